//! Weighted caches: `LruCache` with a weigher beside quick_cache and moka
//! weighted alike, read through a trace; entries weigh 1 to 16 KiB by
//! their key ([`varying`]). `cache-hits` tables the LIRS paper's traces
//! this way, and `--example weighted_hits` every judged trace and size
//! with more columns.

use std::time::Instant;

use mmbatch_cache::{LruCache, Policy};

use crate::Row;

/// Key `k`'s weight in the varying cache: 1 to 16 KiB by its hash.
pub fn varying(k: u64) -> u64 {
    1024 * (1 + (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60))
}

/// The mean of [`varying`]'s weights (each of 16 equally likely).
pub const VARYING_MEAN: u64 = 1024 * 17 / 2;

/// quick_cache's weigher: a function of the key.
#[derive(Clone, Debug)]
pub struct QcWeigh(pub fn(u64) -> u64);

impl quick_cache::Weighter<u64, u64> for QcWeigh {
    fn weight(&self, k: &u64, _: &u64) -> u64 {
        (self.0)(*k)
    }
}

/// A peer's cache, weighted alike.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    /// `quick_cache::sync::Cache::with_weighter`, told the entries.
    QuickCache,
    /// `moka::sync::Cache` with a `weigher`, pending tasks run after every insert.
    Moka,
}

/// Read-through hit % of `trace` into `peer`'s cache of `capacity` in
/// weight, about `entries` entries, entries weighing `weigh`.
pub fn peer_hit_pct(
    trace: &[u64],
    peer: Peer,
    entries: usize,
    capacity: u64,
    weigh: fn(u64) -> u64,
) -> f64 {
    let mut hits = 0u64;
    match peer {
        Peer::Moka => {
            let c = moka::sync::Cache::<u64, u64>::builder()
                .max_capacity(capacity)
                .weigher(move |k: &u64, _: &u64| u32::try_from(weigh(*k)).expect("a u32 weight"))
                .build();
            for &k in trace {
                if c.get(&k).is_some() {
                    hits += 1;
                } else {
                    c.insert(k, k);
                    c.run_pending_tasks();
                }
            }
        }
        Peer::QuickCache => {
            let c = quick_cache::sync::Cache::<u64, u64, QcWeigh>::with_weighter(
                entries,
                capacity,
                QcWeigh(weigh),
            );
            for &k in trace {
                if c.get(&k).is_some() {
                    hits += 1;
                } else {
                    c.insert(k, k);
                }
            }
        }
    }
    hits as f64 * 100.0 / trace.len() as f64
}

/// How a weighted cache's shards are set.
#[derive(Clone, Copy, Debug)]
pub enum Shards {
    /// The default: 1 a CPU, not told the entries.
    Default,
    /// `Builder::shards`.
    Fixed(usize),
    /// `Builder::estimated_entries`: the default told the entries.
    Told(usize),
}

/// Read-through hit % of `trace` into a cache of `capacity` under
/// `policy`, entries weighing `weigh` (`None`: no weigher, `capacity`
/// entries, and `shards` unused), its shards set by `shards`.
pub fn hit_pct(
    trace: &[u64],
    policy: Policy,
    capacity: u64,
    weigh: Option<fn(u64) -> u64>,
    shards: Shards,
) -> f64 {
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
            let b = LruCache::<u64, u64>::builder(capacity)
                .policy(policy)
                .weigher(move |k: &u64, _: &u64| w(*k));
            let c = match shards {
                Shards::Default => b,
                Shards::Fixed(n) => b.shards(n),
                Shards::Told(n) => b.estimated_entries(n),
            }
            .build()
            .expect("a valid capacity");
            replay(&|k| c.get(&k).is_some(), &|k| {
                c.insert(k, k);
            });
        }
    }
    hits as f64 * 100.0 / trace.len() as f64
}

/// The columns of a `cache-hits` weighted table.
pub(super) const COLUMNS: [&str; 5] = [
    "mmbatch-adaptive",
    "mmbatch-adaptive-8-shards",
    "quick_cache",
    "moka",
    "mmbatch-adaptive-told",
];

/// The row name of `column` on `trace` at `pages` entries' mean weight.
pub(super) fn row_name(column: &str, trace: &str, pages: usize) -> String {
    format!("weighted/{column}/{trace}/pages-{pages}")
}

/// The rows of one trace at one size: each of [`COLUMNS`]' read-through
/// hit ratio over the whole trace, entries weighing [`varying`], the
/// capacity `pages` times their mean weight; one replay each.
pub(super) fn rows(trace: &[u64], name: &str, pages: usize) -> Vec<Row> {
    let capacity = VARYING_MEAN * pages as u64;
    COLUMNS
        .iter()
        .map(|&column| {
            let start = Instant::now();
            let pct = match column {
                "mmbatch-adaptive" => hit_pct(
                    trace,
                    Policy::Adaptive,
                    capacity,
                    Some(varying),
                    Shards::Default,
                ),
                "mmbatch-adaptive-8-shards" => hit_pct(
                    trace,
                    Policy::Adaptive,
                    capacity,
                    Some(varying),
                    Shards::Fixed(8),
                ),
                "mmbatch-adaptive-told" => hit_pct(
                    trace,
                    Policy::Adaptive,
                    capacity,
                    Some(varying),
                    Shards::Told(pages),
                ),
                "quick_cache" => peer_hit_pct(trace, Peer::QuickCache, pages, capacity, varying),
                _ => peer_hit_pct(trace, Peer::Moka, pages, capacity, varying),
            };
            let pct = (pct * 1000.0).round() / 1000.0;
            let mut row = Row::timed(
                row_name(column, name, pages),
                vec![start.elapsed().as_secs_f64()],
                [("hit_ratio_pct", pct)],
            );
            row.ops_per_sample = Some(trace.len() as f64);
            row
        })
        .collect()
}
