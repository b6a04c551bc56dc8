//! Parallel clearing of large memory, as ktask cleared gigantic pages.

use std::convert::Infallible;

use crate::{Job, RunError, run_slice};

/// Least work per thread for memory jobs: 2 MiB, a huge page.
pub const MIN_CHUNK: usize = 2 << 20;

/// Zeroes `buf` on up to `max_threads` threads (0 is taken as 1), in
/// chunks of at least 2 MiB (the ktask series' parallel
/// `clear_gigantic_page`). The
/// threads are started for the call (see [`run_with_undo`](crate::run_with_undo));
/// more than the CPUs the memory's node has adds threads, not bandwidth.
#[doc(alias = "clear_gigantic_page")]
#[doc(alias = "clear_huge_page")]
pub fn clear(buf: &mut [u8], max_threads: usize) {
    clear_aligned(buf, 1, MIN_CHUNK, max_threads);
}

/// The job [`clear_aligned`] runs over `len` bytes.
pub(crate) fn clear_job(len: usize, align: usize, min_chunk: usize, max_threads: usize) -> Job {
    Job::with_all(0, len, align, min_chunk, max_threads.max(1))
}

/// `clear` with chunks aligned to `align` and at least `min_chunk` long
/// (`buf.len()` must be a multiple of `align`).
pub(crate) fn clear_aligned(buf: &mut [u8], align: usize, min_chunk: usize, max_threads: usize) {
    clear_by(buf, &clear_job(buf.len(), align, min_chunk, max_threads));
}

/// Zeroes `buf` by `job` (one over `0..buf.len()`).
pub(crate) fn clear_by(buf: &mut [u8], job: &Job) {
    let r = run_slice::<u8, Infallible>(job, buf, |_, chunk| {
        chunk.fill(0);
        Ok(())
    });
    if let Err(RunError::Job(e)) = r {
        panic!("clear: {e}");
    }
}
