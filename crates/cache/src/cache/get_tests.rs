//! `get` by a fast read (its own path, `LruCache::get`) against `get` by
//! a slow read (`get_batched`): the same lookups leave the same cache.

use super::{CacheStats, LruCache, Policy};

/// A fixed hasher: the two caches compared must shard, index and sample
/// their keys alike.
type Fixed = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

const CAPACITY: u32 = 256;

fn cache(policy: Policy, fast_reads: bool) -> LruCache<u32, u32, Fixed> {
    LruCache::builder(u64::from(CAPACITY))
        .shards(1)
        .policy(policy)
        .hasher(Fixed::default())
        .fast_reads(fast_reads)
        .build()
        .unwrap()
}

/// Makes `c`'s shards fast and tells whether this thread's lookups of it
/// then read fast: not where membarrier is refused, nor on a test thread
/// that owns no stripe of their locks (numbered past them while other
/// tests' threads hold the lower numbers), which shares one and reads
/// slow. A thread claims its number at its first read, which this makes.
fn reads_fast(c: &LruCache<u32, u32, Fixed>) -> bool {
    c.shards.iter().all(|s| {
        drop(s.read());
        s.go_fast() && s.try_read_fast().is_ok()
    })
}

/// A test that found no fast read of `c` ([`reads_fast`]) stops, saying
/// so; it fails if neither membarrier nor the thread's stripe (one of
/// each shard lock's stripes) stood in the way.
fn no_fast_read(c: &LruCache<u32, u32, Fixed>, what: &str) {
    assert!(
        !c.shards
            .iter()
            .all(|s| super::lock::tests::thread_reads_fast(s)),
        "a thread that owns a stripe of each shard, with membarrier, did not read fast"
    );
    eprintln!("no fast read here (membarrier refused, or no stripe owned): {what}");
}

/// The counters, but for which shards read fast.
fn counters(c: &LruCache<u32, u32, Fixed>) -> CacheStats {
    let mut s = c.stats();
    s.fast_read_shards = 0;
    s
}

/// Under every policy, a cache whose lookups read fast and one whose
/// lookups never do, given the same insertions and lookups, hold the same
/// entries and counters after, and under `Adaptive` fed their duels the
/// same sampled accesses: a fast hit counts its reference (24 hot keys,
/// which the insertions after must not evict first), is handed to the
/// duel if sampled, saturated or not (eight rounds of hits: the later
/// ones find the count saturated), and is counted as a hit, a fast miss
/// as a miss. Fewer hot keys than a batch of LRU moves, so that neither
/// cache drains one in the lookups (a fast lock leaves that to the next
/// insertion).
#[test]
fn fast_and_slow_reads_leave_the_same_cache() {
    for policy in [
        Policy::Workingset,
        Policy::ActiveInactive,
        Policy::Lirs,
        Policy::LirsTinyLfu,
        Policy::Lru,
        Policy::Adaptive,
    ] {
        let (slow, fast) = (cache(policy, false), cache(policy, true));
        for c in [&slow, &fast] {
            for k in 0..CAPACITY {
                c.insert(k, k + 1);
            }
        }
        if !reads_fast(&fast) {
            no_fast_read(&fast, "not compared");
            return;
        }
        let seen_before = fast.duel.as_ref().map(|d| d.seen());
        for _ in 0..8 {
            for k in (0..24).map(|i| i * 10).chain(1000..1010) {
                let got = fast.get(&k);
                assert_eq!(got, slow.get(&k), "{policy:?}: key {k}");
                assert_eq!(got, (k < CAPACITY).then_some(k + 1));
            }
        }
        assert_eq!(
            fast.stats().fast_read_shards,
            1,
            "{policy:?}: no write, still fast"
        );
        assert_eq!(slow.stats().fast_read_shards, 0);
        if let (Some(before), Some(duel)) = (seen_before, &fast.duel) {
            assert!(
                duel.seen() > before,
                "{policy:?}: sampled hits reached the duel"
            );
            assert_eq!(
                duel.seen(),
                slow.duel.as_ref().unwrap().seen(),
                "{policy:?}"
            );
        }
        for c in [&slow, &fast] {
            for k in CAPACITY..CAPACITY * 7 / 4 {
                c.insert(k, k + 1);
            }
        }
        for k in 0..CAPACITY * 7 / 4 {
            assert_eq!(fast.peek(&k), slow.peek(&k), "{policy:?}: key {k}");
        }
        let hot_kept = (0..24).filter(|i| fast.peek(&(i * 10)).is_some()).count();
        assert!(
            hot_kept >= 20,
            "{policy:?}: {hot_kept} of the 24 hit keys kept"
        );
        assert_eq!(counters(&fast), counters(&slow), "{policy:?}");
        fast.check_invariants().unwrap();
    }
}

/// A clock the test moves.
struct Manual(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl super::Clock for Manual {
    fn now(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// Only the batched lookup of a cache without expiry takes the fast
/// read's path: with its shards made fast (where they can be), an
/// expiring cache still misses an expired entry, and an unbatched LRU
/// cache still moves a hit to the head (its next eviction takes the entry
/// after it).
#[test]
fn expiring_and_unbatched_lookups_keep_their_own_paths() {
    let ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let expiring: LruCache<u32, u32, Fixed> = LruCache::builder(64)
        .shards(1)
        .hasher(Fixed::default())
        .time_to_live(std::time::Duration::from_millis(10))
        .clock(Manual(ms.clone()))
        .build()
        .unwrap();
    expiring.insert(1, 1);
    let unbatched: LruCache<u32, u32, Fixed> = LruCache::builder(4)
        .shards(1)
        .policy(Policy::Lru)
        .hasher(Fixed::default())
        .batching(false)
        .build()
        .unwrap();
    for k in 0..4 {
        unbatched.insert(k, k);
    }
    // Fast where it can be: a lookup that took the fast read's path
    // would skip expiry and the move either way.
    for s in expiring.shards.iter().chain(unbatched.shards.iter()) {
        let _ = s.go_fast();
    }
    assert_eq!(expiring.get(&1), Some(1));
    ms.store(20, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(expiring.get(&1), None, "expired, read fast or not");
    assert_eq!(unbatched.get(&0), Some(0));
    unbatched.insert(4, 4);
    assert_eq!(unbatched.peek(&0), Some(0), "the hit moved 0 to the head");
    assert_eq!(unbatched.peek(&1), None, "1 was the least recent");
}

/// Every fast lookup returns what the cache holds, those that look for
/// quiet (one in 1024 of a stripe's hits, and of its misses) too: the
/// 2048th and 3072nd hits find their entries' counts saturated (no duel
/// samples a key under `Workingset`), and so look on the usual path.
#[test]
fn fast_lookups_that_look_for_quiet_return_their_value() {
    let c = cache(Policy::Workingset, true);
    for k in 0..CAPACITY {
        c.insert(k, k + 1);
    }
    if !reads_fast(&c) {
        no_fast_read(&c, "not checked");
        return;
    }
    for n in 0..3 * 1024 {
        let k = n % CAPACITY;
        assert_eq!(c.get(&k), Some(k + 1), "hit {n}");
        assert_eq!(c.get(&(k + CAPACITY)), None, "miss {n}");
    }
    assert_eq!(c.stats().fast_read_shards, 1, "still fast");
    assert_eq!((c.stats().hits, c.stats().misses), (3 * 1024, 3 * 1024));
}
