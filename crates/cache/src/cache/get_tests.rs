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
        if !fast.shards.iter().all(|s| s.go_fast()) {
            eprintln!("membarrier refused: no fast read to compare");
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
