//! Experiment `batch`: what batching buys against one lock.
//!
//! Threads apply operations to one lock-protected structure, either taking
//! the lock per operation (`per-op`) or queueing on a
//! [`Batcher`] that applies a batch of `N` under
//! one acquisition (`batched-N`, N = 1, 7, 15, 31, 63). A third design,
//! `percpu-mutex-31`, batches in a [`PerCpu`] slot
//! locked by a mutex on every queue: the straightforward port of the
//! kernel's `local_lock`, shown for what that per-queue lock costs.
//!
//! Workloads:
//! - `counter`: one counter update per op, so locking and queueing dominate;
//! - `list`: one LRU move per op — unlink a frame from one of two intrusive
//!   lists and link it at the head of the other, as `activate` does.
//!
//! Rows are `WORKLOAD/VARIANT/threads-T` for T in the powers of two
//! below 2×CPUs (or `--threads`) and that count. Each sample times a fixed number of ops spread over the
//! threads, including each thread's final `drain_local`, so every op is
//! applied inside the timed region; the result is checked after each
//! sample. Samples of one table alternate between its rows, so drift on a
//! shared machine spreads over all of them.

use std::{
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use crossbeam_utils::CachePadded;
use mmbatch_pagevec::{Apply, Batcher, PageVec, apply_batch};

use crate::{Config, Experiment, Metric, Progress, Report, Row, Table, percpu::PerCpu, timed};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    id: "batch",
    seed: "all (the pagevec primitive)",
    title: "ops against one lock: per-op locking vs batches of N",
    run,
    big_scale: 1.0,
    memory: |_| 64 << 20,
    seed_refs: &[],
    seed_why: "No seed measures the batching primitive alone; its per-op rows model the per-page lock round trips every seed removes.",
    contention: "the rows at 2 or more threads",
};

/// Batch sizes measured: Linux's history (15, 31) and FreeBSD's (7, 63).
pub const BATCH_SIZES: [usize; 5] = [1, 7, 15, 31, 63];

/// Ops per sample at scale 1.0, spread over the sample's threads.
pub const OPS_PER_SAMPLE: f64 = 4_000_000.0;

/// Frames in the `list` workload: 16 Ki frames, so the lists stay in cache
/// and the lock, not memory, is what is measured.
const FRAMES: u32 = 1 << 14;

/// What each op does under the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// One counter update.
    Counter,
    /// One move between two intrusive lists.
    List,
}

impl Workload {
    /// The row-name prefix.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Counter => "counter",
            Workload::List => "list",
        }
    }
}

/// How ops reach the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Lock, apply, unlock, for every op.
    PerOp,
    /// Queue on a `Batcher<_, N>`.
    Batched(usize),
    /// Queue on a `PerCpu<PageVec<_, 31>>` slot, locking it per queue.
    PerCpuMutex,
}

impl Variant {
    /// The row-name part.
    pub fn name(self) -> String {
        match self {
            Variant::PerOp => "per-op".to_owned(),
            Variant::Batched(n) => format!("batched-{n}"),
            Variant::PerCpuMutex => "percpu-mutex-31".to_owned(),
        }
    }

    /// Every variant, baseline first.
    pub fn all() -> Vec<Variant> {
        let mut v = vec![Variant::PerOp];
        v.extend(BATCH_SIZES.iter().map(|&n| Variant::Batched(n)));
        v.push(Variant::PerCpuMutex);
        v
    }
}

/// One timed run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Wall time from releasing the threads to the last one finishing.
    pub elapsed: Duration,
    /// Ops applied.
    pub ops: u64,
    /// Acquisitions of the shared lock.
    pub lock_acquisitions: u64,
    /// Full batches applied.
    pub batches: u64,
    /// Partial batches applied by drains.
    pub drains: u64,
}

/// The `counter` target: one counter behind one lock.
#[derive(Debug, Default)]
struct Counter(CachePadded<Mutex<u64>>);

impl Apply for Counter {
    type Op = u32;
    type Key = ();
    type Guard<'a> = MutexGuard<'a, u64>;

    fn key(&self, _: &u32) {}

    fn lock(&self, _: ()) -> Self::Guard<'_> {
        self.0.lock().unwrap()
    }

    fn apply(&self, total: &mut Self::Guard<'_>, n: u32) {
        **total += u64::from(n);
    }
}

/// Two circular intrusive lists (inactive, active) over `FRAMES` frames with
/// sentinels at `FRAMES` and `FRAMES + 1`: the shape of an lruvec.
#[derive(Debug)]
struct Lists {
    next: Vec<u32>,
    prev: Vec<u32>,
    active: Vec<bool>,
    sizes: [u64; 2],
    moves: u64,
}

impl Lists {
    fn new() -> Self {
        let n = FRAMES as usize + 2;
        let mut l = Lists {
            next: (0..n as u32).collect(),
            prev: (0..n as u32).collect(),
            active: vec![false; FRAMES as usize],
            sizes: [0; 2],
            moves: 0,
        };
        for f in 0..FRAMES {
            l.link_head(f, false);
        }
        l.sizes = [u64::from(FRAMES), 0];
        l
    }

    fn head(active: bool) -> u32 {
        FRAMES + u32::from(active)
    }

    fn link_head(&mut self, f: u32, active: bool) {
        let head = Self::head(active);
        let first = self.next[head as usize];
        self.next[head as usize] = f;
        self.prev[f as usize] = head;
        self.next[f as usize] = first;
        self.prev[first as usize] = f;
    }

    /// Moves frame `f` to the head of the other list.
    fn toggle(&mut self, f: u32) {
        let (p, n) = (self.prev[f as usize], self.next[f as usize]);
        self.next[p as usize] = n;
        self.prev[n as usize] = p;
        let from = self.active[f as usize];
        self.link_head(f, !from);
        self.active[f as usize] = !from;
        self.sizes[usize::from(from)] -= 1;
        self.sizes[usize::from(!from)] += 1;
        self.moves += 1;
    }

    /// Walks both lists: every frame once, on the list its flag names.
    fn check(&self) {
        let mut seen = 0u64;
        for active in [false, true] {
            let head = Self::head(active);
            let mut f = self.next[head as usize];
            let mut n = 0;
            while f != head {
                assert_eq!(
                    self.active[f as usize], active,
                    "frame {f} on the wrong list"
                );
                f = self.next[f as usize];
                n += 1;
            }
            assert_eq!(n, self.sizes[usize::from(active)], "list size counter");
            seen += n;
        }
        assert_eq!(seen, u64::from(FRAMES));
    }
}

#[derive(Debug)]
struct ListTarget(CachePadded<Mutex<Lists>>);

impl Apply for ListTarget {
    type Op = u32;
    type Key = ();
    type Guard<'a> = MutexGuard<'a, Lists>;

    fn key(&self, _: &u32) {}

    fn lock(&self, _: ()) -> Self::Guard<'_> {
        self.0.lock().unwrap()
    }

    fn apply(&self, lists: &mut Self::Guard<'_>, frame: u32) {
        lists.toggle(frame);
    }
}

/// A cheap per-thread op stream (xorshift32), so op generation costs the
/// same in every variant.
struct Ops(u32);

impl Ops {
    fn new(thread: usize) -> Self {
        Ops(0x9e37_79b9 ^ (thread as u32 + 1).wrapping_mul(0x85eb_ca6b))
    }

    #[inline]
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0 % FRAMES
    }
}

/// Applies `ops_per_thread` ops from each of `threads` threads to `target`
/// the `variant` way; returns the sample and the target.
fn drive<A: Apply<Op = u32>>(
    target: A,
    variant: Variant,
    threads: usize,
    ops_per_thread: u64,
) -> (Sample, A) {
    match variant {
        Variant::PerOp => {
            let elapsed = timed(threads, |t| {
                let mut ops = Ops::new(t);
                for _ in 0..ops_per_thread {
                    let op = ops.next();
                    let mut guard = target.lock(target.key(&op));
                    target.apply(&mut guard, op);
                }
            });
            let ops = ops_per_thread * threads as u64;
            let sample = Sample {
                elapsed,
                ops,
                lock_acquisitions: ops,
                ..Sample::default()
            };
            (sample, target)
        }
        Variant::Batched(n) => match n {
            1 => batched::<A, 1>(target, threads, ops_per_thread),
            7 => batched::<A, 7>(target, threads, ops_per_thread),
            15 => batched::<A, 15>(target, threads, ops_per_thread),
            31 => batched::<A, 31>(target, threads, ops_per_thread),
            63 => batched::<A, 63>(target, threads, ops_per_thread),
            _ => panic!("batch size {n} is not instantiated; use one of {BATCH_SIZES:?}"),
        },
        Variant::PerCpuMutex => percpu_mutex(target, threads, ops_per_thread),
    }
}

fn batched<A: Apply<Op = u32>, const N: usize>(
    target: A,
    threads: usize,
    ops_per_thread: u64,
) -> (Sample, A) {
    let batcher: Batcher<A, N> = Batcher::new(target);
    let elapsed = timed(threads, |t| {
        let mut ops = Ops::new(t);
        for _ in 0..ops_per_thread {
            batcher.queue(ops.next());
        }
        batcher.drain_local();
    });
    let st = batcher.stats();
    assert_eq!(st.pending, 0, "every op is applied inside the timed region");
    assert_eq!(
        st.lock_acquisitions,
        st.batches + st.drains,
        "one key: one lock per applied batch"
    );
    let sample = Sample {
        elapsed,
        ops: st.ops,
        lock_acquisitions: st.lock_acquisitions,
        batches: st.batches,
        drains: st.drains,
    };
    (sample, batcher.into_inner())
}

fn percpu_mutex<A: Apply<Op = u32>>(target: A, threads: usize, ops_per_thread: u64) -> (Sample, A) {
    #[derive(Default)]
    struct Slot {
        batch: PageVec<u32, 31>,
        locks: u64,
        batches: u64,
        drains: u64,
    }
    let slots = PerCpu::new(|_| Slot::default());
    let elapsed = timed(threads, |t| {
        let mut ops = Ops::new(t);
        for _ in 0..ops_per_thread {
            let mut slot = slots.local();
            slot.batch.push(ops.next());
            if slot.batch.is_full() {
                let Slot {
                    batch,
                    locks,
                    batches,
                    ..
                } = &mut *slot;
                *locks += apply_batch(&target, batch);
                *batches += 1;
            }
        }
        // The thread may have migrated and left ops on other CPUs' slots:
        // drain them all (lru_add_drain_all). The last thread to finish
        // leaves nothing behind, so all work stays inside the timing.
        slots.for_each(|_, slot| {
            if !slot.batch.is_empty() {
                let Slot {
                    batch,
                    locks,
                    drains,
                    ..
                } = slot;
                *locks += apply_batch(&target, batch);
                *drains += 1;
            }
        });
    });
    let mut sample = Sample {
        elapsed,
        ops: ops_per_thread * threads as u64,
        ..Sample::default()
    };
    for slot in slots.into_inner() {
        assert!(slot.batch.is_empty(), "an op was left in a per-CPU batch");
        sample.lock_acquisitions += slot.locks;
        sample.batches += slot.batches;
        sample.drains += slot.drains;
    }
    (sample, target)
}

/// Runs one sample of `workload` the `variant` way and checks the result.
pub fn measure(
    workload: Workload,
    variant: Variant,
    threads: usize,
    ops_per_thread: u64,
) -> Sample {
    let expected = ops_per_thread * threads as u64;
    match workload {
        Workload::Counter => {
            let (sample, c) = drive(Counter::default(), variant, threads, ops_per_thread);
            // Each op adds a frame number; recompute the expected sum.
            let want: u64 = (0..threads)
                .map(|t| {
                    let mut ops = Ops::new(t);
                    (0..ops_per_thread)
                        .map(|_| u64::from(ops.next()))
                        .sum::<u64>()
                })
                .sum();
            assert_eq!(
                *c.0.lock().unwrap(),
                want,
                "{variant:?} lost or repeated an update"
            );
            sample
        }
        Workload::List => {
            let target = ListTarget(CachePadded::new(Mutex::new(Lists::new())));
            let (sample, l) = drive(target, variant, threads, ops_per_thread);
            let lists = l.0.lock().unwrap();
            assert_eq!(lists.moves, expected, "{variant:?} lost or repeated a move");
            lists.check();
            sample
        }
    }
}

fn run(cfg: &Config, progress: &mut dyn Progress) -> Report {
    let threads = cfg.thread_rows();
    let variants = Variant::all();
    let workloads = [Workload::Counter, Workload::List];
    let samples = cfg.samples.max(1);
    let total = workloads.len() * threads.len() * variants.len() * samples;
    let mut done = 0;
    let mut rows = Vec::new();
    let mut tables = Vec::new();
    for workload in workloads {
        for &t in &threads {
            let per_thread = ((OPS_PER_SAMPLE * cfg.scale) as u64 / t as u64).max(64);
            let names: Vec<String> = variants
                .iter()
                .map(|v| format!("{}/{}/threads-{t}", workload.name(), v.name()))
                .collect();
            let mut measured: Vec<Vec<Sample>> = vec![Vec::new(); variants.len()];
            // Alternate rows within each sample round (drift hits all alike).
            for _ in 0..samples {
                for (i, &v) in variants.iter().enumerate() {
                    progress.row(done, total, &names[i]);
                    done += 1;
                    measured[i].push(measure(workload, v, t, per_thread));
                }
            }
            let first = rows.len();
            for ((name, v), ss) in names.into_iter().zip(&variants).zip(measured) {
                rows.push(row(name, *v, &ss));
            }
            tables.push(Table {
                title: format!(
                    "{}, {t} thread(s), {per_thread} ops per thread",
                    workload.name()
                ),
                rows: (first..rows.len()).collect(),
                columns: variants.iter().map(|v| v.name()).collect(),
            });
        }
    }
    let mut report = EXPERIMENT.report(cfg, Metric::MopsPerSec, rows, tables);
    report.notes = notes(&report, &threads);
    report
}

fn row(name: String, variant: Variant, samples: &[Sample]) -> Row {
    let mean = |f: fn(&Sample) -> u64| crate::mean(samples, f);
    let mut counters = std::collections::BTreeMap::new();
    counters.insert("ops".to_owned(), mean(|s| s.ops));
    counters.insert(
        "lock_acquisitions".to_owned(),
        mean(|s| s.lock_acquisitions),
    );
    if variant != Variant::PerOp {
        counters.insert("batches".to_owned(), mean(|s| s.batches));
        counters.insert("drains".to_owned(), mean(|s| s.drains));
    }
    Row {
        name,
        samples_s: samples.iter().map(|s| s.elapsed.as_secs_f64()).collect(),
        ops_per_sample: Some(mean(|s| s.ops)),
        counters,
    }
}

/// The target and the shape of the curves, from the medians.
fn notes(r: &Report, threads: &[usize]) -> Vec<String> {
    let mut notes = Vec::new();
    let ratio = |w: &str, v: &str, t: usize| {
        let b = r.median(&format!("{w}/per-op/threads-{t}"))?;
        let x = r.median(&format!("{w}/{v}/threads-{t}"))?;
        Some(x / b)
    };
    if let Some(x) = ratio("counter", "batched-31", 2) {
        notes.push(format!(
            "target: counter/batched-31 at 2 threads runs {x:.1}x the ops/s of counter/per-op \
             (target >= 10x): {}",
            if x >= 10.0 { "met" } else { "MISSED" }
        ));
    }
    for w in ["counter", "list"] {
        for &t in threads {
            let curve: Vec<String> = BATCH_SIZES
                .iter()
                .filter_map(|n| {
                    ratio(w, &format!("batched-{n}"), t).map(|x| format!("N={n} {x:.1}x"))
                })
                .collect();
            let pc = ratio(w, "percpu-mutex-31", t)
                .map_or(String::new(), |x| format!("; percpu-mutex-31 {x:.1}x"));
            notes.push(format!(
                "{w}, {t} thread(s), median ops/s vs per-op: {}{pc}",
                curve.join(", ")
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_applies_every_op_exactly_once() {
        for w in [Workload::Counter, Workload::List] {
            for v in Variant::all() {
                let s = measure(w, v, 3, 500);
                assert_eq!(s.ops, 1500, "{w:?} {v:?}");
                match v {
                    Variant::PerOp => assert_eq!(s.lock_acquisitions, 1500),
                    Variant::Batched(n) => {
                        assert_eq!(s.lock_acquisitions, s.batches + s.drains);
                        assert!(s.batches >= 1500 / n as u64 - 3, "{v:?} {s:?}");
                    }
                    Variant::PerCpuMutex => assert!(s.lock_acquisitions < 1500),
                }
            }
        }
    }

    #[test]
    fn smallest_run_produces_every_row_and_table() {
        let cfg = Config {
            scale: 0.0001,
            threads: Some(3),
            samples: 1,
        };
        let r = run(&cfg, &mut crate::Quiet);
        assert_eq!(r.rows.len(), 2 * 3 * Variant::all().len());
        assert_eq!(r.tables.len(), 6);
        assert!(r.row("counter/batched-31/threads-2").is_some());
        assert!(r.to_text().contains("Mops/s mean"));
        assert!(r.notes.iter().any(|n| n.starts_with("target:")));
    }
}
