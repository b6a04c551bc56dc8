//! A batched activate racing isolate + putback of the same frame: the
//! batch re-checks the LRU bit under the lock, so the frame is moved at
//! most once, never while isolated, and ends on exactly one list with only
//! its allocation reference.

use loom::{sync::Arc, thread};

use super::{engine, list_of, model};
use crate::{Flags, Pfn};

#[test]
fn activate_vs_isolate() {
    model(|| {
        let e = Arc::new(engine(2));
        let p = Pfn(0);
        let e1 = e.clone();
        let activator = thread::spawn(move || {
            e1.activate(p).unwrap();
            e1.lru_add_drain();
        });
        let e2 = e.clone();
        let isolator = thread::spawn(move || {
            if e2.isolate(p).unwrap() {
                e2.putback(p).unwrap();
                e2.lru_add_drain();
            }
        });
        activator.join().unwrap();
        isolator.join().unwrap();
        e.check_invariants().unwrap();
        let st = e.frame_state(p).unwrap();
        assert_eq!(st.refcount, 1, "a queued or isolation reference leaked");
        assert!(st.flags.contains(Flags::LRU));
        assert!(list_of(&e, p).is_some());
    });
}
