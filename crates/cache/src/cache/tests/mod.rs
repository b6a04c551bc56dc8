//! Loom models of the cache's protocols. Run with `cargo xtask loom cache`.

mod loom_async_room;
mod loom_fast_read;
mod loom_idle_reads;
mod loom_insert_vs_insert;
mod loom_sampled_hits;
mod loom_shard_lock;
mod loom_single_flight;

use loom::sync::{Arc, Mutex};

use crate::{LruCache, Policy};

/// Runs `f` under loom (the bound comes from `LOOM_MAX_PREEMPTIONS`,
/// which `cargo xtask loom` sets).
fn model(f: impl Fn() + Sync + Send + 'static) {
    mmbatch_testkit::loom_model::check(3, mmbatch_testkit::loom_model::DEFAULT_BRANCHES, f);
}

/// [`model`] at no more than `most` preemptions.
fn model_at_most(most: usize, f: impl Fn() + Sync + Send + 'static) {
    mmbatch_testkit::loom_model::check_at_most(
        most,
        mmbatch_testkit::loom_model::DEFAULT_BRANCHES,
        f,
    );
}

/// Values the listener saw.
type Log = Arc<Mutex<Vec<u32>>>;

/// A fixed hasher: loom replays each schedule, and a random seed would make
/// keys change shards between replays.
type Fixed = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// A one-shard cache of `capacity` entries, logging evictions.
fn cache(capacity: u64, policy: Policy, batching: bool) -> (LruCache<u32, u32, Fixed>, Log) {
    let log = Log::default();
    let l = log.clone();
    let cache = LruCache::builder(capacity)
        .shards(1)
        .policy(policy)
        .hasher(Fixed::default())
        .batching(batching)
        .eviction_listener(move |_, v| l.lock().unwrap().push(v))
        .build()
        .unwrap();
    (cache, log)
}

/// Every value the listener heard plus every value still cached under
/// `keys`, sorted: each value ever inserted appears at most once.
fn seen(
    cache: &LruCache<u32, u32, Fixed>,
    log: &Log,
    keys: std::ops::RangeInclusive<u32>,
) -> Vec<u32> {
    let mut seen = log.lock().unwrap().clone();
    seen.extend(keys.filter_map(|k| cache.peek(&k)));
    seen.sort_unstable();
    seen
}
