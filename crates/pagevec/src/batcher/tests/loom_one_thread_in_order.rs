//! Guarantee: one thread's ops are applied in the order it queued them,
//! even when remote drains take part of its batch.

use loom::{sync::Arc, thread};

use super::{Log, TestBatcher, applied, model};

#[test]
fn one_thread_in_order() {
    model(|| {
        let b = Arc::new(TestBatcher::new(Log::default()));
        let b1 = b.clone();
        let owner = thread::spawn(move || (0..3).for_each(|i| b1.queue((1, i))));
        b.drain_all();
        owner.join().unwrap();
        b.drain_all();
        let mine: Vec<u32> = applied(&b).iter().map(|&(_, i)| i).collect();
        assert_eq!(mine, [0, 1, 2]);
    });
}
