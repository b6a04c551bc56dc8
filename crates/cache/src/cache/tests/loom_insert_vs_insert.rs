//! Two insertions into a full shard at once, with a hit racing them:
//! making room and linking the new entry are one step under the shard's
//! write lock, so the shard never holds more than its capacity, every
//! value ends cached or evicted exactly once, and the shadow left by each
//! eviction is consistent with the refault test (workingset). Broken on
//! purpose by releasing the lock between making room and linking (two
//! write sections in `LruCache::insert`): "shard 0: 2 entries of weight 2
//! over the shard's 1 / 1".

use loom::{sync::Arc, thread};

use super::{cache, seen};
use crate::Policy;

#[test]
fn insert_vs_insert() {
    for policy in [
        Policy::Workingset,
        Policy::ActiveInactive,
        Policy::Lru,
        Policy::Lirs,
        Policy::Adaptive,
    ] {
        super::model(move || {
            let (cache, log) = cache(1, policy, true);
            cache.insert(0, 100);
            let cache = Arc::new(cache);
            let threads: Vec<_> = (1..=2)
                .map(|k| {
                    let c = cache.clone();
                    thread::spawn(move || {
                        assert_eq!(c.insert(k, 100 + k), None);
                    })
                })
                .collect();
            // A reader: sees a whole value or none.
            for k in 0..=2 {
                if let Some(v) = cache.get(&k) {
                    assert_eq!(v, 100 + k);
                }
            }
            for t in threads {
                t.join().unwrap();
            }
            cache.check_invariants().unwrap();
            assert_eq!(cache.len(), 1);
            assert_eq!(seen(&cache, &log, 0..=2), [100, 101, 102], "{policy:?}");
            let st = cache.stats();
            assert_eq!(st.evictions, 2);
            if matches!(policy, Policy::Workingset | Policy::Lirs | Policy::Adaptive) {
                // One shadow per eviction, in a table of two slots for a
                // shard of one entry (two evictions may share a slot).
                assert!((1..=2).contains(&st.shadows), "{st:?}");
            } else {
                assert_eq!(st.shadows, 0);
            }
        });
    }
}
