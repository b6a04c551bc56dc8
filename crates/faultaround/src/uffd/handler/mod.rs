//! The fault handler threads: read userfaultfd events, resolve each fault
//! by copying (or mapping) its window, and fail a page that cannot be
//! filled so its reader gets a signal instead of waiting forever.

use std::{
    collections::{HashSet, VecDeque},
    io,
    os::fd::OwnedFd,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc, Condvar, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::sys::Uffd;
use mmbatch_mmap::Mapping;
use rustix::event::{PollFd, PollFlags, poll};

use super::{PageRead, PageSource, REPLAY_RUN, source::fault_in};
use crate::Window;

mod areas;
mod copy;
mod events;
mod failing;
mod replay;
mod resident;
#[cfg(all(test, mmbatch_loom))]
mod tests;
mod watchdog;

pub(super) use areas::Area;
pub(super) use failing::UFFDIO_POISON_BIT;
use replay::REPLAY_READ;
pub(super) use replay::{Recorder, Replay};
pub(super) use resident::{ZeroedBitmap, zeroed_bitmap};
use watchdog::Ticket;

pub(super) use watchdog::Watch;

/// A fault read from the userfaultfd: where, and whether it is a minor
/// fault (the page cached, its mapping missing).
#[derive(Clone, Copy, Debug)]
pub(super) struct Fault {
    pub(super) addr: usize,
    pub(super) minor: bool,
}

/// Why a fault on a page-cache region that is not a minor one fails.
const MISSING_IN_CONTINUE: &str = "a missing-page fault on memory served over a page cache: \
     the page is not in the cache, so UFFDIO_CONTINUE cannot map it; the memory must be a \
     MAP_SHARED mapping of a shmem or hugetlbfs file holding the image, registered with \
     UFFDIO_REGISTER_MODE_MINOR, not MODE_MISSING";

/// How faults are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Missing pages: copy from the source (`UFFDIO_COPY`).
    Copy,
    /// Minor faults on a shared page-cache mapping: map the cached pages
    /// (`UFFDIO_CONTINUE`), as the kernel's `map_pages` does.
    Continue,
}

/// The signal a reader of a failed page gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailSignal {
    /// `SIGBUS`, from a poisoned page table entry (`UFFDIO_POISON`,
    /// Linux 6.6+): what a file mapping past its end gives.
    Sigbus,
    /// `SIGSEGV`, from the page made inaccessible (`mprotect(PROT_NONE)`):
    /// the fallback where `UFFDIO_POISON` is missing or refused.
    Sigsegv,
}

/// The first page a region failed to fill.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) page: u64,
    pub(super) cause: io::Error,
    /// `None`: neither poisoning nor protecting worked; the reader stays
    /// blocked until the region shuts down.
    pub(super) signal: Option<FailSignal>,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) faults: AtomicU64,
    pub(super) pages_copied: AtomicU64,
    pub(super) pages_skipped: AtomicU64,
    pub(super) already_present: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) pages_failed: AtomicU64,
    pub(super) pages_prefetched: AtomicU64,
    pub(super) remove_events: AtomicU64,
    pub(super) pages_zeroed: AtomicU64,
    pub(super) replay_runs_refused: AtomicU64,
}

/// What a region's handler threads share with it.
pub(super) struct Shared {
    pub(super) mode: Mode,
    /// The process that made it, and the forks its line had been through
    /// then (`fork::generation`): a child of `fork(2)` holds a copy whose
    /// threads and registration are the parent's, which its drop or
    /// `shutdown` must leave alone ([`in_owner`](Self::in_owner)).
    pub(super) owner: (u32, u64),
    pub(super) uffd: Uffd,
    /// Where the pages are (`areas.rs`): sorted by first page, one for a
    /// region the process mapped itself.
    pub(super) areas: Box<[Area]>,
    /// The source bytes the areas span (the end of the last).
    pub(super) len: usize,
    pub(super) page: usize,
    pub(super) order: u32,
    pub(super) source: Box<dyn PageSource>,
    pub(super) source_timeout: Duration,
    /// How long a page the source says is not ready is waited for.
    pub(super) not_ready_timeout: Duration,
    /// How long a handler polls for the next fault before sleeping.
    pub(super) busy_poll: Duration,
    /// Told of each failed page (`on_failure`).
    pub(super) on_failure: Option<super::builder::OnFailure>,
    /// Set while one handler busy-polls (the others sleep in `poll`).
    pub(super) polling: AtomicBool,
    pub(super) stop: AtomicBool,
    /// A copy was refused with ESRCH: the process whose memory this is
    /// has exited, and the replay stops (nothing is left to install).
    pub(super) gone: AtomicBool,
    pub(super) wake: OwnedFd,
    pub(super) stats: Counters,
    /// Whether `UFFDIO_POISON` is available (cleared when refused).
    pub(super) poison: AtomicBool,
    /// Pages failed: never filled afterwards (not by a neighbour's window,
    /// not by shutdown), so their readers keep getting the signal.
    pub(super) failed: Mutex<HashSet<u64>>,
    pub(super) failure: Mutex<Option<Failure>>,
    /// `/proc/self/pagemap`, opened the first time the `PROT_NONE`
    /// fallback asks whether a page is mapped (`None`: unreadable).
    pub(super) pagemap: std::sync::OnceLock<Option<std::fs::File>>,
    /// The region's memory until it is dropped: guards `mprotect`, the one
    /// call a handler that outlived the region must not make.
    pub(super) mapping: RwLock<Option<Mapping>>,
    /// Handler threads still running, and their exit signal.
    pub(super) alive: Mutex<usize>,
    pub(super) exited: Condvar,
    /// Held for writing while an event is read (and a removal marked),
    /// for reading around every copy: a copy that starts after a
    /// `UFFD_EVENT_REMOVE` was read sees its pages marked (see `events`).
    pub(super) events: RwLock<()>,
    /// Set under `events` held for writing when the region or handler is
    /// dropped ([`retire`](Self::retire)): from then on no copy, continue,
    /// zero page or poison reaches the kernel.
    pub(super) retired: AtomicBool,
    /// One bit per page discarded by the application: zeros from now on
    /// ([`zeroed_bitmap`]).
    pub(super) removed: ZeroedBitmap,
    pub(super) any_removed: AtomicBool,
    /// For memory of another process, which `mincore` cannot see: one bit
    /// per page installed (copied, zeroed; cleared by a removal). `None`
    /// for the process's own memory, asked of `mincore`.
    pub(super) installed: Option<ZeroedBitmap>,
    /// Writes are tracked (`UFFD_FEATURE_WP_ASYNC`): every page goes in
    /// write-protected (`dirty.rs`).
    pub(super) track: bool,
    /// Faults read by a thread that could not serve them at once (a
    /// copier draining events to get past EAGAIN): served by a handler.
    pub(super) deferred: Mutex<VecDeque<Fault>>,
    /// The faults' first touches, when recording.
    pub(super) recorder: Option<Recorder>,
    /// The replay's plan, set before any handler starts: a fault on a
    /// recorded page no replay thread has taken installs its whole run.
    pub(super) replay: std::sync::OnceLock<Arc<Replay>>,
    /// Replay threads still installing, and faults installing a run they
    /// took from the replay (`take_run`); their end's signal.
    pub(super) prefetching: Mutex<usize>,
    pub(super) replayed: Condvar,
    /// The region's threads (handlers, replay, watchdog), joined when it
    /// stops.
    pub(super) threads: Mutex<Vec<JoinHandle<()>>>,
    /// What each handler is serving, for the watchdog (`watchdog.rs`).
    pub(super) watch: Watch,
    /// The watchdog's sleep, cut short when the region stops.
    pub(super) watch_lock: Mutex<()>,
    pub(super) watch_wake: Condvar,
}

/// A recorded run a fault took from the replay.
struct TakenRun<'a> {
    pages: std::ops::Range<u64>,
    /// Its index in the plan.
    i: usize,
    /// Among the replay's work until the fault has installed it.
    _counted: CountOut<'a>,
}

/// Why the faulting page's data could not be had.
enum Unready {
    Failed(io::Error),
    Stopped,
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".into())
}

/// Counts a thread (or a fault's run) out of `count` when it ends, even
/// by panicking, and wakes whoever waits on `done` (`alive`/`exited` for
/// every thread of a region, `prefetching`/`replayed` for the replay's
/// threads and the runs faults took from it).
struct CountOut<'a>(&'a Mutex<usize>, &'a Condvar);

impl Drop for CountOut<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        self.1.notify_all();
    }
}

impl Shared {
    /// Handler thread `me`: wait for faults (or the stop signal), resolve
    /// them.
    ///
    /// Every handler polls the one userfaultfd and reads events from it,
    /// one event per read: the kernel hands each pending fault to exactly
    /// one reader (the others get EAGAIN), so concurrent faults spread
    /// over the handlers and are resolved in parallel; only the read
    /// itself is serialised (under `events`), never a copy.
    ///
    /// A handler the watchdog found stuck in the source exits once the
    /// source lets it go (a replacement serves in its place).
    pub(super) fn serve(&self, me: usize) {
        let _alive = CountOut(&self.alive, &self.exited);
        let mut buf = vec![0u8; self.page * self.fault_pages()];
        // Whether this handler has served a fault since it last slept.
        let mut served = false;
        loop {
            if self.stop.load(Ordering::Acquire) {
                // Passed on: the one nudge stop writes may have been read
                // by this handler, as a deferred fault's, while another
                // sleeps in `poll`.
                let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
                return;
            }
            let next = self
                .deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            if let Some(fault) = next {
                if !self.serve_one(me, fault, &mut buf) {
                    return;
                }
                continue;
            }
            if std::mem::take(&mut served) && self.poll_busily() {
                while let Some(fault) = self.next_fault() {
                    served = true;
                    if !self.serve_one(me, fault, &mut buf) {
                        return;
                    }
                }
                continue;
            }
            let mut fds = [
                PollFd::new(&self.uffd, PollFlags::IN),
                PollFd::new(&self.wake, PollFlags::IN),
            ];
            let r = poll(&mut fds, None);
            if self.stop.load(Ordering::Acquire) {
                let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
                return;
            }
            if !matches!(r, Ok(n) if n > 0) {
                continue;
            }
            if !fds[1].revents().is_empty() {
                // A deferred fault's nudge (the eventfd is non-blocking).
                let _ = rustix::io::read(&self.wake, &mut [0u8; 8]);
            }
            while let Some(fault) = self.next_fault() {
                served = true;
                if !self.serve_one(me, fault, &mut buf) {
                    return;
                }
            }
        }
    }

    /// Serves `fault`; whether handler `me` serves on: false only when the
    /// watchdog found it stuck in the source and another has taken its
    /// place ([`back_from_stuck`](Self::back_from_stuck)).
    fn serve_one(&self, me: usize, fault: Fault, buf: &mut [u8]) -> bool {
        self.on_fault(me, fault, buf) || self.back_from_stuck(me)
    }

    /// Polls the userfaultfd without sleeping for up to `busy_poll`,
    /// yielding the CPU between looks; true when an event (or the stop
    /// nudge) is there. One handler polls at a time: false at once if
    /// another is, or polling is off. The kernel's `sk_busy_loop`, for a
    /// userfaultfd.
    fn poll_busily(&self) -> bool {
        if self.busy_poll.is_zero()
            || self
                .polling
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        let until = Instant::now() + self.busy_poll;
        let found = loop {
            let mut fds = [
                PollFd::new(&self.uffd, PollFlags::IN),
                PollFd::new(&self.wake, PollFlags::IN),
            ];
            let zero = rustix::event::Timespec::default();
            if matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0) {
                break fds[0].revents().contains(PollFlags::IN);
            }
            if self.stop.load(Ordering::Acquire) || Instant::now() >= until {
                break false;
            }
            std::thread::yield_now();
        };
        self.polling.store(false, Ordering::Release);
        found
    }

    /// Records (when recording) and resolves the fault at `addr`, under a
    /// ticket the watchdog can claim; false if it did (this handler was
    /// stuck and has been replaced).
    fn on_fault(&self, me: usize, fault: Fault, buf: &mut [u8]) -> bool {
        let Some(page) = self.page_of(fault.addr) else {
            self.fail_stray(fault.addr);
            return true;
        };
        if let Some(r) = &self.recorder {
            r.touch(me, page);
        }
        let ticket = self.begin(me, page);
        // Source calls are guarded one by one; this is for a bug of ours:
        // the reader must not wait forever.
        let resolve = || self.resolve(page, fault.minor, buf, ticket);
        if let Err(p) = catch_unwind(AssertUnwindSafe(resolve)) {
            let msg = format!("the fault handler panicked: {}", panic_message(&*p));
            self.fail_page(page, io::Error::other(msg));
        }
        self.end(ticket)
    }

    /// Starts handler `me` (counted as serving until the watchdog finds it
    /// stuck).
    pub(super) fn start_handler(self: &Arc<Self>, me: usize) -> io::Result<()> {
        self.serving(1);
        self.spawn_handler(me).inspect_err(|_| self.serving(-1))
    }

    /// The thread of handler `me` (already counted as serving).
    pub(super) fn spawn_handler(self: &Arc<Self>, me: usize) -> io::Result<()> {
        let s = self.clone();
        self.start(format!("uffd-handler-{me}"), move || s.serve(me))
    }

    /// `read_page`, with a panic turned into a failed page.
    /// `k`: the handler's fault, whose watchdog slot times the call.
    fn read(&self, p: u64, buf: &mut [u8], k: Option<Ticket>) -> PageRead {
        let _in = self.in_source(k);
        match catch_unwind(AssertUnwindSafe(|| self.source.read_page(p, buf))) {
            Ok(r) => r,
            Err(payload) => PageRead::Failed(io::Error::other(format!(
                "the page source panicked reading page {p}: {}",
                panic_message(&*payload)
            ))),
        }
    }

    /// `pages`, ignored unless exactly `n` pages long (and if it panics),
    /// its memory faulted in ([`fault_in`]) here, under the watchdog's eye
    /// (`k`), and outside `events`. `UFFDIO_COPY` reads the slice in the kernel,
    /// under `events`' read lock: a page of a mapped file not in the page
    /// cache (a network filesystem that stalls, a cold disk), or of
    /// another region not yet filled, held that lock for as long as it
    /// took, out of the watchdog's view, with the next event's reader and
    /// the region's drop waiting behind it.
    fn source_pages(&self, p: u64, n: usize, k: Option<Ticket>) -> Option<&[u8]> {
        let _in = self.in_source(k);
        catch_unwind(AssertUnwindSafe(|| {
            let pages = self.source_slice(p, n)?;
            // Its error is the copy's to report.
            let _ = fault_in(pages);
            Some(pages)
        }))
        .ok()
        .flatten()
    }

    /// Whether the source holds pages `p..p + n` in memory (`pages`),
    /// without touching them.
    fn source_has(&self, p: u64, n: usize, k: Option<Ticket>) -> bool {
        let _in = self.in_source(k);
        catch_unwind(AssertUnwindSafe(|| self.source_slice(p, n).is_some())).unwrap_or(false)
    }

    /// `pages`, ignored unless exactly `n` pages long.
    fn source_slice(&self, p: u64, n: usize) -> Option<&[u8]> {
        self.source
            .pages(p, n, self.page)
            .filter(|s| Some(s.len()) == n.checked_mul(self.page))
    }

    /// Waits until the source has page `p`, into `buf`: until it fails,
    /// `deadline` passes (a failure too), or — if `heed_stop` — the region
    /// stops.
    fn read_ready(
        &self,
        p: u64,
        buf: &mut [u8],
        deadline: Instant,
        heed_stop: bool,
        k: Option<Ticket>,
    ) -> Result<(), Unready> {
        let mut nap = Duration::from_micros(50);
        loop {
            match self.read(p, &mut buf[..self.page], k) {
                PageRead::Ready => return Ok(()),
                PageRead::Failed(e) => return Err(Unready::Failed(e)),
                PageRead::NotReady => {}
            }
            if heed_stop && self.stop.load(Ordering::Acquire) {
                return Err(Unready::Stopped);
            }
            if Instant::now() >= deadline {
                return Err(Unready::Failed(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the page source did not have page {p} ready within {:?} (the region's \
                         not_ready_timeout, by default its source_timeout)",
                        self.not_ready_timeout
                    ),
                )));
            }
            // Timed as the source's other calls are: a wait that never
            // returns is a hung source. So the nap stays well inside the
            // source timeout (a default wait, a sleep, of 5 ms against a
            // 2 ms timeout was taken for a hung source).
            let wait = nap.min(self.source_timeout / 4);
            let waited = {
                let _in = self.in_source(k);
                catch_unwind(AssertUnwindSafe(|| self.source.wait_ready(p, wait)))
            };
            if let Err(payload) = waited {
                return Err(Unready::Failed(io::Error::other(format!(
                    "the page source panicked waiting for page {p}: {}",
                    panic_message(&*payload)
                ))));
            }
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }

    /// [`read_ready`](Self::read_ready) for shutdown, which has stopped
    /// the handlers but still waits for the source, up to `deadline`.
    fn read_ready_until(
        &self,
        p: u64,
        buf: &mut [u8],
        deadline: Instant,
        k: Option<Ticket>,
    ) -> io::Result<()> {
        self.read_ready(p, buf, deadline, false, k)
            .map_err(|e| match e {
                Unready::Failed(e) => e,
                Unready::Stopped => io::Error::other("stopped"),
            })
    }

    pub(super) fn is_failed(&self, page: u64) -> bool {
        self.stats.pages_failed.load(Ordering::Relaxed) != 0
            && self
                .failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&page)
    }

    pub(super) fn any_failed(&self, w: &Window) -> bool {
        self.stats.pages_failed.load(Ordering::Relaxed) != 0
            && w.pages.clone().any(|p| self.is_failed(p))
    }

    /// Resolves a missing-page fault at `addr`: the faulting page first
    /// (without waking), then the window's other missing pages that are
    /// ready, in runs; then the faulting thread is woken — as the kernel
    /// maps the whole window before the fault returns.
    fn resolve(&self, page: u64, minor: bool, buf: &mut [u8], ticket: Ticket) {
        self.stats.faults.fetch_add(1, Ordering::Relaxed);
        if self.mode == Mode::Copy && self.is_removed(page) {
            // Discarded by the application: zeros, as anonymous memory.
            self.zero_page(page);
            return;
        }
        if self.mode == Mode::Continue && !minor {
            // Only a range registered for missing pages faults so: the
            // page is not in the cache, CONTINUE cannot map it, and a
            // reader woken would fault again at once.
            self.fail_page(page, io::Error::other(MISSING_IN_CONTINUE));
            return;
        }
        let around = Window::around(page, self.order, self.bounds(page))
            .unwrap_or_else(|_| Window::single(page));
        // In a replay, the recorded run the page lies in, if the replay's
        // threads have not taken it: the window takes it in too.
        let taken = self.take_run(page);
        let window = match &taken {
            Some(run) => Window {
                pages: run.pages.start.min(around.pages.start)..run.pages.end.max(around.pages.end),
            },
            None => around,
        };
        let (wstart, wlen) = (window.pages.start, window.len() as usize);
        if self.mode == Mode::Continue {
            // The faulting page was cached (a minor fault); its neighbours
            // may not be: those are skipped, never waited for. If it has
            // left the cache since (a hole punched, a truncation), the
            // reader is woken into the kernel's ordinary fault.
            if self.cont(wstart, wlen, false).is_err() {
                if let Err(e) = self.cont(page, 1, false) {
                    self.fail_page(page, e);
                    return;
                }
            }
            let _ = self.uffd.wake(self.addr(wstart), wlen * self.page);
            return;
        }
        // A run taken from the replay comes from its working-set file, as
        // the replay would have installed it; the window's other pages
        // (an order's neighbours) from the source.
        if let Some(run) = taken {
            match self.install_taken(&run, page, buf, ticket) {
                Some(true) => {
                    let whole = window.pages == run.pages;
                    // The replay's part is done: `wait_replayed` need
                    // not wait for the neighbours' source.
                    drop(run);
                    if !whole {
                        self.copy_window(&window, page, buf, ticket);
                    }
                    let _ = self.uffd.wake(self.addr(wstart), wlen * self.page);
                    return;
                }
                // The watchdog took the fault while the read held it.
                Some(false) => return,
                None => {}
            }
        }
        let deadline = self.ready_deadline();
        // Fast path: a source holding the whole window in memory gets it
        // copied in one UFFDIO_COPY (pages already present are skipped by
        // the EEXIST/partial handling in `copy_run`), then one wake for
        // the window: two ioctls per fault. Waking last means a resumed
        // thread sees the whole window, and these statistics, in place.
        if let Some(src) = self.source_pages(wstart, wlen, Some(ticket)) {
            if !self.have_data(ticket) {
                return;
            }
            if !self.any_failed(&window) && self.copy_run(wstart, wlen, src, false).is_ok() {
                let _ = self.uffd.wake(self.addr(wstart), wlen * self.page);
                return;
            }
        }
        // The watchdog took the fault while the source held this thread:
        // the page is failed, not to be copied.
        let mine = || self.have_data(ticket);
        let copied = match self.source_pages(page, 1, Some(ticket)) {
            Some(src) if mine() => self.copy_page(page, src, false),
            Some(_) => return,
            None => match self.read_ready(page, buf, deadline, true, Some(ticket)) {
                Ok(()) if mine() => self.copy_page(page, &buf[..self.page], false),
                Ok(()) => return,
                Err(Unready::Stopped) => return,
                Err(Unready::Failed(e)) => {
                    self.fail_page(page, e);
                    return;
                }
            },
        };
        if let Err(e) = copied {
            self.fail_page(page, e);
            return;
        }
        if wlen > 1 {
            self.copy_window(&window, page, buf, ticket);
        }
        let _ = self.uffd.wake(self.addr(page), self.page);
    }

    /// The longest run a fault takes from the replay in copy mode: what
    /// fits in [`REPLAY_READ`] bytes (2 MiB: one huge page, so runs of
    /// huge pages are left to the replay threads).
    fn fault_run(&self) -> usize {
        (REPLAY_READ / self.page).min(REPLAY_RUN)
    }

    /// The most pages one fault installs (the size of a handler's
    /// buffer): its order's window, and in a replay the run it may take
    /// beside it.
    pub(super) fn fault_pages(&self) -> usize {
        let run = match self.replay.get() {
            Some(_) => self.fault_run(),
            None => 0,
        };
        (1usize << self.order) + run
    }

    /// In a replay, the faulting page's whole run, taken from the replay
    /// if its threads have not taken it (see [`Replay::untaken_run_of`]):
    /// one in the page's area, of at most [`fault_run`](Self::fault_run)
    /// pages where it is copied. Counted as the replay's work while the
    /// fault installs it, so that `wait_replayed` waits for it.
    fn take_run(&self, page: u64) -> Option<TakenRun<'_>> {
        let plan = self.replay.get()?;
        let most = match self.mode {
            // Mapped in place: no buffer to fit.
            Mode::Continue => REPLAY_RUN,
            Mode::Copy => self.fault_run(),
        };
        // A look first, so that a fault whose run is gone (every fault
        // once the replay is done) takes no lock; then counted before it
        // is taken: the replay's threads cannot all end, and
        // `wait_replayed` return, between the two.
        let i = plan.untaken_run_of(page, most, self.bounds(page))?;
        *self.prefetching.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        let counted = CountOut(&self.prefetching, &self.replayed);
        if !plan.take(i) {
            return None;
        }
        let (start, n) = plan.run(i);
        Some(TakenRun {
            pages: start..start + n as u64,
            i,
            _counted: counted,
        })
    }

    fn copy_window(&self, w: &Window, page: u64, buf: &mut [u8], k: Ticket) {
        let present = self.resident(w.pages.start as usize, w.len() as usize);
        let wanted = |p: u64| {
            p != page
                && !present[(p - w.pages.start) as usize]
                && !self.is_failed(p)
                && !self.is_removed(p)
        };
        if self.source_has(w.pages.start, w.len() as usize, Some(k)) {
            // In memory and ready: copy each run of missing pages straight
            // from the source.
            for run in runs(w.pages.clone(), wanted) {
                let n = (run.end - run.start) as usize;
                if let Some(src) = self.source_pages(run.start, n, Some(k)) {
                    let _ = self.copy_run(run.start, n, src, true);
                }
            }
            return;
        }
        let mut run_start = None;
        let mut run_len = 0usize;
        for p in w.pages.clone() {
            let ready = wanted(p)
                && matches!(
                    self.read(
                        p,
                        &mut buf[run_len * self.page..(run_len + 1) * self.page],
                        Some(k)
                    ),
                    PageRead::Ready
                );
            if wanted(p) && !ready {
                self.stats.pages_skipped.fetch_add(1, Ordering::Relaxed);
            }
            if ready {
                run_start.get_or_insert(p);
                run_len += 1;
            } else if let Some(start) = run_start.take() {
                let _ = self.copy_run(start, run_len, &buf[..run_len * self.page], true);
                run_len = 0;
            }
        }
        if let Some(start) = run_start {
            let _ = self.copy_run(start, run_len, &buf[..run_len * self.page], true);
        }
    }
}

/// The maximal runs of consecutive pages of `pages` for which `wanted`
/// holds, in order.
fn runs(
    pages: std::ops::Range<u64>,
    mut wanted: impl FnMut(u64) -> bool,
) -> Vec<std::ops::Range<u64>> {
    let mut out = Vec::new();
    let mut run: Option<std::ops::Range<u64>> = None;
    for p in pages {
        if wanted(p) {
            match &mut run {
                Some(r) => r.end = p + 1,
                None => run = Some(p..p + 1),
            }
        } else if let Some(r) = run.take() {
            out.push(r);
        }
    }
    out.extend(run);
    out
}

#[cfg(all(test, not(mmbatch_loom)))]
mod unit_tests;
