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

/// A weighted cache's duel resizes its simulations, to a new sampling
/// shift, from one shard's write while another shard, which has not yet
/// taken the new shift up (it takes it at its next write), hands the
/// simulations a hit of a key sampled at the old shift only. Whichever
/// comes first, or if the lookup finds the simulations busy (its hit
/// then waits in its shard's buffer), the simulations take no key
/// outside their sample: after the resize they see the insertion's miss
/// alone. Broken on purpose (the lookup's hit taken whatever its key),
/// seen to fail: 2.
#[test]
fn a_resize_and_a_stale_shards_hit_leave_the_sample_whole() {
    super::model(|| {
        // Capacity 2^20 over two shards: a shard holding a key weighing 1
        // says it holds 2^19 (the cache 2^20: a shift of 12).
        let cache = LruCache::builder(1 << 20)
            .shards(2)
            .policy(Policy::Adaptive)
            .hasher(Fixed::default())
            .weigher(|_: &u32, v: &u32| u64::from(*v))
            .build()
            .unwrap();
        let duel = cache.duel.clone().expect("an adaptive cache has a duel");
        // Shard 0's key, sampled at a shift of 3 but not of 12; shard 1's,
        // sampled at 12 (and so at 3): bounded searches.
        let find = |shard: usize, at: u32, not_at: u32| {
            (0..200_000u32).find(|k| {
                let h = cache.hash(k);
                cache.shard_index(h) == shard
                    && duel.samples_at(h, at)
                    && !duel.samples_at(h, not_at)
            })
        };
        let stale = find(0, 3, 12).expect("a key of shard 0 sampled at 3 only");
        let fresh = find(1, 12, 32).expect("a key of shard 1 sampled at 12");
        let filler = (0..100u32)
            .find(|k| {
                let h = cache.hash(k);
                cache.shard_index(h) == 1 && !duel.samples_at(h, 3)
            })
            .expect("a key of shard 1 not sampled");
        // A shard reports what it would hold from what it holds before a
        // write: shard 1 a key weighing 1 (unsampled: nothing reported
        // yet), shard 0 its sampled key (holding nothing before, it
        // reports nothing). The simulations stay at a shift of 3, and so
        // does shard 0 until its next write.
        cache.insert(filler, 1);
        cache.insert(stale, 1 << 19);
        assert_eq!(duel.shift_now(), 3);
        let seen = duel.seen();
        let cache = Arc::new(cache);
        let insert = {
            let c = cache.clone();
            thread::spawn(move || {
                c.insert(fresh, 1);
            })
        };
        let lookup = {
            let c = cache.clone();
            thread::spawn(move || assert_eq!(c.get(&stale), Some(1 << 19)))
        };
        insert.join().unwrap();
        lookup.join().unwrap();
        if duel.dropped() == 0 {
            // A resize to a new shift starts the simulations afresh: they
            // saw the insertion's miss, and the stale hit only if it came
            // before (gone with the old simulations).
            assert_eq!(duel.shift_now(), 12, "shard 1's key says 2^20 entries");
            assert_eq!(duel.seen(), 1, "a key outside the sample reached them");
        } else {
            // The insertion found the simulations busy with the hit, and
            // dropped its miss (and the resize it would have made).
            assert_eq!((duel.shift_now(), duel.seen()), (3, seen + 1));
        }
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
