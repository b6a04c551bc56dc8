//! Experiment `cache`: [`LruCache`] against the caches a Rust user would
//! pick instead — `Mutex<lru::LruCache>`, moka (sync), quick_cache — and
//! against itself with batching off.
//!
//! Keys follow a Zipf distribution over `KEYS` keys (s = 0.9 and 1.1);
//! every cache holds 10% of the key space. Each cache is warmed with
//! get-or-insert over a Zipf stream (untimed), then each thread runs its
//! own slice of a pre-drawn key stream (no RNG in the timed loop):
//! - `read`: 100% get;
//! - `mixed`: 90% get, 10% insert (every tenth operation).
//!
//! Rows `IMPL/MIX-sS/threads-T`, ops/s, with the hit ratio (hits / gets,
//! in percent) as a counter. The exact-LRU reference is `mutex-lru`, whose
//! order is exact at any thread count (one lock); the targets compare
//! against it, quick_cache and moka at 2 threads.
//!
//! Samples of one configuration alternate between the implementations,
//! and each cache keeps its state from sample to sample. Each configured
//! sample is `SAMPLES_PER_SAMPLE` short runs.

use std::{
    hint::black_box,
    num::NonZeroUsize,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use mmbatch_lru::{LruCache, Policy};
use rand::{RngExt, SeedableRng, rngs::SmallRng};
use rand_distr::Zipf;

use crate::{
    Config, Experiment, Metric, Progress, Report, Row, Table, batch::thread_counts, timed,
};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    id: "cache",
    seed: "004 (batched activate_page), as a cache library",
    title: "LruCache with batched promotion vs Mutex<lru>, moka, quick_cache",
    run,
    big_scale: 1.0,
    memory: |cfg| {
        ((KEYS * cfg.scale) as u64).max(64) * 64 + ((OPS * cfg.scale) as u64).max(1024) * 16
    },
    seed_refs: &[],
    seed_why: "No seed: this is seed 004's batched activation as a library, against the caches a Rust user would otherwise pick.",
};

/// Keys at scale 1.0.
pub const KEYS: f64 = (1u64 << 20) as f64;
/// Operations per sample (all threads together) at scale 1.0.
pub const OPS: f64 = 400_000.0;

/// Samples per configured sample: this host's noise comes in bursts of
/// tens of milliseconds, so many short samples give steadier medians than
/// a few long ones.
pub const SAMPLES_PER_SAMPLE: usize = 3;

/// The Zipf exponents measured.
pub const SKEWS: [f64; 2] = [0.9, 1.1];

/// The operation mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// 100% get.
    Read,
    /// 90% get, 10% insert.
    Mixed,
}

impl Mix {
    /// Both, read-heavy first.
    pub const ALL: [Mix; 2] = [Mix::Read, Mix::Mixed];

    /// The row-name part.
    pub fn name(self) -> &'static str {
        match self {
            Mix::Read => "read",
            Mix::Mixed => "mixed",
        }
    }
}

/// The caches compared, baseline first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    /// `Mutex<lru::LruCache>`: exact LRU behind one lock.
    MutexLru,
    /// `moka::sync::Cache`.
    Moka,
    /// `quick_cache::sync::Cache`.
    QuickCache,
    /// `LruCache`, batching off: every activation takes the lru_lock.
    MmbatchNoBatch,
    /// `LruCache`, the default: batched promotion.
    Mmbatch,
}

impl Impl {
    /// Every implementation, baseline first.
    pub const ALL: [Impl; 5] = [
        Impl::MutexLru,
        Impl::Moka,
        Impl::QuickCache,
        Impl::MmbatchNoBatch,
        Impl::Mmbatch,
    ];

    /// The row-name part.
    pub fn name(self) -> &'static str {
        match self {
            Impl::MutexLru => "mutex-lru",
            Impl::Moka => "moka",
            Impl::QuickCache => "quick_cache",
            Impl::MmbatchNoBatch => "mmbatch-nobatch",
            Impl::Mmbatch => "mmbatch",
        }
    }
}

/// A cache under test: the two operations the workloads use.
pub trait Cache: Sync {
    /// Whether `key` was found.
    fn get(&self, key: u64) -> bool;
    /// Caches `value` under `key`.
    fn insert(&self, key: u64, value: u64);
}

impl Cache for Mutex<lru::LruCache<u64, u64>> {
    fn get(&self, key: u64) -> bool {
        self.lock().unwrap().get(&key).is_some()
    }
    fn insert(&self, key: u64, value: u64) {
        self.lock().unwrap().put(key, value);
    }
}

impl Cache for moka::sync::Cache<u64, u64> {
    fn get(&self, key: u64) -> bool {
        moka::sync::Cache::get(self, &key).is_some()
    }
    fn insert(&self, key: u64, value: u64) {
        moka::sync::Cache::insert(self, key, value);
    }
}

impl Cache for quick_cache::sync::Cache<u64, u64> {
    fn get(&self, key: u64) -> bool {
        quick_cache::sync::Cache::get(self, &key).is_some()
    }
    fn insert(&self, key: u64, value: u64) {
        quick_cache::sync::Cache::insert(self, key, value);
    }
}

impl Cache for LruCache<u64, u64> {
    fn get(&self, key: u64) -> bool {
        LruCache::get(self, &key).is_some()
    }
    fn insert(&self, key: u64, value: u64) {
        LruCache::insert(self, key, value);
    }
}

/// Builds an empty cache of `capacity` entries.
pub fn build(which: Impl, capacity: usize) -> Box<dyn Cache> {
    let nz = NonZeroUsize::new(capacity.max(1)).expect("at least 1");
    match which {
        Impl::MutexLru => Box::new(Mutex::new(lru::LruCache::new(nz))),
        Impl::Moka => Box::new(moka::sync::Cache::new(capacity as u64)),
        Impl::QuickCache => Box::new(quick_cache::sync::Cache::new(capacity)),
        Impl::MmbatchNoBatch | Impl::Mmbatch => Box::new(
            LruCache::<u64, u64>::builder(capacity as u64)
                .policy(Policy::ActiveInactive)
                .batching(which == Impl::Mmbatch)
                .build()
                .expect("a valid capacity"),
        ),
    }
}

/// `n` keys drawn from Zipf(`keys`, `s`), ranks spread over the key space
/// by a multiplicative hash so hot keys are not neighbours.
pub fn zipf_stream(keys: u64, s: f64, n: usize, seed: u64) -> Vec<u64> {
    let zipf = Zipf::new(keys as f64, s).expect("valid Zipf parameters");
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (rng.sample(zipf) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect()
}

/// Untimed: get-or-insert over `stream`, filling the cache the way the
/// workload will.
pub fn warm(cache: &dyn Cache, stream: &[u64]) {
    for &k in stream {
        if !cache.get(k) {
            cache.insert(k, k);
        }
    }
}

/// One timed run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Wall time of the threads' work.
    pub elapsed_s: f64,
    /// Operations done.
    pub ops: u64,
    /// gets done.
    pub gets: u64,
    /// gets that hit.
    pub hits: u64,
}

/// Runs `mix` on `threads` threads, thread `t` over its slice of `stream`.
pub fn measure(cache: &dyn Cache, mix: Mix, threads: usize, stream: &[u64]) -> Sample {
    let per_thread = stream.len() / threads;
    let hits = AtomicU64::new(0);
    let gets = AtomicU64::new(0);
    let elapsed = timed(threads, |t| {
        let mine = &stream[t * per_thread..(t + 1) * per_thread];
        let (mut h, mut g) = (0u64, 0u64);
        for (i, &k) in mine.iter().enumerate() {
            if mix == Mix::Mixed && i % 10 == 9 {
                cache.insert(k, i as u64);
            } else {
                g += 1;
                h += u64::from(cache.get(k));
            }
        }
        hits.fetch_add(black_box(h), Ordering::Relaxed);
        gets.fetch_add(g, Ordering::Relaxed);
    });
    Sample {
        elapsed_s: elapsed.as_secs_f64(),
        ops: (per_thread * threads) as u64,
        gets: gets.into_inner(),
        hits: hits.into_inner(),
    }
}

fn run(cfg: &Config, progress: &mut dyn Progress) -> Report {
    let keys = ((KEYS * cfg.scale) as u64).max(64);
    let capacity = (keys / 10) as usize;
    let ops = ((OPS * cfg.scale) as usize).max(1024);
    let threads = thread_counts(cfg.max_threads());
    let samples = cfg.samples.max(1) * SAMPLES_PER_SAMPLE;
    let total = SKEWS.len() * Mix::ALL.len() * threads.len() * Impl::ALL.len() * samples;
    let mut done = 0;
    let mut rows = Vec::new();
    let mut tables = Vec::new();
    for (si, &s) in SKEWS.iter().enumerate() {
        let warmup = zipf_stream(keys, s, capacity * 8, 1 + si as u64);
        let stream = zipf_stream(keys, s, ops, 100 + si as u64);
        for mix in Mix::ALL {
            for &t in &threads {
                let names: Vec<String> = Impl::ALL
                    .iter()
                    .map(|i| format!("{}/{}-s{s}/threads-{t}", i.name(), mix.name()))
                    .collect();
                let caches: Vec<Box<dyn Cache>> = Impl::ALL
                    .iter()
                    .map(|&i| {
                        let c = build(i, capacity);
                        warm(&*c, &warmup);
                        c
                    })
                    .collect();
                let mut measured: Vec<Vec<Sample>> = vec![Vec::new(); Impl::ALL.len()];
                for _ in 0..samples {
                    for (i, cache) in caches.iter().enumerate() {
                        progress.row(done, total, &names[i]);
                        done += 1;
                        measured[i].push(measure(&**cache, mix, t, &stream));
                    }
                }
                let first = rows.len();
                for (name, ss) in names.into_iter().zip(measured) {
                    rows.push(row(name, &ss));
                }
                tables.push(Table {
                    title: format!(
                        "{} Zipf s={s}, {keys} keys, capacity {capacity}, {t} thread(s)",
                        match mix {
                            Mix::Read => "read-heavy (100% get),",
                            Mix::Mixed => "mixed (90% get, 10% insert),",
                        }
                    ),
                    rows: (first..rows.len()).collect(),
                    columns: Impl::ALL.iter().map(|i| i.name().to_owned()).collect(),
                });
            }
        }
    }
    let mut report = EXPERIMENT.report(cfg, Metric::MopsPerSec, rows, tables);
    report.notes = notes(&report, &threads);
    report
}

fn row(name: String, samples: &[Sample]) -> Row {
    let hits: u64 = samples.iter().map(|s| s.hits).sum();
    let gets: u64 = samples.iter().map(|s| s.gets).sum();
    let mut row = Row::timed(
        name,
        samples.iter().map(|s| s.elapsed_s).collect(),
        [(
            "hit_ratio_pct",
            (hits as f64 * 1e5 / gets.max(1) as f64).round() / 1e3,
        )],
    );
    row.ops_per_sample = Some(crate::mean(samples, |s| s.ops));
    row
}

/// The targets at 2 threads, and where each implementation stands.
fn notes(r: &Report, threads: &[usize]) -> Vec<String> {
    let mut notes = Vec::new();
    let name = |i: Impl, mix: Mix, s: f64, t: usize| {
        format!("{}/{}-s{s}/threads-{t}", i.name(), mix.name())
    };
    let hit = |n: &str| {
        r.row(n)
            .and_then(|row| row.counters.get("hit_ratio_pct").copied())
    };
    let t = 2;
    if !threads.contains(&t) {
        return notes;
    }
    for s in SKEWS {
        for mix in Mix::ALL {
            let ours = name(Impl::Mmbatch, mix, s, t);
            let (Some(x), Some(q), Some(m), Some(nb)) = (
                r.median(&ours),
                r.median(&name(Impl::QuickCache, mix, s, t)),
                r.median(&name(Impl::Moka, mix, s, t)),
                r.median(&name(Impl::MmbatchNoBatch, mix, s, t)),
            ) else {
                continue;
            };
            let (Some(h), Some(exact)) = (hit(&ours), hit(&name(Impl::MutexLru, mix, s, t))) else {
                continue;
            };
            let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
            let mut line = format!(
                "{}-s{s}, 2 threads: mmbatch {x:.2} Mops/s = {:.2}x quick_cache (target >= 1x: {}), ",
                mix.name(),
                x / q,
                verdict(x >= q),
            );
            if mix == Mix::Read {
                line += &format!(
                    "{:.1}x moka (target >= 3x: {}), ",
                    x / m,
                    verdict(x >= 3.0 * m)
                );
            } else {
                line += &format!("{:.1}x moka, ", x / m);
            }
            line += &format!(
                "{:.2}x batching off; hit ratio {h:.2}% vs exact LRU {exact:.2}% ({:+.2} points; target within 1: {})",
                x / nb,
                h - exact,
                verdict(h - exact >= -1.0),
            );
            notes.push(line);
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cache_counts_hits_and_stays_bounded() {
        let stream = zipf_stream(1000, 0.9, 4000, 7);
        for i in Impl::ALL {
            let c = build(i, 100);
            warm(&*c, &stream);
            let s = measure(&*c, Mix::Mixed, 2, &stream);
            assert_eq!(s.ops, 4000, "{i:?}");
            assert_eq!(s.gets, 3600, "{i:?}");
            assert!(s.hits > 0 && s.hits < s.gets, "{i:?}: {s:?}");
        }
    }

    #[test]
    fn smallest_run_produces_every_row_and_table() {
        let cfg = Config {
            scale: 0.001,
            threads: Some(2),
            samples: 1,
        };
        let r = run(&cfg, &mut crate::Quiet);
        assert_eq!(r.rows.len(), 2 * 2 * 2 * Impl::ALL.len());
        assert_eq!(r.tables.len(), 8);
        assert!(r.row("mmbatch/read-s0.9/threads-2").is_some());
        assert!(
            r.notes.iter().any(|n| n.contains("target >= 3x")),
            "{:?}",
            r.notes
        );
    }
}
