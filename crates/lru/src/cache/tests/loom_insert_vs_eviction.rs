//! Two insertions racing for the last frame of a full cache: each needs a
//! frame and each pushes the cache over capacity, so both run reclaim,
//! whose evict callbacks take shard locks while the other thread inserts.
//! Every value ends cached or evicted exactly once, the weight is back
//! within the capacity, and the frames, slots and lists agree. Broken on
//! purpose by handing an evicted frame out from inside the evict callback,
//! before the engine has cleared it: "pfn 0 on node 0 Inactive has
//! Flags(0)" (the engine's clear wiped the new entry's LRU bit).

use loom::{model::Builder, sync::Arc, thread};

use super::{cache, seen};
use crate::Policy;

#[test]
fn insert_vs_eviction() {
    for policy in [Policy::ActiveInactive, Policy::Lru] {
        let mut b = Builder::new();
        b.max_branches = 10_000; // six batch kinds per drain
        // Bound 2 whatever LOOM_MAX_PREEMPTIONS says: at 3 this model runs for
        // many minutes.
        b.preemption_bound = Some(2);
        b.check(move || {
            // One entry cached, one spare frame: the second insertion
            // must reclaim a frame.
            let (cache, log) = cache(1, 1, policy, true);
            cache.insert(0, 100);
            let cache = Arc::new(cache);
            let threads: Vec<_> = (1..=2)
                .map(|k| {
                    let c = cache.clone();
                    thread::spawn(move || {
                        assert_eq!(c.insert(k, 100 + k), None);
                        c.engine().lru_add_drain();
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            cache.check_invariants().unwrap();
            // Two evictors may each evict once on seeing the weight over:
            // the documented over-eviction of racing insertions.
            assert!(cache.len() <= 1);
            assert_eq!(seen(&cache, &log, 0..=2), [100, 101, 102], "{policy:?}");
        });
    }
}
