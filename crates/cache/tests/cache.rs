//! `LruCache` against oracles: the `lru` crate for exact LRU order, a
//! `HashMap` of latest values for every policy and mode, and threads
//! hammering one cache whose every evicted or surviving entry must be
//! accounted for.

use std::sync::{Arc, Mutex};

use mmbatch_cache::{CacheError, LruCache, Policy, PolicyState};
use proptest::prelude::*;

use mmbatch_models::cache as cache_model;

use cache_model::{Op, run};

fn op(keys: u8) -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        8 => (0..keys).prop_map(Op::Get),
        2 => (0..keys).prop_map(Op::Peek),
        2 => (0..keys).prop_map(Op::Remove),
        2 => (0..keys, any::<u32>()).prop_map(|(k, m)| Op::RemoveIf(k, m)),
        4 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        1 => Just(Op::Clear),
        1 => Just(Op::Iter),
        1 => (1..4u8).prop_map(Op::Retain),
        1 => Just(Op::Drain),
        1 => (0..14u8).prop_map(Op::SetCapacity),
        4 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Compute(k, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// One thread, batching off, `Policy::Lru`: every result and every
    /// eviction, in order, is the `lru` crate's.
    #[test]
    fn exact_lru_order(capacity in 1usize..8, ops in prop::collection::vec(op(16), 1..200)) {
        run(capacity, Policy::Lru, false, &ops).map_err(TestCaseError::fail)?;
    }

    /// Every policy and mode, one thread: a cached value is the latest
    /// inserted, removed keys are gone, the listener hears every eviction,
    /// and the structures agree after every step.
    #[test]
    fn values_and_accounting(
        capacity in 1usize..12,
        policy in prop_oneof![Just(Policy::Workingset), Just(Policy::ActiveInactive), Just(Policy::Lru), Just(Policy::Lirs), Just(Policy::LirsTinyLfu), Just(Policy::Adaptive)],
        batching in any::<bool>(),
        ops in prop::collection::vec(op(24), 1..300),
    ) {
        run(capacity, policy, batching, &ops).map_err(TestCaseError::fail)?;
    }
}

/// Threads insert, get, remove and replace over shared keys; afterwards
/// every value ever inserted is cached, returned as replaced or removed,
/// or evicted — exactly once — and the structures agree.
#[test]
fn threads_account_for_every_value() {
    // A load whose waiters are never handed a room waits for good.
    let _hang = mmbatch_testkit::hang_guard("threads_account_for_every_value");
    for (policy, batching) in [
        (Policy::Workingset, true),
        (Policy::Workingset, false),
        (Policy::ActiveInactive, true),
        (Policy::ActiveInactive, false),
        (Policy::Lru, true),
        (Policy::Lirs, true),
        (Policy::Lirs, false),
        (Policy::LirsTinyLfu, true),
        (Policy::LirsTinyLfu, false),
        (Policy::Adaptive, true),
        (Policy::Adaptive, false),
    ] {
        let evicted = Arc::new(Mutex::new(Vec::new()));
        let log = evicted.clone();
        let cache: LruCache<u32, u64> = LruCache::builder(64)
            .policy(policy)
            .batching(batching)
            .eviction_listener(move |_, v| log.lock().unwrap().push(v))
            .build()
            .unwrap();
        let threads = 4u64;
        let per_thread = 20_000u64;
        let returned: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let cache = &cache;
                    s.spawn(move || {
                        let mut back = Vec::new();
                        let mut x = t * 7919 + 1;
                        for i in 0..per_thread {
                            x = x
                                .wrapping_mul(6364136223846793005)
                                .wrapping_add(1442695040888963407);
                            let key = (x >> 33) as u32 % 256;
                            let value = t << 32 | i;
                            match (x >> 20) % 10 {
                                0..=2 => back.extend(cache.insert(key, value)),
                                3 => {
                                    // Ours is cached only if the key was absent.
                                    let _ = cache.get_or_insert_with(key, || value);
                                }
                                4 => back.extend(cache.remove(&key)),
                                _ => {
                                    if let Some(v) = cache.get(&key) {
                                        assert!(v >> 32 < threads, "a value never inserted");
                                    }
                                }
                            }
                            assert!(cache.weight() <= 64 + threads);
                        }
                        back
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        cache.check_invariants().unwrap();
        let mut seen: Vec<u64> = returned.into_iter().flatten().collect();
        seen.extend(evicted.lock().unwrap().iter().copied());
        for k in 0..256 {
            seen.extend(cache.peek(&k));
        }
        let inserted = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), inserted, "{policy:?}: a value came back twice");
        assert_eq!(
            cache.stats().evictions as usize,
            evicted.lock().unwrap().len()
        );
        assert!(cache.len() <= 64);
    }
}

/// `hit_ratio` is hits over lookups, as its docs say, and 0 before any.
#[test]
fn hit_ratio_is_hits_over_lookups() {
    let cache: LruCache<u32, u32> = LruCache::builder(16).shards(1).build().unwrap();
    assert_eq!(cache.stats().hit_ratio(), 0.0, "no lookup yet");
    cache.insert(1, 1);
    for _ in 0..3 {
        assert_eq!(cache.get(&1), Some(1));
    }
    assert_eq!(cache.get(&2), None);
    let st = cache.stats();
    assert_eq!((st.hits, st.misses), (3, 1));
    assert_eq!(st.hit_ratio(), 0.75);
}

/// With batching off a lookup takes the write lock, and is counted there:
/// the counts are exact, with expiry off and on.
#[test]
fn lookups_are_counted_with_batching_off() {
    for ttl in [None, Some(std::time::Duration::from_secs(3600))] {
        let mut b = LruCache::<u32, u32>::builder(16).shards(1).batching(false);
        if let Some(ttl) = ttl {
            b = b.time_to_live(ttl);
        }
        let cache = b.build().unwrap();
        cache.insert(1, 1);
        for _ in 0..3 {
            assert_eq!(cache.get(&1), Some(1));
        }
        assert_eq!(cache.get(&2), None);
        let st = cache.stats();
        assert_eq!((st.hits, st.misses), (3, 1), "time to live {ttl:?}");
    }
}

/// A fixed hasher: with the default's random seed, key 50 below is taken
/// for a refault in about one seed in 1200 (17 of 20 000 tried; 4 of the
/// first 5 counted a refault: a 10-bit shadow tag of an evicted key
/// matched, shadows being lossy as the kernel's are) and admitted at
/// once, which failed this test once in a full run.
#[test]
fn weigher_bounds_total_weight() {
    let evicted = Arc::new(Mutex::new(Vec::new()));
    let log = evicted.clone();
    let cache = LruCache::builder(100)
        .hasher(foldhash::quality::FixedState::default())
        .weigher(|_: &u32, v: &Vec<u8>| v.len() as u64)
        .max_entries(50)
        .eviction_listener(move |k, _| log.lock().unwrap().push(k))
        .build()
        .unwrap();
    for k in 0..20 {
        cache.insert(k, vec![0; 10]);
        assert!(cache.weight() <= 100);
    }
    assert_eq!(cache.len(), 10);
    // A replaced value's new weight replaces the old one's.
    let k = (0..19).find(|k| cache.contains_key(k)).unwrap();
    assert_eq!(cache.insert(k, vec![0; 3]), Some(vec![0; 10]));
    assert_eq!(cache.weight(), 93);
    cache.check_invariants().unwrap();
    // Heavier than the capacity: not cached, reported at once, and the
    // key's old value is gone.
    assert_eq!(cache.insert(19, vec![0; 101]), Some(vec![0; 10]));
    assert!(!cache.contains_key(&19));
    assert_eq!(evicted.lock().unwrap().last(), Some(&19));
    assert_eq!(cache.stats().rejected, 1, "the rejected value is counted");
    assert_eq!(
        cache.stats().evictions,
        evicted.lock().unwrap().len() as u64,
        "evictions count what the listener heard, the rejected value too"
    );
    // An entry as heavy as the whole capacity is cached alone (above the
    // low watermark, which reclaim cannot reach without evicting it): the
    // default runs LIRS first, which declines a cold key heavier than its
    // HIR set and free room, and takes it when it is requested again.
    assert_eq!(cache.insert(50, vec![0; 100]), None);
    assert!(!cache.contains_key(&50));
    assert_eq!(evicted.lock().unwrap().last(), Some(&50));
    assert_eq!(cache.stats().not_admitted, 1);
    assert_eq!(cache.insert(50, vec![0; 100]), None);
    assert_eq!((cache.len(), cache.weight()), (1, 100));
    cache.check_invariants().unwrap();
    // Weight 0 counts as 1: max_entries bounds the entries.
    let tiny = LruCache::builder(1000)
        .weigher(|_: &u32, _: &()| 0)
        .max_entries(8)
        .build()
        .unwrap();
    for k in 0..100 {
        tiny.insert(k, ());
    }
    assert!(tiny.len() <= 9);
    tiny.check_invariants().unwrap();
}

#[test]
fn bad_configurations_explain_themselves() {
    let e = LruCache::<u8, u8>::builder(LruCache::<u8, u8>::MAX_CAPACITY + 1)
        .build()
        .unwrap_err();
    assert!(matches!(e, CacheError::CapacityTooLarge { .. }), "{e:?}");
    assert!(e.to_string().contains("smaller capacity"), "{e}");
    // Memory grows with entries: a huge capacity costs nothing up front.
    let huge = LruCache::<u8, u8>::builder(1 << 40).build().unwrap();
    huge.insert(1, 1);
    assert_eq!(huge.len(), 1);
}

/// `new(usize::MAX)`, a quick_cache user's unbounded cache, is the
/// largest capacity (it panicked: "capacity .. is above the largest").
#[test]
fn new_takes_a_capacity_too_large_as_the_largest() {
    let unbounded = LruCache::<u64, u64>::new(usize::MAX);
    assert_eq!(unbounded.capacity(), LruCache::<u64, u64>::MAX_CAPACITY);
    for k in 0..10_000 {
        unbounded.insert(k, k);
    }
    assert_eq!(unbounded.len(), 10_000);
    unbounded.check_invariants().unwrap();
}

/// A capacity of 0, or `max_entries(0)`, is a cache that stores nothing
/// (moka and quick_cache take it so; configurations use it to turn a
/// cache off): every insertion goes to the listener as evicted and counts
/// as rejected, every load runs, and `set_capacity` turns such a cache
/// on and off. It was an error (a panic from `new`).
#[test]
fn a_capacity_of_zero_stores_nothing() {
    type Heard = Arc<Mutex<Vec<(u32, mmbatch_cache::RemovalCause)>>>;
    fn check<S: std::hash::BuildHasher, W: mmbatch_cache::Weigher<u32, u32>>(
        cache: LruCache<u32, u32, S, W>,
        heard: &Heard,
        what: &str,
        resizable: bool,
    ) {
        for k in 0..100 {
            assert_eq!(cache.insert(k, k), None, "{what}");
            assert_eq!(cache.get(&k), None, "{what}");
        }
        let mut loads = 0;
        for k in 0..3 {
            for _ in 0..2 {
                let v = cache.get_or_insert_with(k, || {
                    loads += 1;
                    7
                });
                assert_eq!(v, 7, "{what}");
            }
        }
        assert_eq!(loads, 6, "{what}: every load runs");
        let put = cache.compute(1, |_| mmbatch_cache::Compute::Put(1));
        assert!(matches!(put, mmbatch_cache::Computed::Inserted), "{what}");
        let seen = (cache.len(), cache.iter().count(), cache.peek(&1));
        assert_eq!(seen, (0, 0, None), "{what}");
        let st = cache.stats();
        assert_eq!(st.rejected, 107, "{what}: {st:?}");
        {
            let heard = heard.lock().unwrap();
            assert_eq!(heard.len(), 107, "{what}");
            let evicted = mmbatch_cache::RemovalCause::Evicted;
            assert!(heard.iter().all(|&(_, c)| c == evicted), "{what}");
        }
        cache
            .check_invariants()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        if !resizable {
            return;
        }
        // Turned on, it caches; turned off again, it evicts them all.
        cache
            .set_capacity(1000)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        for k in 0..10 {
            cache.insert(k, 1);
        }
        assert_eq!(cache.get(&3), Some(1), "{what}");
        cache
            .set_capacity(0)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let size = (cache.len(), cache.weight(), cache.capacity());
        assert_eq!(size, (0, 0, 0), "{what}");
        cache.insert(3, 1);
        assert_eq!(cache.get(&3), None, "{what}");
        cache
            .check_invariants()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    fn built<T>(r: Result<T, CacheError>) -> T {
        r.unwrap_or_else(|e| panic!("a capacity of 0 builds: {e}"))
    }
    let _hang = mmbatch_testkit::hang_guard("a_capacity_of_zero_stores_nothing");
    assert_eq!(LruCache::<u32, u32>::new(0).capacity(), 0);
    // One shard, or those asked for (a cache turned on later keeps them).
    assert_eq!(LruCache::<u32, u32>::new(0).shards(), 1);
    let four = built(LruCache::<u32, u32>::builder(0).shards(4).build());
    assert_eq!(four.shards(), 4);
    four.set_capacity(100).unwrap();
    assert_eq!((four.shards(), four.capacity()), (4, 100));
    // Exact LRU keeps its one shard, whatever was asked.
    let exact = LruCache::<u32, u32>::builder(0)
        .shards(4)
        .policy(Policy::Lru)
        .batching(false)
        .build();
    assert_eq!(built(exact).shards(), 1);
    let policies = [
        (Policy::Adaptive, true),
        (Policy::Workingset, true),
        (Policy::ActiveInactive, true),
        (Policy::Lirs, true),
        (Policy::LirsTinyLfu, true),
        (Policy::Lru, true),
        (Policy::Lru, false),
    ];
    for (policy, batching) in policies {
        for how in ["capacity", "max_entries", "weighed", "expiring"] {
            let heard = Heard::default();
            let h = heard.clone();
            let listen = move |k, _, cause| h.lock().unwrap().push((k, cause));
            let b = LruCache::<u32, u32>::builder(if how == "max_entries" { 10 } else { 0 })
                .policy(policy)
                .batching(batching)
                .removal_listener(listen);
            let what = format!("{policy:?}, batching {batching}, {how}");
            match how {
                "max_entries" => check(built(b.max_entries(0).build()), &heard, &what, false),
                "weighed" => {
                    let b = b.weigher(|_, v| u64::from(*v));
                    check(built(b.build()), &heard, &what, true);
                }
                "expiring" => {
                    let b = b.time_to_live(std::time::Duration::from_secs(60));
                    check(built(b.build()), &heard, &what, true);
                }
                _ => check(built(b.build()), &heard, &what, true),
            }
        }
    }
}

#[test]
fn two_lists_keep_hot_entries_through_a_scan() {
    // The default hasher, seeded at random: with foldhash's `fast` hash
    // this failed about 1 run in 100 (the unit test
    // `the_default_hash_keeps_hot_entries_through_a_scan_whatever_the_seed`
    // sweeps seeds).
    let cache = LruCache::builder(100).batching(false).build().unwrap();
    for k in 0..50u32 {
        cache.insert(k, k);
        cache.get(&k);
        cache.get(&k);
    }
    // A one-off scan of 1000 keys flushes an exact LRU entirely ...
    let lru = LruCache::builder(100)
        .policy(Policy::Lru)
        .batching(false)
        .build()
        .unwrap();
    for k in 0..50u32 {
        lru.insert(k, k);
        lru.get(&k);
    }
    for k in 1000..2000u32 {
        cache.insert(k, k);
        lru.insert(k, k);
    }
    assert!((0..50).all(|k| !lru.contains_key(&k)));
    // ... but not the two lists: the hot half is active.
    assert!((0..50).all(|k| cache.contains_key(&k)));
    cache.check_invariants().unwrap();
}

/// A cache that is only read goes fast (its lookups skip their barrier)
/// once its shards have had no insertion for a while; an insertion ends
/// it for its shard, and every lookup is right throughout, another thread
/// inserting meanwhile. Where membarrier(2) is refused no shard goes
/// fast, and the test only checks the values.
#[test]
fn lookups_go_fast_when_the_cache_is_only_read() {
    let c: LruCache<u64, u64> = LruCache::builder(16_384).shards(4).build().unwrap();
    for k in 0..4096 {
        c.insert(k, k * 3);
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while c.stats().fast_read_shards < 4 && std::time::Instant::now() < until {
        for k in 0..4096 {
            assert_eq!(c.get(&k), Some(k * 3));
        }
    }
    let fast = c.stats().fast_read_shards;
    if fast == 0 {
        eprintln!("no shard went fast (membarrier refused?): values checked only");
    } else {
        assert_eq!(fast, 4, "every shard only read for 5 s");
        c.insert(0, 0);
        assert_eq!(
            c.stats().fast_read_shards,
            3,
            "the insertion's shard is slow"
        );
        assert_eq!(c.get(&0), Some(0));
    }
    // Lookups on one thread, replacements of the same values on another.
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 0..20u64 {
                c.insert(round % 4096 + 1, (round % 4096 + 1) * 3);
                std::thread::sleep(std::time::Duration::from_millis(3));
            }
        });
        for _ in 0..50 {
            for k in 1..4096 {
                assert_eq!(c.get(&k), Some(k * 3));
            }
        }
    });
    c.check_invariants().unwrap();
}

/// `fast_reads(false)`: a cache only read never skips the barrier, and so
/// never calls membarrier(2) (a process whose seccomp filter kills on it
/// can use the cache), while a default cache read alike goes fast where
/// membarrier is available.
#[test]
fn fast_reads_off_keeps_every_shard_slow() {
    let build = |fast| {
        let c: LruCache<u64, u64> = LruCache::builder(16_384)
            .shards(4)
            .fast_reads(fast)
            .build()
            .unwrap();
        for k in 0..4096 {
            c.insert(k, k);
        }
        c
    };
    let (on, off) = (build(true), build(false));
    let until = std::time::Instant::now() + std::time::Duration::from_millis(200);
    while std::time::Instant::now() < until {
        for k in 0..4096 {
            assert_eq!(on.get(&k), Some(k));
            assert_eq!(off.get(&k), Some(k));
        }
    }
    assert_eq!(off.stats().fast_read_shards, 0);
    eprintln!(
        "default cache: {} of 4 shards fast",
        on.stats().fast_read_shards
    );
    off.insert(0, 1);
    assert_eq!(off.get(&0), Some(1));
}

/// Through the cache's own calls: the lookups its stripes count reach the
/// shard (with `insert` and with `get_or_insert_with`), which finds its
/// active list stale when a loop that started after other requests hits
/// almost nothing, and ages it (see the shard's test of the same loop:
/// about 12% of the loop's requests hit, 0.9% unaged). The hasher is
/// fixed: over 400 hash seeds the median was 13.2% and the lowest 11.3%,
/// but of 4000 the lowest three were 6.7%, 5.9% and 4.4%, and with the
/// default random seed the test failed 1 run in about 1500. Under
/// `Workingset` itself, and under the default (whose duel may take LIRS
/// up for the loop, where the staleness is not what keeps it).
#[test]
fn a_loop_after_other_requests_gets_hits_through_both_insertions() {
    let n = 1024u64;
    let (trace, from) = mmbatch_models::traces::loop_after_other(n);
    for (loader, policy) in [false, true].into_iter().flat_map(|l| {
        [Policy::Workingset, Policy::default()]
            .into_iter()
            .map(move |p| (l, p))
    }) {
        let cache = LruCache::<u64, u64>::builder(n)
            .shards(1)
            .policy(policy)
            .hasher(foldhash::quality::FixedState::default())
            .build()
            .unwrap();
        let mut hits = 0u64;
        for (at, &k) in trace.iter().enumerate() {
            if cache.get(&k).is_some() {
                hits += u64::from(at >= from);
            } else if loader {
                cache.get_or_insert_with(k, || k);
            } else {
                cache.insert(k, k);
            }
        }
        cache.check_invariants().unwrap();
        let ratio = hits as f64 / (trace.len() - from) as f64;
        eprintln!("{policy:?}, loader {loader}: {:.2}% hit", ratio * 100.0);
        assert!(
            ratio > 0.05,
            "{policy:?}, loader {loader}: {:.2}% of the loop's requests hit",
            ratio * 100.0
        );
    }
}

/// `iter` and `drain` give a shard's entries hottest first: under exact
/// LRU, most recently used first, as the `lru` crate's `iter`.
#[test]
fn iteration_is_hottest_first() {
    let cache = LruCache::builder(8)
        .policy(Policy::Lru)
        .batching(false)
        .shards(1)
        .build()
        .unwrap();
    let mut oracle = lru::LruCache::new(std::num::NonZeroUsize::new(8).unwrap());
    for k in 1..=5u32 {
        cache.insert(k, k * 10);
        oracle.put(k, k * 10);
    }
    for k in [2, 4, 1] {
        cache.get(&k);
        oracle.get(&k);
    }
    let want: Vec<(u32, u32)> = oracle.iter().map(|(&k, &v)| (k, v)).collect();
    assert_eq!(cache.iter().collect::<Vec<_>>(), want);
    // A `for` loop over `&cache` is `iter`; past its end it stays done.
    let mut looped = Vec::new();
    for kv in &cache {
        looped.push(kv);
    }
    assert_eq!(looped, want);
    fn fused<I: std::iter::FusedIterator>(i: I) -> I {
        i
    }
    let mut it = fused(cache.iter());
    assert_eq!(it.by_ref().count(), want.len());
    assert_eq!((it.next(), it.next()), (None, None));
    // The iterator's type names no hasher or weigher for a default cache.
    let _: mmbatch_cache::Iter<'_, u32, u32> = cache.iter();
    assert!(!cache.is_empty());
    assert_eq!(cache.drain().collect::<Vec<_>>(), want);
    assert!(cache.is_empty());
}

/// Iterating and retaining while other threads insert and evict: each
/// pass yields a key at most once, with its only value, and the
/// structures agree afterwards.
#[test]
fn iteration_is_weakly_consistent_under_writers() {
    let cache = Arc::new(LruCache::builder(512).shards(4).build().unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let (cache, stop) = (cache.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut k = t;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    cache.insert(k % 4096, (k % 4096) * 2);
                    k += 2;
                }
            })
        })
        .collect();
    for pass in 0..200 {
        let mut seen = std::collections::HashSet::new();
        for (k, v) in cache.iter() {
            assert!(seen.insert(k), "pass {pass}: key {k} twice");
            assert_eq!(v, k * 2, "pass {pass}");
        }
        assert!(seen.len() <= 512);
        if pass % 20 == 0 {
            cache.retain(|k, _| k % 3 != 0);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    cache.check_invariants().unwrap();
    let drained: Vec<_> = cache.drain().collect();
    assert!(drained.iter().all(|&(k, v)| v == k * 2));
    assert!(cache.is_empty());
}

/// An eviction listener hears evictions only; a removal listener hears
/// every way out, each outside every lock: it may use the cache (here it
/// looks the removed key up, and inserts a key of its own).
#[test]
fn listeners_hear_their_causes_outside_the_locks() {
    use mmbatch_cache::RemovalCause;
    use std::sync::{OnceLock, Weak};
    let evictions = Arc::new(Mutex::new(Vec::new()));
    let log = evictions.clone();
    let only = LruCache::builder(2)
        .shards(1)
        .eviction_listener(move |k: u32, v: u32| log.lock().unwrap().push((k, v)))
        .build()
        .unwrap();
    only.insert(1, 10);
    only.insert(1, 11);
    only.remove(&1);
    only.insert(2, 20);
    only.clear();
    assert!(evictions.lock().unwrap().is_empty());

    type Cache = LruCache<u32, u32>;
    let me: Arc<OnceLock<Weak<Cache>>> = Arc::new(OnceLock::new());
    let heard = Arc::new(Mutex::new(Vec::new()));
    let (me2, log) = (me.clone(), heard.clone());
    let cache = Arc::new(
        LruCache::builder(4)
            .shards(1)
            .removal_listener(move |k: u32, v: u32, cause| {
                let cache = me2.get().and_then(Weak::upgrade).unwrap();
                if cause != RemovalCause::Replaced {
                    assert_eq!(cache.peek(&k), None, "{k} heard while still cached");
                }
                if k != 99 {
                    cache.insert(99, 0);
                }
                log.lock().unwrap().push((k, v, cause));
            })
            .build()
            .unwrap(),
    );
    me.set(Arc::downgrade(&cache)).unwrap();
    cache.insert(1, 10);
    cache.insert(1, 11); // replaced: 10
    assert_eq!(cache.remove(&1), Some(11));
    cache.insert(2, 20);
    assert_eq!(cache.retain(|k, _| *k != 2), 1);
    let mut got = heard.lock().unwrap().clone();
    got.retain(|h| h.0 != 99);
    assert_eq!(
        got,
        [
            (1, 10, RemovalCause::Replaced),
            (1, 11, RemovalCause::Removed),
            (2, 20, RemovalCause::Removed),
        ]
    );
    heard.lock().unwrap().clear();
    cache.clear();
    assert_eq!(*heard.lock().unwrap(), [(99, 0, RemovalCause::Cleared)]);
}

/// `remove_if` removes only what its predicate says, and `remove_entry`
/// hands back the key the cache held; each removal is heard once, with
/// or without a listener for every cause, and a predicate that says no
/// (or panics) leaves the entry as it was.
#[test]
fn remove_if_and_remove_entry() {
    use mmbatch_cache::RemovalCause;
    for every_cause in [false, true] {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let log = heard.clone();
        let b = LruCache::<String, u32>::builder(64).shards(1);
        let cache = if every_cause {
            b.removal_listener(move |k, v, c| log.lock().unwrap().push((k, v, c)))
        } else {
            b.eviction_listener(move |k, v| log.lock().unwrap().push((k, v, RemovalCause::Evicted)))
        }
        .build()
        .unwrap();
        cache.insert("a".to_owned(), 1);
        cache.insert("b".to_owned(), 2);
        assert_eq!(cache.remove_if("a", |v| *v == 2), None);
        assert_eq!(cache.peek("a"), Some(1));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cache.remove_if("a", |_| panic!("predicate"))
        }));
        assert!(r.is_err());
        assert_eq!(cache.get("a"), Some(1), "a panicking predicate removed it");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cache.remove_if("a", |_| cache.get("a").is_some())
        }));
        let msg = mmbatch_testkit::panic_message(&*r.expect_err("a lookup from the predicate"));
        assert!(
            msg.contains("would deadlock") && msg.contains("remove_if"),
            "{msg}"
        );
        assert_eq!(cache.peek("a"), Some(1));
        assert_eq!(cache.remove_if("a", |v| *v == 1), Some(1));
        assert_eq!(cache.remove_if("a", |_| true), None);
        assert_eq!(cache.remove_if("zz", |_| unreachable!()), None);
        assert_eq!(cache.remove_entry("b"), Some(("b".to_owned(), 2)));
        assert_eq!(cache.remove_entry("b"), None);
        assert!(cache.is_empty());
        cache.check_invariants().unwrap();
        let want: Vec<(String, u32, RemovalCause)> = if every_cause {
            vec![
                ("a".to_owned(), 1, RemovalCause::Removed),
                ("b".to_owned(), 2, RemovalCause::Removed),
            ]
        } else {
            vec![]
        };
        assert_eq!(*heard.lock().unwrap(), want, "every_cause {every_cause}");
    }
}

/// A composite key looked up by an [`Equivalent`] form that borrows it:
/// every lookup and removal finds the entry by it, on each of `get`'s
/// paths (batched, unbatched, with expiry).
///
/// [`Equivalent`]: mmbatch_cache::Equivalent
#[test]
fn composite_keys_are_found_by_an_equivalent_form() {
    use mmbatch_cache::Equivalent;
    #[derive(Hash)]
    struct Ref<'a>(&'a str, u32);
    impl Equivalent<(String, u32)> for Ref<'_> {
        fn equivalent(&self, key: &(String, u32)) -> bool {
            self.0 == key.0 && self.1 == key.1
        }
    }
    type Cache = LruCache<(String, u32), u64>;
    let builds: [fn() -> Cache; 3] = [
        || LruCache::new(64),
        || LruCache::builder(64).batching(false).build().unwrap(),
        || {
            LruCache::builder(64)
                .time_to_live(std::time::Duration::from_secs(3600))
                .build()
                .unwrap()
        },
    ];
    for build in builds {
        let cache = build();
        for i in 0..8 {
            cache.insert((format!("k{i}"), i), u64::from(i) * 10);
        }
        assert_eq!(cache.get(&Ref("k3", 3)), Some(30));
        assert_eq!(cache.get(&Ref("k3", 4)), None);
        assert_eq!(cache.peek(&Ref("k4", 4)), Some(40));
        assert!(cache.contains_key(&Ref("k5", 5)));
        assert_eq!(cache.remove_if(&Ref("k5", 5), |v| *v == 0), None);
        assert_eq!(cache.remove_if(&Ref("k5", 5), |v| *v == 50), Some(50));
        assert_eq!(cache.remove(&Ref("k6", 6)), Some(60));
        assert_eq!(
            cache.remove_entry(&Ref("k7", 7)),
            Some((("k7".to_owned(), 7), 70))
        );
        assert_eq!(cache.len(), 5);
        cache.check_invariants().unwrap();
    }
}

/// `set_capacity`: refusals name the fix and change nothing; a shard
/// grows past 65535 entries (its index widens) with nothing evicted, and
/// shrinks through the policy, each eviction heard.
#[test]
fn capacity_changes_at_run_time() {
    // A shrink that stopped evicting would spin: the guard ends it.
    let _hang = mmbatch_testkit::hang_guard("capacity_changes_at_run_time");
    let evicted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = evicted.clone();
    // One shard: keys spread unevenly over several, and a shard evicts
    // at its share.
    let cache: LruCache<u32, u32> = LruCache::builder(100)
        .shards(1)
        .eviction_listener(move |_, _| {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .build()
        .unwrap();
    let two: LruCache<u32, u32> = LruCache::builder(100).shards(2).build().unwrap();
    let e = two.set_capacity(1).unwrap_err();
    assert!(e.to_string().contains("fewer shards"), "{e}");
    assert_eq!(two.capacity(), 100);
    // The largest capacity a builder takes, `set_capacity` takes too.
    let max = LruCache::<u32, u32>::MAX_CAPACITY;
    two.set_capacity(max).unwrap();
    assert_eq!(two.capacity(), max);
    let e = cache
        .set_capacity(LruCache::<u32, u32>::MAX_CAPACITY + 1)
        .unwrap_err();
    assert!(e.to_string().contains("smaller capacity"), "{e}");
    assert_eq!(cache.capacity(), 100);
    cache.set_capacity(150_000).unwrap();
    for k in 0..150_000 {
        cache.insert(k, k);
    }
    assert_eq!(cache.len(), 150_000);
    assert_eq!(evicted.load(std::sync::atomic::Ordering::Relaxed), 0);
    cache.check_invariants().unwrap();
    assert_eq!(cache.get(&123_456), Some(123_456));
    cache.set_capacity(10).unwrap();
    assert_eq!(cache.len(), 10);
    assert_eq!(cache.stats().evictions, 149_990);
    assert_eq!(evicted.load(std::sync::atomic::Ordering::Relaxed), 149_990);
    cache.check_invariants().unwrap();
    // The entry that was hit is kept; the policy chose the rest (the
    // filling shard's active entries over its probation's).
    let kept: Vec<u32> = cache.iter().map(|(k, _)| k).collect();
    assert!(kept.contains(&123_456), "{kept:?}");
}

/// Shrinking remembers what it evicts, as evictions for room do: a key
/// the shrink evicted and soon asked for again is known as a refault. (The
/// shadow table, sized down with the capacity, was sized again, and so
/// emptied, at every eviction of the shrink if the check that it had room
/// to grow were loosened.)
#[test]
fn shrinking_keeps_the_shadows_of_what_it_evicts() {
    let _hang = mmbatch_testkit::hang_guard("shrinking_keeps_the_shadows_of_what_it_evicts");
    let cache = LruCache::builder(1000)
        .shards(1)
        .policy(Policy::Workingset)
        .build()
        .unwrap();
    for k in 0..1000u32 {
        cache.insert(k, k);
    }
    assert_eq!(cache.stats().shadows, 0);
    cache.set_capacity(500).unwrap();
    let s = cache.stats();
    assert_eq!(s.evictions, 500);
    // Two-way buckets lose some to collisions (about a tenth here).
    assert!(s.shadows >= 250, "{s:?}");
}

/// Capacity changing under inserting threads: whenever it is read, the
/// cache holds no more than the larger of the capacities around the read,
/// and the structures agree at the end.
#[test]
fn capacity_changes_under_writers() {
    let cache = Arc::new(LruCache::builder(1024).shards(4).build().unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let (cache, stop) = (cache.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut k = t;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    cache.insert(k % 8192, k);
                    k += 2;
                }
            })
        })
        .collect();
    for round in 0..200u64 {
        let c = if round % 2 == 0 { 64 } else { 1024 };
        cache.set_capacity(c).unwrap();
        let before = cache.capacity();
        let weight = cache.weight();
        let after = cache.capacity();
        assert!(
            weight <= before.max(after),
            "round {round}: {weight} over {before}/{after}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    cache.check_invariants().unwrap();
    assert!(cache.len() <= 1024);
}

/// "The shards' total never exceeds `capacity`", read by another thread
/// while the cache is resized: a shrink publishes its capacity once every
/// shard has evicted down to it, a growth before any shard grows. A
/// reader that sees one capacity before and after reading the length,
/// with no resize finished in between, never sees more entries.
#[test]
fn a_resize_never_shows_more_entries_than_capacity() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    let _hang = mmbatch_testkit::hang_guard("a_resize_never_shows_more_entries_than_capacity");
    let cache = Arc::new(LruCache::builder(4096).shards(4).build().unwrap());
    let (stop, resizes) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let reader = {
        let (cache, stop, resizes) = (cache.clone(), stop.clone(), resizes.clone());
        std::thread::spawn(move || {
            let mut seen = 0u64;
            while !stop.load(SeqCst) || seen == 0 {
                let (r1, c1) = (resizes.load(SeqCst), cache.capacity());
                let len = cache.len() as u64;
                let (c2, r2) = (cache.capacity(), resizes.load(SeqCst));
                if r1 == r2 && c1 == c2 {
                    assert!(len <= c1, "{len} entries under a capacity of {c1}");
                    seen += 1;
                }
            }
            seen
        })
    };
    for _ in 0..100 {
        for k in 0..4096u64 {
            cache.insert(k, k);
        }
        for c in [64, 4096] {
            cache.set_capacity(c).unwrap();
            resizes.fetch_add(1, SeqCst);
        }
    }
    stop.store(true, SeqCst);
    assert!(reader.join().unwrap() > 0);
}

/// A warm restart: `save` lists the keys as the policy values them, and
/// a new cache warmed from it through a loader holds the same keys in the
/// same order, active where they were; into a smaller cache the warm
/// loads only what fits, the hottest, and evicts nothing.
#[test]
fn a_saved_cache_warms_a_new_one_in_the_same_order() {
    for policy in [
        Policy::Workingset,
        Policy::ActiveInactive,
        Policy::Lru,
        Policy::Lirs,
        Policy::LirsTinyLfu,
        Policy::Adaptive,
    ] {
        let build = |cap| {
            LruCache::builder(cap)
                .shards(1)
                .policy(policy)
                .build()
                .unwrap()
        };
        let a: LruCache<u32, u32> = build(64);
        let mut x = 7u32;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            // Skewed keys: some are hit again and go active.
            let k = if x % 3 == 0 { x % 20 } else { x % 150 };
            if a.get(&k).is_none() {
                a.insert(k, k * 3);
            }
        }
        let saved = a.save();
        assert_eq!(saved.keys.len(), a.len());
        let keys: Vec<u32> = saved.keys.iter().map(|s| s.key).collect();
        assert_eq!(
            keys,
            a.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            "{policy:?}"
        );
        if policy != Policy::Lru {
            assert!(
                saved.keys.iter().any(|s| s.active),
                "{policy:?}: nothing active"
            );
        }

        let b: LruCache<u32, u32> = build(64);
        let mut loads = 0;
        let n = b.warm(&saved.state, saved.keys.clone(), |&k| {
            loads += 1;
            Some(k * 3)
        });
        assert_eq!(
            (n, loads),
            (saved.keys.len(), saved.keys.len()),
            "{policy:?}"
        );
        assert_eq!(b.save().keys, saved.keys, "{policy:?}: warmed out of order");
        assert_eq!(b.stats().evictions, 0);
        b.check_invariants().unwrap();

        let small: LruCache<u32, u32> = build(10);
        let mut loads = 0;
        let n = small.warm(&saved.state, saved.keys.clone(), |&k| {
            loads += 1;
            Some(k * 3)
        });
        assert_eq!(n, 10, "{policy:?}");
        assert_eq!(loads, 11, "{policy:?}: one load past full, then none");
        let kept: Vec<u32> = small.save().keys.iter().map(|s| s.key).collect();
        assert_eq!(kept, keys[..10], "{policy:?}: not the hottest");
        assert_eq!(small.stats().evictions, 0);
        small.check_invariants().unwrap();
    }
}

/// A warm calls its loader only for what it can place: not for a key the
/// cache holds already (its value stays), and not for the keys of a shard
/// once that shard is full, while it goes on loading the other shards';
/// every shard full, it reads no more of the record.
#[test]
fn a_warm_loads_no_cached_key_and_stops_loading_a_full_shard() {
    use mmbatch_cache::SavedKey;
    let c: LruCache<u32, u32> = LruCache::builder(16).shards(2).build().unwrap();
    c.insert(5, 500);
    c.insert(6, 600);
    let saved: Vec<SavedKey<u32>> = (0..400)
        .map(|key| SavedKey { key, active: false })
        .collect();
    let mut loaded = Vec::new();
    let mut pulled = 0;
    let saved = saved.into_iter().inspect(|_| pulled += 1);
    let n = c.warm(&PolicyState::default(), saved, |&k| {
        loaded.push(k);
        Some(k)
    });
    assert!(
        !loaded.contains(&5) && !loaded.contains(&6),
        "loaded a cached key: {loaded:?}"
    );
    assert_eq!((c.get(&5), c.get(&6)), (Some(500), Some(600)));
    assert_eq!((n + 2, c.len()), (16, 16), "both shards filled");
    // Both full, the warm stops reading the record.
    assert!(pulled < 400, "read all {pulled} saved keys");
    // Each shard is loaded until full, then once more at most (the load
    // that finds it full); 400 keys would fill both many times over.
    assert!(
        loaded.len() <= 16 + 2,
        "{} loads for 16 entries in 2 shards: {loaded:?}",
        loaded.len()
    );
    assert_eq!(c.stats().evictions, 0);
}

/// A key inserted while a warm loads it (here by the loader itself) is
/// the newer value: the warm keeps it, overwrites nothing and removes
/// nothing.
#[test]
fn a_warm_keeps_a_key_inserted_while_it_loads() {
    use mmbatch_cache::SavedKey;
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = heard.clone();
    let c: LruCache<u32, u32> = LruCache::builder(16)
        .removal_listener(move |k, v, cause| log.lock().unwrap().push((k, v, cause)))
        .build()
        .unwrap();
    let saved = vec![SavedKey {
        key: 1,
        active: true,
    }];
    let n = c.warm(&PolicyState::default(), saved, |&k| {
        c.insert(k, 100);
        Some(7)
    });
    assert_eq!((n, c.get(&1)), (0, Some(100)));
    assert_eq!(*heard.lock().unwrap(), []);
}

/// `Policy::Lirs` counts its LIR set's room by weight as well as by
/// entries: in a cache of weight 100, keys weighing 97 and 1 fill the
/// LIR set's 98%, and the next key starts HIR (inactive), though far
/// fewer entries than 98 are cached.
#[test]
fn a_weighted_lirs_cache_fills_its_lir_set_by_weight() {
    let c = LruCache::builder(100)
        .policy(Policy::Lirs)
        .weigher(|_: &u32, v: &u32| u64::from(*v))
        .build()
        .unwrap();
    for (k, weight) in [(1u32, 97u32), (2, 1), (3, 1)] {
        c.insert(k, weight);
    }
    let active: Vec<(u32, bool)> = {
        let mut a: Vec<_> = c
            .save()
            .keys
            .into_iter()
            .map(|s| (s.key, s.active))
            .collect();
        a.sort_unstable();
        a
    };
    assert_eq!(active, [(1, true), (2, true), (3, false)]);
}

/// `Policy::Lirs` counts refaults and their activations as the default
/// does (a key evicted and requested again while its shadow lasts), and
/// new keys placed in the LIR set's room are not activations.
#[test]
fn a_lirs_cache_counts_its_refaults() {
    let c: LruCache<u32, u32> = LruCache::builder(10).policy(Policy::Lirs).build().unwrap();
    for k in (0..20).chain(0..20) {
        if c.get(&k).is_none() {
            c.insert(k, k);
        }
    }
    let st = c.stats();
    assert!(st.refaults > 0 && st.refaults <= st.misses, "{st:?}");
    assert!(st.refault_activations > 0, "{st:?}");
    // Room in the LIR set, then new keys (no shadow): the count stands.
    let cached: Vec<u32> = (0..20).filter(|k| c.contains_key(k)).take(5).collect();
    for k in cached {
        c.remove(&k);
    }
    for k in 100..103 {
        c.insert(k, k);
    }
    assert!(c.stats().refault_activations >= st.refault_activations);
}

/// `Policy::LirsTinyLfu` admits a new key into a full shard only if it
/// has been seen more often lately than the entry it would evict: a
/// one-off scan three times the cache is refused (each key heard as
/// evicted and counted in `not_admitted`; a few get in where the sketch's
/// counters of other keys coincide with all of theirs) and the cached
/// keys stay; a key requested again and again gets in once its count
/// passes the victim's. With a fixed hasher: under the default's random
/// seed 1 run in 300 admitted the last key at its first miss (a seed
/// where other keys' counts reach all of its counters, which the sketch
/// allows, or its short hash matches a shadow's; not traced).
#[test]
fn lirs_tinylfu_admits_a_new_key_only_past_its_victims_count() {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let log = heard.clone();
    let c: LruCache<u32, u32, foldhash::quality::FixedState> = LruCache::builder(100)
        .shards(1)
        .hasher(foldhash::quality::FixedState::default())
        .policy(Policy::LirsTinyLfu)
        .eviction_listener(move |k, _| log.lock().unwrap().push(k))
        .build()
        .unwrap();
    for k in 0..100 {
        c.insert(k, k);
        c.get(&k);
    }
    let admitted = (1000..1300)
        .filter(|k| {
            c.insert(*k, *k);
            c.contains_key(k)
        })
        .count();
    assert!(admitted <= 15, "{admitted} of 300 scan keys admitted");
    let kept = (0..100).filter(|k| c.contains_key(k)).count();
    assert!(kept >= 100 - admitted, "{kept} of 100 cached keys kept");
    let st = c.stats();
    assert_eq!(st.not_admitted as usize, 300 - admitted);
    assert_eq!(st.evictions, 300, "every scan key or its victim heard");
    assert_eq!(heard.lock().unwrap().len(), 300);
    assert_eq!(st.tinylfu_shards, 1);
    // Requested again and again (a read-through's misses), a key is
    // counted each time and gets in.
    let tries = (1..=16)
        .find(|_| {
            c.insert(5000, 0);
            c.contains_key(&5000)
        })
        .expect("a key missed 16 times never admitted");
    assert!(tries >= 2, "admitted at its first miss");
    assert_eq!(c.len(), 100);
    c.check_invariants().unwrap();
}

/// Each policy a cache is built with is the one it reports.
#[test]
fn a_cache_reports_the_policy_it_was_built_with() {
    for policy in [
        Policy::Workingset,
        Policy::ActiveInactive,
        Policy::Lru,
        Policy::Lirs,
        Policy::LirsTinyLfu,
        Policy::Adaptive,
    ] {
        let c: LruCache<u32, u32> = LruCache::builder(8).policy(policy).build().unwrap();
        assert_eq!(c.policy(), policy);
    }
}

/// A listener may resize the cache (it runs after `set_capacity` lets
/// go of its resize lock), and a `retain` whose predicate panics still
/// has every entry it removed heard.
#[test]
fn listeners_may_resize_and_a_panicking_retain_is_heard() {
    use mmbatch_cache::RemovalCause;
    use std::sync::{OnceLock, Weak};
    type Cache = LruCache<u32, u32>;
    let me: Arc<OnceLock<Weak<Cache>>> = Arc::new(OnceLock::new());
    let heard = Arc::new(Mutex::new(Vec::new()));
    let (me2, log) = (me.clone(), heard.clone());
    let cache = Arc::new(
        LruCache::builder(64)
            .shards(1)
            .removal_listener(move |k: u32, _v: u32, cause| {
                if cause == RemovalCause::Evicted {
                    let c = me2.get().and_then(Weak::upgrade).unwrap();
                    // Resizing from the listener of a resize.
                    c.set_capacity(c.capacity()).unwrap();
                }
                log.lock().unwrap().push((k, cause));
            })
            .build()
            .unwrap(),
    );
    me.set(Arc::downgrade(&cache)).unwrap();
    for k in 0..64 {
        cache.insert(k, k);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let cache = cache.clone();
        std::thread::spawn(move || {
            cache.set_capacity(8).unwrap();
            let _ = tx.send(());
        });
    }
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .expect("set_capacity with a resizing listener did not finish in 20 s (a deadlock)");
    assert_eq!(cache.len(), 8);
    assert_eq!(heard.lock().unwrap().len(), 56);

    heard.lock().unwrap().clear();
    let mut calls = 0;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache.retain(|_, _| {
            calls += 1;
            assert!(calls <= 3, "a predicate that fails on its 4th entry");
            false
        })
    }));
    assert!(r.is_err());
    let removed = heard.lock().unwrap().clone();
    assert_eq!(removed.len(), 3, "{removed:?}");
    assert!(removed.iter().all(|h| h.1 == RemovalCause::Removed));
    assert_eq!(cache.len(), 5);
    cache.check_invariants().unwrap();
}

/// Hits of `trace` on a cache of `capacity` under `policy`, from request
/// `from`, its hasher seeded with `hasher`: the seed picks the shards, the
/// duel's sample and the shadows' buckets, so a property test draws it
/// with its other inputs and a failing case replays exactly.
fn hits_from(policy: Policy, capacity: u64, hasher: u64, trace: &[u32], from: usize) -> usize {
    let c = LruCache::builder(capacity)
        .policy(policy)
        .hasher(seeded(hasher))
        .build()
        .unwrap();
    replay(&c, trace, from)
}

/// The hasher of the tests whose outcome the hasher's seed moves: the
/// default's algorithm, both of whose seeds (the shared one, which the
/// default draws once a process, and the per-hasher one) come from `seed`.
fn seeded(seed: u64) -> Seeded {
    // Leaked: a few words a case, and the hasher needs it for 'static.
    let shared = Box::leak(Box::new(foldhash::SharedSeed::from_u64(seed)));
    foldhash::quality::SeedableRandomState::with_seed(seed.rotate_left(32) ^ 0x9e37_79b9, shared)
}

/// [`seeded`]'s hasher.
type Seeded = foldhash::quality::SeedableRandomState;

/// Replays `trace` read-through into `c` (a miss inserts); its hits from
/// request `from` on.
fn replay<S: std::hash::BuildHasher, W: mmbatch_cache::Weigher<u32, u32>>(
    c: &LruCache<u32, u32, S, W>,
    trace: &[u32],
    from: usize,
) -> usize {
    let mut hits = 0;
    for (i, &k) in trace.iter().enumerate() {
        if c.get(&k).is_some() {
            hits += usize::from(i >= from);
        } else {
            c.insert(k, k);
        }
    }
    hits
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The promise of `Policy::Workingset`, `Policy::Lirs` and
    /// `Policy::LirsTinyLfu` on a loop (their docs): over up to 1.5 times the cache, at least half OPT's
    /// hits once it has gone round four times (LRU gets none).
    #[test]
    fn a_loop_just_over_the_cache_keeps_half_of_opt(
        capacity in 64u64..512,
        over in 1.05f64..1.5,
        policy in prop_oneof![Just(Policy::Workingset), Just(Policy::Lirs), Just(Policy::LirsTinyLfu), Just(Policy::Adaptive)],
        hasher in any::<u64>(),
    ) {
        let (hits, opt) = loop_just_over(policy, capacity, over, hasher);
        prop_assert!(hits as f64 >= opt / 2.0, "{hits} hits, OPT {opt:.0}");
    }

    /// A hot half of the cache, each key hit twice, then a one-off scan of
    /// new keys up to nine times the cache: nine in ten hot keys stay.
    #[test]
    fn a_scan_keeps_the_hot_entries(
        capacity in 64u64..512,
        scan in 1u64..10,
        policy in prop_oneof![Just(Policy::Workingset), Just(Policy::Lirs), Just(Policy::LirsTinyLfu), Just(Policy::Adaptive)],
        hasher in any::<u64>(),
    ) {
        let c = LruCache::builder(capacity)
            .policy(policy)
            .hasher(seeded(hasher))
            .build()
            .unwrap();
        let hot = (capacity / 2) as u32;
        for k in 0..hot {
            c.insert(k, k);
            c.get(&k);
            c.get(&k);
        }
        for k in 0..(scan * capacity) as u32 {
            c.insert(1_000_000 + k, k);
        }
        let kept = (0..hot).filter(|k| c.contains_key(k)).count();
        prop_assert!(kept * 10 >= hot as usize * 9, "{kept} of {hot} hot keys kept");
    }

    /// A working set of half the cache, requested at random, that moves to
    /// new keys: once the new set has been requested four times the cache's
    /// size, nine requests in ten hit.
    #[test]
    fn a_shifting_working_set_is_taken_up(
        capacity in 64u64..512,
        seed in any::<u64>(),
        policy in prop_oneof![Just(Policy::Workingset), Just(Policy::Lirs), Just(Policy::Adaptive)],
        hasher in any::<u64>(),
    ) {
        let (hits, counted) = shifting_set(policy, capacity, seed, hasher);
        prop_assert!(hits * 10 >= counted * 9, "{hits} hits of {counted}");
    }
}

proptest! {
    // Caches of thousands of entries, replayed tens of times over in a
    // debug build: 16 cases (PROPTEST_CASES overrides it, proptest 1.2 and
    // on). At 48 the two took 92 s of one thread, the longest run of CI's
    // test step; over 154 cases the second's worst trailed LRU by 0.15
    // points, against its bound of 2.
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// `Policy::Adaptive` keeps the loop's and the shifting set's promises
    /// past its warm-up too, while its duel chooses and its shards change
    /// policy: caches of 2048 to 4096 entries sample 1 key in 8, so the
    /// cases above (64 to 512 entries) end before their first verdict.
    #[test]
    fn adaptive_keeps_the_promises_past_its_warm_up(
        capacity in 2048u64..4096,
        over in 1.05f64..1.5,
        seed in any::<u64>(),
        hasher in any::<u64>(),
    ) {
        let (hits, opt) = loop_just_over(Policy::Adaptive, capacity, over, hasher);
        prop_assert!(hits as f64 >= opt / 2.0, "loop: {hits} hits, OPT {opt:.0}");
        let (hits, counted) = shifting_set(Policy::Adaptive, capacity, seed, hasher);
        prop_assert!(hits * 10 >= counted * 9, "shifting set: {hits} hits of {counted}");
    }

    /// `Policy::Adaptive`'s promise where recency pays (its docs): on keys
    /// whose popularity slides, within 2 points of `Policy::Lru` once 24
    /// times the cache's size has been requested. (Counted from half of
    /// 24 times, one case in about a hundred trailed by 2.1: its shards
    /// took LRU up late in the count; from 24 times, 154 cases trailed by
    /// 0.15 at most.)
    #[test]
    fn adaptive_keeps_what_lru_gets_where_recency_pays(
        capacity in 2048u32..4096,
        seed in any::<u64>(),
        hasher in any::<u64>(),
    ) {
        let trace = sliding_popularity(capacity, 36 * capacity as usize, seed);
        let from = 24 * capacity as usize;
        // One hasher for both: the two caches shard and sample alike.
        let pct = |p| hits_from(p, u64::from(capacity), hasher, &trace, from) as f64 * 100.0
            / (trace.len() - from) as f64;
        let (adaptive, lru) = (pct(Policy::Adaptive), pct(Policy::Lru));
        prop_assert!(adaptive >= lru - 2.0, "adaptive {adaptive:.1}, LRU {lru:.1}");
    }
}

/// A loop over `over` times the cache, twelve times round: the hits of its
/// last eight rounds, and OPT's (which keeps capacity - 1 of the loop's
/// keys and turns one over).
fn loop_just_over(policy: Policy, capacity: u64, over: f64, hasher: u64) -> (usize, f64) {
    let len = (capacity as f64 * over) as u32;
    let trace: Vec<u32> = (0..12).flat_map(|_| 0..len).collect();
    let from = 4 * len as usize;
    let counted = trace.len() - from;
    let opt = counted as f64 * (capacity - 1) as f64 / (len - 1) as f64;
    (hits_from(policy, capacity, hasher, &trace, from), opt)
}

/// A working set of half the cache requested at random, moving to new keys
/// twice: the hits, and the requests counted, from four times the cache's
/// size into the last set.
fn shifting_set(policy: Policy, capacity: u64, seed: u64, hasher: u64) -> (usize, usize) {
    let set = (capacity / 2) as u32;
    let mut x = seed | 1;
    let mut next = move |n: u32| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % u64::from(n)) as u32
    };
    let per = 6 * capacity as usize;
    let mut trace = Vec::new();
    for phase in 0..3u32 {
        trace.extend((0..per).map(|_| phase * 1_000_000 + next(set)));
    }
    let from = 2 * per + 4 * capacity as usize;
    (
        hits_from(policy, capacity, hasher, &trace, from),
        trace.len() - from,
    )
}

/// `Policy::Lirs` after a phase change: a loop just over the cache, then
/// a longer loop over new keys. The new loop's keys must displace the old
/// LIR set (half OPT's hits once it has gone round four times). With the
/// LIR test frozen at the last demotion, no refault of the new loop
/// qualified, nothing was demoted again, and the old set stayed.
#[test]
fn a_lirs_shard_takes_up_a_new_loop() {
    for capacity in [100u32, 400] {
        let old = capacity * 105 / 100;
        let new = capacity * 140 / 100;
        let mut trace: Vec<u32> = (0..20).flat_map(|_| 0..old).collect();
        let from = trace.len() + 4 * new as usize;
        trace.extend((0..12).flat_map(|_| 1_000_000..1_000_000 + new));
        let counted = trace.len() - from;
        let opt = counted as f64 * f64::from(capacity - 1) / f64::from(new - 1);
        let hits = hits_from(Policy::Lirs, u64::from(capacity), 0, &trace, from);
        assert!(
            hits as f64 >= opt / 2.0,
            "capacity {capacity}: {hits} hits of {counted}, OPT {opt:.0}"
        );
    }
}

/// `Policy::Adaptive` runs whichever of `Workingset` and `Lirs` hits more
/// on the cache's own requests, over caches large enough to be sampled
/// (8192 entries, 4 shards: 1 key in 32 simulated): on a loop over twice
/// the cache after other requests it runs LIRS and hits within a point of
/// it (`Workingset` keeps little of such a loop); on new keys requested
/// twice, a twentieth of the cache apart, beside a hot set, it runs
/// `Workingset` and hits within a point of it (LIRS's small resident HIR
/// set lets them go before their second request).
#[test]
fn adaptive_runs_the_policy_that_hits_more() {
    let n = 8192u32;
    let pairs = pairs(n, 24 * n);
    runs_the_policy_that_hits_more(
        n,
        |policy, trace| replay_fixed(policy, n, 4, trace, trace.len() / 2),
        Some(&pairs),
        |st| st.lirs_shards,
    );
}

/// [`adaptive_runs_the_policy_that_hits_more`]'s check, the caches made
/// by `run`: on a loop after a hot set (LIRS wins), `pairs` if given
/// (`Workingset` wins) and sliding popularity (LRU wins), the shape tells
/// the policies apart by 3 points, `Adaptive` hits within a point of the
/// winner, and its 4 shards run it (LIRS's counted by `lirs`).
fn runs_the_policy_that_hits_more(
    n: u32,
    run: impl Fn(Policy, &[u32]) -> (f64, mmbatch_cache::CacheStats),
    pairs: Option<&[u32]>,
    lirs: impl Fn(&mmbatch_cache::CacheStats) -> u64,
) {
    let mut looped: Vec<u32> = (0..4 * n).map(|k| 1_000_000 + k % (n / 2)).collect();
    looped.extend((0..12 * n).map(|k| k % (2 * n)));
    let sliding = sliding_popularity(n, 24 * n as usize, 88_172_645_463_325_252);
    let mut shapes = vec![("loop", &looped[..], Policy::Lirs)];
    shapes.extend(pairs.map(|p| ("pairs", p, Policy::Workingset)));
    shapes.push(("sliding", &sliding[..], Policy::Lru));
    for (name, trace, wins) in shapes {
        let each: Vec<(Policy, f64)> = [Policy::Workingset, Policy::Lirs, Policy::Lru]
            .into_iter()
            .map(|p| (p, run(p, trace).0))
            .collect();
        let (adaptive, st) = run(Policy::Adaptive, trace);
        let better = each.iter().find(|e| e.0 == wins).unwrap().1;
        assert!(
            each.iter().all(|e| e.0 == wins || better > e.1 + 3.0),
            "{name}: the shape tells the policies apart: {each:?}"
        );
        assert!(
            adaptive >= better - 1.0,
            "{name}: adaptive {adaptive:.1}, each {each:?}"
        );
        let running = match wins {
            Policy::Lirs => lirs(&st),
            Policy::Lru => st.lru_shards,
            _ => {
                assert_eq!(
                    st.workingset_shards,
                    4 - st.lirs_shards - st.lru_shards - st.tinylfu_shards,
                    "{name}: every shard runs one of the four"
                );
                st.workingset_shards
            }
        };
        assert_eq!(running, 4, "{name}: shards running {wins:?}: {st:?}");
    }
}

/// A weighted cache runs the default's duel too, its simulations sized
/// by the entries its shards hold (not by its capacity, here in bytes):
/// on the shapes that tell the policies apart, with every entry weighing
/// 4 KiB, `Adaptive` hits within a point of the best and its shards run
/// that policy (LIRS with admission or without, on the loop), as in a
/// cache of entries. (A weighted cache ran `Workingset` alone.)
#[test]
fn a_weighted_cache_runs_the_policy_that_hits_more() {
    let n = 8192u32;
    runs_the_policy_that_hits_more(
        n,
        |policy, trace| replay_weighted(policy, n, 4096, trace, trace.len() / 2),
        None,
        lirs_shards,
    );
}

/// `Policy::Lirs` in a cache whose weights are bytes ranks entries as in
/// a cache of entries: its stamps follow the entries each shard holds,
/// not its capacity in bytes. With every entry weighing 4 KiB, on
/// popularity that slides the weighted cache hits as the unweighted one
/// does, to a point (42.4% both). Stamped in units of a 64th of the
/// byte capacity, every entry of a shard read as used at once: 23.6%.
#[test]
fn a_weighted_lirs_cache_ranks_by_entries_not_bytes() {
    let n = 8192u32;
    let sliding = sliding_popularity(n, 24 * n as usize, 88_172_645_463_325_252);
    let from = sliding.len() / 2;
    let weighted = replay_weighted(Policy::Lirs, n, 4096, &sliding, from).0;
    let entries = replay_fixed(Policy::Lirs, n, 4, &sliding, from).0;
    assert!(
        (weighted - entries).abs() <= 1.0,
        "weighted {weighted:.1}, of entries {entries:.1}"
    );
}

/// LIRS in small weighted shards keeps its LIR set from cold keys: 150
/// hot keys requested at random, each other request a key never seen
/// again, entries weighing 1 to 16 units by key, a capacity of 200
/// entries of the mean weight. In 4 shards (50 entries each) the hot set
/// hits as in one shard. Before, a cold key heavier than the HIR set
/// evicted LIR entries, and a shard that an eviction left more than its
/// HIR share free took the next cold key as LIR: 4 shards hit 32.2%
/// against one shard's 50.0%.
#[test]
fn a_weighted_lirs_cache_in_small_shards_keeps_its_lir_set() {
    let mut x = 88_172_645_463_325_252u64;
    let mut cold = 1_000_000u32;
    let trace: Vec<u32> = (0..60_000)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 2 == 0 {
                (x % 150) as u32
            } else {
                cold += 1;
                cold
            }
        })
        .collect();
    let weigh = |k: u32| 1 + (u64::from(k).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60);
    let from = trace.len() / 2;
    let run = |shards| replay_weighing(Policy::Lirs, 200 * 17 / 2, shards, weigh, &trace, from).0;
    let (one, four) = (run(1), run(4));
    assert!(
        four >= one - 2.0 && four >= 45.0,
        "4 shards {four:.1}, one {one:.1} (at most 50: the hot half)"
    );
}

/// A shard of `Policy::Adaptive` taking up `Workingset` starts from what
/// the duel's simulation of it learned, not from nothing: on two programs
/// interleaved, bursts of a loop over 1.5x the cache and of Zipf over
/// 50x, whose simulations run close enough that the shards change policy
/// now and then, `Adaptive` hits within a point of the better of the two
/// run alone (55.2% against LIRS's 53.9% and Workingset's 50.0%).
/// Learning afresh at each change, it hit 50.8%.
#[test]
fn adaptive_changing_policy_keeps_what_either_gets() {
    let n = 5000u32;
    let trace = loop_and_power_law(n, 600_000, 7);
    let run = |policy| replay_fixed(policy, n, 8, &trace, trace.len() / 5).0;
    let (ws, lirs, adaptive) = (
        run(Policy::Workingset),
        run(Policy::Lirs),
        run(Policy::Adaptive),
    );
    assert!(
        adaptive >= ws.max(lirs) - 1.0,
        "adaptive {adaptive:.1}, Workingset {ws:.1}, LIRS {lirs:.1}"
    );
}

/// A hasher of this file's own (`u32` keys times an odd constant), so
/// that tests asserting on the duel's choice do not move with the
/// standard library's hasher.
#[derive(Clone, Copy, Default)]
struct Mix(u64);

impl std::hash::Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, k: u32) {
        self.0 = (self.0 ^ u64::from(k)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 ^= self.0 >> 29;
    }
}

type Mixed = std::hash::BuildHasherDefault<Mix>;

/// A default cache of `n` entries in 4 shards on [`Mix`].
fn mixed(n: u32) -> LruCache<u32, u32, Mixed> {
    LruCache::builder(u64::from(n))
        .shards(4)
        .hasher(Mixed::default())
        .build()
        .unwrap()
}

/// New keys requested twice, a twentieth of `n` apart, beside a hot set
/// of `n / 2`: the duel gives such a workload `Workingset` (LIRS's small
/// HIR set lets the new keys go before their second request).
fn pairs(n: u32, len: u32) -> Vec<u32> {
    let mut x = 88_172_645_463_325_252u64;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match i % 4 {
                0 | 1 => (x % u64::from(n / 2)) as u32,
                2 => 2_000_000 + i / 4,
                _ => 2_000_000 + (i / 4).saturating_sub(n / 20),
            }
        })
        .collect()
}

/// Shards running LIRS, with admission or without.
fn lirs_shards(st: &mmbatch_cache::CacheStats) -> u64 {
    st.lirs_shards + st.tinylfu_shards
}

/// A warm restart carries what the default's duel chose: a cache that
/// learned `Workingset` on [`pairs`] saves it, and a new cache warmed
/// from that save runs it, where one warmed from the same keys without
/// the state runs LIRS (every duel's first verdict) from its first miss
/// until its own duel has warmed up, and hits less over the next
/// requests.
#[test]
fn a_warm_restart_runs_the_policy_the_saved_cache_chose() {
    let n = 8192u32;
    let trace = pairs(n, 32 * n);
    let (first, next) = trace.split_at(24 * n as usize);
    let a = mixed(n);
    replay(&a, first, 0);
    let st = a.stats();
    assert_eq!((lirs_shards(&st), st.lru_shards), (0, 0), "{st:?}");
    let saved = a.save();
    assert_eq!(saved.state.policy(), Some(Policy::Workingset));
    let warm = |state: &PolicyState| {
        let c = mixed(n);
        let warmed = c.warm(state, saved.keys.iter().cloned(), |&k| Some(k));
        assert_eq!(warmed, saved.keys.len());
        c.check_invariants().unwrap();
        let (early, rest) = next.split_at(1000);
        let hits = replay(&c, early, 0);
        let lirs = lirs_shards(&c.stats());
        let hits = hits + replay(&c, rest, 0);
        (lirs, hits as f64 * 100.0 / next.len() as f64)
    };
    let (lirs, with_state) = warm(&saved.state);
    assert_eq!(lirs, 0, "warmed with the state: shards running LIRS");
    let (lirs, without) = warm(&PolicyState::default());
    assert_eq!(lirs, 4, "warmed from keys alone: shards running LIRS");
    assert!(
        with_state > without + 1.0,
        "hit {with_state:.1}% warmed with the state, {without:.1}% without"
    );
}

/// A cache in use keeps what it learned: warming it from another
/// cache's state changes neither its duel's choice nor, saved again,
/// its statistics, even after a resize renewed its duel's simulations;
/// and a cache saved before its duel warmed up records no choice (every
/// duel starts on LIRS: that is not learned).
#[test]
fn a_warm_leaves_a_cache_in_use_its_own_policy() {
    let n = 8192u32;
    let looped: Vec<u32> = (0..24 * n).map(|i| i % (3 * n / 2)).collect();
    let lirs = mixed(n);
    replay(&lirs, &looped, 0);
    assert_eq!(lirs_shards(&lirs.stats()), 4, "{:?}", lirs.stats());
    let ws = mixed(n);
    replay(&ws, &pairs(n, 24 * n), 0);
    let before = ws.save().state;
    assert_eq!(before.policy(), Some(Policy::Workingset));
    ws.warm(&lirs.save().state, Vec::new(), |&k| Some(k));
    ws.get(&1);
    ws.insert(1, 1);
    assert_eq!(lirs_shards(&ws.stats()), 0, "{:?}", ws.stats());
    assert_eq!(ws.save().state, before);
    // Grown eightfold, the duel samples at another rate with new
    // simulations; its verdict is still what it learned.
    ws.set_capacity(u64::from(8 * n)).unwrap();
    assert_eq!(ws.save().state.policy(), Some(Policy::Workingset));
    ws.warm(&lirs.save().state, Vec::new(), |&k| Some(k));
    ws.insert(2, 2);
    assert_eq!(lirs_shards(&ws.stats()), 0, "{:?}", ws.stats());

    let young = mixed(n);
    replay(&young, &looped[..100], 0);
    assert_eq!(young.save().state.policy(), None);
}

/// A cache of a fixed policy records no duel's choice, and warming one
/// from a default cache's state leaves its policy as built.
#[test]
fn a_fixed_policy_neither_saves_nor_takes_a_duels_choice() {
    let a: LruCache<u32, u32> = LruCache::builder(64).policy(Policy::Lirs).build().unwrap();
    for k in 0..200 {
        a.insert(k % 80, k);
    }
    assert_eq!(a.save().state.policy(), None);
    for p in [Policy::Lirs, Policy::Lru] {
        let b: LruCache<u32, u32> = LruCache::builder(64)
            .policy(Policy::Workingset)
            .build()
            .unwrap();
        // A default cache's state naming `p`, through its bytes.
        let mut bytes = PolicyState::default().to_bytes();
        bytes[1] = if p == Policy::Lirs { 1 } else { 2 };
        let state = PolicyState::from_bytes(&bytes).unwrap();
        assert_eq!(state.policy(), Some(p));
        b.warm(&state, Vec::new(), |&k| Some(k));
        b.insert(1, 1);
        let st = b.stats();
        assert_eq!((st.lirs_shards, st.lru_shards), (0, 0), "{p:?}");
    }
}

/// `PolicyState`'s bytes: a saved state comes back as it was; the
/// verdict's byte is fixed per policy; bytes of the wrong length, another
/// version, no such policy, flags or bytes `to_bytes` never writes, or a
/// number that is not finite are refused with the cause named; numbers
/// outside a cache's bounds are brought within them, so no bytes make a
/// cache misbehave. The HIR share saved is the shards' mean, a share.
#[test]
fn policy_state_bytes_round_trip_and_bad_bytes_are_refused() {
    // A loop over 1.5x the cache: the duel runs LIRS (with admission).
    let a = mixed(8192);
    let looped: Vec<u32> = (0..24 * 8192).map(|i| i % (3 * 4096)).collect();
    replay(&a, &looped, 0);
    let state = a.save().state;
    assert_eq!(state.policy(), Some(Policy::LirsTinyLfu));
    let bytes = state.to_bytes();
    assert_eq!(bytes.len(), PolicyState::BYTES);
    // Layout: version; verdict (0 Workingset, 1 LIRS, 2 LRU, 3 LIRS with
    // admission); flags (1 the workingset's statistics, 2 thrashing, 4
    // LIRS's HIR share, 8 the sample hit); 0; the statistics; the share.
    assert_eq!(
        (bytes[0], bytes[1], bytes[2] & 13, bytes[3]),
        (1, 3, 13, 0),
        "{bytes:?}"
    );
    let hir = f64::from_le_bytes(bytes[28..].try_into().unwrap());
    assert!(
        hir > 0.0 && hir <= 0.02,
        "a mean of 4 shards' shares: {hir}"
    );
    assert_eq!(PolicyState::from_bytes(&bytes), Ok(state));
    for (byte, p) in [(0, Policy::Workingset), (1, Policy::Lirs), (2, Policy::Lru)] {
        let mut b = bytes;
        b[1] = byte;
        let s = PolicyState::from_bytes(&b).unwrap();
        assert_eq!((s.policy(), s.to_bytes()), (Some(p), b));
    }
    let mut calm = bytes;
    calm[2] &= !2;
    assert_eq!(
        PolicyState::from_bytes(&calm).unwrap().to_bytes(),
        calm,
        "not thrashing"
    );
    assert_ne!(PolicyState::from_bytes(&calm), Ok(state));
    assert_eq!(
        PolicyState::from_bytes(&PolicyState::default().to_bytes()),
        Ok(PolicyState::default())
    );
    let refused = |b: &[u8]| PolicyState::from_bytes(b).unwrap_err().to_string();
    assert!(
        refused(&bytes[..35]).contains("long"),
        "{}",
        refused(&bytes[..35])
    );
    let with = |i: usize, v: u8| {
        let mut b = bytes;
        b[i] = v;
        b
    };
    assert!(refused(&with(0, 2)).contains("version"));
    assert!(refused(&with(1, 4)).contains("no such policy"));
    assert!(refused(&with(2, 16 | 13)).contains("flags"));
    assert!(
        refused(&with(2, 2 | 4)).contains("flags"),
        "thrashing, no statistics"
    );
    let mut no_verdict = with(1, 0xff);
    assert!(refused(&no_verdict).contains("flags"), "a hit, no verdict");
    no_verdict[2] &= !8;
    assert_eq!(PolicyState::from_bytes(&no_verdict).unwrap().policy(), None);
    assert!(refused(&with(3, 1)).contains("no part"));
    assert!(
        refused(&with(2, 8 | 4)).contains("no part"),
        "statistics' bytes, no flag"
    );
    assert!(
        refused(&with(2, 8 | 1)).contains("no part"),
        "a share's bytes, no flag"
    );
    let mut nan = bytes;
    nan[28..36].copy_from_slice(&f64::NAN.to_le_bytes());
    assert!(refused(&nan).contains("not finite"));
    nan[28..36].copy_from_slice(&0.01f64.to_le_bytes());
    nan[4..12].copy_from_slice(&f64::INFINITY.to_le_bytes());
    assert!(refused(&nan).contains("not finite"));
    // Out of bounds but finite: taken, within bounds; the caches go on.
    let mut wild = bytes;
    for at in [4, 12, 28] {
        wild[at..at + 8].copy_from_slice(&(-1e300f64).to_le_bytes());
    }
    wild[20..24].copy_from_slice(&7e30f32.to_le_bytes());
    let tamed = PolicyState::from_bytes(&wild).unwrap().to_bytes();
    let f64_at = |i: usize| f64::from_le_bytes(tamed[i..i + 8].try_into().unwrap());
    let f32_at = |i: usize| f32::from_le_bytes(tamed[i..i + 4].try_into().unwrap());
    assert!(
        f64_at(4) > 0.0 && f64_at(4) < 1.0,
        "inactive share {}",
        f64_at(4)
    );
    assert!(f64_at(12) > 0.0, "reach {}", f64_at(12));
    assert!(f32_at(20) <= 1.0, "refault share {}", f32_at(20));
    assert!(
        f64_at(28) > 0.0 && f64_at(28) <= 0.02,
        "HIR share {}",
        f64_at(28)
    );
    let wild = PolicyState::from_bytes(&wild).unwrap();
    for policy in [Policy::Adaptive, Policy::Workingset, Policy::Lirs] {
        let c: LruCache<u32, u32> = LruCache::builder(256)
            .shards(1)
            .policy(policy)
            .build()
            .unwrap();
        c.warm(&wild, Vec::new(), |&k| Some(k));
        for k in 0..5000u32 {
            if c.get(&(k % 700)).is_none() {
                c.insert(k % 700, k);
            }
        }
        assert_eq!(c.len(), 256, "{policy:?}");
        c.check_invariants().unwrap();
    }
}

/// A zigzag (keys 0 to 1.5x the capacity and back, again and again) is
/// served alike by LRU, Workingset and LIRS with admission (two thirds
/// of requests hit, OPT's figure), so `Adaptive`'s simulations tie over
/// it while each half-turn leads lately: the shards must not turn back
/// and forth between policies at each, which loses what each had learned.
/// The bound, 60%, lies between what this hasher's 8 and 16 shards hit
/// where the recent window turned straight back to the policy just left
/// and what they hit now; the hold lasts one recent window, and with
/// fewer shards they still turn once it has passed (docs/cache.md, "No
/// straight turn back").
#[test]
fn adaptive_does_not_turn_back_and_forth_between_tied_policies() {
    let n = 5000u32;
    let len = n * 3 / 2;
    let trace: Vec<u32> = (0..600_000u32)
        .map(|i| {
            let p = i % (2 * len);
            if p < len { p } else { 2 * len - 1 - p }
        })
        .collect();
    for shards in [8, 16] {
        let (hits, stats) = replay_fixed(Policy::Adaptive, n, shards, &trace, trace.len() / 5);
        assert!(
            hits >= 60.0,
            "{shards} shards: {hits:.1}% hit (OPT and LRU 66.7), {} running LRU at the end",
            stats.lru_shards
        );
    }
}

/// Replays `trace` read-through (a miss inserts) into a cache of
/// `capacity` entries and `shards` shards under `policy`, with a fixed
/// hasher, so that caches of different policies sample and shard alike
/// (the seed alone moves a policy's hit ratio by a point or two on these
/// traces). Returns the hit ratio in % from request `from` on, and the
/// cache's statistics.
fn replay_fixed(
    policy: Policy,
    capacity: u32,
    shards: usize,
    trace: &[u32],
    from: usize,
) -> (f64, mmbatch_cache::CacheStats) {
    type Fixed = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
    let c: LruCache<u32, u32, Fixed> = LruCache::builder(u64::from(capacity))
        .shards(shards)
        .policy(policy)
        .hasher(Fixed::default())
        .build()
        .unwrap();
    let hits = replay(&c, trace, from);
    let pct = hits as f64 * 100.0 / (trace.len() - from) as f64;
    (pct, c.stats())
}

/// [`replay_fixed`] in a cache of `capacity` entries of `weight` each,
/// its capacity counted in weight.
fn replay_weighted(
    policy: Policy,
    capacity: u32,
    weight: u64,
    trace: &[u32],
    from: usize,
) -> (f64, mmbatch_cache::CacheStats) {
    replay_weighing(
        policy,
        u64::from(capacity) * weight,
        4,
        move |_| weight,
        trace,
        from,
    )
}

/// [`replay_fixed`] in a cache of `capacity` in weight over `shards`
/// shards, key `k` weighing `weigh(k)`.
fn replay_weighing(
    policy: Policy,
    capacity: u64,
    shards: usize,
    weigh: impl Fn(u32) -> u64 + Send + Sync + 'static,
    trace: &[u32],
    from: usize,
) -> (f64, mmbatch_cache::CacheStats) {
    type Fixed = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
    let c = LruCache::builder(capacity)
        .shards(shards)
        .policy(policy)
        .hasher(Fixed::default())
        .weigher(move |k: &u32, _: &u32| weigh(*k))
        .build()
        .unwrap();
    let hits = replay(&c, trace, from);
    let pct = hits as f64 * 100.0 / (trace.len() - from) as f64;
    (pct, c.stats())
}

/// `n` requests in bursts of 1000, in turn from a loop over `1.5 *
/// capacity` keys and from a power law over `50 * capacity` (rank `50 *
/// capacity * u^10`, `u` uniform: Zipf's with exponent 0.9): two programs
/// interleaved.
fn loop_and_power_law(capacity: u32, n: usize, seed: u64) -> Vec<u32> {
    let mut x = seed | 1;
    let len = capacity + capacity / 2;
    let mut looped = 0u32;
    (0..n)
        .map(|i| {
            if (i / 1000) % 2 == 0 {
                looped += 1;
                (1 << 30) | (looped % len)
            } else {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                (f64::from(50 * capacity) * u.powi(10)) as u32
            }
        })
        .collect()
}

/// `n` requests of keys whose popularity slides: a power law over `4 *
/// capacity` ranks (rank `4 * capacity * u^3`, `u` uniform), each rank's
/// key moving on by one every 20 requests, so that a key grows hotter as
/// the ranks slide towards it and, once past the hottest, is never
/// requested again. Recency pays (the keys just requested are the
/// likeliest next), and a policy protecting what was hot loses to LRU.
fn sliding_popularity(capacity: u32, n: usize, seed: u64) -> Vec<u32> {
    let mut x = seed | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            (f64::from(4 * capacity) * u * u * u) as u32 + (i / 20) as u32
        })
        .collect()
}

/// `Debug` shows what a user set: capacity (as changed at run time),
/// shard count, policy and batching — what a log line of a misbehaving
/// cache needs.
#[test]
fn debug_shows_the_settings() {
    let c: LruCache<u64, u64> = LruCache::builder(1000)
        .shards(2)
        .policy(mmbatch_cache::Policy::ActiveInactive)
        .batching(false)
        .build()
        .unwrap();
    c.set_capacity(500).unwrap();
    let s = format!("{c:?}");
    for part in [
        "LruCache",
        "capacity: 500",
        "shards: 2",
        "policy: ActiveInactive",
        "batching: false",
    ] {
        assert!(s.contains(part), "{part} missing from {s}");
    }
    // A builder too, before `build` (as a log of a refused build shows).
    let b = LruCache::<u64, u64>::builder(1000).policy(mmbatch_cache::Policy::Lru);
    let s = format!("{b:?}");
    for part in ["Builder", "capacity: 1000", "policy: Lru"] {
        assert!(s.contains(part), "{part} missing from {s}");
    }
}

/// With batching off, a hit on an inactive entry hit before activates it
/// at once (`folio_activate` unbatched): `save` reports it active.
#[test]
fn batching_off_activates_an_entry_at_its_second_hit() {
    for policy in [Policy::Workingset, Policy::ActiveInactive] {
        // A fixed hasher: under a random one, key 1000 took a shadow's
        // place (a 10-bit tag) about once in 3000 runs and started active.
        let c = LruCache::builder(64)
            .policy(policy)
            .batching(false)
            .shards(1)
            .hasher(seeded(0))
            .build()
            .unwrap();
        // Past the fill that makes a new shard's first keys active.
        for k in 0..200 {
            c.insert(k, k);
        }
        c.insert(1000, 1);
        let active = |c: &LruCache<u32, u32, Seeded>| {
            c.save()
                .keys
                .iter()
                .find(|s| s.key == 1000)
                .map(|s| s.active)
        };
        assert_eq!(
            active(&c),
            Some(false),
            "{policy:?}: new entries start inactive"
        );
        assert_eq!(c.get(&1000), Some(1));
        assert_eq!(active(&c), Some(false), "{policy:?}: one hit");
        assert_eq!(c.get(&1000), Some(1));
        assert_eq!(active(&c), Some(true), "{policy:?}: the second hit");
    }
}

/// `compute` is one atomic read-modify-write: four threads adding 1 to
/// eight counters 2000 times each lose no increment (with `get` then
/// `insert` they would).
#[test]
fn compute_is_atomic_across_threads() {
    use mmbatch_cache::Compute;
    let _hang = mmbatch_testkit::hang_guard("compute_is_atomic_across_threads");
    let cache: Arc<LruCache<u8, u64>> = Arc::new(LruCache::new(1024));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                for i in 0..2000u32 {
                    let k = ((i + t) % 8) as u8;
                    cache.compute(k, |cur| Compute::Put(cur.copied().unwrap_or(0) + 1));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let total: u64 = (0..8u8).map(|k| cache.get(&k).unwrap()).sum();
    assert_eq!(total, 4 * 2000);
}

/// A `compute` whose function panics, or uses the cache from under the
/// key's shard, leaves the cache as it was and working; the use is named.
#[test]
fn a_compute_that_panics_or_reenters_changes_nothing() {
    use mmbatch_cache::{Compute, Computed};
    let _hang = mmbatch_testkit::hang_guard("a_compute_that_panics_or_reenters_changes_nothing");
    let cache: LruCache<u8, u32> = LruCache::new(64);
    cache.insert(1, 10);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache.compute(1, |_| panic!("the caller's bug"))
    }));
    assert!(r.is_err());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache.compute(1, |_| Compute::Put(cache.get(&1).unwrap_or(0) + 1))
    }));
    let p = r.expect_err("the use of the cache from compute's function");
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(
        msg.contains("would deadlock") && msg.contains("compute"),
        "{msg}"
    );
    assert_eq!(cache.get(&1), Some(10));
    assert_eq!(
        cache.compute(1, |cur| Compute::Put(cur.unwrap() + 1)),
        Computed::Replaced(10)
    );
    assert_eq!(cache.get(&1), Some(11));
    assert_eq!(
        cache.compute(2, |_| Compute::Remove),
        Computed::Unchanged(None)
    );
    cache.check_invariants().unwrap();
}

/// `Policy::Adaptive` where exact LRU pays most: keys swept up and back
/// down (a zigzag over 1.5 times the cache), where exact LRU hits two
/// requests in three and CLOCK one in three. Once its shards take LRU up
/// they keep its order: each hit moved to the head in batches, drained by
/// the insertion or by the lookup that fills one. Without the lookup's
/// drain, 36.3%: a sweep back hits a whole cache with no insertion, the
/// simulation (exact LRU) still leads, and the shards ran CLOCK.
#[test]
fn adaptive_keeps_exact_lrus_hits_on_a_zigzag() {
    let n = 4096u32;
    let sweep = n * 3 / 2;
    let trace: Vec<u32> = (0..24)
        .flat_map(|_| (0..sweep).chain((0..sweep).rev()))
        .collect();
    let (pct, _) = replay_fixed(Policy::Adaptive, n, 4, &trace, trace.len() / 2);
    assert!(pct >= 60.0, "{pct:.1}% hit (exact LRU: 66.7%)");
}

/// An iterator's `Debug` says where it is: the shard and what is left of
/// it (no keys or values, which need not be `Debug`).
#[test]
fn an_iterator_debugs_its_position() {
    let cache: LruCache<u8, u8> = LruCache::builder(8).shards(1).build().unwrap();
    cache.insert(1, 1);
    cache.insert(2, 2);
    let mut it = cache.iter();
    assert_eq!(format!("{it:?}"), "Iter { shard: 0, left_in_shard: 0, .. }");
    it.next();
    assert_eq!(format!("{it:?}"), "Iter { shard: 1, left_in_shard: 1, .. }");
}
