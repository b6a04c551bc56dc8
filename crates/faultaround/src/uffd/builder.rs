//! [`UffdRegionBuilder`]: a region's settings.

use std::{fs::File, os::fd::AsRawFd, time::Duration};

use super::{Mode, PageSource, Record, UffdHandler, UffdRegion, Zeroes};
use crate::Error;

/// What a region and a [`UffdHandler`] share: how faults are served.
#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub(super) order: u32,
    pub(super) handlers: usize,
    pub(super) source_timeout: Duration,
    pub(super) not_ready_timeout: Option<Duration>,
    pub(super) record: bool,
    pub(super) image_id: String,
    pub(super) replay: Option<Record>,
    pub(super) replay_pages: Option<std::sync::Arc<File>>,
    pub(super) prefetchers: usize,
    pub(super) busy_poll: Duration,
    pub(super) on_failure: Option<OnFailure>,
}

/// A callback told of each failed page ([`on_failure`](UffdRegionBuilder::on_failure)).
#[derive(Clone)]
pub(super) struct OnFailure(pub(super) std::sync::Arc<dyn Fn(Error) + Send + Sync>);

impl std::fmt::Debug for OnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnFailure(..)")
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            order: 0,
            handlers: 1,
            source_timeout: super::DEFAULT_SOURCE_TIMEOUT,
            not_ready_timeout: None,
            record: false,
            image_id: String::new(),
            replay: None,
            replay_pages: None,
            prefetchers: 2,
            busy_poll: DEFAULT_BUSY_POLL,
            on_failure: None,
        }
    }
}

/// [`busy_poll`](UffdRegionBuilder::busy_poll)'s default: about two
/// fault round trips of a guest whose idle vCPUs halt, as KVM's
/// `halt_poll_ns` covers a wake-up.
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(100);

/// The longest [`busy_poll`](UffdRegionBuilder::busy_poll) accepted:
/// beyond it a handler burns a CPU between faults for no gain in latency.
pub const MAX_BUSY_POLL: Duration = Duration::from_millis(10);

/// The setters of [`Settings`], for both builders.
macro_rules! settings_setters {
    () => {
        /// Fault-around order: each fault copies the ready pages of its
        /// `2^order`-page window (default 0, at most [`MAX_ORDER`](crate::MAX_ORDER),
        /// and a window of at most 32 MiB, each handler's buffer: order 4
        /// with 2 MiB pages).
        pub fn order(mut self, order: u32) -> Self {
            self.settings.order = order;
            self
        }

        /// Handler threads (default 1, at most [`MAX_HANDLERS`](crate::MAX_HANDLERS)).
        pub fn handlers(mut self, handlers: usize) -> Self {
            self.settings.handlers = handlers;
            self
        }

        /// How long a faulting page waits for a source that says
        /// [`NotReady`](crate::PageRead::NotReady), or that has not returned
        /// from its call, before it is failed (default 30 s; `Duration::MAX`
        /// waits for good). A handler whose call into the source has lasted
        /// longer is replaced (see the region's docs); with none free, new
        /// faults fail until one is. Drop waits for
        /// the handlers up to this long; [`shutdown`](crate::UffdRegion::shutdown)
        /// as its docs say. Below [`MIN_SOURCE_TIMEOUT`](crate::MIN_SOURCE_TIMEOUT)
        /// the build is refused.
        pub fn source_timeout(mut self, timeout: Duration) -> Self {
            self.settings.source_timeout = timeout;
            self
        }

        /// How long a faulting page waits for a source that keeps saying
        /// [`NotReady`](crate::PageRead::NotReady) before it is failed, and
        /// how long [`shutdown`](crate::UffdRegion::shutdown)'s fill waits
        /// for such pages in all (default: the
        /// [source timeout](Self::source_timeout)). Apart from it, so that
        /// a source still downloading its pages can be waited for as long
        /// as it takes (`Duration::MAX`) while a call that never returns
        /// is still caught at the source timeout. A handler waits on such
        /// a page, serving no other fault meanwhile: build with a handler
        /// for each page that may be waited for at once. `shutdown` waits
        /// this long too for such pages: with `Duration::MAX`, for as long
        /// as the source takes (the drop does not wait for them).
        pub fn not_ready_timeout(mut self, timeout: Duration) -> Self {
            self.settings.not_ready_timeout = Some(timeout);
            self
        }

        /// Records the page of every fault, first touch first, for
        /// [`UffdRegion::record`] (default off). The cost is one uncontended
        /// lock and a push per fault, in the handler thread. Only faulting
        /// pages are recorded: with an [`order`](Self::order) above 0 the
        /// window's other pages, installed with them, are not, and a replay
        /// leaves them to fault. Record at order 0 for the whole working
        /// set.
        pub fn record(mut self, yes: bool) -> Self {
            self.settings.record = yes;
            self
        }

        /// The image's id (a snapshot's name or content hash, at most
        /// [`MAX_ID_LEN`](crate::MAX_ID_LEN) bytes), written into records and checked on replay
        /// (default empty: records are then told apart by length alone).
        pub fn image_id(mut self, id: impl Into<String>) -> Self {
            self.settings.image_id = id.into();
            self
        }

        /// Replays `record`: background threads install its pages in runs of
        /// consecutive pages (one `UFFDIO_COPY` each; over a page cache, one
        /// `UFFDIO_CONTINUE` each, which maps the cached pages without
        /// copying), in record order, while
        /// the handlers serve faults as they come — a fault never queues
        /// behind the replay, and a fault on a recorded page whose run the
        /// replay has not reached installs that run whole with its window
        /// (copied, a run of at most 2 MiB, so not one of several huge
        /// pages; mapped in place, any run). Pages outside the record
        /// fault in as usual. A
        /// record of another image (length, page size or id) is refused at
        /// build.
        pub fn replay(mut self, record: Record) -> Self {
            self.settings.replay = Some(record);
            self
        }

        /// Where a replay reads the recorded pages (not read over a page
        /// cache, where the replay maps the cached pages in place): a
        /// working-set file that
        /// [`Record::write_pages`](crate::Record::write_pages) wrote for the replayed record, read in one
        /// sequential pass (REAP's), instead of the pages' places in the image.
        /// A file written for another record, or corrupt, is refused at build;
        /// a run whose CRC-32 does not match is not installed (its pages fault
        /// in from the image).
        pub fn replay_pages(mut self, file: File) -> Self {
            self.settings.replay_pages = Some(std::sync::Arc::new(file));
            self
        }

        /// Threads that install a replayed record (default 2, at least 1 and
        /// at most [`MAX_HANDLERS`](crate::MAX_HANDLERS); read only with
        /// [`replay`](Self::replay)).
        pub fn prefetchers(mut self, n: usize) -> Self {
            self.settings.prefetchers = n;
            self
        }

        /// How long a handler that has just served a fault keeps polling
        /// the userfaultfd before it sleeps (default
        /// [`DEFAULT_BUSY_POLL`](crate::DEFAULT_BUSY_POLL); zero turns it off; at most
        /// [`MAX_BUSY_POLL`](crate::MAX_BUSY_POLL)). One handler at a time
        /// polls, yielding its CPU to any thread that wants it. It trades
        /// that much CPU per burst of faults for the wake-up of a sleeping
        /// handler, which costs a halted vCPU's wake-up in a virtual
        /// machine: the kernel's busy polling of sockets (`sk_busy_loop`,
        /// `net.core.busy_poll`) and KVM's halt polling, for faults.
        pub fn busy_poll(mut self, duration: std::time::Duration) -> Self {
            self.settings.busy_poll = duration;
            self
        }

        /// Calls `f` with each page that fails
        /// ([`Error::PageFailed`](crate::Error::PageFailed): the page, the
        /// signal its readers get, the cause's kind and message), as it
        /// fails, after `failure` has the first: to log it, or to stop a
        /// guest whose reader cannot be signalled (another process's
        /// memory before Linux 6.6, where it stays blocked) instead of
        /// polling `failure`, which keeps the first only. `f` runs on the
        /// thread that failed the page (a handler, the watchdog, or one
        /// in `shutdown` or the drop), once the page's readers are woken
        /// to their signal, and that thread waits for it: return
        /// promptly, and do not shut down or drop the region or handler
        /// from it. A panic in it is caught.
        pub fn on_failure(mut self, f: impl Fn(crate::Error) + Send + Sync + 'static) -> Self {
            self.settings.on_failure = Some(OnFailure(std::sync::Arc::new(f)));
            self
        }
    };
}

/// Settings of a [`UffdRegion`]; from [`UffdRegion::builder`].
#[derive(Clone, Debug)]
pub struct UffdRegionBuilder {
    pub(super) len: usize,
    pub(super) huge: Option<mmbatch_mmap::HugePageSize>,
    pub(super) track_writes: bool,
    pub(super) require_kernel_faults: bool,
    pub(super) settings: Settings,
}

impl UffdRegionBuilder {
    settings_setters!();

    /// Backs the region with hugetlb pages of `size` (`MAP_HUGETLB`): each
    /// fault is served with a whole huge page (`UFFDIO_COPY` of 2 MiB), so
    /// a working set arrives in far fewer faults, and the guest's TLB
    /// reach grows as a VMM's hugetlbfs-backed memory gives. The length
    /// must be a whole number of huge pages and the pool must hold that
    /// many free (reserved at build: a short pool is
    /// [`Error::HugePagesUnavailable`], naming the command that reserves
    /// them). The source, the window order, the statistics and records
    /// all count huge pages. 2 MiB pages only: a build with
    /// `HugePageSize::Size1G` is refused (a handler's buffer would need
    /// the whole gigabyte). Not for a page-cache region
    /// ([`build_over_page_cache`](Self::build_over_page_cache)), whose
    /// pages are its file's: refused there.
    pub fn huge_pages(mut self, size: mmbatch_mmap::HugePageSize) -> Self {
        self.huge = Some(size);
        self
    }

    /// Tracks which pages the process writes (default off), for
    /// incremental snapshots and live migration: every page goes in
    /// write-protected, the kernel marks a page written on its first write
    /// without waking a handler (`UFFD_FEATURE_WP_ASYNC`), and
    /// [`UffdRegion::written_pages`] reports the pages written since the
    /// region was built or since the last
    /// [`take_written_pages`](UffdRegion::take_written_pages). Needs Linux
    /// 6.7 (refused as [`Error::Unsupported`] before); not over a page
    /// cache.
    pub fn track_writes(mut self, yes: bool) -> Self {
        self.track_writes = yes;
        self
    }

    /// Refuses to build a region that would serve only the process's own
    /// faults (default off: [`build`](Self::build) then settles for
    /// [`UffdMode::UserModeOnly`](crate::UffdMode::UserModeOnly)). For
    /// memory handed to the kernel (a VMM's guest memory under KVM or
    /// vhost, O_DIRECT or io_uring buffers), where a user-mode-only region
    /// fails each such access to a page not yet present with `EFAULT`,
    /// later and far from the cause: with this, `build` returns
    /// [`Error::NoPermission`], which names the permissions that give the
    /// full mode. (A [`UffdHandler`] serves the mode of
    /// the descriptor its VMM opened, which the kernel does not report.)
    pub fn require_kernel_faults(mut self, yes: bool) -> Self {
        self.require_kernel_faults = yes;
        self
    }

    /// Maps the region over `source` and starts its handlers.
    ///
    /// The region serves the kernel's faults on the process's behalf
    /// (`write(2)`, `send(2)`, O_DIRECT, io_uring, vhost reading pages not
    /// yet present) wherever the process may have that: as root or with
    /// `CAP_SYS_PTRACE`, with read/write access to `/dev/userfaultfd`
    /// (root's only by default; a group or an ACL grants it), or with
    /// `sysctl vm.unprivileged_userfaultfd=1`. Without any of these it is
    /// built user-mode-only, where such a system call fails with `EFAULT`
    /// ("Bad address") on a page the process has not read itself yet:
    /// [`UffdRegion::mode`] says which it got, and
    /// [`require_kernel_faults`](Self::require_kernel_faults) makes it an
    /// error instead. Any other refusal of the userfaultfd is an error, not
    /// a quiet fallback.
    ///
    /// # Errors
    /// [`Error::BadLength`] and [`Error::SourceTooShort`] for a length
    /// that is not whole pages or that the source does not cover;
    /// [`Error::SourceUnreadable`] for a source (or working-set file) that
    /// cannot be read; [`Error::BadHandlers`]; [`Error::OrderTooLarge`]
    /// past [`MAX_ORDER`](crate::MAX_ORDER); [`Error::BadSetting`] naming
    /// a setting out of range (the window past 32 MiB, 1 GiB pages,
    /// `replay_pages` without `replay`, and the like); [`Error::RecordMismatch`] and
    /// [`Error::WorkingSetFile`] for a replay made from another image or a
    /// file that is not its record's; [`Error::HugePagesUnavailable`];
    /// [`Error::MapRefused`] for a region larger than the address space
    /// or the limits on mappings allow; [`Error::NoPermission`] and [`Error::Unsupported`] for a
    /// userfaultfd (or a feature of it) this kernel or process does not
    /// have; [`Error::ThreadRefused`]; [`Error::Sys`] for any other failed
    /// system call, named.
    pub fn build(self, source: impl PageSource) -> Result<UffdRegion, Error> {
        if source.len() < self.len as u64 {
            return Err(Error::SourceTooShort {
                source_len: source.len(),
                region_len: self.len,
            });
        }
        UffdRegion::build(self, Box::new(source), None)
    }

    /// A shared mapping of `file`'s page cache; see
    /// [`UffdRegion::over_page_cache`].
    ///
    /// # Errors
    /// As [`build`](Self::build), and [`Error::FileSealed`] for a file
    /// sealed against writes (the region's mapping of it is writable).
    ///
    /// # Safety
    /// As [`UffdRegion::over_page_cache`].
    pub unsafe fn build_over_page_cache(self, file: &File) -> Result<UffdRegion, Error> {
        let source_len = PageSource::len(file);
        if source_len < self.len as u64 {
            return Err(Error::SourceTooShort {
                source_len,
                region_len: self.len,
            });
        }
        let zeroes = Zeroes(self.len as u64);
        UffdRegion::build(self, Box::new(zeroes), Some(file.as_raw_fd()))
    }
}

/// Settings of a [`UffdHandler`]; from [`UffdHandler::builder`].
#[derive(Debug)]
pub struct UffdHandlerBuilder {
    pub(super) uffd: std::os::fd::OwnedFd,
    pub(super) ranges: Vec<super::UffdRange>,
    pub(super) page_size: usize,
    pub(super) track_writes_of: Option<u32>,
    pub(super) settings: Settings,
}

impl UffdHandlerBuilder {
    settings_setters!();

    /// Tracks which pages process `pid` (the one that registered the
    /// ranges) writes, as [`UffdRegionBuilder::track_writes`] does for an
    /// owned region: every page goes in write-protected, and
    /// [`UffdHandler::written_pages`] reads `/proc/PID/pagemap`
    /// (`PAGEMAP_SCAN`). That process must have asked for
    /// `UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_WP_ASYNC` in its
    /// `UFFDIO_API` and registered each range with `UFFDIO_REGISTER_MODE_MISSING
    /// | UFFDIO_REGISTER_MODE_WP` (Linux 6.7), and be ours to ptrace (the
    /// same user, or `CAP_SYS_PTRACE`): `build` checks each and names the
    /// one missing. A VMM's pid is its end of the socket's
    /// `SO_PEERCRED`.
    pub fn track_writes_of(mut self, pid: u32) -> Self {
        self.track_writes_of = Some(pid);
        self
    }

    /// The page size of the ranges (default the system's): the huge page
    /// size (such as 2 MiB) for memory the other process mapped with
    /// `MAP_HUGETLB` or from hugetlbfs, which the kernel fills only a
    /// whole huge page at a time. The source is then read in pages of this
    /// size, and the fault-around window counts them. A size smaller than
    /// the memory's fails every page (EINVAL); where the kernel poisons
    /// (Linux 6.6), the whole huge page is poisoned, so its readers get
    /// SIGBUS, and [`failure`](UffdHandler::failure) names the size to set.
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = bytes;
        self
    }

    /// Starts serving the userfaultfd's faults from `source`: a fault at
    /// an address in a range is served with the source's bytes at the
    /// range's offset, as an owned region's are (window, handlers, replay,
    /// REMOVE, POISON, watchdog). Refused: no ranges, ranges not aligned to
    /// the page size or overlapping (in memory or in the source), a source
    /// shorter than the last range's end, a descriptor that is not a
    /// userfaultfd. The descriptor is made non-blocking (its flags are
    /// shared with every copy of it).
    ///
    /// # Errors
    /// [`Error::BadSetting`] naming what is wrong (the ranges, the page
    /// size, a descriptor that is not a userfaultfd, a setting out of
    /// range), [`Error::SourceTooShort`], [`Error::SourceUnreadable`],
    /// [`Error::BadHandlers`], [`Error::OrderTooLarge`],
    /// [`Error::RecordMismatch`] and [`Error::WorkingSetFile`] for a replay
    /// that does not fit (as [`UffdRegionBuilder::build`]),
    /// [`Error::ThreadRefused`], the write tracking's refusals (see
    /// [`track_writes_of`](Self::track_writes_of)), and [`Error::Sys`] for
    /// any other failed system call, named.
    pub fn build(self, source: impl PageSource) -> Result<UffdHandler, Error> {
        UffdHandler::build(self, Box::new(source), Mode::Copy)
    }

    /// Starts serving minor faults on a page cache the other process
    /// mapped shared: a shmem or hugetlbfs file (a memfd) already holding
    /// the image, mapped `MAP_SHARED` and registered with
    /// `UFFDIO_REGISTER_MODE_MINOR` (and `UFFD_FEATURE_MINOR_SHMEM` or
    /// `UFFD_FEATURE_MINOR_HUGETLBFS` in its `UFFDIO_API`; Linux 5.14 for
    /// shmem, 5.13 for hugetlbfs).
    /// Each fault maps the cached pages of its window in place
    /// (`UFFDIO_CONTINUE`), copying nothing, as
    /// [`UffdRegion::over_page_cache`](crate::UffdRegion::over_page_cache)
    /// does for its own mapping; record, replay, several handlers and the
    /// statistics work as for copies. Nothing is read from a source, so
    /// there is none to give. A missing-page fault (a range registered
    /// with `UFFDIO_REGISTER_MODE_MISSING` instead) fails its page (the
    /// reader gets SIGBUS where the kernel poisons), with a cause naming
    /// the registration; a page that leaves the cache between its fault
    /// and the handler's CONTINUE is left to the kernel's own fault. Refused with
    /// [`track_writes_of`](Self::track_writes_of), since writes to a
    /// shared page cache reach its file.
    pub fn build_over_page_cache(self) -> Result<UffdHandler, Error> {
        if self.track_writes_of.is_some() {
            return Err(Error::BadSetting {
                setting: "track_writes_of",
                value: "a pid".into(),
                why: "write tracking is for anonymous and huge-page memory served by copy; a \
                      page-cache mapping's writes reach its file"
                    .into(),
            });
        }
        let end = self
            .ranges
            .iter()
            .map(|r| r.offset.saturating_add(r.len as u64))
            .max()
            .unwrap_or(0);
        UffdHandler::build(self, Box::new(Zeroes(end)), Mode::Continue)
    }
}
