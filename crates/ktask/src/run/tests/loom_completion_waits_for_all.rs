//! The caller's wait returns only after every thread finished its chunks.

use loom::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    thread,
};

use super::{super::Shared, model};

#[test]
fn completion_waits_for_all() {
    model(|| {
        let shared = Arc::new(Shared::<()>::new(vec![0..1, 1..2]));
        let finished_chunks = Arc::new(AtomicUsize::new(0));
        let (s2, c2) = (shared.clone(), finished_chunks.clone());
        let helper = thread::spawn(move || {
            s2.work(&|_| {
                c2.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
        });
        let c1 = finished_chunks.clone();
        shared.work(&|_| {
            c1.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
        shared.wait(2);
        // Every chunk's work happens-before the wait's return.
        assert_eq!(finished_chunks.load(Ordering::Relaxed), 2);
        helper.join().unwrap();
    });
}
