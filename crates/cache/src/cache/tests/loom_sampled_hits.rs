//! `Policy::Adaptive`'s sampled hits: lookups racing under a shard's read
//! lock each keep their hit in the shard's buffer (each claims a slot of
//! its own), and the shard's next write hands every one to the duel's
//! simulations once. Broken on purpose by claiming a slot with a load and
//! a store instead of `fetch_add`: two racing lookups took the same slot,
//! one hit was lost, and the simulations saw 4 accesses, not 5.

use loom::{sync::Arc, thread};

use super::cache;
use crate::Policy;

#[test]
fn racing_hits_each_reach_the_duel_once() {
    super::model(|| {
        let (cache, _) = cache(4, Policy::Adaptive, true);
        let duel = cache.duel.clone().expect("an adaptive cache has a duel");
        // Three keys in the sample (1 in 8 is).
        let k: Vec<u32> = (0..)
            .filter(|k| duel.samples(cache.hash(k)))
            .take(3)
            .collect();
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
        assert_eq!(duel.seen(), 2, "the hits wait for the shard's next write");
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
