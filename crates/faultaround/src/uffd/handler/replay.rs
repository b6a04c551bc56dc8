//! Recording the pages faults touch, and replaying a record: REAP's
//! record-and-prefetch (Ustiugov et al., ASPLOS 2021) on a region that
//! keeps serving faults while it installs.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
};

use super::{PageRead, Shared};
use crate::uffd::record::WorkingSet;

/// Bytes of a working-set file read at once: its runs lie back to back,
/// so one `pread` brings several (docs/restore.md, `replay_paths`).
pub(super) const REPLAY_READ: usize = 2 << 20;

/// What a region's replay threads share.
pub(in crate::uffd) struct Replay {
    /// The record's runs, in replay order.
    runs: Vec<(u64, usize)>,
    /// Where the runs' bytes are, if not in the image.
    working_set: Option<WorkingSet>,
    /// The runs a thread takes at a time, in order: consecutive runs of up
    /// to [`REPLAY_READ`] bytes (or one longer run) from a working-set
    /// file, one run otherwise.
    batches: Vec<std::ops::Range<usize>>,
    /// The next batch to install.
    next: AtomicUsize,
    /// The runs' indices in page order, for a fault to find its run.
    by_page: Vec<usize>,
    /// Whether each run has been taken, by a replay thread or by a fault
    /// that came before it: a run is installed whole, once.
    taken: Box<[AtomicBool]>,
}

impl Replay {
    /// The plan of replaying `runs` of `page`-byte pages.
    pub(in crate::uffd) fn new(
        runs: Vec<(u64, usize)>,
        working_set: Option<WorkingSet>,
        page: usize,
    ) -> Self {
        let limit = if working_set.is_some() {
            REPLAY_READ
        } else {
            0
        };
        let mut batches: Vec<std::ops::Range<usize>> = Vec::new();
        let mut bytes = 0;
        for (i, &(_, n)) in runs.iter().enumerate() {
            match batches.last_mut() {
                Some(b) if bytes + n * page <= limit => {
                    b.end = i + 1;
                    bytes += n * page;
                }
                _ => {
                    batches.push(i..i + 1);
                    bytes = n * page;
                }
            }
        }
        let mut by_page: Vec<usize> = (0..runs.len()).collect();
        by_page.sort_unstable_by_key(|&i| runs[i].0);
        Self {
            taken: runs.iter().map(|_| AtomicBool::new(false)).collect(),
            by_page,
            runs,
            working_set,
            batches,
            next: AtomicUsize::new(0),
        }
    }

    /// Takes run `i`; false if a fault or another thread took it first.
    pub(super) fn take(&self, i: usize) -> bool {
        !self.taken[i].swap(true, Ordering::Relaxed)
    }

    /// The run holding `page`, for a fault to take (its index), if the
    /// record has one of at most `most` pages inside `area` (source
    /// pages: a run across two of a handler's ranges stays the replay's)
    /// that nobody has taken yet: the faulting thread will read its
    /// neighbours next, so the run goes in whole now rather than a page a
    /// fault ahead of the replay (REAP installs whole runs).
    pub(super) fn untaken_run_of(
        &self,
        page: u64,
        most: usize,
        area: std::ops::Range<u64>,
    ) -> Option<usize> {
        let at = self
            .by_page
            .partition_point(|&i| self.runs[i].0 <= page)
            .checked_sub(1)?;
        let i = self.by_page[at];
        let (start, n) = self.runs[i];
        let end = start + n as u64;
        (page < end
            && n <= most
            && area.start <= start
            && end <= area.end
            && !self.taken[i].load(Ordering::Relaxed))
        .then_some(i)
    }

    /// Run `i`: (first page, pages).
    pub(super) fn run(&self, i: usize) -> (u64, usize) {
        self.runs[i]
    }
}

/// One handler's faults: (sequence number, page).
type Touches = Mutex<Vec<(u64, u64)>>;

/// The pages faulted on, first touch first: one list per handler thread
/// (so recording takes no shared lock), ordered by a global sequence.
pub(in crate::uffd) struct Recorder {
    seq: AtomicU64,
    lists: Box<[Touches]>,
    pub(in crate::uffd) image_id: String,
}

impl Recorder {
    pub(in crate::uffd) fn new(handlers: usize, image_id: String) -> Self {
        Self {
            seq: AtomicU64::new(0),
            lists: (0..handlers).map(|_| Mutex::new(Vec::new())).collect(),
            image_id,
        }
    }

    /// Handler `me` took a fault on `page`.
    pub(super) fn touch(&self, me: usize, page: u64) {
        let at = self.seq.fetch_add(1, Ordering::Relaxed);
        self.lists[me]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((at, page));
    }

    /// Every page touched so far, in fault order.
    pub(in crate::uffd) fn pages(&self) -> Vec<u64> {
        let mut all: Vec<(u64, u64)> = self
            .lists
            .iter()
            .flat_map(|l| l.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect();
        all.sort_unstable();
        all.into_iter().map(|(_, p)| p).collect()
    }
}

impl Shared {
    /// A replay thread: installs batches of runs of the record, taking
    /// the next one from the plan, until none is left or the region
    /// stops. A run the source cannot give whole, or whose working-set
    /// bytes fail their CRC, is left to the faults.
    pub(in crate::uffd) fn prefetch(&self, plan: &Replay) {
        let _alive = super::CountOut(&self.alive, &self.exited);
        let _prefetching = super::CountOut(&self.prefetching, &self.replayed);
        let bytes = |b: &std::ops::Range<usize>| -> usize {
            plan.runs[b.clone()]
                .iter()
                .map(|&(_, n)| n * self.page)
                .sum()
        };
        // As long as the longest batch: REPLAY_READ, or one run of up to
        // REPLAY_RUN pages (not REPLAY_RUN pages of 2 MiB, 128 MiB a
        // thread, for every record).
        let longest = plan.batches.iter().map(bytes).max().unwrap_or(0);
        let mut buf = vec![0u8; longest];
        loop {
            // Fail point `uffd::replay_batch`: a test holds the replay
            // here (`pause`) while faults come ahead of it.
            fail_point!("uffd::replay_batch");
            // Stopped, or the process gone: its runs cannot be installed.
            if self.stop.load(Ordering::Acquire) || self.gone.load(Ordering::Relaxed) {
                return;
            }
            let b = plan.next.fetch_add(1, Ordering::Relaxed);
            let Some(batch) = plan.batches.get(b) else {
                return;
            };
            let installed = match &plan.working_set {
                Some(ws) if self.mode == super::Mode::Copy => {
                    self.install_from(ws, plan, batch.clone(), &mut buf[..bytes(batch)])
                }
                _ => batch
                    .clone()
                    .filter(|&i| plan.take(i))
                    .map(|i| self.install_run(plan.runs[i], &mut buf))
                    .sum(),
            };
            self.stats
                .pages_prefetched
                .fetch_add(installed as u64, Ordering::Relaxed);
        }
    }

    /// Installs `batch`'s runs from the working-set file, read with one
    /// `pread` into `buf` (exactly their bytes), each run that no fault
    /// has taken; a run whose bytes fail their CRC, or all of them if the
    /// read fails, are refused. Returns the pages installed.
    fn install_from(
        &self,
        ws: &WorkingSet,
        plan: &Replay,
        batch: std::ops::Range<usize>,
        buf: &mut [u8],
    ) -> usize {
        let refused = |n: usize| {
            self.stats
                .replay_runs_refused
                .fetch_add(n as u64, Ordering::Relaxed);
        };
        let at = ws.runs[batch.start].0;
        if std::os::unix::fs::FileExt::read_exact_at(&*ws.file, buf, at).is_err() {
            refused(batch.len());
            return 0;
        }
        let mut off = 0;
        let mut installed = 0;
        for i in batch {
            let (start, n) = plan.runs[i];
            let run = &buf[off..off + n * self.page];
            off += run.len();
            if !plan.take(i) {
                continue;
            }
            if crc32fast::hash(run) != ws.runs[i].1 {
                refused(1);
                continue;
            }
            installed += self.copy_run(start, n, run, true).unwrap_or(0);
        }
        installed
    }

    /// Installs `run`, which fault `ticket` on `page` took, as the replay
    /// would have: from the working-set file where there is one (not from
    /// the source, which may be remote or not have it ready), else with
    /// one `read_pages` of the source (not a read a page); `buf` holds at
    /// least the run. The read is timed by the watchdog as a source call
    /// is. `Some(true)` once the faulting page is copied or failed (not
    /// woken: the caller wakes the window); `Some(false)` if the watchdog
    /// took the fault meanwhile (its page failed: the run's others are
    /// installed all the same once the read returns); `None` if the run
    /// could not be had so (a
    /// failed page in it, a source holding the pages in memory or without
    /// them ready, a read or CRC that failed): the fault then goes on as
    /// any other.
    pub(super) fn install_taken(
        &self,
        run: &super::TakenRun<'_>,
        page: u64,
        buf: &mut [u8],
        ticket: super::Ticket,
    ) -> Option<bool> {
        let plan = self.replay.get()?;
        let (start, n) = plan.runs[run.i];
        let buf = &mut buf[..n * self.page];
        // A failed page stays failed: the fault's usual path, which
        // skips those, copies the rest.
        if self.any_failed(&crate::Window {
            pages: run.pages.clone(),
        }) {
            return None;
        }
        if let Some(ws) = &plan.working_set {
            let (at, crc) = ws.runs[run.i];
            let read = {
                let _in = self.in_source(Some(ticket));
                // Fail point `uffd::taken_run_read`: a test stalls the
                // read (a file on a network disk that stopped answering).
                fail_point!("uffd::taken_run_read");
                std::os::unix::fs::FileExt::read_exact_at(&*ws.file, buf, at)
            };
            if read.is_err() || crc32fast::hash(buf) != crc {
                self.stats
                    .replay_runs_refused
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
        } else {
            if self.source_has(start, n, Some(ticket)) {
                return None;
            }
            let read = {
                let _in = self.in_source(Some(ticket));
                catch_unwind(AssertUnwindSafe(|| self.source.read_pages(start, n, buf)))
            };
            if !matches!(read, Ok(PageRead::Ready)) {
                return None;
            }
        }
        if !self.have_data(ticket) {
            // The watchdog failed the faulting page while the read held
            // this thread; the run's other pages are as good as the
            // replay's (and nobody else will replay them): in they go,
            // around every failed page.
            for part in super::runs(run.pages.clone(), |p| !self.is_failed(p)) {
                let at = (part.start - start) as usize * self.page;
                let len = (part.end - part.start) as usize;
                let _ = self.copy_run(part.start, len, &buf[at..], true);
            }
            return Some(false);
        }
        // This handler copies or fails the page from here (the watchdog
        // no longer can): the run without waking, the page alone if the
        // run's copy stopped short of it.
        let _ = self.copy_run(start, n, buf, false);
        if !self.resident(page as usize, 1)[0] {
            let at = (page - start) as usize * self.page;
            if let Err(e) = self.copy_page(page, &buf[at..at + self.page], false) {
                self.fail_page(page, e);
            }
        }
        Some(true)
    }

    /// Installs one run, `(first page, pages)`, from the page cache or
    /// the source, using `buf` to read it; returns the pages installed.
    fn install_run(&self, (start, n): (u64, usize), buf: &mut [u8]) -> usize {
        let buf = &mut buf[..n * self.page];
        let copied = if self.mode == super::Mode::Continue {
            // Over a page cache the pages are there: map them in place
            // (`UFFDIO_CONTINUE`), copying nothing.
            self.cont(start, n, true).map_err(|_| 0)
        } else if let Some(src) = self.source_pages(start, n, None) {
            self.copy_run(start, n, src, true)
        } else {
            let read = catch_unwind(AssertUnwindSafe(|| self.source.read_pages(start, n, buf)));
            match read {
                Ok(PageRead::Ready) => self.copy_run(start, n, buf, true),
                _ => Ok(0),
            }
        };
        copied.unwrap_or(0)
    }
}
