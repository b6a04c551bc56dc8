//! The split is the kernel's, and runs keep their promises.

use std::sync::{
    Mutex,
    atomic::{AtomicUsize, Ordering},
};

use mmbatch_ktask::{
    Job, JobError, LOAD_BALANCE_FACTOR, Mapping, RunError, clear, populate, run, run_slice,
    run_with_undo,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn chunks_cover_exactly_once_aligned_with_the_formula(
        align in 1usize..64,
        start_units in 0usize..1000,
        size_units in 0usize..5000,
        min_chunk in 1usize..2000,
        max_threads in 1usize..64,
    ) {
        let job = Job::new(start_units * align, size_units * align).align(align).min_chunk(min_chunk).max_threads(max_threads);
        let plan = job.plan().unwrap();
        let works = (job.size / min_chunk.max(align)).max(1);
        prop_assert_eq!(plan.threads, works.min(max_threads));
        let want_chunk = (job.size / (plan.threads * LOAD_BALANCE_FACTOR)).max(min_chunk).max(1).div_ceil(align) * align;
        prop_assert_eq!(plan.chunk, want_chunk);
        let chunks: Vec<_> = plan.chunks().collect();
        // Exact cover, in order, no overlap.
        let mut at = job.start;
        for c in &chunks {
            prop_assert_eq!(c.start, at);
            prop_assert!(c.end > c.start);
            at = c.end;
            // Aligned, and ending on a chunk multiple (or the job's end).
            prop_assert_eq!(c.start % align, 0);
            prop_assert!(c.end % plan.chunk == 0 || c.end == job.start + job.size);
            prop_assert!(c.len() <= plan.chunk);
        }
        prop_assert_eq!(at, job.start + job.size);
        // Only the first and last chunks may be short of min_chunk.
        for c in chunks.iter().skip(1).rev().skip(1) {
            prop_assert!(c.len() >= min_chunk.min(plan.chunk));
        }
    }

    #[test]
    fn run_slice_hands_each_item_in_the_job_to_one_chunk(
        len in 0usize..3000,
        start in 0usize..3000,
        size in 0usize..3000,
        min_chunk in 1usize..500,
        max_threads in 1usize..5,
    ) {
        let mut items: Vec<(usize, u8)> = (0..len).map(|i| (i, 0)).collect();
        let job = Job::new(start, size).min_chunk(min_chunk).max_threads(max_threads);
        let r = run_slice::<_, ()>(&job, &mut items, |at, chunk| {
            for (k, (i, visits)) in chunk.iter_mut().enumerate() {
                assert_eq!(*i, at + k);
                *visits += 1;
            }
            Ok(())
        });
        if start + size > len {
            let past = matches!(r, Err(RunError::Job(JobError::PastSlice { .. })));
            prop_assert!(past, "{:?}", r);
            prop_assert!(items.iter().all(|(_, v)| *v == 0));
        } else {
            prop_assert!(r.is_ok());
            for (i, v) in &items {
                prop_assert_eq!(*v, u8::from((start..start + size).contains(i)));
            }
        }
    }
}

#[test]
fn invalid_jobs_are_clear_errors() {
    let mut job = Job::new(0, 100);
    job.max_threads = 0;
    assert_eq!(job.plan(), Err(JobError::ZeroThreads));
    job.max_threads = 2;
    job.align = 8;
    let e = job.plan().unwrap_err();
    assert!(e.to_string().contains("round it to 104"), "{e}");
}

#[test]
fn first_error_stops_and_undoes_exactly_the_finished_chunks() {
    let job = Job::new(0, 64).align(1).min_chunk(4).max_threads(2);
    let done = Mutex::new(Vec::new());
    let undone = Mutex::new(Vec::new());
    let r = run_with_undo(
        &job,
        |r| {
            if r.start == 16 {
                return Err(format!("chunk at {} failed", r.start));
            }
            done.lock().unwrap().push(r.start);
            Ok(())
        },
        |r| undone.lock().unwrap().push(r.start),
    );
    assert!(
        matches!(&r, Err(RunError::Failed(e)) if e == "chunk at 16 failed"),
        "{r:?}"
    );
    let (mut d, mut u) = (done.into_inner().unwrap(), undone.into_inner().unwrap());
    d.sort_unstable();
    u.sort_unstable();
    assert_eq!(d, u);
    assert!(!d.contains(&16));
}

#[test]
fn a_panic_in_a_helper_reaches_the_caller_after_the_others_stop() {
    let ran = AtomicUsize::new(0);
    let job = Job::new(0, 1 << 20)
        .align(1)
        .min_chunk(1 << 10)
        .max_threads(4);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run::<()>(&job, |r| {
            ran.fetch_add(1, Ordering::Relaxed);
            assert!(r.start != 3 << 16, "boom in a chunk");
            Ok(())
        })
    }));
    let payload = r.unwrap_err();
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(msg.contains("boom"), "{msg}");
    assert!(ran.load(Ordering::Relaxed) < job.plan().unwrap().chunks().count() + 4);
}

#[test]
fn clear_and_populate_do_their_work() {
    let mut buf = vec![7u8; (8 << 20) + 12345];
    clear(&mut buf, 4);
    assert!(buf.iter().all(|b| *b == 0));
    let mut m = Mapping::anonymous(16 << 20).unwrap();
    // SAFETY: our own fresh mapping.
    unsafe { populate(m.as_ptr(), m.len(), 2) }.unwrap();
    let mut v = vec![0u8; m.len() / 4096];
    // SAFETY: our mapping, and a byte per page in `v`.
    let r = unsafe { libc::mincore(m.as_ptr().cast(), m.len(), v.as_mut_ptr()) };
    assert_eq!(r, 0);
    assert!(v.iter().all(|r| r & 1 == 1), "every page populated");
    assert!(
        m.as_mut_slice()
            .expect("read-write")
            .iter()
            .all(|b| *b == 0)
    );
    // A misaligned length is a clear error, and nothing is touched.
    // SAFETY: as above.
    let e = unsafe { populate(m.as_ptr(), 4096 + 1, 2) }.unwrap_err();
    assert!(e.to_string().contains("multiple of align"), "{e}");
    // It says what was asked of populate, not only of the job behind it.
    assert!(e.to_string().contains("range to populate"), "{e}");
    use std::error::Error as _;
    assert!(e.source().is_some(), "the job's error is its source");
}
