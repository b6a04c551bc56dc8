//! lru_cache_disable racing a queued activate: once disable has returned
//! and the queueing call has returned, no op waits in any batch.

use loom::{sync::Arc, thread};

use super::{engine, model};
use crate::Pfn;

#[test]
fn disable_vs_queue() {
    model(|| {
        mmbatch_pagevec::loom_model_with_heavy_barrier();
        let e = engine(2);
        e.mark_accessed(Pfn(0)).unwrap();
        let e = Arc::new(e);
        let e1 = e.clone();
        // The second touch queues an activation.
        let toucher = thread::spawn(move || e1.mark_accessed(Pfn(0)).unwrap());
        e.lru_cache_disable();
        toucher.join().unwrap();
        assert_eq!(e.stats().batches.pending, 0, "an op waits while disabled");
        e.lru_cache_enable();
        e.check_invariants().unwrap();
    });
}
