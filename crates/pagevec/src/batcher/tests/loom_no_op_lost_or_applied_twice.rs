//! Guarantee: every queued op is applied exactly once, whether by its
//! owner's full batch, a remote `drain_all`, or the final drain.

use loom::{sync::Arc, thread};

use super::{Log, TestBatcher, applied, model};

#[test]
fn no_op_lost_or_applied_twice() {
    model(|| {
        let b = Arc::new(TestBatcher::new(Log::default()));
        let b1 = b.clone();
        let t1 = thread::spawn(move || (0..3).for_each(|i| b1.queue((1, i))));
        let b2 = b.clone();
        let t2 = thread::spawn(move || {
            b2.queue((2, 0));
            b2.drain_all();
        });
        t1.join().unwrap();
        t2.join().unwrap();
        b.drain_all();
        let mut ops = applied(&b);
        ops.sort_unstable();
        assert_eq!(ops, [(1, 0), (1, 1), (1, 2), (2, 0)]);
        let s = b.stats();
        assert_eq!((s.ops, s.pending), (4, 0));
        assert_eq!(s.lock_acquisitions, s.batches + s.drains);
    });
}
