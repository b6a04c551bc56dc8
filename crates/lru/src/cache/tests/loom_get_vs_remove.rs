//! A hit racing the removal and re-insertion of its key while an insertion
//! elsewhere runs reclaim: the hit sees the old value, the new one or
//! none; reclaim, which may have taken the key from the old frame's slot
//! before the removal, must not evict the new entry that re-uses the key
//! (it matches the frame, not just the key); and every frame ends free,
//! holding an entry, or awaiting reclaim. Broken on purpose by matching
//! the key only: "pfn 1 is lost". Batching off: the batches only add
//! interleavings already covered by the engine's models and
//! `insert_vs_eviction`, and with them this model runs for minutes.

use loom::{model::Builder, sync::Arc, thread};

use super::{cache, seen};
use crate::Policy;

#[test]
fn get_vs_remove() {
    let mut b = Builder::new();
    b.max_branches = 10_000; // six batch kinds per drain
    // Bound 2 whatever LOOM_MAX_PREEMPTIONS says: at 3 this model runs for
    // many minutes.
    b.preemption_bound = Some(2);
    b.check(|| {
        // Full (2 of 2) with no spare frame to speak of.
        let (cache, log) = cache(2, 1, Policy::ActiveInactive, false);
        cache.insert(0, 100);
        cache.insert(1, 101);
        cache.engine().lru_add_drain();
        let cache = Arc::new(cache);
        let c = cache.clone();
        let reader = thread::spawn(move || {
            if let Some(v) = c.get(&0) {
                assert!(v == 100 || v == 200, "{v}");
            }
        });
        let c = cache.clone();
        let remover = thread::spawn(move || {
            let old = c.remove(&0);
            assert!(old.is_none() || old == Some(100));
            c.insert(0, 200);
            c.engine().lru_add_drain();
            old
        });
        // Over capacity: reclaim evicts the old frame of key 0 or key 1.
        cache.insert(2, 102);
        cache.engine().lru_add_drain();
        reader.join().unwrap();
        let removed = remover.join().unwrap();
        cache.engine().lru_add_drain_all();
        cache.check_invariants().unwrap();
        assert!(cache.len() <= 2);
        // Every value once: cached or evicted, except 100 if the remover
        // took it.
        let want: &[u32] = if removed.is_some() {
            &[101, 102, 200]
        } else {
            &[100, 101, 102, 200]
        };
        assert_eq!(seen(&cache, &log, 0..=2), want);
    });
}
