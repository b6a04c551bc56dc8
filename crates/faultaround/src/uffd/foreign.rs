//! [`UffdHandler`]: serving a userfaultfd that another process made — a
//! VMM's page-fault handler (Firecracker, Cloud Hypervisor), where the VMM
//! maps guest memory, registers it, and hands the descriptor and a
//! description of the ranges to a separate process over a Unix socket.
//! Not CRIU's lazy-pages, whose descriptors ask for fork and remap events
//! (refused: see [`UffdHandler::builder`]).

use std::{
    fmt,
    os::fd::{AsFd, AsRawFd, OwnedFd},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use super::{
    FailSignal, PageSource, Record, Settings, UffdHandlerBuilder, UffdStats,
    handler::{Area, Mode, Shared},
    launch::Parts,
    page_size,
    sys::Uffd,
};
use crate::Error;

/// A range of another process's memory registered with the userfaultfd a
/// [`UffdHandler`] serves: `len` bytes at address `base` in that process,
/// holding the source's bytes from `offset` on. Firecracker's
/// `GuestRegionUffdMapping` (`base_host_virt_addr`, `size`, `offset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UffdRange {
    /// The first byte, in the address space of the process that registered
    /// it.
    pub base: usize,
    /// Bytes.
    pub len: usize,
    /// Where the range's bytes start in the source.
    pub offset: u64,
}

/// Serves the faults of a userfaultfd another process created and
/// registered, from a [`PageSource`]: what [`UffdRegion`](crate::UffdRegion)
/// does for memory it maps itself — fault-around windows, several handler
/// threads, record and replay, `UFFD_EVENT_REMOVE`, failed pages poisoned
/// (SIGBUS in the other process) and the watchdog — for memory it does not
/// own.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use mmbatch_faultaround::{UffdHandler, UffdRange};
/// # let (uffd, base, len): (std::os::fd::OwnedFd, usize, usize) = todo!();
/// // `uffd` and the range arrive from the VMM over a Unix socket (SCM_RIGHTS).
/// let snapshot = std::fs::File::open("snapshot.mem")?;
/// let handler = UffdHandler::builder(uffd, [UffdRange { base, len, offset: 0 }])
///     .order(4)
///     .handlers(2)
///     .build(snapshot)?;
/// // ... until the VMM exits; then
/// println!("{:?}", handler.stats());
/// # Ok(()) }
/// ```
///
/// What the memory is like is the other process's affair: the handler
/// never reads or maps it. It tracks which pages it has installed (the
/// kernel's `mincore` answers only for the caller's own memory), so a
/// page the other process discards without a `UFFD_EVENT_REMOVE` (it did
/// not ask for the feature) may be taken for present: its next fault is
/// still served, only the window's prefetch skips it.
///
/// Where the kernel lacks `UFFDIO_POISON` (before Linux 6.6), a page the
/// source fails cannot be failed in another process (the `PROT_NONE`
/// fallback works only on one's own memory): its reader stays blocked,
/// [`failure`](Self::failure) says which page and why.
///
/// Dropping the handler stops its threads and closes its copy of the
/// descriptor; the ranges stay registered, so the other process's later
/// faults wait for whoever else holds the descriptor. Faults the handler
/// had read and not yet served are woken to fault again, so that they
/// too reach the next reader (a handler built on a duplicate). If no one does
/// (the other process closes its copy too), the kernel unregisters the
/// ranges and wakes them: they, and every later fault, read zeros where
/// the guest had data. So stop the other process, or call
/// [`shutdown`](Self::shutdown), which hands the memory over whole,
/// before the handler goes.
pub struct UffdHandler {
    pub(super) shared: Arc<Shared>,
    pub(super) shut_down: AtomicBool,
    /// The other process's `/proc/PID/pagemap`, when tracking its writes.
    pub(super) pagemap: Option<std::fs::File>,
}

impl fmt::Debug for UffdHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UffdHandler")
            .field("ranges", &self.ranges())
            .field("page_size", &self.shared.page)
            .field("order", &self.shared.order)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// `/proc/self/fd`'s name for a userfaultfd.
const UFFD_LINK: &str = "anon_inode:[userfaultfd]";

fn bad(value: String, why: impl Into<String>) -> Error {
    Error::BadSetting {
        setting: "ranges",
        value,
        why: why.into(),
    }
}

/// A range as an error shows it: hex with its `0x`, the length in bytes
/// too (a bare `40000` read as decimal).
fn shown(r: &UffdRange) -> String {
    format!(
        "{{ base: {:#x}, len: {:#x} ({} bytes), offset: {:#x} }}",
        r.base, r.len, r.len, r.offset
    )
}

/// The ranges as areas, sorted by offset, once checked: aligned to
/// `page`, not empty, overlapping neither in memory nor in the source.
fn areas(ranges: &[UffdRange], page: usize) -> Result<Vec<Area>, Error> {
    if ranges.is_empty() {
        return Err(bad(
            "none".into(),
            "a handler needs the ranges the userfaultfd has registered",
        ));
    }
    for r in ranges {
        if r.base.checked_add(r.len).is_none() || r.offset.checked_add(r.len as u64).is_none() {
            return Err(bad(
                shown(r),
                "the range runs past the end of the address space (base + len) or of a u64 \
                 offset (offset + len): check the list of ranges the other process sent",
            ));
        }
        if r.len == 0 || r.len % page != 0 || r.base % page != 0 || r.offset % page as u64 != 0 {
            return Err(bad(
                shown(r),
                format!(
                    "a range's address, length and offset are multiples of the page size \
                     ({page} bytes; set it with page_size() for huge pages), and the length is \
                     not 0"
                ),
            ));
        }
    }
    let mut by_addr: Vec<&UffdRange> = ranges.iter().collect();
    by_addr.sort_by_key(|r| r.base);
    for w in by_addr.windows(2) {
        if w[0].base + w[0].len > w[1].base {
            return Err(bad(
                format!("{} and {}", shown(w[0]), shown(w[1])),
                "the ranges overlap in memory",
            ));
        }
    }
    let mut by_offset: Vec<&UffdRange> = ranges.iter().collect();
    by_offset.sort_by_key(|r| r.offset);
    for w in by_offset.windows(2) {
        if w[0].offset + w[0].len as u64 > w[1].offset {
            return Err(bad(
                format!("{} and {}", shown(w[0]), shown(w[1])),
                "the ranges overlap in the source: two ranges would hold the same bytes",
            ));
        }
    }
    Ok(by_offset
        .into_iter()
        .map(|r| Area {
            base: r.base,
            first: r.offset / page as u64,
            pages: (r.len / page) as u64,
        })
        .collect())
}

/// Checks that `fd` is a userfaultfd (where `/proc` says), and makes it
/// non-blocking: several handler threads read one descriptor, and a read
/// that finds the fault taken by another must return, not wait.
fn adopt(fd: OwnedFd) -> Result<Uffd, Error> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    if let Ok(link) = link {
        if link.as_os_str() != UFFD_LINK {
            return Err(Error::BadSetting {
                setting: "uffd",
                value: link.display().to_string(),
                why: format!(
                    "the descriptor is not a userfaultfd ({UFFD_LINK}): pass the one the other \
                     process created and registered"
                ),
            });
        }
    }
    let sys = |op| {
        move |e: rustix::io::Errno| Error::Sys {
            op,
            source: e.into(),
        }
    };
    let flags = rustix::fs::fcntl_getfl(&fd).map_err(sys("fcntl(F_GETFL) on the userfaultfd"))?;
    rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK)
        .map_err(sys("fcntl(F_SETFL, O_NONBLOCK) on the userfaultfd"))?;
    // A descriptor received without MSG_CMSG_CLOEXEC would pass to every
    // program the process runs later, keeping the other process's memory
    // alive (a userfaultfd holds its mm) past its exit.
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
        .map_err(sys("fcntl(F_SETFD, FD_CLOEXEC) on the userfaultfd"))?;
    Ok(Uffd::from_fd(fd))
}

/// Refuses a userfaultfd that has not been through `UFFDIO_API`: the
/// kernel polls it as an error and fails its reads for good, so handler
/// threads would spin. `poll` says so without a side effect: `POLLERR`
/// on a non-blocking userfaultfd (as [`adopt`] leaves it) is exactly a
/// handshake not yet done (`userfaultfd_poll`).
fn refuse_before_api(uffd: &Uffd) -> Result<(), Error> {
    let mut fds = [rustix::event::PollFd::new(
        uffd,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match rustix::event::poll(&mut fds, Some(&zero)) {
        Ok(_) if fds[0].revents().contains(rustix::event::PollFlags::ERR) => {
            Err(Error::BadSetting {
                setting: "uffd",
                value: "a userfaultfd before its UFFDIO_API".to_owned(),
                why: "the kernel reports it as an error and refuses every read until the \
                      process that created it calls UFFDIO_API and registers the ranges: hand \
                      it over after both"
                    .to_owned(),
            })
        }
        _ => Ok(()),
    }
}

/// The `UFFDIO_API` features a handler cannot serve, each with what it
/// would do: the kernel's feature bit, its name, and why.
const UNSERVED: [(u64, &str, &str); 3] = [
    (
        linux_raw_sys::general::UFFD_FEATURE_EVENT_FORK as u64,
        "UFFD_FEATURE_EVENT_FORK",
        "a fork of the other process hands this handler a new userfaultfd for the child, \
         which it does not serve: the child's faults would wait forever",
    ),
    (
        linux_raw_sys::general::UFFD_FEATURE_EVENT_REMAP as u64,
        "UFFD_FEATURE_EVENT_REMAP",
        "the handler does not follow ranges that mremap(2) moves: faults at their new address \
         would be failed as outside every range",
    ),
    (
        linux_raw_sys::general::UFFD_FEATURE_SIGBUS as u64,
        "UFFD_FEATURE_SIGBUS",
        "missing-page faults then raise SIGBUS instead of reaching a handler",
    ),
];

/// The first feature of `features` (a userfaultfd's, as `/proc/self/fdinfo`
/// shows them) that a handler cannot serve: its name and why.
fn unserved(features: u64) -> Option<(&'static str, &'static str)> {
    UNSERVED
        .iter()
        .find_map(|&(bit, name, why)| (features & bit != 0).then_some((name, why)))
}

/// Refuses a userfaultfd set up for events a handler does not serve
/// ([`UNSERVED`]), read from `/proc/self/fdinfo`'s `API:` line; one whose
/// line cannot be read is taken as it is. Returns whether to try
/// `UFFDIO_POISON` (Linux 6.6): as that line's ioctl mask says, and where
/// it cannot be read (no `/proc` in a sandbox), yes: the first refusal
/// drops it, where assuming no left every failed page's readers blocked.
/// Fail point `uffd::fdinfo`: the line cannot be read.
fn refuse_unserved(uffd: &OwnedFd) -> Result<bool, Error> {
    let fdinfo = format!("/proc/self/fdinfo/{}", uffd.as_raw_fd());
    let read = || -> std::io::Result<String> {
        fail_point!("uffd::fdinfo", |_| Err(std::io::Error::from(
            std::io::ErrorKind::NotFound
        )));
        std::fs::read_to_string(&fdinfo)
    };
    let info = read().unwrap_or_default();
    let poisons = super::dirty::uffd_ioctls(&info).is_none_or(|ioctls| {
        super::offered_ioctls(ioctls) & super::handler::UFFDIO_POISON_BIT != 0
    });
    let Some(features) = super::dirty::uffd_features(&info) else {
        return Ok(poisons);
    };
    match unserved(features) {
        Some((name, why)) => Err(Error::BadSetting {
            setting: "uffd",
            value: format!("a userfaultfd with features {features:#x}"),
            why: format!(
                "its UFFDIO_API asked for {name}, which this handler does not serve: {why}"
            ),
        }),
        None => Ok(poisons),
    }
}

impl UffdHandler {
    /// A handler for `uffd` (created, `UFFDIO_API`'d and registered for
    /// missing-page faults by another process) over `ranges`, with default
    /// settings, to adjust. The build refuses a descriptor set up for
    /// events a handler does not serve (`UFFD_FEATURE_EVENT_FORK`,
    /// `EVENT_REMAP`, `SIGBUS`) or not yet through `UFFDIO_API`, and makes
    /// it non-blocking and close-on-exec. A failed build closes the
    /// handler's copy of `uffd` (and may have set its `O_NONBLOCK`): pass
    /// a duplicate (`OwnedFd::try_clone`) to keep one for a retry.
    pub fn builder(
        uffd: OwnedFd,
        ranges: impl IntoIterator<Item = UffdRange>,
    ) -> UffdHandlerBuilder {
        UffdHandlerBuilder {
            uffd,
            ranges: ranges.into_iter().collect(),
            page_size: page_size(),
            track_writes_of: None,
            settings: Settings::default(),
        }
    }

    pub(super) fn build(
        b: UffdHandlerBuilder,
        source: Box<dyn PageSource>,
        mode: Mode,
    ) -> Result<Self, Error> {
        let UffdHandlerBuilder {
            uffd,
            ranges,
            page_size: page,
            track_writes_of,
            settings,
        } = b;
        if !page.is_power_of_two() || page < page_size() {
            return Err(Error::BadSetting {
                setting: "page_size",
                value: page.to_string(),
                why: format!(
                    "a page size is a power of two, at least the system's {} bytes",
                    page_size()
                ),
            });
        }
        let areas = areas(&ranges, page)?;
        let len = areas
            .last()
            .map_or(0, |a| (a.first + a.pages) as usize * page);
        let working_set = settings.check((page, "page_size"), len, &*source)?;
        let poisons = refuse_unserved(&uffd)?;
        let uffd = adopt(uffd)?;
        refuse_before_api(&uffd)?;
        let pagemap = track_writes_of
            .map(|pid| super::dirty::pagemap_of(pid, uffd.as_fd(), &areas, page))
            .transpose()?;
        let shared = Shared::new(Parts {
            mode,
            uffd,
            areas,
            page,
            // Tried, and dropped when the kernel refuses it; not tried on a
            // kernel too old to have it (so `fail_signal` says so at once).
            poison: poisons,
            mapping: None,
            foreign: true,
            track: pagemap.is_some(),
            source,
            settings: &settings,
        })?;
        let handler = UffdHandler {
            shared,
            shut_down: AtomicBool::new(false),
            pagemap,
        };
        // From here `handler`'s drop stops the threads started.
        handler.shared.launch(settings, working_set)?;
        Ok(handler)
    }

    /// The ranges served, sorted by offset.
    pub fn ranges(&self) -> Vec<UffdRange> {
        let page = self.shared.page;
        self.shared
            .areas
            .iter()
            .map(|a| UffdRange {
                base: a.base,
                len: a.addresses(page).len(),
                offset: a.first * page as u64,
            })
            .collect()
    }

    /// The page size the ranges are served in.
    pub fn page_size(&self) -> usize {
        self.shared.page
    }

    /// What the handlers did so far.
    pub fn stats(&self) -> UffdStats {
        self.shared.stats()
    }

    /// The first page that could not be filled, and why; a fault outside
    /// every range is page `u64::MAX`, its address in the cause.
    pub fn failure(&self) -> Option<Error> {
        self.shared.failure()
    }

    /// The pages faulted on so far, as [`UffdRegion::record`](crate::UffdRegion::record)
    /// (pages numbered by their place in the source).
    pub fn record(&self) -> Option<Record> {
        self.shared.record()
    }

    /// As [`UffdRegion::wait_replayed`](crate::UffdRegion::wait_replayed).
    #[must_use = "false: the replay had not ended by the timeout"]
    pub fn wait_replayed(&self, timeout: Duration) -> bool {
        self.shared.wait_replayed(timeout)
    }

    /// How a failed page's readers are stopped: SIGBUS where the kernel
    /// poisons pages (Linux 6.6+); elsewhere they stay blocked (`None`).
    /// Where `/proc` does not say what the kernel offers, SIGBUS until a
    /// poison is refused.
    pub fn fail_signal(&self) -> Option<FailSignal> {
        self.shared
            .poison
            .load(Ordering::Relaxed)
            .then_some(FailSignal::Sigbus)
    }

    /// Pages installed so far (copied or zeroed, or found present: ones
    /// the other process wrote before it registered them), less those it
    /// discarded since.
    pub fn installed_pages(&self) -> usize {
        self.shared.resident_pages()
    }

    /// Stops the handler threads, then installs every page still missing
    /// (waiting for the source as [`UffdRegion::shutdown`](crate::UffdRegion::shutdown)
    /// does) and unregisters the ranges: the memory is the other process's
    /// alone from then on, every page with its data (postcopy's end). If
    /// the other process has exited, the fill stops at the first copy the
    /// kernel refuses for it (ESRCH): [`failure`](Self::failure) names the
    /// exit. In a child of `fork(2)`, does nothing: the handler is the
    /// parent's.
    pub fn shutdown(&self) {
        if !self.shared.in_owner() || self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared.shutdown();
    }
}

impl Drop for UffdHandler {
    fn drop(&mut self) {
        if !self.shared.in_owner() {
            // A child's copy: the threads and the userfaultfd are the
            // parent's (see `Shared::in_owner`).
            return;
        }
        self.shared.stop_handlers();
        // A thread left in the source installs nothing into the VMM's
        // memory after this (which may hold another mapping by then).
        self.shared.retire();
        // The threads waiting on faults the handlers read and did not
        // serve fault again, and the kernel queues their faults afresh
        // for whoever reads the descriptor next (a handler built on a
        // duplicate of it): it queues a fault once, and the ranges stay
        // registered (the other process's).
        self.shared.wake_all();
    }
}

#[cfg(all(test, not(mmbatch_loom)))]
mod tests;
