//! Loom models of the cache's protocols, over an engine with batches of 2.
//! Run with `cargo xtask loom lru`.

mod loom_get_vs_remove;
mod loom_insert_vs_eviction;

use loom::sync::{Arc, Mutex};

use crate::{LruCache, Policy};

/// Values the listener saw.
type Log = Arc<Mutex<Vec<u32>>>;

/// A fixed hasher: loom replays each schedule, and a random seed would make
/// keys change shards between replays.
type Fixed = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// A cache of `capacity` entries with `spare` spare frames, logging
/// evictions; batched or not.
fn cache(
    capacity: u64,
    spare: usize,
    policy: Policy,
    batching: bool,
) -> (LruCache<u32, u32, Fixed>, Log) {
    let log = Log::default();
    let l = log.clone();
    let cache = LruCache::builder(capacity)
        .spare_frames(spare)
        .shards(4)
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
