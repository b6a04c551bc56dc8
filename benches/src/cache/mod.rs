//! Experiment `cache`: [`LruCache`](mmbatch_cache::LruCache) against the caches a Rust user would
//! pick instead — `Mutex<lru::LruCache>`, moka (sync), quick_cache — and
//! against itself with batching off.
//!
//! Keys follow a Zipf distribution over `KEYS` keys (s = 0.9 and 1.1);
//! every cache holds 10% of the key space. Each cache is warmed with
//! get-or-insert over a stream of the same workload (untimed: [`WARM_READ`]
//! times its capacity for read and mixed, [`WARM_FILLS`] for read-through
//! and load, measured past the fill, where a long-lived cache spends its
//! life), then each
//! thread runs its own slice of a pre-drawn key stream (no RNG in the
//! timed loop):
//! - `read`: 100% get;
//! - `mixed`: 90% get, 10% insert (every tenth operation);
//! - `readthrough`: each request is `get(k)` and, on a miss, `insert(k, v)`
//!   (how mokabench drives caches); one request is one operation, whether
//!   or not it inserted. Measured on Zipf 0.9, Zipf 1.1, and Zipf 0.9 with
//!   one-off scans (`s0.9-scan`): every fourth run of [`SCAN_RUN`]
//!   requests is a sequential run of keys never requested before, outside
//!   the Zipf key space (25% of requests); each sample gets fresh scan
//!   keys, so no scan key is ever requested twice; and a small cache
//!   (`s0.9-small`: Zipf 0.9 over 1/[`SMALL_SHARE`] of the keys into a
//!   cache of a tenth of them, 409 entries at scale 1, where a cache runs
//!   few shards), reported, not judged; and young caches (`s0.9-young`:
//!   Zipf 0.9 into caches warmed only [`WARM_READ`] times their capacity,
//!   what a short-lived cache gets), reported, not judged. Each read-through
//!   sample draws its own requests (a replayed stream would be resident
//!   after the first sample, since read-through inserts what it misses);
//!   read and mixed replay one stream, as before.
//! - `load`: the same read-through by each cache's loader API (the loader
//!   returns the key at once), as a user of a single-flight cache reads
//!   through: `LruCache::get_or_insert_with`, quick_cache's
//!   `get_or_insert_with`, moka's `get_with`, and `lru`'s `get_or_insert`
//!   under the mutex; hits are the requests that did not load. Reported
//!   beside quick_cache's, not judged (the issue sets no target for it).
//!
//! LruCache runs once per policy of [`policies`] (`mmbatch-POLICY`, batching
//! on), plus `mmbatch-nobatch` (the kernel's two lists, batching off) and
//! `mmbatch-portable` (the default policy with `fast_reads(false)`: the
//! path every lookup takes where the Linux-only `membarrier` fast path is
//! not built or is refused). moka runs a quarter of each sample's
//! operations ([`MOKA_SHARE`]).
//!
//! Rows `IMPL/MIX-WORKLOAD/threads-T`, ops/s, with the hit ratio (hits /
//! gets, in percent) as a counter. The exact-LRU reference is `mutex-lru`,
//! whose order is exact at any thread count (one lock). The targets, judged
//! in the notes at 1 and 2 threads for every policy: read-through ≥ 1.0×
//! quick_cache's ops/s on each workload, pure read ≥ 1.2×, mixed ≥ 1.0×;
//! at 2 threads also read ≥ 3× moka and a hit ratio no more than a point
//! under exact LRU's.
//!
//! moka applies evictions in batches on its own schedule; its
//! `run_pending_tasks()` runs after warming and before each sample
//! (untimed), so every sample starts from a cache within its capacity,
//! while inside the timed loop moka runs its housekeeping as it would for a
//! user.
//!
//! Samples of one configuration alternate between the implementations.
//! Each implementation runs as [`INSTANCES`] caches, warmed alike, and
//! sample `i` is taken on instance `i mod INSTANCES`, which keeps its
//! state from sample to sample. The judged rows of read and mixed (1 and
//! 2 threads), and every row of young caches, get caches built and warmed
//! for them; read-through and load build and warm theirs once per
//! workload, and every row after the first goes on with the caches the
//! previous thread count left (as the rows only reported do), past the
//! fill already. Each configured sample of a judged row is
//! `SAMPLES_PER_SAMPLE` short runs, of a reported row one
//! ([`samples_per_sample`]). The targets are judged on
//! paired ratios: the median over samples of a cache's ops/s over its
//! peer's in the same turn ([`Report::paired_ratio`](crate::Report::paired_ratio)),
//! since on a shared host the two medians can come from different moments
//! (quick_cache's read-through medians moved by 2x between runs of this
//! host); the ratio of medians is printed beside it.

use std::{
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
};

use mmbatch_cache::Policy;
use rand::{RngExt, SeedableRng, rngs::SmallRng};
use rand_distr::Zipf;

mod caches;
pub mod in_flight;
mod notes;

pub use caches::{Cache, build};
use notes::notes;

use crate::{Config, Experiment, Metric, Progress, Report, Row, Table, timed};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    id: "cache",
    seed: "004 (batched activate_page), as a cache library",
    title: "LruCache with batched promotion vs Mutex<lru>, moka, quick_cache",
    run,
    big_scale: 1.0,
    memory: |cfg| {
        // One set of caches at a time (each `INSTANCES` times; about
        // 128 bytes a key for the set, moka's two a half of it), the
        // warm-up stream (`WARM_FILLS` times a tenth of the keys), and a
        // stream per sample for read-through (at most 3 + 3 + 1 per
        // configured sample over the thread counts) and the one a sample
        // runs.
        let keys = ((KEYS * cfg.scale) as u64).max(64);
        keys * 128 * INSTANCES as u64
            + keys / 10 * WARM_FILLS as u64 * 8
            + ((OPS * cfg.scale) as u64).max(1024) * 8 * (cfg.samples.max(1) as u64 * 7 + 1)
    },
    seed_refs: &[],
    seed_why: "No seed: this is seed 004's batched activation as a library, against the caches a Rust user would otherwise pick.",
    contention: "the rows at 2 or more threads",
};

/// Keys at scale 1.0.
pub const KEYS: f64 = (1u64 << 20) as f64;
/// Operations per sample (all threads together) at scale 1.0.
pub const OPS: f64 = 400_000.0;

/// Samples per configured sample of a judged row: this host's noise comes
/// in bursts of tens of milliseconds, so many short samples give steadier
/// medians than a few long ones.
pub const SAMPLES_PER_SAMPLE: usize = 3;

/// Samples per configured sample of `mix` at `threads`: [`SAMPLES_PER_SAMPLE`]
/// for the rows the notes judge (every mix but `load`, at 1 and 2
/// threads, but the small cache's), one for the rows they only report.
pub fn samples_per_sample(mix: Mix, workload: Workload, threads: usize) -> usize {
    if mix != Mix::Load && workload.judged() && threads <= 2 {
        SAMPLES_PER_SAMPLE
    } else {
        1
    }
}

/// Requests that warm a cache for the read and mixed rows, in multiples
/// of its capacity: enough to fill it and turn it over. A pure read never
/// inserts, so its rows judge caches this young, where quick_cache is at
/// its fastest (docs/cache.md, "A cache's age"): the bar is the peers'
/// best, not ours.
pub const WARM_READ: usize = 8;

/// Requests that warm a cache for the read-through (judged) and load
/// (reported) rows, in multiples of its capacity: past the fill, where
/// the hit ratios are within about half a point of their long-run values
/// (at [`WARM_READ`] they are still rising; docs/cache.md, "A cache's
/// age"); more costs the experiment time.
pub const WARM_FILLS: usize = 32;

/// Instances of each cache per configuration, warmed alike, whose turns
/// the samples take in rotation: a cache's speed depends on its instance
/// (random hash seeds, where its memory landed), and one instance per
/// configuration made the judged ratios swing between runs (one-thread
/// pure read at Zipf 0.9: 1.67x then 1.14x of quick_cache, same code).
pub const INSTANCES: usize = 3;

/// moka runs this fraction of each sample's operations (its samples
/// still alternate with the others'): at a twentieth of the others' speed,
/// full samples made it 70% of the experiment's time (190 of 268 s),
/// though only its pure-read rows at 2 threads are judged, on a ratio (3x)
/// far from the measured one.
pub const MOKA_SHARE: usize = 4;

/// The Zipf exponents measured.
pub const SKEWS: [f64; 2] = [0.9, 1.1];

/// Length of one one-off scan run; one run in four is a scan (25%).
pub const SCAN_RUN: usize = 256;

/// The bit that sets scan keys apart from Zipf keys (clear in every Zipf
/// key of a scan workload), so a scan key is never a Zipf key.
pub const SCAN_TAG: u64 = 1 << 63;

/// Every [`Policy`] of `LruCache` the experiments measure, with its name in
/// row names: the one list to extend when a policy is added.
pub fn policies() -> Vec<(&'static str, Policy)> {
    vec![
        ("workingset", Policy::Workingset),
        ("active-inactive", Policy::ActiveInactive),
        ("lru", Policy::Lru),
        ("lirs", Policy::Lirs),
        ("lirs-tinylfu", Policy::LirsTinyLfu),
        ("adaptive", Policy::Adaptive),
    ]
}

/// The operation mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// 100% get.
    Read,
    /// 90% get, 10% insert.
    Mixed,
    /// get, and insert on a miss.
    ReadThrough,
    /// Read-through by each cache's loader API, the loader returning at
    /// once: `LruCache::get_or_insert_with`, quick_cache's
    /// `get_or_insert_with`, moka's `get_with` (each runs one loader per
    /// key), `lru`'s `get_or_insert` under the mutex.
    Load,
}

impl Mix {
    /// Every mix, read-heavy first.
    pub const ALL: [Mix; 4] = [Mix::Read, Mix::Mixed, Mix::ReadThrough, Mix::Load];

    /// Whether it inserts what it misses, so that each sample needs
    /// requests of its own.
    pub fn fills(self) -> bool {
        matches!(self, Mix::ReadThrough | Mix::Load)
    }

    /// The row-name part.
    pub fn name(self) -> &'static str {
        match self {
            Mix::Read => "read",
            Mix::Mixed => "mixed",
            Mix::ReadThrough => "readthrough",
            Mix::Load => "load",
        }
    }

    /// For table titles.
    pub fn describe(self) -> &'static str {
        match self {
            Mix::Read => "read-heavy (100% get),",
            Mix::Mixed => "mixed (90% get, 10% insert),",
            Mix::ReadThrough => "read-through (get, insert on miss),",
            Mix::Load => "read-through by loader (get_or_insert_with; moka get_with),",
        }
    }
}

/// The key stream's shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Workload {
    /// Zipf with this exponent.
    Zipf(f64),
    /// Zipf with this exponent, 25% of requests in one-off scans.
    ZipfScans(f64),
    /// Zipf with this exponent over 1/[`SMALL_SHARE`] of the keys, into a
    /// cache as many times smaller (409 entries at scale 1): what a small
    /// cache costs, where a cache runs few shards. Reported, not judged.
    Small(f64),
    /// Zipf with this exponent, read through caches warmed only
    /// [`WARM_READ`] times their capacity: what a short-lived cache gets
    /// (docs/cache.md, "A cache's age"). Reported, not judged.
    Young(f64),
}

/// [`Workload::Small`] requests 1 in this many of the keys, into a cache
/// as many times smaller.
pub const SMALL_SHARE: u64 = 256;

impl Workload {
    /// The row-name part.
    pub fn name(self) -> String {
        match self {
            Workload::Zipf(s) => format!("s{s}"),
            Workload::ZipfScans(s) => format!("s{s}-scan"),
            Workload::Small(s) => format!("s{s}-small"),
            Workload::Young(s) => format!("s{s}-young"),
        }
    }

    /// The Zipf exponent.
    pub fn skew(self) -> f64 {
        match self {
            Workload::Zipf(s)
            | Workload::ZipfScans(s)
            | Workload::Small(s)
            | Workload::Young(s) => s,
        }
    }

    /// The keys requested, of `keys` at this scale.
    pub fn keys(self, keys: u64) -> u64 {
        match self {
            Workload::Small(_) => (keys / SMALL_SHARE).max(64),
            _ => keys,
        }
    }

    /// Whether the notes judge its rows against a target.
    pub fn judged(self) -> bool {
        !matches!(self, Workload::Small(_) | Workload::Young(_))
    }

    /// Whether its rows measure young caches ([`Workload::Young`]), which
    /// no earlier row may age.
    pub fn young(self) -> bool {
        matches!(self, Workload::Young(_))
    }

    /// Requests that warm a cache before `mix`, in multiples of its
    /// capacity: [`WARM_FILLS`] before read-through and load (but for
    /// [`young`](Self::young) caches), else [`WARM_READ`].
    pub fn warm_times(self, mix: Mix) -> usize {
        if mix.fills() && !self.young() {
            WARM_FILLS
        } else {
            WARM_READ
        }
    }

    /// For table titles.
    pub fn describe(self) -> String {
        match self {
            Workload::Zipf(s) => format!("Zipf s={s}"),
            Workload::ZipfScans(s) => {
                format!("Zipf s={s} + one-off scans (25%, runs of {SCAN_RUN})")
            }
            Workload::Small(s) => format!("a small cache, Zipf s={s}"),
            Workload::Young(s) => {
                format!("Zipf s={s}, caches warmed {WARM_READ}x their capacity (young)")
            }
        }
    }

    /// `zipf` (from [`zipf_stream`]) as this workload: unchanged, or with
    /// scans whose keys are `SCAN_TAG | scan_base..`, in order.
    pub fn apply(self, zipf: &[u64], scan_base: u64) -> Vec<u64> {
        match self {
            Workload::Zipf(_) | Workload::Small(_) | Workload::Young(_) => zipf.to_vec(),
            Workload::ZipfScans(_) => with_scans(zipf, scan_base),
        }
    }
}

/// Every (workload, mix) measured, in table order: read and mixed on each
/// skew as before, then read-through on the three workloads, a small
/// cache's and young caches', then loader read-through on the three.
pub fn plan() -> Vec<(Workload, Mix)> {
    let mut plan = Vec::new();
    for s in SKEWS {
        plan.push((Workload::Zipf(s), Mix::Read));
        plan.push((Workload::Zipf(s), Mix::Mixed));
    }
    for w in [
        Workload::Zipf(0.9),
        Workload::Zipf(1.1),
        Workload::ZipfScans(0.9),
        Workload::Small(0.9),
        Workload::Young(0.9),
    ] {
        plan.push((w, Mix::ReadThrough));
    }
    for w in [
        Workload::Zipf(0.9),
        Workload::Zipf(1.1),
        Workload::ZipfScans(0.9),
    ] {
        plan.push((w, Mix::Load));
    }
    plan
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
    /// `LruCache`, the kernel's two lists, batching off: every activation
    /// takes the lru_lock.
    MmbatchNoBatch,
    /// `LruCache` with batched promotion and the named policy of
    /// [`policies`].
    Mmbatch(&'static str, Policy),
    /// `LruCache` (the default policy) with `fast_reads(false)`: every
    /// lookup takes its barrier, as on the systems without `membarrier`
    /// (macOS, Windows) and on a Linux that refuses it.
    MmbatchPortable,
    /// `LruCache` (the default policy) with a time to live on every entry
    /// ([`TTL`]: none expires during a run); read-through only.
    MmbatchTtl,
    /// moka with the same time to live; read-through only.
    MokaTtl,
    /// quick_cache with a weigher (`with_weighter`, told the entries),
    /// entries of 1-16 KiB by key ([`varying`](crate::cache_hits::weighted::varying)),
    /// the capacity their mean weight times the entries; read-through only.
    QuickCacheWeighted,
    /// `LruCache`'s default with the same weigher and capacity, its
    /// default shards (1 a CPU: it is not told the entries).
    MmbatchWeighted,
    /// The same, told the entries (`Builder::estimated_entries`).
    MmbatchWeightedTold,
}

/// The time to live of the `-ttl` caches: an hour, so that the rows
/// measure the cost of expiry, not its misses.
pub const TTL: std::time::Duration = std::time::Duration::from_secs(3600);

impl Impl {
    /// Every implementation, baseline first, then one `Mmbatch` per policy.
    pub fn all() -> Vec<Impl> {
        let mut v = vec![
            Impl::MutexLru,
            Impl::Moka,
            Impl::QuickCache,
            Impl::MmbatchNoBatch,
        ];
        v.extend(policies().into_iter().map(|(n, p)| Impl::Mmbatch(n, p)));
        v.push(Impl::MmbatchPortable);
        v
    }

    /// The implementations measured on `mix`: [`all`](Self::all), and on
    /// read-through the two with a time to live and the three weighted.
    pub fn for_mix(mix: Mix) -> Vec<Impl> {
        let mut v = Self::all();
        if mix == Mix::ReadThrough {
            v.extend([
                Impl::MmbatchTtl,
                Impl::MokaTtl,
                Impl::QuickCacheWeighted,
                Impl::MmbatchWeighted,
                Impl::MmbatchWeightedTold,
            ]);
        }
        v
    }

    /// Whether its rows are only reported, whatever the workload (the
    /// weighted caches): on a judged workload they take one sample in
    /// [`SAMPLES_PER_SAMPLE`], not every one, so that they add little to
    /// the run.
    pub fn reported_only(self) -> bool {
        matches!(
            self,
            Impl::QuickCacheWeighted | Impl::MmbatchWeighted | Impl::MmbatchWeightedTold
        )
    }

    /// The row-name part.
    pub fn name(self) -> String {
        match self {
            Impl::MutexLru => "mutex-lru".to_owned(),
            Impl::Moka => "moka".to_owned(),
            Impl::QuickCache => "quick_cache".to_owned(),
            Impl::MmbatchNoBatch => "mmbatch-nobatch".to_owned(),
            Impl::Mmbatch(policy, _) => format!("mmbatch-{policy}"),
            Impl::MmbatchPortable => "mmbatch-portable".to_owned(),
            Impl::MmbatchTtl => "mmbatch-ttl".to_owned(),
            Impl::MokaTtl => "moka-ttl".to_owned(),
            Impl::QuickCacheWeighted => "quick_cache-weighted".to_owned(),
            Impl::MmbatchWeighted => "mmbatch-weighted".to_owned(),
            Impl::MmbatchWeightedTold => "mmbatch-weighted-told".to_owned(),
        }
    }
}

/// The multiplicative hash that spreads small keys (ranks, offsets) over
/// the key space, so that neighbours are not neighbours in a hash table:
/// odd, so a bijection on `u64`.
pub const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

/// `n` keys drawn from Zipf(`keys`, `s`), ranks (from 1) times [`SPREAD`]
/// so hot keys are not neighbours.
pub fn zipf_stream(keys: u64, s: f64, n: usize, seed: u64) -> Vec<u64> {
    zipf_ranks(keys, s, n, seed)
        .into_iter()
        .map(|rank| rank.wrapping_mul(SPREAD))
        .collect()
}

/// [`zipf_stream`]'s draws before the spread: `n` ranks from 1 to `keys`,
/// rank 1 the most requested.
pub fn zipf_ranks(keys: u64, s: f64, n: usize, seed: u64) -> Vec<u64> {
    let zipf = Zipf::new(keys as f64, s).expect("valid Zipf parameters");
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.sample(zipf) as u64).collect()
}

/// `zipf` with every fourth run of [`SCAN_RUN`] requests replaced by a
/// sequential scan of new keys `SCAN_TAG | scan_base`, `SCAN_TAG |
/// scan_base + 1`, ... (25% of requests); the Zipf keys lose their top bit,
/// which keeps distinct ranks distinct (the hash is odd, so two ranks would
/// have to differ by 2^63 to collide).
pub fn with_scans(zipf: &[u64], scan_base: u64) -> Vec<u64> {
    let mut next = scan_base;
    zipf.iter()
        .enumerate()
        .map(|(i, &k)| {
            if (i / SCAN_RUN) % 4 == 3 {
                next += 1;
                SCAN_TAG | (next - 1)
            } else {
                k & !SCAN_TAG
            }
        })
        .collect()
}

/// Untimed: get-or-insert over `stream`, filling the cache the way the
/// workload will, then [`Cache::settle`].
pub fn warm(cache: &dyn Cache, stream: &[u64]) {
    for &k in stream {
        if !cache.get(k) {
            cache.insert(k, k);
        }
    }
    cache.settle();
}

/// One timed run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Wall time of the threads' work.
    pub elapsed_s: f64,
    /// Operations done (read-through: requests).
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
        match mix {
            Mix::ReadThrough => {
                for &k in mine {
                    g += 1;
                    if cache.get(k) {
                        h += 1;
                    } else {
                        cache.insert(k, k);
                    }
                }
            }
            Mix::Load => {
                let mut loads = 0;
                let mut sum = 0u64;
                for &k in mine {
                    sum = sum.wrapping_add(cache.load(k, &mut loads));
                }
                black_box(sum);
                g = mine.len() as u64;
                h = g - loads;
            }
            Mix::Read | Mix::Mixed => {
                for (i, &k) in mine.iter().enumerate() {
                    if mix == Mix::Mixed && i % 10 == 9 {
                        cache.insert(k, i as u64);
                    } else {
                        g += 1;
                        h += u64::from(cache.get(k));
                    }
                }
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

/// Of the samples of `mix` on `workload` at `t` threads, `which` takes
/// every this many: all for a row that may be judged, one configured
/// sample's worth for one [`Impl::reported_only`].
fn stride(which: Impl, mix: Mix, workload: Workload, t: usize) -> usize {
    if which.reported_only() {
        samples_per_sample(mix, workload, t)
    } else {
        1
    }
}

/// The row name of `which` running `mix` on `workload` at `t` threads.
pub fn row_name(which: Impl, mix: Mix, workload: Workload, t: usize) -> String {
    format!(
        "{}/{}-{}/threads-{t}",
        which.name(),
        mix.name(),
        workload.name()
    )
}

fn run(cfg: &Config, progress: &mut dyn Progress) -> Report {
    let all_keys = ((KEYS * cfg.scale) as u64).max(64);
    let ops = ((OPS * cfg.scale) as usize).max(1024);
    let threads = cfg.thread_rows();
    let plan = plan();
    let samples_at =
        |w: Workload, mix: Mix, t: usize| cfg.samples.max(1) * samples_per_sample(mix, w, t);
    let total: usize = plan
        .iter()
        .flat_map(|&(w, mix)| threads.iter().map(move |&t| (w, mix, t)))
        .map(|(w, mix, t)| {
            Impl::for_mix(mix)
                .into_iter()
                .map(|i| samples_at(w, mix, t) / stride(i, mix, w, t))
                .sum::<usize>()
        })
        .sum();
    let mut done = 0;
    let mut rows = Vec::new();
    let mut tables = Vec::new();
    for &(workload, mix) in &plan {
        let impls = Impl::for_mix(mix);
        let keys = workload.keys(all_keys);
        let capacity = (keys / 10) as usize;
        let s = workload.skew();
        let si = SKEWS.iter().position(|&x| x == s).unwrap_or(0) as u64;
        let warm_len = capacity * workload.warm_times(mix);
        let warmup = workload.apply(&zipf_stream(keys, s, warm_len, 1 + si), 0);
        // Read-through inserts what it misses, so a stream replayed sample
        // after sample would be resident from the second sample on: each
        // read-through sample, at each thread count, draws its own
        // requests. Read and mixed replay one stream, as they always have.
        let fresh = mix.fills();
        let drawn: usize = threads.iter().map(|&t| samples_at(workload, mix, t)).sum();
        let zipf = zipf_stream(keys, s, if fresh { ops * drawn } else { ops }, 100 + si);
        let fresh_caches = || -> Vec<Vec<Box<dyn Cache>>> {
            impls
                .iter()
                .map(|&i| {
                    (0..INSTANCES)
                        .map(|_| {
                            let c = build(i, capacity);
                            warm(&*c, &warmup);
                            c
                        })
                        .collect()
                })
                .collect()
        };
        let mut caches = Vec::new();
        let mut drawn_before = 0;
        for &t in &threads {
            let samples = samples_at(workload, mix, t);
            // Judged rows of read and mixed start from caches built and
            // warmed for them, and so does every row of young caches (the
            // previous rows would age them); the others go on with the
            // caches the previous thread count left (more warming, alike
            // for every cache): read-through's and load's were warmed past
            // the fill once.
            let judged = samples_per_sample(mix, workload, t) == SAMPLES_PER_SAMPLE;
            if caches.is_empty() || (judged && !mix.fills()) || workload.young() {
                // The old set goes before the new one is built.
                caches.clear();
                caches = fresh_caches();
            }
            let names: Vec<String> = impls
                .iter()
                .map(|&i| row_name(i, mix, workload, t))
                .collect();
            let mut measured: Vec<Vec<Sample>> = vec![Vec::new(); impls.len()];
            for sample in 0..samples {
                let at = drawn_before + sample;
                let part = if fresh {
                    &zipf[at * ops..(at + 1) * ops]
                } else {
                    &zipf[..]
                };
                // Fresh scan keys each sample: a scan is never repeated.
                let stream = workload.apply(part, (warmup.len() + at * ops) as u64);
                for (i, instances) in caches.iter().enumerate() {
                    // Reported-only caches: every `stride`th sample, turn
                    // by turn through their instances.
                    let stride = stride(impls[i], mix, workload, t);
                    if sample % stride != 0 {
                        continue;
                    }
                    progress.row(done, total, &names[i]);
                    done += 1;
                    let cache = &instances[(sample / stride) % INSTANCES];
                    cache.settle();
                    let stream = if matches!(impls[i], Impl::Moka | Impl::MokaTtl) {
                        &stream[..stream.len() / MOKA_SHARE]
                    } else {
                        &stream[..]
                    };
                    measured[i].push(measure(&**cache, mix, t, stream));
                }
            }
            drawn_before += samples;
            let first = rows.len();
            for (name, ss) in names.into_iter().zip(measured) {
                rows.push(row(name, &ss));
            }
            tables.push(Table {
                title: format!(
                    "{} {}, {keys} keys, capacity {capacity}, {t} thread(s)",
                    mix.describe(),
                    workload.describe(),
                ),
                rows: (first..rows.len()).collect(),
                columns: impls.iter().map(|i| i.name()).collect(),
            });
        }
    }
    let mut report = EXPERIMENT.report(cfg, Metric::MopsPerSec, rows, tables);
    report.notes = notes(&report, &threads, &plan);
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

#[cfg(test)]
mod tests;
