//! The default policy in a cache with a weigher, against the same cache
//! without one, quick_cache and moka weighted alike, and each fixed policy
//! weighted alike: `cargo run --release -p mmbatch-benches --example
//! weighted_hits`. The shared traces at the sizes `cache-hits` judges are
//! read through (a miss inserts) a new cache each replay, default shards
//! and hasher (random seeds), `REPS` replays each (default 3), means:
//!
//! - without a weigher: `Policy::Adaptive`, a capacity of `n` entries;
//! - 4 KiB each: every entry weighs 4096, the capacity `4096 * n`; the
//!   default, quick_cache (`with_weighter`, told `n` items) and moka;
//! - 1-16 KiB: an entry weighs 1 to 16 KiB, drawn from its key's hash,
//!   the capacity the mean weight times `n`: the default, quick_cache and
//!   moka; the default in 8 shards (what a host of 8 CPUs or more builds
//!   by default); the default told its entries (`estimated_entries`:
//!   the shards of an unweighted cache of `n`, on this host);
//!   `Workingset` weighted alike (what the default ran in a weighted
//!   cache before the duel did) and the best of the fixed policies
//!   weighted alike.
//!
//! docs/cache.md ("Weighted LIRS in small shards") gives a run.

use mmbatch_benches::cache_hits::{
    read_trace, traces_dir,
    weighted::{Peer, Shards, VARYING_MEAN, hit_pct, peer_hit_pct, varying},
};
use mmbatch_cache::Policy;

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

fn main() {
    let reps: usize = std::env::var("REPS").map_or(3, |v| v.parse().expect("REPS: a number"));
    let mean = |f: &dyn Fn() -> f64| (0..reps).map(|_| f()).sum::<f64>() / reps as f64;
    println!(
        "{:27}| {:<17} | {:<32} |",
        "", "4 KiB each", "1-16 KiB each"
    );
    println!(
        "{:12} {:>6} {:>6} | {:>5} {:>5} {:>5} | {:>5} {:>5} {:>5} {:>8} {:>5} | {:>10} best fixed",
        "trace",
        "size",
        "no wgt",
        "ours",
        "qc",
        "moka",
        "ours",
        "qc",
        "moka",
        "8 shards",
        "told",
        "Workingset",
    );
    for (name, n) in ROWS {
        let path = traces_dir().join(format!("{name}.lis.zst"));
        let trace = read_trace(&path, usize::MAX).unwrap_or_else(|e| panic!("{e}"));
        let n64 = n as u64;
        let plain = mean(&|| hit_pct(&trace, Policy::Adaptive, n64, None, Shards::Default));
        let four = |_| 4096;
        let equal = mean(&|| {
            hit_pct(
                &trace,
                Policy::Adaptive,
                4096 * n64,
                Some(four),
                Shards::Default,
            )
        });
        let var_cap = VARYING_MEAN * n64;
        let var = |p, shards| mean(&|| hit_pct(&trace, p, var_cap, Some(varying), shards));
        let peer = |p, cap, w| mean(&|| peer_hit_pct(&trace, p, n, cap, w));
        let fixed: Vec<(Policy, f64)> = FIXED
            .iter()
            .map(|&p| (p, var(p, Shards::Default)))
            .collect();
        let best = fixed
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("four policies");
        println!(
            "{name:12} {n:>6} {plain:>6.1} | {equal:>5.1} {:>5.1} {:>5.1} | {:>5.1} {:>5.1} {:>5.1} {:>8.1} {:>5.1} | {:>10.1} {:>5.1} {:?}",
            peer(Peer::QuickCache, 4096 * n64, four),
            peer(Peer::Moka, 4096 * n64, four),
            var(Policy::Adaptive, Shards::Default),
            peer(Peer::QuickCache, var_cap, varying),
            peer(Peer::Moka, var_cap, varying),
            var(Policy::Adaptive, Shards::Fixed(8)),
            var(Policy::Adaptive, Shards::Told(n)),
            fixed[0].1,
            best.1,
            best.0,
        );
    }
}
