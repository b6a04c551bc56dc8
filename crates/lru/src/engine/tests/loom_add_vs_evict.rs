//! `lru_add` racing reclaim's eviction of the same frame: the add either
//! comes before the freeze (refused: in use), during it (refused:
//! `Reclaiming`) or after the frame is free (it goes back on a list with
//! its flags), never into a frame whose flags the eviction then resets.
//! Broken on purpose (the refcount freed before the flags reset), loom
//! finds an immediate add that is undone: the frame linked with no
//! flags.

use loom::{sync::Arc, thread};

use super::{list_of, model};
use crate::{Config, Engine, LruError, Modes, Pfn};

fn add_vs_evict(modes: Modes) {
    model(move || {
        let e = Engine::new(Config::new(1).modes(modes)).unwrap();
        e.lru_add(Pfn(0)).unwrap();
        e.lru_add_drain();
        let e = Arc::new(e);
        let e1 = e.clone();
        let adder = thread::spawn(move || match e1.lru_add(Pfn(0)) {
            Ok(()) => true,
            Err(LruError::InUse { .. } | LruError::Reclaiming(_)) => false,
            Err(other) => panic!("{other}"),
        });
        let e2 = e.clone();
        let reclaim = thread::spawn(move || e2.shrink(0, 1, |_| true).unwrap());
        let added = adder.join().unwrap();
        let stats = reclaim.join().unwrap();
        // The adder's op waits in its own thread's batch.
        e.lru_add_drain_all();
        e.check_invariants().unwrap();
        let st = e.frame_state(Pfn(0)).unwrap();
        if added {
            // Added after the eviction freed it.
            assert_eq!(stats.evicted, 1);
            assert_eq!(st.refcount, 1);
            assert!(
                list_of(&e, Pfn(0)).is_some(),
                "the added frame is on no list"
            );
        } else if stats.evicted == 1 {
            assert_eq!(st.refcount, 0, "evicted, not added: free");
        }
    });
}

/// An add applied at once (under the lruvec lock): the case the
/// deliberately broken order fails.
#[test]
fn add_vs_evict_immediate() {
    add_vs_evict(Modes::IMMEDIATE);
}

/// An add queued in its thread's batch.
#[test]
fn add_vs_evict_batched() {
    add_vs_evict(Modes::BATCHED);
}
