//! Recording the pages faults touch, and replaying a record: REAP's
//! record-and-prefetch (Ustiugov et al., ASPLOS 2021) on a region that
//! keeps serving faults while it installs.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use super::{PageRead, Shared};
use crate::uffd::record::{REPLAY_RUN, WorkingSet};

/// What a region's replay threads share.
pub(in crate::uffd) struct Replay {
    /// The record's runs, in replay order.
    pub(in crate::uffd) runs: Vec<(u64, usize)>,
    /// Where the runs' bytes are, if not in the image.
    pub(in crate::uffd) working_set: Option<WorkingSet>,
    /// The next run to install.
    pub(in crate::uffd) next: AtomicUsize,
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
    /// A replay thread: installs runs of the record, taking the next one
    /// from the plan, until none is left or the region stops. A run the
    /// source cannot give whole, or whose working-set bytes fail their
    /// CRC, is left to the faults.
    pub(in crate::uffd) fn prefetch(&self, plan: &Replay) {
        let _alive = super::CountOut(&self.alive, &self.exited);
        let _prefetching = super::CountOut(&self.prefetching, &self.replayed);
        // As long as the longest run (REPLAY_RUN pages of 2 MiB would be
        // 128 MiB a thread).
        let longest = plan.runs.iter().map(|&(_, n)| n).max().unwrap_or(0);
        let mut buf = vec![0u8; self.page * longest.min(REPLAY_RUN)];
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let i = plan.next.fetch_add(1, Ordering::Relaxed);
            let Some(&(start, n)) = plan.runs.get(i) else {
                return;
            };
            let buf = &mut buf[..n * self.page];
            let copied = if self.mode == super::Mode::Continue {
                // Over a page cache the pages are there: map them in place
                // (`UFFDIO_CONTINUE`), copying nothing.
                self.cont(start, n, true).map_err(|_| 0)
            } else if let Some(ws) = &plan.working_set {
                let (at, crc) = ws.runs[i];
                match std::os::unix::fs::FileExt::read_exact_at(&*ws.file, buf, at) {
                    Ok(()) if crc32fast::hash(buf) == crc => self.copy_run(start, n, buf, true),
                    _ => {
                        self.stats
                            .replay_runs_refused
                            .fetch_add(1, Ordering::Relaxed);
                        Ok(0)
                    }
                }
            } else if let Some(src) = self.source_pages(start, n, None) {
                self.copy_run(start, n, src, true)
            } else {
                let read = catch_unwind(AssertUnwindSafe(|| self.source.read_pages(start, n, buf)));
                match read {
                    Ok(PageRead::Ready) => self.copy_run(start, n, buf, true),
                    _ => Ok(0),
                }
            };
            self.stats
                .pages_prefetched
                .fetch_add(copied.unwrap_or(0) as u64, Ordering::Relaxed);
        }
    }
}
