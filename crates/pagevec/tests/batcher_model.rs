//! `Batcher` against a sequential reference model.
//!
//! Random sequences of queue / apply_now / drain_local / drain_all /
//! disable / enable run on real worker threads (each owns its slot, as in
//! production), one step at a time, driven from the test thread so every run
//! is deterministic. After every step:
//! - each thread's applied ops equal the model's, in order;
//! - the ops waiting in batches equal the model's;
//! - every counter in `BatchStats` equals the model's, and the lock
//!   acquisitions the target saw equal `stats.lock_acquisitions`.

use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
    mpsc,
};

use mmbatch_pagevec::{Apply, BatchStats, Batcher};
use proptest::prelude::*;

const N: usize = 4;
const THREADS: usize = 3;
const KEYS: u8 = 3;

/// (thread, sequence within thread, key)
type Op = (usize, u32, u8);

/// Three lists, one lock each, recording application order.
#[derive(Default)]
struct Lists {
    lists: [Mutex<Vec<Op>>; KEYS as usize],
    log: Mutex<Vec<Op>>,
    locks: AtomicU64,
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

#[derive(Clone, Copy, Debug)]
enum Step {
    Queue(usize, u8),
    ApplyNow(usize, u8),
    DrainLocal(usize),
    DrainAll(usize),
    Disable(usize),
    Enable(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let t = 0..THREADS;
    prop_oneof![
        12 => (t.clone(), 0..KEYS).prop_map(|(t, k)| Step::Queue(t, k)),
        1 => (t.clone(), 0..KEYS).prop_map(|(t, k)| Step::ApplyNow(t, k)),
        2 => t.clone().prop_map(Step::DrainLocal),
        1 => t.clone().prop_map(Step::DrainAll),
        1 => t.clone().prop_map(Step::Disable),
        1 => t.prop_map(Step::Enable),
    ]
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

fn run(steps: &[Step]) -> Result<(), TestCaseError> {
    let batcher: Batcher<Lists, N> = Batcher::new(Lists::default());
    let mut model = Model::default();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (tx, rx) = mpsc::channel::<(Step, Option<Op>)>();
                let (done_tx, done_rx) = mpsc::channel::<()>();
                let b = &batcher;
                scope.spawn(move || {
                    for (s, op) in rx {
                        match s {
                            Step::Queue(..) => b.queue(op.unwrap()),
                            Step::ApplyNow(..) => b.apply_now(op.unwrap()),
                            Step::DrainLocal(_) => b.drain_local(),
                            Step::DrainAll(_) => b.drain_all(),
                            Step::Disable(_) => b.disable(),
                            Step::Enable(_) => b.enable(),
                        }
                        done_tx.send(()).unwrap();
                    }
                });
                (tx, done_rx)
            })
            .collect();
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
            workers[t].0.send((s, op)).unwrap();
            workers[t].1.recv().unwrap();
            check(&batcher, &model, s)?;
        }
        Ok(())
    })
}

fn check(b: &Batcher<Lists, N>, m: &Model, s: Step) -> Result<(), TestCaseError> {
    let log = b.target().log.lock().unwrap().clone();
    for t in 0..THREADS {
        let mine: Vec<Op> = log.iter().copied().filter(|op| op.0 == t).collect();
        prop_assert_eq!(&mine, &m.applied[t], "thread {} after {:?}", t, s);
    }
    let mut stats = m.stats;
    stats.pending = m.pending.iter().map(|p| p.len() as u64).sum();
    let got = b.stats();
    prop_assert_eq!(got, stats, "stats after {:?}", s);
    prop_assert_eq!(
        b.target().locks.load(Ordering::Relaxed),
        got.lock_acquisitions
    );
    prop_assert_eq!(b.is_disabled(), m.disabled > 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 128 },
        // Miri's isolation forbids the file access persistence needs.
        failure_persistence: if cfg!(miri) {
            None
        } else {
            ProptestConfig::default().failure_persistence
        },
        ..ProptestConfig::default()
    })]

    #[test]
    fn batcher_matches_sequential_model(
        steps in prop::collection::vec(step(), 1..if cfg!(miri) { 20 } else { 60 })
    ) {
        run(&steps)?;
    }
}

#[test]
fn full_batch_relocks_only_on_key_change() {
    let b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    for (i, k) in [0, 0, 0, 1, 1, 0, 2, 2].into_iter().enumerate() {
        b.queue((0, i as u32, k));
    }
    let s = b.stats();
    assert_eq!((s.batches, s.lock_acquisitions, s.pending), (1, 4, 0));
}

#[test]
fn drop_applies_waiting_ops_and_into_inner_returns_them() {
    let b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    b.queue((0, 1, 0));
    std::thread::scope(|s| {
        s.spawn(|| b.queue((1, 1, 1)));
    });
    assert_eq!(b.stats().pending, 2);
    let lists = b.into_inner();
    assert_eq!(lists.log.lock().unwrap().len(), 2);
}

#[test]
fn ops_of_exited_threads_wait_for_drain_all() {
    let b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    std::thread::scope(|s| {
        for t in 0..4 {
            let b = &b;
            s.spawn(move || b.queue((t, 1, 0)));
        }
    });
    assert_eq!(b.stats().pending, 4);
    b.drain_all();
    let s = b.stats();
    assert_eq!((s.pending, s.drain_all_passes), (0, 1));
    // An exited thread's id (and slot) is reused by the next thread, so the
    // four ops sat in one to four slots.
    assert!((1..=4).contains(&s.drains), "{s:?}");
    assert_eq!(b.target().log.lock().unwrap().len(), 4);
}

#[test]
fn apply_panic_drops_the_rest_of_the_batch_and_keeps_working() {
    struct Picky(Mutex<Vec<u32>>);
    impl Apply for Picky {
        type Op = u32;
        type Key = ();
        type Guard<'a> = MutexGuard<'a, Vec<u32>>;
        fn key(&self, _: &u32) {}
        fn lock(&self, _: ()) -> Self::Guard<'_> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
        fn apply(&self, v: &mut Self::Guard<'_>, op: u32) {
            assert_ne!(op, 13, "unlucky op");
            v.push(op);
        }
    }
    let b: Batcher<Picky, 4> = Batcher::new(Picky(Mutex::new(vec![])));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        [12, 13, 14, 15].into_iter().for_each(|op| b.queue(op));
    }));
    assert!(r.is_err());
    // 14 and 15 were dropped with the batch; the slot is usable again.
    [1, 2, 3, 4].into_iter().for_each(|op| b.queue(op));
    assert_eq!(*b.target().0.lock().unwrap_or_else(|e| e.into_inner()), [12, 1, 2, 3, 4]);
    assert_eq!(b.stats().pending, 0);
}

#[test]
#[should_panic(expected = "more times than Batcher::disable")]
fn enable_without_disable_panics() {
    let b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    b.enable();
}

#[test]
#[cfg_attr(miri, ignore = "membarrier is a system call")]
fn membarrier_is_used_where_the_kernel_offers_it() {
    use rustix::thread::{MembarrierCommand, membarrier_query};
    let _b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    let offered = membarrier_query().contains_command(MembarrierCommand::PrivateExpedited);
    if !offered {
        eprintln!("this kernel offers no private expedited membarrier: queue() uses a full fence");
    }
    assert_eq!(mmbatch_pagevec::uses_membarrier(), offered);
}
