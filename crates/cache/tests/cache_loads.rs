//! Refault detection and the cache's bad inputs (capacity 0, weights 0
//! and `u64::MAX`, a listener that uses the cache, a hasher that does not
//! mix), loops larger than the cache and thrashing (single-flight loading
//! is in `cache_single_flight.rs`). Scenarios that could hang run in a
//! child process with a bounded wait.

use std::{
    hash::{BuildHasher, Hash},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use mmbatch_cache::{LruCache, Policy};
use mmbatch_testkit::child;

const LIMIT: Duration = Duration::from_secs(30);

/// One read-through request, as a cache user makes it: `get`, and on a
/// miss `insert`; whether it hit.
fn request<K: Hash + Eq + Clone, S: BuildHasher>(c: &LruCache<K, K, S>, key: K) -> bool {
    let hit = c.get(&key).is_some();
    if !hit {
        c.insert(key.clone(), key);
    }
    hit
}

/// Reads a loop over keys `0..keys` through `c` for `passes` passes;
/// returns the percentage of requests that hit from pass `counted_from` on.
fn loop_hit_percent<K: Hash + Eq + Clone + From<u32>, S: BuildHasher>(
    c: &LruCache<K, K, S>,
    keys: u32,
    passes: u32,
    counted_from: u32,
) -> f64 {
    let (mut hits, mut counted) = (0u64, 0u64);
    for pass in 0..passes {
        for k in 0..keys {
            let hit = request(c, K::from(k));
            if pass >= counted_from {
                counted += 1;
                hits += u64::from(hit);
            }
        }
    }
    hits as f64 * 100.0 / counted as f64
}

/// xorshift64 from `seed`: reproducible request noise.
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// The eviction listener runs outside every lock: it may read, insert and
/// remove in the same cache (a re-entrant listener deadlocked caches that
/// call it under a lock).
#[test]
fn a_listener_may_use_the_cache() {
    if let Some(run) = child::parent("a_listener_may_use_the_cache", LIMIT) {
        run.expect_success();
        return;
    }
    // The listener finds the cache through this slot, set once it exists.
    type Slot = Arc<Mutex<Option<Arc<LruCache<u32, u32>>>>>;
    let cache: Slot = Arc::default();
    let me = cache.clone();
    let heard = Arc::new(AtomicUsize::new(0));
    let h = heard.clone();
    let c = Arc::new(
        LruCache::builder(4)
            .eviction_listener(move |k, v| {
                h.fetch_add(1, Ordering::Relaxed);
                let c = me.lock().unwrap().clone().unwrap();
                let _ = c.get(&k);
                let _ = c.remove(&(k + 1));
                if k < 1000 {
                    c.insert(k + 1000, v); // may evict again: re-enters
                }
            })
            .build()
            .unwrap(),
    );
    *cache.lock().unwrap() = Some(c.clone());
    for k in 0..100 {
        c.insert(k, k);
    }
    assert!(heard.load(Ordering::Relaxed) > 90);
    c.check_invariants().unwrap();
    *cache.lock().unwrap() = None;
}

/// A key evicted and asked for again soon is a refault: with the active
/// list larger than its refault distance it comes back active.
#[test]
fn refaults_are_detected_and_activated() {
    let c: LruCache<u32, u32> = LruCache::builder(100).shards(1).build().unwrap();
    // A hot set that reaches the active list.
    for k in 0..80 {
        c.insert(k, k);
    }
    for _ in 0..3 {
        for k in 0..80 {
            assert_eq!(c.get(&k), Some(k));
        }
    }
    // A stream of new keys evicts; 0..80 stay, promoted; the stream's
    // own keys are evicted and leave shadows.
    for k in 1000..1100 {
        c.insert(k, k);
    }
    let before = c.stats();
    assert!(before.shadows > 0, "{before:?}");
    // The stream's last evicted keys come back at once: refaults within
    // the active list's size.
    for k in 1070..1080 {
        if c.get(&k).is_none() {
            c.insert(k, k);
        }
    }
    let st = c.stats();
    assert!(st.refaults > before.refaults, "{st:?}");
    assert!(
        st.refault_activations > before.refault_activations,
        "{st:?}"
    );
    c.check_invariants().unwrap();
    // ActiveInactive keeps no shadows.
    let ai: LruCache<u32, u32> = LruCache::builder(10)
        .policy(Policy::ActiveInactive)
        .build()
        .unwrap();
    for k in 0..100 {
        ai.insert(k, k);
    }
    assert_eq!(ai.stats().shadows, 0);
}

/// A loop over more keys than fit, read through (get, insert on a
/// miss): exact LRU misses every request. Refaults of entries that never
/// reached the working set go to the inactive tail, so most of the loop
/// stays resident and hits (OPT keeps capacity / keys of it: 80% here).
/// Fixed hash seeds, among them one (20, one shard) whose shadow
/// collisions made a direct-mapped shadow table fall back to 0% hits.
/// `Workingset`'s shards see they thrash; the default keeps the loop too.
#[test]
fn a_loop_larger_than_the_cache_still_hits() {
    for policy in [Policy::Workingset, Policy::Adaptive] {
        for shards in [1, 4] {
            for seed in 0..32 {
                let capacity = 1000;
                let c: LruCache<u32, u32, _> = LruCache::builder(capacity)
                    .shards(shards)
                    .policy(policy)
                    .hasher(foldhash::fast::FixedState::with_seed(seed))
                    .build()
                    .unwrap();
                let pct = loop_hit_percent(&c, capacity as u32 * 5 / 4, 20, 10);
                assert!(
                    pct > 70.0,
                    "{policy:?}, {shards} shard(s), seed {seed}: {pct:.1}% hits, {:?}",
                    c.stats()
                );
                if policy == Policy::Workingset {
                    // Every miss of the loop refaults: every shard thrashes.
                    assert_eq!(c.stats().thrashing_shards, shards as u64);
                }
                c.check_invariants().unwrap();
            }
        }
    }
}

/// The same loop with 1% of requests to random other keys: the noise moves
/// loop keys onto the active list, and without the failed-activation mark
/// (an entry activated by a refault and evicted unhit starts inactive on
/// its next refault) the loop's refaults kept re-activating each other at
/// short distances and the hit ratio fell to 10.2% (OPT: 80%, quick_cache
/// about 60%); with the mark, 39.3%; with a failed retry marked too (one
/// activation in three passes for a thrashing key), 46.7%; with an
/// activation paid only by a second hit (a loop gives each key one per
/// pass), 65.9%; with the shard seen thrashing, failed retries retried
/// again and kept out of the inactive target's adaptation, 75.4%. Mean
/// over fixed hash seeds, so one unlucky seed does not decide, and the
/// figures are deterministic: 70% tells the last two apart.
#[test]
fn a_noisy_loop_larger_than_the_cache_still_hits() {
    for policy in [Policy::Workingset, Policy::Adaptive] {
        let (mut hits, mut counted) = (0u64, 0u64);
        for seed in 0..8 {
            let capacity = 1000;
            let c: LruCache<u32, u32, _> = LruCache::builder(capacity)
                .shards(4)
                .policy(policy)
                .hasher(foldhash::fast::FixedState::with_seed(seed))
                .build()
                .unwrap();
            let keys = capacity as u32 * 5 / 4;
            let mut x = 0x9e37_79b9_u32 ^ seed as u32;
            for pass in 0..40 {
                for k in 0..keys {
                    // xorshift32: 1% of requests to keys outside the loop.
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let key = if x % 100 == 0 { keys + x % 100_000 } else { k };
                    let hit = request(&c, key);
                    if pass >= 20 && key < keys {
                        counted += 1;
                        hits += u64::from(hit);
                    }
                }
            }
            c.check_invariants().unwrap();
        }
        let pct = hits as f64 * 100.0 / counted as f64;
        assert!(
            pct > 70.0,
            "{policy:?}: {pct:.1}% of the loop's requests hit"
        );
    }
}

/// A loop over twice the cache, read through from the start: half of it
/// can stay resident (OPT: 50%), as it does once the shards see they
/// thrash. Two-way shadow buckets lose about a third of the shadows a loop
/// twice the cache needs (a refault comes about a shard's size of
/// evictions later), so its misses refault at about 0.7, not the 0.8 and
/// more of smaller loops: with the bound at 0.8 no shard thrashed (this
/// test failed at once: 1000 entries in one shard, seed 0, 68% of misses
/// refaulting and 2.2% of requests hitting), the refaults within the reach were
/// activated and churned each other, and such a loop hit 16.4% of its
/// requests at 10240 entries, 0.45% with 1% of other requests mixed in
/// (quick_cache 47.7-48.7%, moka 49-50%; see `THRASHING_ABOVE`).
#[test]
fn a_loop_over_twice_the_cache_thrashes_and_keeps_half() {
    for policy in [Policy::Workingset, Policy::Adaptive] {
        for (capacity, shards) in [(1000u64, 1usize), (4096, 8)] {
            for seed in 0..4 {
                let c: LruCache<u64, u64, _> = LruCache::builder(capacity)
                    .shards(shards)
                    .policy(policy)
                    .hasher(foldhash::fast::FixedState::with_seed(seed))
                    .build()
                    .unwrap();
                let pct = loop_hit_percent(&c, capacity as u32 * 2, 40, 20);
                let st = c.stats();
                if policy == Policy::Workingset {
                    assert_eq!(
                        st.thrashing_shards, shards as u64,
                        "{capacity}/{shards}, seed {seed}: {st:?}"
                    );
                }
                assert!(
                    pct > 40.0,
                    "{policy:?} {capacity}/{shards}, seed {seed}: {pct:.1}% hits"
                );
                c.check_invariants().unwrap();
            }
        }
    }
}

/// A cache whose misses are mostly new keys stops thrashing, shard by
/// shard, once each has evicted half its size and seen the misses: here
/// skewed requests over far more keys than fit (most misses are keys
/// never seen, or seen too long ago to have a shadow).
#[test]
fn a_cache_of_new_keys_does_not_thrash() {
    let c: LruCache<u64, u64, _> = LruCache::builder(1000)
        .shards(4)
        .policy(Policy::Workingset)
        .hasher(foldhash::fast::FixedState::with_seed(1))
        .build()
        .unwrap();
    // Presumed thrashing until a shard has evicted half its size, and
    // not counted as such.
    assert_eq!(c.stats().thrashing_shards, 0);
    let mut rnd = xorshift(0x2545_f491_4f6c_dd1d);
    for _ in 0..100_000 {
        let x = rnd();
        // Half the requests to 250 hot keys (even x), half to 500,000
        // others (odd x).
        request(&c, if x % 2 == 0 { x % 500 } else { x % 1_000_000 });
    }
    let st = c.stats();
    assert_eq!(st.thrashing_shards, 0, "{st:?}");
    c.check_invariants().unwrap();
}

/// A loop that starts after other requests, once every shard has left
/// thrashing: its refaults put each shard back into it, and the loop
/// keeps most of itself resident. With a bound of 0.99 instead of 0.8 the
/// shards stayed out and the loops 1.25x and 1.1x the cache fell to 0-10%
/// and 49% hits (70-87% with it). The bound went down to 0.6 since, so
/// that a loop twice the cache is seen thrashing (see
/// `a_loop_over_twice_the_cache_thrashes_and_keeps_half`); these shards of
/// 250 entries then enter it earlier, with more of the stale active list
/// left, and keep less: 59.4%, 66.4% and 65.7% in the order below, against
/// 71.6%, 74.2% and 80.4% with 0.8 (quick_cache keeps none of such loops). The loop twice the cache keeps about
/// 37% (quick_cache: none) without its shards going back to thrashing:
/// with the reach starting at twice the shard, its first refaults are
/// activated before the shards see they thrash (46% and every shard
/// thrashing with a start at the shard's size; see `REACH_START`).
#[test]
fn a_loop_after_other_requests_thrashes_again() {
    // (loop keys, 1% of other requests mixed in, least hit %, every
    // shard back to thrashing)
    for (policy, (keys, noisy, least, thrashes)) in [Policy::Workingset, Policy::Adaptive]
        .into_iter()
        .flat_map(|p| {
            [
                (1250u64, false, 55.0, true),
                (1250, true, 60.0, true),
                (1100, true, 60.0, true),
                (2000, true, 30.0, false),
            ]
            .map(|case| (p, case))
        })
    {
        let c: LruCache<u64, u64, _> = LruCache::builder(1000)
            .shards(4)
            .policy(policy)
            .hasher(foldhash::fast::FixedState::with_seed(3))
            .build()
            .unwrap();
        let mut rnd = xorshift(0x2545_f491_4f6c_dd1d);
        for _ in 0..50_000 {
            let r = rnd();
            request(
                &c,
                1_000_000 + if r % 2 == 0 { r % 500 } else { r % 1_000_000 },
            );
        }
        if policy == Policy::Workingset {
            assert_eq!(c.stats().thrashing_shards, 0, "before the loop");
        }
        let (mut hits, mut counted) = (0u64, 0u64);
        for pass in 0..60 {
            for k in 0..keys {
                let r = rnd();
                let key = if noisy && r % 100 == 0 {
                    5_000_000 + r % 100_000
                } else {
                    k
                };
                let hit = request(&c, key);
                if pass >= 30 && key < keys {
                    counted += 1;
                    hits += u64::from(hit);
                }
            }
        }
        let pct = hits as f64 * 100.0 / counted as f64;
        let st = c.stats();
        if thrashes && policy == Policy::Workingset {
            assert_eq!(st.thrashing_shards, 4, "loop of {keys}: {st:?}");
        }
        assert!(
            pct > least,
            "{policy:?}, loop of {keys} (noise: {noisy}): {pct:.1}% hits"
        );
        c.check_invariants().unwrap();
    }
}

/// The identity hash of integer keys (`nohash-hasher`'s): the cache mixes
/// a user's hasher's output, so small keys still spread over every shard
/// and the cache holds its whole capacity, and so do keys that differ only
/// in their high bits (a tag packed above bit 48). Why: the shard comes
/// from the hash's high bits and the index from its middle ones, and an
/// unmixed identity hash leaves one or the other the same for such keys.
#[test]
fn an_identity_hasher_still_fills_the_cache() {
    #[derive(Default)]
    struct Identity(u64);
    impl std::hash::Hasher for Identity {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = self.0 << 8 | u64::from(b);
            }
        }
        fn write_u64(&mut self, x: u64) {
            self.0 = x;
        }
    }
    for shift in [0, 32, 48] {
        let c: LruCache<u64, u64, _> = LruCache::builder(1000)
            .shards(8)
            .hasher(std::hash::BuildHasherDefault::<Identity>::default())
            .build()
            .unwrap();
        for k in 0..1000 {
            c.insert(k << shift, k);
        }
        // Shards get 125 entries each; hashing spreads keys unevenly, so a
        // few overflow theirs.
        assert!(
            c.len() > 900,
            "keys k << {shift}: {} of 1000 cached",
            c.len()
        );
        c.check_invariants().unwrap();
    }
}

/// Weights of 0 count as 1; an entry heavier than its shard goes to the
/// listener, not the cache.
#[test]
fn bad_sizes_have_clear_outcomes() {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let h = heard.clone();
    let c: LruCache<u8, u64, _, _> = LruCache::builder(10)
        .weigher(|_: &u8, w: &u64| *w)
        .eviction_listener(move |k, _| h.lock().unwrap().push(k))
        .build()
        .unwrap();
    for k in 0..10 {
        c.insert(k, 0); // weight 0 counts as 1
    }
    assert_eq!((c.len(), c.weight()), (10, 10));
    c.insert(200, u64::MAX);
    assert_eq!(c.peek(&200), None);
    assert_eq!(c.stats().rejected, 1);
    assert_eq!(heard.lock().unwrap().as_slice(), &[200]);
    c.check_invariants().unwrap();
}

/// `max_entry_weight` is the weight a user can count on: an entry of
/// exactly it is cached in any empty shard (in a full one LIRS may
/// decline a cold key that heavy), one heavier is rejected, and it
/// follows the shard count and the capacity.
#[test]
fn the_heaviest_entry_kept_is_the_smallest_shards_share() {
    let c: LruCache<u64, u64, _, _> = LruCache::builder(1003)
        .weigher(|_: &u64, w: &u64| *w)
        .shards(4)
        .build()
        .unwrap();
    // 1003 over 4 shards: 251, 251, 251, 250.
    assert_eq!(c.max_entry_weight(), 250);
    for k in 0..64 {
        c.insert(k, 250);
        assert_eq!(c.peek(&k), Some(250), "key {k}");
        c.remove(&k);
    }
    assert_eq!(c.stats().rejected, 0);
    // Some shard's share is 250: one of these keys lands there.
    for k in 100..164 {
        c.insert(k, 251);
    }
    assert!(c.stats().rejected > 0);
    c.insert(1000, 252);
    assert_eq!(c.peek(&1000), None);
    c.set_capacity(400).unwrap();
    assert_eq!(c.max_entry_weight(), 100);
    let one: LruCache<u64, u64, _, _> = LruCache::builder(1003)
        .weigher(|_: &u64, w: &u64| *w)
        .shards(1)
        .build()
        .unwrap();
    assert_eq!(one.max_entry_weight(), 1003);
    one.insert(1, 1003);
    assert_eq!(one.peek(&1), Some(1003));
}

/// A shard count far past any machine's: at most `MAX_SHARDS` (unbounded,
/// 2^40 shards asked for 128 TiB, and the process aborted).
#[test]
fn a_huge_shard_count_is_capped() {
    for shards in [1 << 30, usize::MAX] {
        let c: LruCache<u64, u64> = LruCache::builder(1 << 40).shards(shards).build().unwrap();
        assert_eq!(c.shards(), mmbatch_cache::MAX_SHARDS);
        c.insert(1, 1);
        assert_eq!(c.get(&1), Some(1));
    }
}

/// A key that counts its clones on the cloning thread (`ToOwned` of a
/// `Key` is its `Clone`): each test reads its own thread's count, so tests
/// running in parallel do not see each other's.
#[derive(Debug, Hash, PartialEq, Eq)]
struct Key(u64);

thread_local! {
    static KEY_CLONES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Clone for Key {
    fn clone(&self) -> Self {
        KEY_CLONES.set(KEY_CLONES.get() + 1);
        Key(self.0)
    }
}

/// Loading by a borrowed key: a hit makes no owned key; a miss makes one
/// for the flight and one for the entry; `&str` finds `String` keys.
#[test]
fn loading_by_a_borrowed_key_clones_no_key_on_a_hit() {
    let cache: LruCache<Key, u64> = LruCache::new(16);
    let clones = || KEY_CLONES.get();
    let before = clones();
    assert_eq!(cache.get_or_insert_with_ref(&Key(5), || 50), 50);
    assert_eq!(
        clones() - before,
        2,
        "a miss: the flight's key and the entry's"
    );
    let before = clones();
    for _ in 0..10 {
        assert_eq!(cache.get_or_insert_with_ref(&Key(5), || unreachable!()), 50);
    }
    assert_eq!(clones(), before, "a hit cloned the key");
    assert_eq!(cache.stats().loads, 1);
    let r: Result<u64, &str> = cache.try_get_or_insert_with_ref(&Key(6), || Err("down"));
    assert_eq!(r, Err("down"));
    assert_eq!(cache.peek(&Key(6)), None);

    let names: LruCache<String, usize> = LruCache::new(16);
    assert_eq!(names.get_or_insert_with_ref("answer", || 42), 42);
    assert_eq!(names.get_or_insert_with_ref("answer", || 0), 42);
    assert_eq!(names.peek("answer"), Some(42));
}

/// The async loaders by a borrowed key, as the blocking ones: a hit makes
/// no owned key, a miss two; a failed load caches nothing.
#[test]
fn loading_async_by_a_borrowed_key_clones_no_key_on_a_hit() {
    use futures_executor::block_on;
    let cache: LruCache<Key, u64> = LruCache::new(16);
    let clones = || KEY_CLONES.get();
    let before = clones();
    assert_eq!(
        block_on(cache.get_or_insert_async_ref(&Key(5), async { 50 })),
        50
    );
    assert_eq!(
        clones() - before,
        2,
        "a miss: the flight's key and the entry's"
    );
    let before = clones();
    for _ in 0..10 {
        let v = block_on(cache.get_or_insert_async_ref(&Key(5), async { unreachable!() }));
        assert_eq!(v, 50);
    }
    assert_eq!(clones(), before, "a hit cloned the key");
    assert_eq!(cache.stats().loads, 1);
    let r: Result<u64, &str> =
        block_on(cache.try_get_or_insert_async_ref(&Key(6), async { Err("down") }));
    assert_eq!(r, Err("down"));
    assert_eq!(cache.peek(&Key(6)), None);
    let r: Result<u64, &str> =
        block_on(cache.try_get_or_insert_async_ref(&Key(6), async { Ok(60) }));
    assert_eq!(r, Ok(60), "the next ask loads again");
    assert_eq!(cache.peek(&Key(6)), Some(60));
}

/// Loading by an owned key: a miss clones it once, for the flight that
/// waiters match, and the entry takes the caller's key itself; a hit
/// clones none. The same for the async loader.
#[test]
fn loading_by_an_owned_key_clones_it_once_on_a_miss() {
    let cache: LruCache<Key, u64> = LruCache::new(16);
    let clones = || KEY_CLONES.get();
    let before = clones();
    assert_eq!(cache.get_or_insert_with(Key(5), || 50), 50);
    assert_eq!(clones() - before, 1, "a miss: the flight's key only");
    let before = clones();
    assert_eq!(cache.get_or_insert_with(Key(5), || unreachable!()), 50);
    assert_eq!(clones(), before, "a hit cloned the key");
    let before = clones();
    let r: Result<u64, &str> = cache.try_get_or_insert_with(Key(6), || Ok(60));
    assert_eq!(r, Ok(60));
    assert_eq!(clones() - before, 1, "a fallible loader's miss");
    let before = clones();
    let v = futures_executor::block_on(cache.get_or_insert_async(Key(7), async { 70 }));
    assert_eq!(v, 70);
    assert_eq!(clones() - before, 1, "an async loader's miss");
    assert_eq!(cache.peek(&Key(7)), Some(70));
    assert_eq!(cache.stats().loads, 3);
}
