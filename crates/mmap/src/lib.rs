//! [`Mapping`]: one memory mapping owned by a Rust value and unmapped when
//! it is dropped (`mmap(2)` and `munmap(2)` through rustix).
//!
//! The mmbatch crates keep their memory in it — ktask's cleared and
//! populated buffers and hugetlb regions, mlock's locked regions and
//! their guard reservations, faultaround's userfaultfd regions — so no
//! error path has to pair an unmap with a map by hand, and the types that
//! hold one are `Send` and `Sync` through it rather than through an
//! `unsafe impl` of their own. Beside `memmap2`, which maps files to read
//! and write them, it is for anonymous, hugetlb and `PROT_NONE` memory
//! owned as a value, with `mprotect`, `madvise` and `msync` over its own
//! range.
//!
//! ```
//! use mmbatch_mmap::{MapFlags, Mapping, ProtFlags};
//!
//! # fn main() -> std::io::Result<()> {
//! // 4 MiB of zeroed private memory, faulted in now.
//! let mut m = Mapping::populated(4 << 20)?;
//! m.as_mut_slice().unwrap()[0] = 7;
//! assert_eq!(m.as_slice().unwrap()[0], 7);
//!
//! // A PROT_NONE reservation gives no safe view of its bytes.
//! let r = Mapping::new(1 << 20, ProtFlags::empty(), MapFlags::PRIVATE | MapFlags::NORESERVE)?;
//! assert!(r.as_slice().is_none());
//! # Ok(()) }
//! // Both are unmapped when dropped.
//! ```

// Linux only: one clear error on other systems, and only that one (every
// item below is Linux's, so the missing Linux calls give no more).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
compile_error!(
    "mmbatch-mmap is Linux only (and so are mmbatch-mlock and mmbatch-faultaround, which \
     map through it; mmbatch-ktask's jobs and clear build everywhere): it uses Linux's \
     MAP_POPULATE, MAP_HUGETLB and madvise advice; elsewhere map files with memmap2"
);

#[cfg(any(target_os = "linux", target_os = "android"))]
use std::{io, os::fd::BorrowedFd, ptr::NonNull};

/// A `fail` crate fail point (<https://docs.rs/fail>), compiled in with the
/// `failpoints` feature, which only tests turn on (this crate's and its
/// dependents'); nothing otherwise, so users never build `fail`.
#[cfg(feature = "failpoints")]
macro_rules! fail_point {
    ($($t:tt)*) => {
        fail::fail_point!($($t)*)
    };
}
#[cfg(not(feature = "failpoints"))]
macro_rules! fail_point {
    ($($t:tt)*) => {};
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod advise;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod huge;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod pool;

#[cfg(any(target_os = "linux", target_os = "android"))]
pub use advise::Advice;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use huge::{HugePageSize, HugePagesUnavailable, hugetlbfs_page_size};
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use pool::{PoolGrowth, PoolLock};
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use rustix::mm::{MapFlags, ProtFlags};

/// Flags of Linux's `mmap` that rustix names on Linux but not on Android,
/// which runs the same kernel: from the kernel's headers (linux-raw-sys).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) mod flags {
    use rustix::mm::MapFlags;

    /// `MAP_HUGE_2MB`.
    pub(crate) const HUGE_2MB: MapFlags =
        MapFlags::from_bits_retain(linux_raw_sys::general::MAP_HUGE_2MB);
    /// `MAP_HUGE_1GB`.
    pub(crate) const HUGE_1GB: MapFlags =
        MapFlags::from_bits_retain(linux_raw_sys::general::MAP_HUGE_1GB);
    /// `MAP_FIXED_NOREPLACE`.
    pub(crate) const FIXED_NOREPLACE: MapFlags =
        MapFlags::from_bits_retain(linux_raw_sys::general::MAP_FIXED_NOREPLACE);
}

/// One mapping, unmapped on drop.
///
/// Safe views of its bytes ([`as_slice`](Self::as_slice),
/// [`as_mut_slice`](Self::as_mut_slice)) follow its protection: the one it
/// was made with, or the last [`protect`](Self::protect) set. Whoever
/// changes the protection otherwise (`mprotect` through
/// [`as_ptr`](Self::as_ptr)) takes on keeping those views valid.
///
/// Dropping it panics if `munmap` refuses the range as not whole pages (a
/// [`from_raw_parts`](Self::from_raw_parts) that broke its contract). At
/// `vm.max_map_count`, where the kernel merged it with a neighbour and
/// must split the mapping to unmap it, the drop releases what pages it
/// can and leaks the range (see [`Drop`](#impl-Drop-for-Mapping)).
/// [`unmap`](Self::unmap) returns either error instead.
#[derive(Debug)]
#[cfg(any(target_os = "linux", target_os = "android"))]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    prot: ProtFlags,
    /// The size of its pages ([`page_size`](Self::page_size)).
    page: usize,
}

// SAFETY: a Mapping owns its range as a Box owns its allocation: nothing
// else refers to it, and moving the owner to another thread moves nothing
// the kernel ties to a thread.
#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe impl Send for Mapping {}
// SAFETY: through `&Mapping` the bytes are only read (`as_slice`), and the
// raw pointer's users answer for their own accesses (its deref is unsafe).
#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe impl Sync for Mapping {}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl Mapping {
    /// `len` bytes of private, zeroed, read-write memory, faulted in on
    /// first touch.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        Self::new(len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE)
    }

    /// As [`anonymous`](Self::anonymous), every page faulted in now
    /// (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14; `MAP_POPULATE` before,
    /// or where a seccomp filter refuses the advice, which does not say
    /// when it stops short).
    ///
    /// # Errors
    /// As [`new`](Self::new); and the populate's: `ENOMEM` where the
    /// memory (or the memory cgroup's limit) runs out part way, where
    /// `MAP_POPULATE` returned the mapping as if whole and a later touch
    /// met the OOM killer. The mapping is unmapped then.
    pub fn populated(len: usize) -> io::Result<Self> {
        populated_by(len, populate)
    }

    /// An anonymous mapping of `len` bytes with `prot` and `flags`
    /// (`MAP_SHARED` or `MAP_PRIVATE`, and any of `MAP_POPULATE`,
    /// `MAP_NORESERVE`, `MAP_LOCKED`, `MAP_HUGETLB`, ...) at an address the
    /// kernel picks.
    ///
    /// # Errors
    /// Refused with `InvalidInput`: `len` 0; `MAP_FIXED` (which would
    /// replace whatever is mapped at the address) and
    /// `MAP_FIXED_NOREPLACE` (the address is the kernel's to pick); neither
    /// `MAP_SHARED` nor `MAP_PRIVATE`; and, with `MAP_HUGETLB`, a `len`
    /// that is not a whole number of huge pages (the kernel would map
    /// whole pages that a `munmap` of `len` bytes cannot give back) or
    /// `MAP_NORESERVE` (no page is reserved, so a touch that finds the pool
    /// empty kills the process with `SIGBUS`). The kernel's refusals come
    /// back as its errno: `ENOMEM` for a `MAP_HUGETLB` pool with too few
    /// free pages ([`HugePagesUnavailable::new`] names the fix), or for
    /// more address space than the process has left.
    pub fn new(len: usize, prot: ProtFlags, flags: MapFlags) -> io::Result<Self> {
        check(len, flags)?;
        if flags.contains(MapFlags::HUGETLB) {
            if flags.contains(MapFlags::NORESERVE) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "MAP_HUGETLB with MAP_NORESERVE reserves no huge page: a first touch that \
                     finds the pool empty kills the process with SIGBUS; drop MAP_NORESERVE, \
                     and a short pool is refused here (ENOMEM) instead",
                ));
            }
            whole_pages(len, hugetlb_page_size(flags)?, "MAP_HUGETLB")?;
        }
        let page = if flags.contains(MapFlags::HUGETLB) {
            hugetlb_page_size(flags)?
        } else {
            rustix::param::page_size()
        };
        // SAFETY: no MAP_FIXED (checked), so the kernel picks a range no
        // one else owns.
        let p = unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, prot, flags) }
            .map_err(|e| {
                let hugetlb = flags.contains(MapFlags::HUGETLB) && e == rustix::io::Errno::INVAL;
                let sizes = || huge::sizes_here(HUGEPAGES_DIR);
                hugetlb
                    .then(|| huge::size_missing(page, sizes()?))
                    .flatten()
                    .unwrap_or_else(|| e.into())
            })?;
        let p = NonNull::new(p.cast()).expect("mmap does not return NULL without MAP_FIXED");
        // SAFETY: the kernel gave us [p, p + len).
        let mut m = unsafe { Self::from_raw_parts(p, len, prot) };
        m.page = page;
        Ok(m)
    }

    /// A mapping of `len` bytes of the file `fd` from `offset` (a multiple
    /// of the page size), at an address the kernel picks. On hugetlbfs,
    /// `len` must be a whole number of the file system's huge pages, as
    /// for [`new`](Self::new) with `MAP_HUGETLB`.
    ///
    /// # Errors
    /// As [`new`](Self::new) for `len` and `flags` (`MAP_NORESERVE` is
    /// the caller's to judge here), an `offset` off a page boundary, and a
    /// regular file shorter than `offset + len` (the pages past its end
    /// would be `SIGBUS` to touch: extend it first) are `InvalidInput`;
    /// but for a writable mapping of a hugetlbfs file, which the kernel
    /// extends to cover the mapping.
    ///
    /// # Safety
    /// While a slice from [`as_slice`](Self::as_slice) or
    /// [`as_mut_slice`](Self::as_mut_slice) is borrowed, nothing else may
    /// change the file's bytes under it (another process writing the file,
    /// or truncating it, which turns access into `SIGBUS`): the obligation
    /// of `memmap2::Mmap::map`. For a file that is not a regular file (a
    /// device), the mapped range must exist: a page past its end is
    /// `SIGBUS` too.
    pub unsafe fn file(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        prot: ProtFlags,
        flags: MapFlags,
    ) -> io::Result<Self> {
        check(len, flags)?;
        let huge = hugetlbfs_page_size(fd)?;
        let page = if let Some(huge) = huge {
            whole_pages(len, huge, "a hugetlbfs file")?;
            huge as u64
        } else {
            rustix::param::page_size() as u64
        };
        if page != 0 && offset % page != 0 {
            let down = offset - offset % page;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "offset {offset} is not a multiple of the {page}-byte page: a file is mapped \
                     from a page boundary; map from {down} and index {} bytes in",
                    offset - down
                ),
            ));
        }
        let st = rustix::fs::fstat(fd)?;
        let end = offset.checked_add(len as u64);
        let file_len = u64::try_from(st.st_size).unwrap_or(0);
        let mapped_end = file_len.next_multiple_of(page.max(1));
        // A writable mapping of a hugetlbfs file extends the file to
        // cover it (`hugetlbfs_file_mmap`): a memfd made for it is mapped
        // before it has a length.
        let grows = huge.is_some() && prot.contains(ProtFlags::WRITE);
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
            && !grows
            && end.is_none_or(|end| end > mapped_end)
        {
            let fix = if file_len == 0 {
                "the file is empty: write or extend it first (File::set_len)".to_owned()
            } else if offset < mapped_end {
                format!(
                    "extend the file first (File::set_len) or map at most {} bytes",
                    mapped_end - offset
                )
            } else {
                "extend the file first (File::set_len) or map from an offset inside it".to_owned()
            };
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "mapping {len} bytes from offset {offset} reaches past the file's end \
                     ({file_len} bytes), where a touch is SIGBUS: {fix}"
                ),
            ));
        }
        // SAFETY: no MAP_FIXED (checked), and no page past the end of a
        // regular file (checked); the file's other users are the caller's
        // obligation.
        let p = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, flags, fd, offset) }?;
        let p = NonNull::new(p.cast()).expect("mmap does not return NULL without MAP_FIXED");
        // SAFETY: the kernel gave us [p, p + len).
        let mut m = unsafe { Self::from_raw_parts(p, len, prot) };
        m.page = page as usize;
        Ok(m)
    }

    /// Takes ownership of a mapping made elsewhere. Its
    /// [`page_size`](Self::page_size) is the base page size, whatever
    /// backs it.
    ///
    /// # Safety
    /// `len` is not 0, and `[ptr, ptr + len)` must be one mapping (or a
    /// whole part of one) that nothing else unmaps or refers to, mapped
    /// with at least `prot`, and `munmap` must accept it whole: for
    /// hugetlb memory, `ptr` and `len` are multiples of its huge page
    /// size.
    pub unsafe fn from_raw_parts(ptr: NonNull<u8>, len: usize, prot: ProtFlags) -> Self {
        Self {
            ptr,
            len,
            prot,
            page: rustix::param::page_size(),
        }
    }

    /// The size of the pages the kernel maps it in: a hugetlb mapping's
    /// huge page size ([`new`](Self::new) with `MAP_HUGETLB`, a
    /// [`file`](Self::file) on hugetlbfs, or as declared with
    /// [`with_page_size`](Self::with_page_size)), else the base page size
    /// (also for [`from_raw_parts`](Self::from_raw_parts)). Work split
    /// over threads by whole pages of it never has two threads fault one
    /// page.
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// This mapping, its pages declared `page_size` bytes: for one taken
    /// with [`from_raw_parts`](Self::from_raw_parts) over hugetlb memory
    /// (a VMM's guest memory, say), which knows only the base page.
    ///
    /// # Errors
    /// `InvalidInput` for a size that is not a power of two of at least
    /// the base page, or that the mapping's start or length is not a
    /// multiple of.
    pub fn with_page_size(mut self, page_size: usize) -> io::Result<Self> {
        let base = rustix::param::page_size();
        let fits = page_size.is_power_of_two()
            && page_size >= base
            && self.ptr.as_ptr().addr() % page_size == 0
            && self.len % page_size == 0;
        if !fits {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a page size of {page_size} bytes does not fit this mapping of {} bytes at \
                     {:p}: it must be a power of two, at least the {base}-byte base page, and \
                     divide the mapping's start and length",
                    self.len, self.ptr
                ),
            ));
        }
        self.page = page_size;
        Ok(self)
    }

    /// Gives the mapping up without unmapping it: the caller owns
    /// `[ptr, ptr + len)` from now on. Returns what
    /// [`from_raw_parts`](Self::from_raw_parts) takes back: the start,
    /// the length and [`prot`](Self::prot) (after an `mprotect` through
    /// [`as_ptr`](Self::as_ptr) that narrowed it, give `from_raw_parts`
    /// the narrower one). The [`page_size`](Self::page_size) is not kept:
    /// give it back with [`with_page_size`](Self::with_page_size).
    pub fn into_raw_parts(self) -> (NonNull<u8>, usize, ProtFlags) {
        let parts = (self.ptr, self.len, self.prot);
        std::mem::forget(self);
        parts
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes (never 0).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping's protection: the one it was made with, or the last
    /// [`protect`](Self::protect) set.
    pub fn prot(&self) -> ProtFlags {
        self.prot
    }

    /// The bytes, if the mapping is readable ([`prot`](Self::prot)).
    pub fn as_slice(&self) -> Option<&[u8]> {
        self.prot.contains(ProtFlags::READ).then(|| {
            // SAFETY: our readable mapping; shared access only reads.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        })
    }

    /// The bytes, if the mapping is readable and writable.
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        self.prot
            .contains(ProtFlags::READ | ProtFlags::WRITE)
            .then(|| {
                // SAFETY: our writable mapping, borrowed exclusively.
                unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
            })
    }

    /// Changes the whole mapping's protection (`mprotect`), and what
    /// [`as_slice`](Self::as_slice) and [`as_mut_slice`](Self::as_mut_slice)
    /// hand out with it: `&mut self`, so no slice outlives the change. A
    /// refusal may leave part of the range changed (the kernel changes it
    /// area by area): the slices then follow the narrower of the two
    /// protections.
    pub fn protect(&mut self, prot: ProtFlags) -> io::Result<()> {
        let flags = rustix::mm::MprotectFlags::from_bits_retain(prot.bits());
        // SAFETY: our own mapping, whole; no slice of it is borrowed
        // (`&mut self`), and `self.prot` follows the change.
        let r = unsafe { rustix::mm::mprotect(self.ptr.as_ptr().cast(), self.len, flags) };
        self.prot = match r {
            Ok(()) => prot,
            Err(_) => self.prot & prot,
        };
        Ok(r?)
    }

    /// Writes a shared file mapping's changed pages back to the file and
    /// waits for it (`msync(MS_SYNC)`), as `memmap2`'s `flush`; for
    /// anonymous or private memory, which no file receives, it does
    /// nothing.
    pub fn flush(&self) -> io::Result<()> {
        // SAFETY: our own mapping, whole; msync reads page state only.
        unsafe {
            rustix::mm::msync(
                self.ptr.as_ptr().cast(),
                self.len,
                rustix::mm::MsyncFlags::SYNC,
            )
        }?;
        Ok(())
    }

    /// Unmaps now, returning the kernel's refusal, which drop cannot.
    ///
    /// A refusal leaves the memory mapped, and leaked: `ENOMEM` where the
    /// range is part of a larger mapping (one the kernel merged with its
    /// neighbours, or a [`from_raw_parts`](Self::from_raw_parts) of part
    /// of one) and the process has `vm.max_map_count` mappings, so that
    /// the split `munmap` needs would be one too many; `EINVAL` where the
    /// range is not whole pages of its page size, as only a
    /// `from_raw_parts` that broke its contract gives.
    pub fn unmap(self) -> io::Result<()> {
        let (ptr, len, _) = self.into_raw_parts();
        // SAFETY: we owned the range, and nothing borrows it any more.
        unsafe { rustix::mm::munmap(ptr.as_ptr().cast(), len) }?;
        Ok(())
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl Drop for Mapping {
    /// Unmaps the range. Where the process is at `vm.max_map_count` and
    /// the range is part of a larger mapping (see [`unmap`](Mapping::unmap)),
    /// the kernel refuses the split with `ENOMEM`: the range is then
    /// leaked, since a limit the program cannot see coming must not panic
    /// a drop (memmap2 ignores the refusal), and its pages released as far
    /// as the kernel lets: `MADV_DONTNEED` (a shared or file mapping's
    /// pages stay in their file or shmem object, held while the range
    /// lives), `MADV_DONTNEED_LOCKED` for locked pages from Linux 5.18
    /// (the range stays locked, its length counted against
    /// `RLIMIT_MEMLOCK`; before 5.18 its locked pages stay too).
    ///
    /// # Panics
    /// If `munmap` refuses the range as not whole pages (`EINVAL`, a
    /// broken [`from_raw_parts`](Mapping::from_raw_parts) contract): the
    /// memory (a huge page, say) would stay reserved for the process's
    /// life, and silence would hide the bug. Not while the thread is
    /// already panicking.
    fn drop(&mut self) {
        // SAFETY: we own the range and nothing borrows it any more.
        let r = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
        if r == Err(rustix::io::Errno::NOMEM) {
            use rustix::mm::{Advice, madvise};
            let (ptr, len) = (self.ptr.as_ptr().cast(), self.len);
            // SAFETY: we own the range and nothing borrows it any more;
            // its pages leave this mapping (a shared mapping's stay in
            // its file), and nobody reads them again.
            let released = unsafe { madvise(ptr, len, Advice::LinuxDontNeed) };
            if released == Err(rustix::io::Errno::INVAL) {
                // Locked pages refuse MADV_DONTNEED (and `munlock` would
                // need the same split): MADV_DONTNEED_LOCKED (Linux 5.18)
                // drops them without changing the mapping. Refused too
                // (an older kernel, hugetlb before 5.18), they stay.
                // SAFETY: as above.
                let _ = unsafe { madvise(ptr, len, Advice::LinuxDontneedLocked) };
            }
            return;
        }
        if let Err(e) = r {
            if !std::thread::panicking() {
                panic!(
                    "munmap of {} bytes at {:p} failed ({e}): the mapping stays, leaked; \
                     a Mapping from from_raw_parts must be whole pages of its page size",
                    self.len, self.ptr
                );
            }
        }
    }
}

/// Where the kernel lists its huge page pools, one directory a size.
const HUGEPAGES_DIR: &str = "/sys/kernel/mm/hugepages";

/// `MAP_HUGE_SHIFT` from `<linux/mman.h>`: log2 of the page size sits in the
/// six flag bits from here.
#[cfg(any(target_os = "linux", target_os = "android"))]
const MAP_HUGE_SHIFT: u32 = 26;

/// `m` with every page faulted in for writing (`MADV_POPULATE_WRITE`),
/// or the kernel's error, `m` unmapped.
fn populate(m: Mapping) -> io::Result<Mapping> {
    m.advise(0..m.len(), Advice::PopulateWrite)?;
    Ok(m)
}

/// Whether errno `e` from `madvise` on memory it must accept says the
/// advice itself is refused: EINVAL (a kernel without it), EPERM or
/// ENOSYS (a sandbox's filter).
fn refused_advice(e: i32) -> bool {
    [
        rustix::io::Errno::INVAL,
        rustix::io::Errno::PERM,
        rustix::io::Errno::NOSYS,
    ]
    .iter()
    .any(|r| r.raw_os_error() == e)
}

/// [`Mapping::populated`] with `populate` making the pages resident (a
/// test's stands in for the kernel's refusals).
fn populated_by(
    len: usize,
    populate: impl FnOnce(Mapping) -> io::Result<Mapping>,
) -> io::Result<Mapping> {
    populate(Mapping::anonymous(len)?).or_else(|e| match e.raw_os_error() {
        // No such advice (before Linux 5.14), or a seccomp filter that
        // refuses it: on a fresh read-write anonymous mapping nothing else
        // gives these.
        Some(e) if refused_advice(e) => Mapping::new(
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::POPULATE,
        ),
        _ => Err(e),
    })
}

/// The huge page size a `MAP_HUGETLB` mapping with `flags` gets: the size
/// its `MAP_HUGE_*` bits name, else the system's default
/// (`Hugepagesize` in `/proc/meminfo`).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn hugetlb_page_size(flags: MapFlags) -> io::Result<usize> {
    let log2 = (flags.bits() >> MAP_HUGE_SHIFT) & 0x3f;
    if log2 != 0 {
        return 1usize.checked_shl(log2).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MAP_HUGE_* names pages of 2^{log2} bytes, more than the address space"),
            )
        });
    }
    let bytes = huge::meminfo_bytes("Hugepagesize")?;
    bytes.and_then(|b| usize::try_from(b).ok()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "MAP_HUGETLB: /proc/meminfo names no Hugepagesize (a kernel without hugetlbfs)",
        )
    })
}

/// Refuses a `len` that is not a whole number of `page`-byte pages.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn whole_pages(len: usize, page: usize, what: &str) -> io::Result<()> {
    if page == 0 || len % page == 0 {
        return Ok(());
    }
    let ask = match len.div_ceil(page).checked_mul(page) {
        Some(up) => format!("ask for {up}"),
        None => format!("ask for at most {}", len / page * page),
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{what}: {len} bytes is not a whole number of {} KiB huge pages; {ask} \
             (the kernel maps whole huge pages, and a munmap of {len} bytes cannot give them back)",
            page >> 10
        ),
    ))
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn check(len: usize, flags: MapFlags) -> io::Result<()> {
    if len == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a mapping of 0 bytes: ask for at least one page",
        ));
    }
    if flags.contains(MapFlags::FIXED) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "MAP_FIXED would replace what is mapped at the address: \
             map into a Mapping you own with rustix::mm::mmap instead",
        ));
    }
    // With no address given, the kernel reads it as address 0: as root it
    // mapped page 0, and a null pointer read zeros instead of faulting.
    if flags.contains(flags::FIXED_NOREPLACE) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "MAP_FIXED_NOREPLACE maps at an address given, and a Mapping is made where the \
             kernel picks: drop the flag (or map with rustix::mm::mmap and take the range \
             with Mapping::from_raw_parts)",
        ));
    }
    if !(flags.contains(MapFlags::SHARED) || flags.contains(MapFlags::PRIVATE)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a mapping is MAP_PRIVATE (copy-on-write, this process's own) or MAP_SHARED \
             (shared with other mappings of the memory): add one of them",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod drop_tests;
#[cfg(test)]
mod tests;

/// This crate's README example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
