//! The sequential reference model of `Batcher`, shared by the proptest
//! (`crates/pagevec/tests/batcher_model.rs`) and the fuzz target
//! (`fuzz/fuzz_targets/batcher_ops.rs`).
//!
//! Steps run on real worker threads (each owns its slot, as in
//! production), one at a time, driven from the caller's thread so a run is
//! deterministic. The workers persist across runs; each run gets a fresh
//! batcher. After every step:
//! - each thread's applied ops equal the model's, in order;
//! - the ops waiting in batches equal the model's;
//! - every counter in `BatchStats` equals the model's, and the lock
//!   acquisitions the target saw equal `stats.lock_acquisitions`.
#![allow(dead_code, unreachable_pub)]

use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
};

use mmbatch_pagevec::{Apply, BatchStats, Batcher};

use crate::workers::{self, workers};

/// Batch capacity of the batcher under test.
pub const N: usize = 4;
/// Worker threads, each owning one slot.
pub use workers::THREADS;
/// Distinct lock keys.
pub const KEYS: u8 = 3;

/// (thread, sequence within thread, key)
pub type Op = (usize, u32, u8);

/// Three lists, one lock each, recording application order.
#[derive(Debug, Default)]
pub struct Lists {
    lists: [Mutex<Vec<Op>>; KEYS as usize],
    /// Every op in the order it was applied.
    pub log: Mutex<Vec<Op>>,
    /// Lock acquisitions seen by the target.
    pub locks: AtomicU64,
}

impl Apply for Lists {
    type Op = Op;
    type Key = u8;
    type Guard<'a> = MutexGuard<'a, Vec<Op>>;

    fn key(&self, op: &Op) -> u8 {
        op.2
    }

    fn lock(&self, key: u8) -> Self::Guard<'_> {
        self.locks.fetch_add(1, Ordering::Relaxed);
        self.lists[key as usize].lock().unwrap()
    }

    fn apply(&self, list: &mut Self::Guard<'_>, op: Op) {
        list.push(op);
        self.log.lock().unwrap().push(op);
    }
}

/// One step of a test sequence; the `usize` is the worker thread.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Thread `.0` queues an op for key `.1`.
    Queue(usize, u8),
    /// Thread `.0` applies an op for key `.1` at once.
    ApplyNow(usize, u8),
    /// Thread `.0` drains its own batch.
    DrainLocal(usize),
    /// Thread `.0` drains every thread's batch.
    DrainAll(usize),
    /// Thread `.0` disables batching.
    Disable(usize),
    /// Thread `.0` re-enables it.
    Enable(usize),
}

/// The sequential model: per-thread FIFO batches of capacity N.
#[derive(Default)]
struct Model {
    pending: [Vec<Op>; THREADS],
    applied: [Vec<Op>; THREADS],
    next_seq: [u32; THREADS],
    disabled: usize,
    stats: BatchStats,
}

impl Model {
    fn apply_batch(&mut self, t: usize) {
        let batch = std::mem::take(&mut self.pending[t]);
        if batch.is_empty() {
            return;
        }
        if batch.len() == N {
            self.stats.batches += 1;
        } else {
            self.stats.drains += 1;
        }
        let mut key = None;
        for op in batch {
            if key != Some(op.2) {
                key = Some(op.2);
                self.stats.lock_acquisitions += 1;
            }
            self.applied[t].push(op);
        }
    }

    fn drain_all(&mut self) {
        (0..THREADS).for_each(|t| self.apply_batch(t));
        self.stats.drain_all_passes += 1;
    }

    fn new_op(&mut self, t: usize, k: u8) -> Op {
        self.next_seq[t] += 1;
        (t, self.next_seq[t], k)
    }

    /// Runs `s`; returns the op it creates, if any.
    fn step(&mut self, s: Step) -> Option<Op> {
        match s {
            Step::Queue(t, k) => {
                let op = self.new_op(t, k);
                self.pending[t].push(op);
                self.stats.ops += 1;
                if self.pending[t].len() == N || self.disabled > 0 {
                    self.apply_batch(t);
                }
                Some(op)
            }
            Step::ApplyNow(t, k) => {
                let op = self.new_op(t, k);
                self.applied[t].push(op);
                self.stats.immediate += 1;
                self.stats.lock_acquisitions += 1;
                Some(op)
            }
            Step::DrainLocal(t) => {
                self.apply_batch(t);
                None
            }
            Step::DrainAll(_) => {
                self.drain_all();
                None
            }
            Step::Disable(_) => {
                self.disabled += 1;
                self.drain_all();
                None
            }
            Step::Enable(_) => {
                self.disabled -= 1;
                None
            }
        }
    }
}

/// Runs `steps` on worker threads and checks the batcher against the
/// model after each one.
pub fn run(steps: &[Step]) -> Result<(), String> {
    let workers = workers();
    let batcher: Arc<Batcher<Lists, N>> = Arc::new(Batcher::new(Lists::default()));
    let mut model = Model::default();
    for &s in steps {
        if matches!(s, Step::Enable(_)) && model.disabled == 0 {
            continue; // enable() without disable() panics by contract
        }
        let op = model.step(s);
        let t = match s {
            Step::Queue(t, _)
            | Step::ApplyNow(t, _)
            | Step::DrainLocal(t)
            | Step::DrainAll(t)
            | Step::Disable(t)
            | Step::Enable(t) => t,
        };
        let b = batcher.clone();
        workers[t]
            .run(Box::new(move || match s {
                Step::Queue(..) => b.queue(op.unwrap()),
                Step::ApplyNow(..) => b.apply_now(op.unwrap()),
                Step::DrainLocal(_) => b.drain_local(),
                Step::DrainAll(_) => b.drain_all(),
                Step::Disable(_) => b.disable(),
                Step::Enable(_) => b.enable(),
            }))
            .map_err(|e| format!("{s:?} panicked: {e}"))?;
        check(&batcher, &model, s)?;
    }
    Ok(())
}

fn check(b: &Batcher<Lists, N>, m: &Model, s: Step) -> Result<(), String> {
    let log = b.target().log.lock().unwrap().clone();
    for t in 0..THREADS {
        let mine: Vec<Op> = log.iter().copied().filter(|op| op.0 == t).collect();
        ensure(&mine, &m.applied[t], || {
            format!("thread {t}'s applied ops after {s:?}")
        })?;
    }
    let mut stats = m.stats;
    stats.pending = m.pending.iter().map(|p| p.len() as u64).sum();
    let got = b.stats();
    ensure(&got, &stats, || format!("stats after {s:?}"))?;
    ensure(
        &b.target().locks.load(Ordering::Relaxed),
        &got.lock_acquisitions,
        || "locks seen by the target".to_owned(),
    )?;
    ensure(&b.is_disabled(), &(m.disabled > 0), || {
        "disabled".to_owned()
    })
}

fn ensure<T: PartialEq + std::fmt::Debug>(
    got: &T,
    want: &T,
    what: impl FnOnce() -> String,
) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{}: got {got:?}, model says {want:?}", what()))
    }
}
