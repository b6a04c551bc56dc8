//! Guarantee: while the batcher is disabled (`lru_cache_disable`), no op
//! waits in a batch — including ops queued concurrently with `disable()`.

use loom::{sync::Arc, thread};

use super::{Log, TestBatcher, model};

#[test]
fn disabled_no_op_waits() {
    model(|| {
        crate::loom_model_with_heavy_barrier();
        // N = 2: one op alone would wait in its batch unless drained.
        let b = Arc::new(TestBatcher::new(Log::default()));
        let b1 = b.clone();
        let owner = thread::spawn(move || b1.queue((1, 0)));
        b.disable();
        owner.join().unwrap();
        // Still disabled, and every queue() has returned.
        let s = b.stats();
        assert_eq!(s.pending, 0, "an op waits in a batch while disabled");
        b.queue((0, 0));
        assert_eq!(b.stats().pending, 0);
        b.enable();
        assert!(!b.is_disabled());
    });
}
