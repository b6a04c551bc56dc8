//! Jobs with arbitrary start, size, alignment, chunk floor and thread
//! count: `plan` returns a split or a clear error — never a panic, a wrap
//! or a division by zero — and small jobs run every unit exactly once.
#![no_main]

use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use mmbatch_ktask::{Job, MAX_THREADS, run};
use mmbatch_testkit::bytes::Bytes;

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let job = Job::new(b.size() as usize, b.size() as usize)
        .align(b.size() as usize)
        .min_chunk(b.size() as usize)
        .max_threads(b.size() as usize);
    let Ok(plan) = job.plan() else { return };
    assert!(plan.threads >= 1 && plan.threads <= MAX_THREADS.min(job.max_threads));
    assert!(plan.chunk >= 1 && plan.chunk % job.align == 0);
    // Walk the chunks of any job while they are few; run small ones.
    let mut at = job.start;
    for (n, r) in plan.chunks().enumerate() {
        assert_eq!(r.start, at);
        assert!(r.end > r.start);
        at = r.end;
        if n > 4096 {
            return;
        }
    }
    assert_eq!(at, job.start + job.size);
    if job.size <= 1 << 16 {
        let units = AtomicUsize::new(0);
        let small = job.clone().max_threads(job.max_threads.min(4));
        run::<()>(&small, |r| {
            units.fetch_add(r.len(), Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        assert_eq!(units.into_inner(), job.size);
    }
});
