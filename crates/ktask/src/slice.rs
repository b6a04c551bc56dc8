//! [`run_slice`]: a [`Job`] over a slice, each chunk handed to its thread
//! as `&mut [T]`, so a caller needs no raw pointer of its own to split
//! its data across threads.

use std::ops::Range;

use crate::{Job, JobError, RunError, run::run_bound};

/// The slice's items, reached by every thread through disjoint chunks.
struct Items<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: the threads only reach the items through `chunk`, whose ranges
// are disjoint (each of the plan's chunks is claimed once), so sharing
// `Items` sends each item's `&mut` to one thread: `T: Send` suffices, as
// for `&mut [T]: Send`.
unsafe impl<T: Send> Sync for Items<T> {}

impl<T> Items<T> {
    /// The items of `range`.
    ///
    /// # Safety
    /// `range` is within `0..len`, and no other reference to its items is
    /// live while the returned one is.
    #[allow(clippy::mut_from_ref)]
    unsafe fn chunk(&self, range: Range<usize>) -> &mut [T] {
        debug_assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: `range.start <= len` (caller's promise), so the offset
        // stays in the slice `ptr` came from.
        let first = unsafe { self.ptr.add(range.start) };
        // SAFETY: `range` is in bounds of that slice (caller's promise),
        // which `run_slice_with_undo` holds borrowed mutably for as long
        // as `self` lives; no other reference covers it (caller's
        // promise).
        unsafe { std::slice::from_raw_parts_mut(first, range.len()) }
    }
}

/// Runs `f` over `items` split as `job` splits its range, in parallel;
/// see [`run_slice_with_undo`].
#[doc(alias = "par_chunks_mut")]
pub fn run_slice<T: Send, E: Send>(
    job: &Job,
    items: &mut [T],
    f: impl Fn(usize, &mut [T]) -> Result<(), E> + Sync,
) -> Result<(), RunError<E>> {
    run_slice_with_undo(job, items, f, |_, _| {})
}

/// [`run_with_undo`](crate::run_with_undo) over a slice: the job's units
/// are `items`' indices, and `f` gets each chunk's first index and its
/// items, `&mut`, on whichever thread claimed it. If a chunk fails (or
/// panics), no new chunk starts, and once every thread has stopped `undo`
/// gets exactly the chunks that completed, on the caller's thread.
///
/// # Errors
/// [`RunError::Job`] for a job that cannot be planned or that ends past
/// `items` ([`JobError::PastSlice`]), before any chunk runs;
/// [`RunError::Failed`] with the first chunk's error.
///
/// # Panics
/// With the first chunk's panic, once the completed chunks are undone;
/// else with the first panic of `undo`.
///
/// ```
/// use mmbatch_ktask::{Job, RunError, run_slice_with_undo};
///
/// // Doubles every item, all or nothing: the chunk holding a negative
/// // item fails, and the chunks that had finished are halved back.
/// let mut items: Vec<i64> = (0..10_000).collect();
/// items[7_000] = -1;
/// let job = Job::new(0, items.len()).min_chunk(1000).max_threads(4);
/// let r = run_slice_with_undo(
///     &job,
///     &mut items,
///     |start, chunk| {
///         if let Some(i) = chunk.iter().position(|x| *x < 0) {
///             return Err(start + i);
///         }
///         chunk.iter_mut().for_each(|x| *x *= 2);
///         Ok(())
///     },
///     |_, chunk| chunk.iter_mut().for_each(|x| *x /= 2),
/// );
/// assert!(matches!(r, Err(RunError::Failed(7_000))));
/// let mut before: Vec<i64> = (0..10_000).collect();
/// before[7_000] = -1;
/// assert_eq!(items, before);
/// ```
#[doc(alias = "padata_do_multithreaded")]
pub fn run_slice_with_undo<T: Send, E: Send>(
    job: &Job,
    items: &mut [T],
    f: impl Fn(usize, &mut [T]) -> Result<(), E> + Sync,
    undo: impl Fn(usize, &mut [T]) + Sync,
) -> Result<(), RunError<E>> {
    job.plan()?;
    // No overflow: `plan` checked it.
    let end = job.start + job.size;
    if end > items.len() {
        return Err(RunError::Job(JobError::PastSlice {
            end,
            len: items.len(),
        }));
    }
    let items = Items {
        ptr: items.as_mut_ptr(),
        len: items.len(),
    };
    run_bound(
        job,
        &|| {},
        // SAFETY: the plan's chunks lie in `job`'s range, within `items`
        // (checked above), and are disjoint; `run_bound` gives each to one
        // call of `f` (one claim each), and `undo` runs on the caller only
        // once every thread has stopped, once per finished chunk.
        &|range: Range<usize>| f(range.start, unsafe { items.chunk(range.clone()) }),
        // SAFETY: as above.
        &|range: Range<usize>| undo(range.start, unsafe { items.chunk(range.clone()) }),
    )
}

#[cfg(test)]
mod tests {
    use std::{
        panic::{AssertUnwindSafe, catch_unwind},
        sync::atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    /// Small enough for Miri, which runs these (`cargo xtask miri`).
    fn job(start: usize, size: usize) -> Job {
        Job::new(start, size).min_chunk(3).max_threads(3)
    }

    #[test]
    fn each_item_reaches_one_chunk_at_its_index() {
        // Items 5..45 of 50, as (index, visits).
        let mut items: Vec<(usize, u32)> = (0..50).map(|i| (i, 0)).collect();
        let chunks = AtomicUsize::new(0);
        run_slice::<_, ()>(&job(5, 40), &mut items, |start, chunk| {
            chunks.fetch_add(1, Ordering::Relaxed);
            for (k, (i, visits)) in chunk.iter_mut().enumerate() {
                assert_eq!(*i, start + k, "chunk at {start}: item {k}");
                *visits += 1;
            }
            Ok(())
        })
        .unwrap();
        let visits: Vec<u32> = items.iter().map(|(_, v)| *v).collect();
        let want: Vec<u32> = (0..50).map(|i| u32::from((5..45).contains(&i))).collect();
        assert_eq!(visits, want);
        let planned = job(5, 40).plan().unwrap().chunks().count();
        assert_eq!(chunks.into_inner(), planned);
    }

    #[test]
    fn a_job_past_the_slice_fails_before_any_chunk() {
        let mut items = [0u8; 10];
        let calls = AtomicUsize::new(0);
        let r = run_slice::<_, ()>(&job(4, 7), &mut items, |_, _| {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
        assert!(
            matches!(
                r,
                Err(RunError::Job(JobError::PastSlice { end: 11, len: 10 }))
            ),
            "{r:?}"
        );
        assert_eq!(calls.into_inner(), 0);
        // A planning error comes first, as from `run`.
        let r = run_slice::<_, ()>(&job(0, 10).max_threads(0), &mut items, |_, _| Ok(()));
        assert!(
            matches!(r, Err(RunError::Job(JobError::ZeroThreads))),
            "{r:?}"
        );
    }

    #[test]
    fn a_failure_undoes_exactly_the_finished_chunks() {
        // Owned items, so Miri sees every write and drop the chunks make.
        let mut items: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        let (done, undone) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let r = run_slice_with_undo(
            &job(0, 30),
            &mut items,
            |start, chunk| {
                if (start..start + chunk.len()).contains(&17) {
                    return Err(start);
                }
                chunk.iter_mut().for_each(|s| s.push('!'));
                done.fetch_add(chunk.len(), Ordering::Relaxed);
                Ok(())
            },
            |_, chunk| {
                for s in chunk {
                    assert_eq!(s.pop(), Some('!'), "undo of an item not done");
                    undone.fetch_add(1, Ordering::Relaxed);
                }
            },
        );
        assert!(matches!(r, Err(RunError::Failed(_))), "{r:?}");
        assert_eq!(done.into_inner(), undone.into_inner());
        assert!(items.iter().enumerate().all(|(i, s)| *s == i.to_string()));
    }

    #[test]
    fn a_panic_undoes_the_finished_chunks_then_reaches_the_caller() {
        let mut items = vec![0u8; 30];
        let r = catch_unwind(AssertUnwindSafe(|| {
            run_slice_with_undo::<_, ()>(
                &job(0, 30),
                &mut items,
                |start, chunk| {
                    assert!(start + chunk.len() <= 20, "the chunk at {start} fails");
                    chunk.fill(1);
                    Ok(())
                },
                |_, chunk| chunk.fill(0),
            )
        }));
        assert!(r.is_err());
        assert_eq!(items, [0; 30]);
    }

    /// A panic in one chunk's undo does not leave the other finished
    /// chunks done, and reaches the caller once they are undone.
    #[test]
    fn a_panicking_undo_leaves_no_other_chunk_done() {
        let mut items = vec![0u8; 40];
        // One thread: chunks 0, 10, 20 finish in order, 30 fails.
        let r = catch_unwind(AssertUnwindSafe(|| {
            run_slice_with_undo(
                &Job::new(0, 40).min_chunk(10).max_threads(1),
                &mut items,
                |start, chunk| {
                    if start == 30 {
                        return Err("chunk 30");
                    }
                    chunk.fill(1);
                    Ok(())
                },
                |start, chunk| {
                    assert_ne!(start, 0, "the undo of chunk 0 panics");
                    chunk.fill(0);
                },
            )
        }));
        let p = r.expect_err("the undo's panic reaches the caller");
        assert_eq!(
            p.downcast_ref::<String>().map(String::as_str),
            Some(
                "assertion `left != right` failed: the undo of chunk 0 panics\n  left: 0\n right: 0"
            )
        );
        assert_eq!(items[..10], [1; 10], "chunk 0's undo panicked first");
        assert_eq!(items[10..], [0; 30], "chunks 10 and 20 left done");
    }

    #[test]
    fn zero_sized_items_are_chunked_too() {
        let mut items = [(); 20];
        let seen = AtomicUsize::new(0);
        run_slice::<_, ()>(&job(0, 20), &mut items, |_, chunk| {
            seen.fetch_add(chunk.len(), Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.into_inner(), 20);
    }
}
