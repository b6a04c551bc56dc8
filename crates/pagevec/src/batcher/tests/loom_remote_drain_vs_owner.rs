//! Guarantee: a remote drain of a slot is safe against its owner queueing:
//! no cell of the ring is read and written without a happens-before edge
//! (loom's `UnsafeCell` tracking checks this), across a ring wrap-around;
//! and the owner's `drain_local` leaves none of its ops waiting, whatever
//! the remote drain took.

use loom::{sync::Arc, thread};

use super::{Log, TestBatcher, applied, model};

#[test]
fn remote_drain_vs_owner() {
    model(|| {
        let b = Arc::new(TestBatcher::new(Log::default()));
        let b1 = b.clone();
        // 3 ops through a ring of 2: cells are reused.
        let owner = thread::spawn(move || {
            (0..3).for_each(|i| b1.queue((1, i)));
            b1.drain_local();
        });
        let b2 = b.clone();
        let remote = thread::spawn(move || b2.drain_all());
        owner.join().unwrap();
        remote.join().unwrap();
        assert_eq!(applied(&b).len(), 3, "drain_local left an op waiting");
    });
}
