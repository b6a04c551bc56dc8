//! `GatedRuns`: a source whose first runs (what a replay's threads read
//! first) block until a gate opens, while later runs and single pages
//! (what faults read) are served at once: the tests' way to hold a replay
//! back while faults come ahead of it.

use std::sync::{
    Arc, Condvar, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use mmbatch_faultaround::{PageRead, PageSource};

/// Opened by [`release`].
pub(crate) type Gate = Arc<(Mutex<bool>, Condvar)>;

/// The runs held: the first of each of a replay's two threads (the
/// default `prefetchers`).
pub(crate) const HELD: usize = 2;

/// Serves `src`; its `read_pages` counts the runs asked for, and the
/// first [`HELD`] wait for `open`.
pub(crate) struct GatedRuns {
    pub(crate) src: Vec<u8>,
    pub(crate) open: Gate,
    pub(crate) runs_read: Arc<AtomicUsize>,
}

impl PageSource for GatedRuns {
    fn len(&self) -> u64 {
        self.src.len() as u64
    }
    fn read_page(&self, index: u64, buf: &mut [u8]) -> PageRead {
        self.src.read_page(index, buf)
    }
    fn read_pages(&self, index: u64, count: usize, buf: &mut [u8]) -> PageRead {
        if self.runs_read.fetch_add(1, Ordering::SeqCst) < HELD {
            let (lock, cv) = &*self.open;
            let _open = cv.wait_while(lock.lock().unwrap(), |open| !*open).unwrap();
        }
        self.src.read_pages(index, count, buf)
    }
}

/// A closed gate.
pub(crate) fn gate() -> Gate {
    Arc::new((Mutex::new(false), Condvar::new()))
}

/// Opens `open`: every run waiting on it goes on.
pub(crate) fn release(open: &(Mutex<bool>, Condvar)) {
    *open.0.lock().unwrap() = true;
    open.1.notify_all();
}
