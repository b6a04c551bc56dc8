//! Guarantee: an op queued before `drain_all` began is applied when it
//! returns — including another thread's op that happens-before the call.

use loom::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
};

use super::{Log, TestBatcher, is_applied, model};

#[test]
fn drain_all_applies_prior_ops() {
    model(|| {
        let b = Arc::new(TestBatcher::new(Log::default()));
        let queued = Arc::new(AtomicBool::new(false));
        let (b1, q1) = (b.clone(), queued.clone());
        let owner = thread::spawn(move || {
            b1.queue((1, 0));
            q1.store(true, Ordering::Release);
            b1.queue((1, 1)); // may be pending or not; nobody waits for it
        });
        let b2 = b.clone();
        let drainer = thread::spawn(move || {
            // Seeing the flag means (1, 0) was queued before this call.
            let before = queued.load(Ordering::Acquire);
            b2.drain_all();
            if before {
                assert!(is_applied(&b2, (1, 0)), "remote op left waiting");
            }
        });
        b.queue((0, 0));
        b.drain_all();
        assert!(is_applied(&b, (0, 0)), "own op left waiting");
        owner.join().unwrap();
        drainer.join().unwrap();
    });
}
