//! [`UffdRegion`]: fault-around on the host, through userfaultfd.
//!
//! - `source`: [`PageSource`], where pages come from.
//! - `handler`: the threads that resolve faults, and what they do with a
//!   page that cannot be filled.

mod builder;
mod dirty;
mod foreign;
mod fork;
mod handler;
mod launch;
mod open;
mod page_cache;
mod pageset;
mod record;
mod room;
mod source;
mod stop;
mod sys;

use std::{
    fs::File,
    io,
    os::{fd::BorrowedFd, unix::fs::FileExt},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use mmbatch_mmap::{Advice, HugePageSize, HugePagesUnavailable, MapFlags, Mapping, ProtFlags};

pub use open::UffdMode;
use open::{open_uffd, uffd_error};

use builder::Settings;
pub use builder::{DEFAULT_BUSY_POLL, MAX_BUSY_POLL, UffdHandlerBuilder, UffdRegionBuilder};
pub use foreign::{UffdHandler, UffdRange};
pub use handler::FailSignal;
use handler::{Area, Mode, Shared};
use launch::Parts;
pub use record::{MAX_ID_LEN, REPLAY_RUN, Record};
pub use source::{InMemory, PageRead, PageSource, Zeroes};

use crate::Error;

/// What a region's handlers did.
///
/// Each count is updated after the work it counts: a reader woken by a
/// copy may run before that copy is counted, so a snapshot taken by the
/// faulting thread right after its access can be short by the copies
/// still in flight. The counts are exact once the handlers are idle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UffdStats {
    /// Faults handled: missing-page faults, and minor faults over a page
    /// cache.
    pub faults: u64,
    /// Pages copied in (`UFFDIO_COPY`), or mapped from the page cache
    /// (`UFFDIO_CONTINUE`) for a [page-cache region](UffdRegion::over_page_cache).
    pub pages_copied: u64,
    /// Window pages skipped because the source was not ready.
    pub pages_skipped: u64,
    /// Copies that found the page already present (EEXIST).
    pub already_present: u64,
    /// Copies retried after EAGAIN or a partial copy.
    pub retries: u64,
    /// Pages that could not be filled (source failure, timeout, a copy
    /// the kernel kept refusing): their readers get a signal.
    pub pages_failed: u64,
    /// Pages a [replay](UffdRegionBuilder::replay)'s threads installed
    /// (also counted in `pages_copied`; a recorded run a fault reached
    /// first is counted there only).
    pub pages_prefetched: u64,
    /// Ranges the application discarded (`UFFD_EVENT_REMOVE`, from
    /// `MADV_DONTNEED` or `MADV_REMOVE`).
    pub remove_events: u64,
    /// Faults on discarded pages, served with zeros (`UFFDIO_ZEROPAGE`).
    pub pages_zeroed: u64,
    /// Runs of a working-set file that could not be read or whose CRC-32
    /// did not match, by the replay or by a fault that took the run: not
    /// installed from it (their pages come from the source).
    pub replay_runs_refused: u64,
}

/// The most handler threads a region starts. Its watchdog may start as
/// many again in place of handlers stuck inside the source (see
/// [`UffdRegion`]), beside itself and the replay's and prefetch's threads.
pub const MAX_HANDLERS: usize = 64;

/// The shortest [`source_timeout`](UffdRegionBuilder::source_timeout): the
/// watchdog's finest tick.
pub const MIN_SOURCE_TIMEOUT: Duration = Duration::from_millis(1);

/// A region's source timeout unless set
/// ([`source_timeout`](UffdRegionBuilder::source_timeout)); how long
/// `page_cache_from` waits for a page.
pub(crate) const DEFAULT_SOURCE_TIMEOUT: Duration = Duration::from_secs(30);

/// An anonymous region registered with userfaultfd and filled on demand
/// from a [`PageSource`]: a missing-page fault is resolved by copying the
/// ready pages of its whole fault-around window (the faulting page first),
/// by one or more handler threads.
///
/// ```no_run
/// use mmbatch_faultaround::UffdRegion;
///
/// # fn main() -> Result<(), mmbatch_faultaround::Error> {
/// let image: Vec<u8> = vec![7; 64 << 20]; // e.g. a snapshot to restore
/// let region = UffdRegion::new(64 << 20, 4, image, 1)?; // 16 pages per fault
/// assert_eq!(region.as_slice()[12345], 7); // faults in pages 0..16
/// assert_eq!(region.stats().faults, 1);
/// # Ok(()) }
/// ```
///
/// A page the source cannot produce ([`PageRead::Failed`], a panic, no
/// answer within the [source timeout](UffdRegionBuilder::source_timeout),
/// not ready within the
/// [not-ready timeout](UffdRegionBuilder::not_ready_timeout)) is never
/// filled: the access gets SIGBUS (SIGSEGV on a kernel without
/// `UFFDIO_POISON`: [`FailSignal`]) and
/// [`failure`](Self::failure) says which page and why. That holds for a
/// source stuck inside a call too: once a call has lasted longer than the
/// timeout, a watchdog thread fails that fault and starts a handler in the
/// stuck one's place (at most twice as many handler threads as handlers
/// in all; a stuck thread whose call returns serves again; with no handler
/// free it fails new faults itself), so no reader waits forever on a
/// source that never returns.
///
/// # System calls on the region
/// The kernel reads the region itself when it is handed to a system call
/// (`write(2)`, `send(2)`, a pipe, O_DIRECT, io_uring, vhost, another
/// region's `UFFDIO_COPY`). Where the process may, the region serves those
/// faults as it does its own ([`UffdMode::AllFaults`]: root,
/// `CAP_SYS_PTRACE`, access to `/dev/userfaultfd`, or
/// `vm.unprivileged_userfaultfd=1`). Elsewhere it is built
/// user-mode-only ([`UffdMode::UserModeOnly`]) and such a system call
/// fails with `EFAULT` on a page the process has not yet read itself;
/// [`mode`](Self::mode) says which the region got. For guest memory under
/// KVM or vhost, build with
/// [`require_kernel_faults`](UffdRegionBuilder::require_kernel_faults)
/// so that a user-mode-only region is an error at build, not an `EFAULT`
/// later.
///
/// # Blocking
/// An access to a page not yet in waits for a handler, and so for the
/// source, up to the source timeout (a page the source says is not
/// ready, up to the not-ready timeout). Dropping the region stops its
/// threads, waiting up to the source timeout for a handler inside a
/// source call (with `Duration::MAX`, for as long as the call takes), then
/// unmaps: stop everything that uses its memory through a pointer first
/// (vCPU threads, KVM memslots, io_uring buffers), or such an access
/// fails (SIGSEGV, or EFAULT for the kernel's), or meets whatever the
/// process maps at that address next.
pub struct UffdRegion {
    shared: Arc<Shared>,
    shut_down: AtomicBool,
    mode: UffdMode,
}

impl std::fmt::Debug for UffdRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UffdRegion")
            .field("len", &self.shared.len)
            .field("order", &self.shared.order)
            .field("mode", &self.mode)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

fn page_size() -> usize {
    rustix::param::page_size()
}

/// The page size a mapping of file `fd` has: its huge page size on
/// hugetlbfs, else the system's (also where `fstatfs` fails).
fn file_page_size(fd: i32) -> usize {
    // SAFETY: the caller holds the file open for this call.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    mmbatch_mmap::hugetlbfs_page_size(fd)
        .ok()
        .flatten()
        .unwrap_or_else(page_size)
}

/// A fresh anonymous mapping (of huge pages of `huge`), or a shared one of
/// the region's own file.
fn map(len: usize, file: Option<i32>, huge: Option<HugePageSize>) -> Result<Mapping, Error> {
    let prot = ProtFlags::READ | ProtFlags::WRITE;
    // Fail point `uffd::mmap` stands in for the kernel's answer.
    if let Some(e) = injected_errno("uffd::mmap") {
        return Err(map_error(len, file, e));
    }
    match (file, huge) {
        (Some(fd), _) => {
            // SAFETY: the caller holds the file open for this call.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            // SAFETY: the file is the region's own (a memfd no one else
            // writes or truncates).
            unsafe { Mapping::file(fd, 0, len, prot, MapFlags::SHARED) }
        }
        // Reserved at mmap (no MAP_NORESERVE): a short pool is refused
        // here (ENOMEM), not found at a fault the copy cannot serve. The
        // kernel's answer, not sysfs's count, decides: a container may not
        // see /sys/kernel/mm/hugepages (the count then reads 0).
        (None, Some(size)) => {
            // Fail point `uffd::mmap_huge` stands in for the kernel's
            // answer, before any page is reserved.
            let mapped = injected_errno("uffd::mmap_huge").map_or_else(
                || Mapping::new(len, prot, MapFlags::PRIVATE | size.map_flags()),
                Err,
            );
            match mapped {
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {
                    return Err(Error::HugePagesUnavailable(HugePagesUnavailable::new(
                        size,
                        len / size.bytes(),
                        size.available_pages(),
                    )));
                }
                r => r,
            }
        }
        (None, None) => Mapping::new(len, prot, MapFlags::PRIVATE | MapFlags::NORESERVE),
    }
    .map_err(|e| map_error(len, file, e))
}

/// Whether `fd`'s seals forbid writes (`F_SEAL_WRITE`,
/// `F_SEAL_FUTURE_WRITE`): the kernel refuses a shared, writable mapping
/// of such a file with EPERM (`memfd_check_seals_mmap`).
fn write_sealed(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_get_seals(fd).is_ok_and(|s| {
        s.contains(rustix::fs::SealFlags::WRITE) || s.contains(rustix::fs::SealFlags::FUTURE_WRITE)
    })
}

/// The error of a refused `mmap` of `len` bytes (of `file`, if given):
/// ENOMEM names the limits that refuse a large region, EPERM of a file
/// sealed against writes the seal.
fn map_error(len: usize, file: Option<i32>, source: io::Error) -> Error {
    // SAFETY: the caller holds the file open for this call.
    let file = file.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
    if source.raw_os_error() == Some(libc::EPERM) && file.is_some_and(write_sealed) {
        Error::FileSealed { source }
    } else if source.raw_os_error() == Some(libc::ENOMEM) {
        Error::MapRefused { len, source }
    } else {
        Error::Sys { op: "mmap", source }
    }
}

impl UffdRegion {
    /// Maps `len` bytes (a multiple of the page size), registers them for
    /// missing-page faults, and starts `handlers` threads (1 to
    /// [`MAX_HANDLERS`]) that resolve each fault by copying its
    /// `2^order`-page window from `source`, and a watchdog thread for a
    /// source that never returns (see the type's docs). The other settings are the
    /// [builder](Self::builder)'s defaults.
    ///
    /// # Errors
    /// As [`UffdRegionBuilder::build`].
    pub fn new(
        len: usize,
        order: u32,
        source: impl PageSource,
        handlers: usize,
    ) -> Result<Self, Error> {
        Self::builder(len)
            .order(order)
            .handlers(handlers)
            .build(source)
    }

    /// A region of `len` bytes with default settings, to adjust.
    pub fn builder(len: usize) -> UffdRegionBuilder {
        UffdRegionBuilder {
            len,
            huge: None,
            track_writes: false,
            require_kernel_faults: false,
            settings: Settings::default(),
        }
    }

    /// A shared mapping of `file` (a shmem file, such as a memfd, or a
    /// hugetlbfs file such as [`huge_page_cache_from`](Self::huge_page_cache_from)
    /// makes, whose `len` is then whole huge pages; its pages in the page
    /// cache) registered for minor faults: a fault on
    /// a cached page not yet mapped here maps the cached pages of its
    /// window in place (`UFFDIO_CONTINUE`), copying nothing — the kernel's
    /// `map_pages`, from userspace. A window page not in the cache is
    /// skipped. Needs Linux 5.14 over shmem, 5.13 over hugetlbfs.
    ///
    /// # Errors
    /// As [`UffdRegionBuilder::build_over_page_cache`].
    ///
    /// # Safety
    /// [`as_slice`](Self::as_slice) hands out `&[u8]` over the file's
    /// pages: while the region lives, nothing may write the file (through
    /// another descriptor, mapping or process), and nothing may truncate it
    /// (an access past the new end is SIGBUS) — the obligation of
    /// `memmap2::Mmap::map`.
    pub unsafe fn over_page_cache(
        file: &File,
        len: usize,
        order: u32,
        handlers: usize,
    ) -> Result<Self, Error> {
        let b = Self::builder(len).order(order).handlers(handlers);
        // SAFETY: the caller's obligation, passed on.
        unsafe { b.build_over_page_cache(file) }
    }

    fn build(
        b: UffdRegionBuilder,
        source: Box<dyn PageSource>,
        shared_fd: Option<i32>,
    ) -> Result<Self, Error> {
        let UffdRegionBuilder {
            len,
            huge,
            track_writes,
            require_kernel_faults,
            settings,
        } = b;
        if let (Some(_), Some(size)) = (shared_fd, huge) {
            return Err(Error::BadSetting {
                setting: "huge_pages",
                value: format!("{} MiB pages", size.bytes() >> 20),
                why: "a page-cache region's pages are its file's: its huge pages where the file \
                      is on hugetlbfs (huge_page_cache_from makes one), else base pages; drop \
                      huge_pages"
                    .into(),
            });
        }
        let page = match shared_fd {
            // A hugetlbfs file is mapped, and continued, in its huge pages.
            Some(fd) => file_page_size(fd),
            None => huge.map_or_else(page_size, HugePageSize::bytes),
        };
        if len == 0 || len % page != 0 {
            return Err(Error::BadLength {
                len,
                page_size: page,
            });
        }
        let working_set = settings.check((page, "huge_pages"), len, &*source)?;
        if track_writes && shared_fd.is_some() {
            return Err(Error::BadSetting {
                setting: "track_writes",
                value: "true".into(),
                why: "write tracking is for anonymous and huge-page regions; a page-cache \
                      region's writes reach its file"
                    .into(),
            });
        }
        let features = if track_writes {
            let mut f = sys::UFFD_FEATURE_PAGEFAULT_FLAG_WP | sys::UFFD_FEATURE_WP_ASYNC;
            if huge.is_some() {
                f |= sys::UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
            }
            u64::from(f)
        } else {
            0
        };
        let (uffd, uffd_mode) = open_uffd(features, require_kernel_faults)?;
        let mapping = map(len, shared_fd, huge)?;
        if shared_fd.is_none() {
            // A child of fork(2) would inherit the range unregistered, and
            // read every page not yet copied in as zeros (a failed one
            // too): not inherited, it faults there instead. `shutdown`,
            // once every page is in, undoes this.
            mapping
                .advise(0..len, Advice::DontFork)
                .map_err(|source| Error::Sys {
                    op: "madvise(MADV_DONTFORK)",
                    source,
                })?;
        }
        let (mode, register, needed, what) = match shared_fd {
            // Registering for minor faults succeeds only where the kernel
            // has minor faults on the file's kind (hugetlbfs 5.13, shmem
            // 5.14).
            Some(_) => (
                Mode::Continue,
                sys::UFFDIO_REGISTER_MODE_MINOR,
                sys::IOCTL_CONTINUE,
                "minor faults and UFFDIO_CONTINUE on shmem (Linux 5.14) or hugetlbfs (5.13)",
            ),
            // Write tracking never calls UFFDIO_WRITEPROTECT (copies carry
            // MODE_WP, PAGEMAP_SCAN protects again), and the handshake
            // already asked for WP_ASYNC (Linux 6.7).
            None if track_writes => (
                Mode::Copy,
                sys::UFFDIO_REGISTER_MODE_MISSING | sys::UFFDIO_REGISTER_MODE_WP,
                sys::IOCTL_COPY,
                "UFFDIO_COPY on anonymous memory",
            ),
            None => (
                Mode::Copy,
                sys::UFFDIO_REGISTER_MODE_MISSING,
                sys::IOCTL_COPY,
                "UFFDIO_COPY on anonymous memory",
            ),
        };
        let ioctls =
            register_range(&uffd, mapping.as_ptr().cast(), len, register).map_err(|e| match e {
                // A file that is not shmem is refused so on any kernel;
                // "this kernel lacks userfaultfd" named the wrong cause.
                rustix::io::Errno::INVAL if shared_fd.is_some() => Error::Sys {
                    op: "registering the file for minor faults (it must be shmem or hugetlbfs: \
                             a memfd or a file on tmpfs or hugetlbfs; and Linux 5.14+, 5.13+ for \
                             hugetlbfs)",
                    source: io::Error::from_raw_os_error(libc::EINVAL),
                },
                e => uffd_error(e),
            })?;
        if registered_ioctls(ioctls) & needed != needed {
            return Err(Error::Unsupported { what: what.into() });
        }
        // UFFDIO_POISON arrived in Linux 6.6.
        let poison = offered_ioctls(ioctls) & handler::UFFDIO_POISON_BIT != 0;
        let area = Area {
            base: mapping.as_ptr() as usize,
            first: 0,
            pages: (len / page) as u64,
        };
        let shared = Shared::new(Parts {
            mode,
            uffd,
            areas: vec![area],
            page,
            poison,
            mapping: Some(mapping),
            foreign: false,
            track: track_writes,
            source,
            settings: &settings,
        })?;
        let region = UffdRegion {
            shared,
            shut_down: AtomicBool::new(false),
            mode: uffd_mode,
        };
        if shared_fd.is_none() {
            // Served from here; the region's drop (or `shutdown`) releases
            // it.
            fork::serve(region.as_ptr() as usize, len);
        }
        // From here `region`'s drop undoes everything: the threads started
        // are stopped and joined, the range unmapped.
        region.shared.launch(settings, working_set)?;
        Ok(region)
    }

    /// The pages faulted on so far, first touch first, with the image's
    /// identity: `None` unless the region was built with
    /// [`record`](UffdRegionBuilder::record). Save it with
    /// [`Record::save`] and give it to
    /// [`replay`](UffdRegionBuilder::replay) on the next restore.
    pub fn record(&self) -> Option<Record> {
        self.shared.record()
    }

    /// Waits up to `timeout` for the replay to be done (true): its threads
    /// ended, and every run a fault took from them installed (or failed;
    /// a run refused, or pages the source did not have ready, are left to
    /// faults) — at once if there is no replay.
    #[must_use = "false: the replay had not ended by the timeout"]
    pub fn wait_replayed(&self, timeout: Duration) -> bool {
        self.shared.wait_replayed(timeout)
    }

    /// The first byte; valid until the region is dropped (see its
    /// Blocking section for what must stop first), aligned to the
    /// region's page size.
    pub fn as_ptr(&self) -> *const u8 {
        self.shared.areas[0].base as *const u8
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.shared.len
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The memory; reading a missing page faults it (and its window) in.
    /// Reading a page the source failed kills the process with SIGBUS, or
    /// SIGSEGV where the kernel cannot poison a page (see
    /// [`failure`](Self::failure) and [`FailSignal`]), as reading a file
    /// mapping past the file's end does.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping lives as long as self; missing pages are
        // filled by the handlers (or, after shutdown, are all present) with
        // `UFFDIO_COPY`/`UFFDIO_CONTINUE`, which never change a page that is
        // present, and the process writes it only through `&mut self`.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.shared.len) }
    }

    /// The first byte, for writing (a VMM hands it to KVM as guest memory).
    /// Writes through it must not overlap a live [`as_slice`](Self::as_slice)
    /// or [`as_mut_slice`](Self::as_mut_slice) borrow, as with
    /// `Vec::as_mut_ptr`. Take it before the region is shared (an
    /// `Arc<UffdRegion>` gives only `&self`); memory another agent writes
    /// through it (a guest) is read with volatile reads through
    /// [`as_ptr`](Self::as_ptr), not through `as_slice`.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.shared.areas[0].base as *mut u8
    }

    /// The memory, writable. A write to a missing page faults it in from
    /// the source first, as a read does (with its window), and then lands
    /// on the source's bytes; a page the process has written is never
    /// filled again (the kernel refuses to copy over a present page), so
    /// no later fault, prefetch or replay undoes a write. System calls
    /// that write the region (`read(2)` into it, O_DIRECT, io_uring) fault
    /// in the same way where the region serves kernel faults
    /// ([`UffdMode::AllFaults`]). In a [page-cache
    /// region](Self::over_page_cache) the mapping is shared: writes reach
    /// the file. Writing a page the source failed kills the process, as
    /// reading it does.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.shared.len;
        // SAFETY: as `as_slice`, and `&mut self` makes this the only borrow
        // of the memory; the handlers' copies land only in pages that are
        // missing, which no byte of the slice has been read or written in.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), len) }
    }

    /// Which faults the region's handlers serve: the kernel's on the
    /// process's behalf too ([`UffdMode::AllFaults`]), or only the
    /// process's own ([`UffdMode::UserModeOnly`], where the process may
    /// have nothing more: then a system call that reads a page not yet
    /// present fails with `EFAULT`). Fixed at build; see [`UffdMode`].
    pub fn mode(&self) -> UffdMode {
        self.mode
    }

    /// What the handlers did so far.
    pub fn stats(&self) -> UffdStats {
        self.shared.stats()
    }

    /// The first page that could not be filled, and why
    /// ([`Error::PageFailed`]); `None` while every fault was served.
    pub fn failure(&self) -> Option<Error> {
        self.shared.failure()
    }

    /// How a failed page's readers are stopped on this kernel: SIGBUS with
    /// `UFFDIO_POISON` (Linux 6.6+), SIGSEGV otherwise.
    pub fn fail_signal(&self) -> FailSignal {
        if self.shared.poison.load(Ordering::Relaxed) {
            FailSignal::Sigbus
        } else {
            FailSignal::Sigsegv
        }
    }

    /// Pages present in memory now (`mincore`).
    pub fn resident_pages(&self) -> usize {
        self.shared.resident_pages()
    }
}

/// `UFFDIO_REGISTER` of `[start, start + len)` in `mode`: the ioctls the
/// kernel offers for it. Fail point `uffd::register` (an errno number,
/// EINVAL by default): refused so.
fn register_range(
    uffd: &sys::Uffd,
    start: *mut std::ffi::c_void,
    len: usize,
    mode: u32,
) -> Result<u64, rustix::io::Errno> {
    fail_point!("uffd::register", |arg| Err(
        rustix::io::Errno::from_raw_os_error(
            arg.and_then(|a| a.parse().ok()).unwrap_or(libc::EINVAL)
        )
    ));
    uffd.register(start, len, mode)
}

/// The ioctls a registration reports; fail point `uffd::ioctls` plays a
/// kernel that registers the range but offers none of them.
fn registered_ioctls(ioctls: u64) -> u64 {
    fail_point!("uffd::ioctls", |_| 0);
    ioctls
}

/// The ioctls the kernel offers over a registered range (a
/// registration's, or a userfaultfd's `API:` line in fdinfo); fail point
/// `uffd::no_poison` plays a kernel before 6.6, whose mask has no
/// `UFFDIO_POISON`.
fn offered_ioctls(ioctls: u64) -> u64 {
    fail_point!("uffd::no_poison", |_| ioctls & !handler::UFFDIO_POISON_BIT);
    ioctls
}

/// The error fail point `name` injects in place of a mapping the kernel
/// would make: `return(N)` is errno N, `return` alone ENOMEM; none while
/// the point is off (or the `failpoints` feature is).
fn injected_errno(name: &str) -> Option<io::Error> {
    #[cfg(feature = "failpoints")]
    {
        fail::eval(name, |e| {
            io::Error::from_raw_os_error(e.and_then(|e| e.parse().ok()).unwrap_or(libc::ENOMEM))
        })
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region's page over a file is hugetlbfs's huge page, and the
    /// system's page over any other file.
    #[test]
    fn a_files_page_is_its_huge_page_on_hugetlbfs_only() {
        use std::os::fd::AsRawFd;
        let plain = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        assert_eq!(file_page_size(plain.as_raw_fd()), page_size());
        let huge = rustix::fs::memfd_create(
            "t",
            rustix::fs::MemfdFlags::CLOEXEC
                | rustix::fs::MemfdFlags::HUGETLB
                | rustix::fs::MemfdFlags::HUGE_2MB,
        );
        // A kernel without hugetlbfs refuses the memfd.
        if let Ok(huge) = huge {
            assert_eq!(file_page_size(huge.as_raw_fd()), 2 << 20);
        }
    }
}
