//! The default policy in a cache with a weigher, against the same cache
//! without one and each fixed policy weighted alike: `cargo run --release
//! -p mmbatch-benches --example weighted_hits`. The shared traces at the
//! sizes `cache-hits` judges are read through (a miss inserts) a new cache
//! each replay, default shards and hasher (random seeds), `REPS` replays
//! each (default 3), means:
//!
//! - without a weigher: `Policy::Adaptive`, a capacity of `n` entries;
//! - 4 KiB each: every entry weighs 4096, the capacity `4096 * n`;
//! - 1-16 KiB: an entry weighs 1 to 16 KiB, drawn from its key's hash,
//!   the capacity the mean weight times `n`; beside it `Workingset`
//!   weighted alike (what the default ran in a weighted cache before)
//!   and the best of the fixed policies weighted alike.
//!
//! docs/cache.md ("Weighted caches") gives a run.

use mmbatch_benches::cache_hits::{read_trace, traces_dir};
use mmbatch_cache::{LruCache, Policy};

/// The traces and sizes `cache-hits` judges.
const ROWS: [(&str, usize); 20] = [
    ("lirs-multi1", 250),
    ("lirs-multi1", 500),
    ("lirs-multi1", 1000),
    ("lirs-gli", 250),
    ("lirs-gli", 500),
    ("lirs-gli", 1000),
    ("lirs-ps", 200),
    ("lirs-ps", 500),
    ("lirs-ps", 1000),
    ("lirs-sprite", 100),
    ("lirs-sprite", 500),
    ("lirs-sprite", 1000),
    ("lirs-cs", 100),
    ("lirs-cs", 300),
    ("lirs-cs", 500),
    ("OLTP", 1000),
    ("OLTP", 5000),
    ("OLTP", 15000),
    ("P3", 32768),
    ("P3", 131072),
];

/// The fixed policies the weighted default is set beside.
const FIXED: [Policy; 4] = [
    Policy::Workingset,
    Policy::Lirs,
    Policy::LirsTinyLfu,
    Policy::Lru,
];

/// Key `k`'s weight in the varying cache: 1 to 16 KiB by its hash.
fn varying(k: u64) -> u64 {
    1024 * (1 + (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60))
}

/// The mean of [`varying`]'s weights (each of 16 equally likely).
const VARYING_MEAN: u64 = 1024 * 17 / 2;

/// Read-through hit % of `trace` into a cache of `capacity` under
/// `policy`, entries weighing `weigh` (`None`: no weigher, `capacity`
/// entries).
fn hit_pct(trace: &[u64], policy: Policy, capacity: u64, weigh: Option<fn(u64) -> u64>) -> f64 {
    let mut hits = 0u64;
    let mut replay = |get: &dyn Fn(u64) -> bool, insert: &dyn Fn(u64)| {
        for &k in trace {
            if get(k) {
                hits += 1;
            } else {
                insert(k);
            }
        }
    };
    match weigh {
        None => {
            let c = LruCache::<u64, u64>::builder(capacity)
                .policy(policy)
                .build()
                .expect("a valid capacity");
            replay(&|k| c.get(&k).is_some(), &|k| {
                c.insert(k, k);
            });
        }
        Some(w) => {
            let c = LruCache::<u64, u64>::builder(capacity)
                .policy(policy)
                .weigher(move |k: &u64, _: &u64| w(*k))
                .build()
                .expect("a valid capacity");
            replay(&|k| c.get(&k).is_some(), &|k| {
                c.insert(k, k);
            });
        }
    }
    hits as f64 * 100.0 / trace.len() as f64
}

fn main() {
    let reps: usize = std::env::var("REPS").map_or(3, |v| v.parse().expect("REPS: a number"));
    let mean = |f: &dyn Fn() -> f64| (0..reps).map(|_| f()).sum::<f64>() / reps as f64;
    println!(
        "{:12} {:>6} {:>9} {:>9} {:>9} {:>11} {:>16}",
        "trace", "size", "no weigh", "4 KiB", "1-16 KiB", "Workingset", "best fixed"
    );
    for (name, n) in ROWS {
        let path = traces_dir().join(format!("{name}.lis.zst"));
        let trace = read_trace(&path, usize::MAX).unwrap_or_else(|e| panic!("{e}"));
        let n64 = n as u64;
        let plain = mean(&|| hit_pct(&trace, Policy::Adaptive, n64, None));
        let equal = mean(&|| hit_pct(&trace, Policy::Adaptive, 4096 * n64, Some(|_| 4096)));
        let var = |p| mean(&|| hit_pct(&trace, p, VARYING_MEAN * n64, Some(varying)));
        let default = var(Policy::Adaptive);
        let fixed: Vec<(Policy, f64)> = FIXED.iter().map(|&p| (p, var(p))).collect();
        let best = fixed
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("four policies");
        println!(
            "{name:12} {n:>6} {plain:>9.1} {equal:>9.1} {default:>9.1} {:>11.1} {:>10.1} {:?}",
            fixed[0].1, best.1, best.0
        );
    }
}
