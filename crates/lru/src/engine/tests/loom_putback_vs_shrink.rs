//! Putback racing reclaim on the same node: reclaim isolates from the tail
//! by test-and-clear of the LRU bit, so a frame another thread is isolating
//! is skipped, never isolated twice; every frame ends either free (evicted)
//! or on a list with one reference.

use loom::{sync::Arc, thread};

use super::{engine, list_of, model};
use crate::{LruError, Pfn};

#[test]
fn putback_vs_shrink() {
    model(|| {
        let e = Arc::new(engine(2));
        let e1 = e.clone();
        let user = thread::spawn(move || match e1.isolate(Pfn(0)) {
            Ok(true) => {
                e1.putback(Pfn(0)).unwrap();
                e1.lru_add_drain();
            }
            Ok(false) => {} // reclaim holds it
            // Reclaim evicted it first: a correct answer.
            Err(e) => assert_eq!(e, LruError::Free(Pfn(0))),
        });
        let e2 = e.clone();
        let reclaim = thread::spawn(move || e2.shrink(0, 2, |_| true).unwrap());
        user.join().unwrap();
        let stats = reclaim.join().unwrap();
        e.lru_add_drain();
        e.check_invariants().unwrap();
        let mut free = 0;
        for pfn in [Pfn(0), Pfn(1)] {
            let st = e.frame_state(pfn).unwrap();
            match st.refcount {
                0 => free += 1,
                1 => assert!(list_of(&e, pfn).is_some(), "{pfn} lost"),
                n => panic!("{pfn} has {n} references"),
            }
        }
        assert_eq!(free, stats.evicted);
    });
}
