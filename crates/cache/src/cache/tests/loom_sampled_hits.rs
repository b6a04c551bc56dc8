//! `Policy::Adaptive`'s sampled hits: a lookup hands its hit to the duel's
//! simulations at once, or, while another thread feeds them, keeps it in
//! the shard's buffer (each racing lookup claiming a slot of its own) for
//! the shard's next write; either way every sampled access reaches the
//! simulations once. Broken on purpose in two ways, each seen to fail: a
//! hit that finds the simulations busy dropped instead of kept (the
//! simulations saw 4 accesses, not 5), and a slot claimed with a load and
//! a store instead of `fetch_add` (two racing pushes took the same slot
//! and one hit was lost; seen again on the shared `shard::Batch`, which
//! the LRU moves of `Adaptive`'s shards fill the same way).

use loom::{sync::Arc, thread};

use super::{Fixed, cache};
use crate::{LruCache, Policy, cache::shard::Sampled};

#[test]
fn racing_hits_each_reach_the_duel_once() {
    super::model(|| {
        let (cache, _) = cache(4, Policy::Adaptive, true);
        let duel = cache.duel.clone().expect("an adaptive cache has a duel");
        // Three keys in the sample (1 in 8 is): a bounded search (a
        // broken sample fails here rather than searching on for good).
        let k: Vec<u32> = (0..1000)
            .filter(|k| duel.samples(cache.hash(k)))
            .take(3)
            .collect();
        assert_eq!(k.len(), 3, "sampled keys among 1000");
        cache.insert(k[0], 100);
        cache.insert(k[1], 101);
        let cache = Arc::new(cache);
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (c, k) = (cache.clone(), k[i]);
                thread::spawn(move || assert_eq!(c.get(&k), Some(100 + i as u32)))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // A hit kept for the shard's next write reaches the simulations here.
        cache.insert(k[2], 102);
        // Two misses, two hits, one miss.
        assert_eq!(
            duel.seen(),
            5,
            "every sampled access reached the simulations once"
        );
        cache.check_invariants().unwrap();
    });
}

/// Two shards at the duel at once: one's insertion feeds the simulations
/// a sampled miss while the other's lookup hands them a sampled hit. The
/// two meet only at the simulations' `try_lock` (neither waits) and the
/// verdict's relaxed atomics: the lookup that finds them busy keeps its
/// hit in its shard's buffer, which that shard's next write replays; the
/// insertion that finds them busy drops its miss (and its shard's kept
/// hits), tallied by the duel. So here (one hit, under the lookups' cap,
/// into an empty buffer) every sampled access reaches the simulations
/// once or is tallied as dropped by a write section. Broken on purpose
/// in two ways, each seen to fail: the lookup drops its hit when the
/// simulations are busy (4 of 5 accounted for), and the lookup keeps its
/// hit in the buffer even when it replays it at once (6 of 5).
#[test]
fn two_shards_feed_the_duel_at_once() {
    super::model(|| {
        let cache: LruCache<u32, u32, Fixed> = LruCache::builder(4)
            .shards(2)
            .policy(Policy::Adaptive)
            .hasher(Fixed::default())
            .build()
            .unwrap();
        let duel = cache.duel.clone().expect("an adaptive cache has a duel");
        // Two sampled keys of each shard: a bounded search.
        let keys = |shard: usize| -> Vec<u32> {
            (0..4000)
                .filter(|k| {
                    let h = cache.hash(k);
                    duel.samples(h) && cache.shard_index(h) == shard
                })
                .take(2)
                .collect()
        };
        let (zero, one) = (keys(0), keys(1));
        assert_eq!((zero.len(), one.len()), (2, 2), "sampled keys among 4000");
        cache.insert(zero[0], 100);
        cache.insert(one[0], 101);
        let cache = Arc::new(cache);
        let insert = {
            let (c, k) = (cache.clone(), zero[1]);
            thread::spawn(move || {
                c.insert(k, 102);
            })
        };
        let lookup = {
            let (c, k) = (cache.clone(), one[0]);
            thread::spawn(move || assert_eq!(c.get(&k), Some(101)))
        };
        insert.join().unwrap();
        lookup.join().unwrap();
        // Shard 1's next write replays a hit its lookup kept.
        cache.insert(one[1], 103);
        // Two misses, then a miss and a hit at once, then a miss.
        assert_eq!(
            duel.seen() + u64::from(duel.dropped()),
            5,
            "every sampled access reached the simulations once or was dropped \
             by a write ({} dropped)",
            duel.dropped()
        );
        cache.check_invariants().unwrap();
    });
}

/// Two racing pushes fill a batch of two: exactly one of them is told it
/// took the last slot (the lookup that drains it). Broken on purpose by
/// telling a pusher from a load of the length after its push (both can
/// see it full): both drained.
#[test]
fn exactly_one_racing_push_fills_the_batch() {
    super::model(|| {
        let b = Arc::new(crate::cache::shard::Batch::<2>::new());
        let threads: Vec<_> = [3u32, 4]
            .into_iter()
            .map(|v| {
                let b = b.clone();
                thread::spawn(move || b.push(v))
            })
            .collect();
        let filled = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&f| f)
            .count();
        assert_eq!(filled, 1, "one pusher took the last slot");
        let mut kept = Vec::new();
        b.drain(|v| kept.push(v));
        kept.sort_unstable();
        assert_eq!(kept, [3, 4]);
    });
}

#[test]
fn racing_pushes_each_keep_their_hit() {
    super::model(|| {
        let s = Arc::new(Sampled::new());
        let threads: Vec<_> = [3u32, 4]
            .into_iter()
            .map(|h| {
                let s = s.clone();
                thread::spawn(move || s.push(h))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut kept = Vec::new();
        s.drain(|h| kept.push(h));
        kept.sort_unstable();
        assert_eq!(kept, [3, 4], "each racing push kept its hit");
    });
}
