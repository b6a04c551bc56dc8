//! Two insertions into a full shard at once, with a hit racing them:
//! making room and linking the new entry are one step under the shard's
//! write lock, so the shard never holds more than its capacity, every
//! value ends cached or evicted exactly once, and the shadow left by each
//! eviction is consistent with the refault test (workingset). Broken on
//! purpose by releasing the lock between making room and linking (two
//! write sections in `LruCache::insert`): "shard 0: 2 entries of weight 2
//! over the shard's 1 / 1", under every policy, at one preemption.
//!
//! Every policy at two preemptions. This model runs the lock's slow path
//! (under loom a shard never turns fast: `look_for_quiet` is off), whose
//! protocol, two writers and a reader against a writer included,
//! `loom_shard_lock` checks at the usual bound (three); `loom_fast_read`
//! checks the fast path. Under `Policy::Adaptive` the model's keys (0, 1
//! and 2, by its fixed hasher) are outside the duel's sample (asserted
//! below), so nothing is fed to the duel here: a sampled hit's hand-off is
//! `loom_sampled_hits`' model, at three, in one shard; an insertion
//! feeding the simulations while another shard's lookup feeds them is
//! `loom_sampled_hits::two_shards_feed_the_duel_at_once`, at three. At
//! three this model took about 55 s under `Adaptive` (the loom step's
//! longest run by far), 2.9 s at two; the break above was seen to fail
//! again at two under `Adaptive`.

use loom::{sync::Arc, thread};

use super::{cache, model_at_most, seen};
use crate::Policy;

// One test per policy, so that the test harness runs them side by side
// (as one they took about 200 s of the loom step alone). The lock's
// protocol is the same under each; what runs in the sections, the hit's
// flags and the duel's sampled hits differ.
#[test]
fn insert_vs_insert_workingset() {
    insert_vs_insert(Policy::Workingset);
}

#[test]
fn insert_vs_insert_active_inactive() {
    insert_vs_insert(Policy::ActiveInactive);
}

#[test]
fn insert_vs_insert_lru() {
    insert_vs_insert(Policy::Lru);
}

#[test]
fn insert_vs_insert_lirs() {
    insert_vs_insert(Policy::Lirs);
}

#[test]
fn insert_vs_insert_adaptive() {
    insert_vs_insert(Policy::Adaptive);
}

fn insert_vs_insert(policy: Policy) {
    model_at_most(2, move || race(policy));
}

/// The model: two insertions into a full one-entry shard, and a hit.
fn race(policy: Policy) {
    let (cache, log) = cache(1, policy, true);
    if let Some(duel) = &cache.duel {
        // What the module's doc says of `Adaptive` here.
        assert!(
            (0..=2).all(|k| !duel.samples(cache.hash(&k))),
            "a key of the model is in the duel's sample"
        );
    }
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
}
