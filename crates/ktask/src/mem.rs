//! Parallel populating of large memory, as ktask cleared gigantic pages:
//! the kernel zeroes them, a chunk per thread (Linux only).

use std::{ffi::c_void, fmt, io};

use rustix::mm::{Advice, madvise};

use crate::{Job, MIN_CHUNK, Mapping, RunError, run_with_undo};

/// A pointer that may cross threads: each chunk touches a disjoint range.
#[derive(Clone, Copy)]
struct Base(*mut u8);
// SAFETY: threads use disjoint ranges of the mapping behind it, which the
// caller lends exclusively for the job's duration.
unsafe impl Send for Base {}
// SAFETY: as above.
unsafe impl Sync for Base {}

/// Why a populate failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum PopulateError {
    /// The job was invalid (a length not page-aligned).
    Job(crate::JobError),
    /// `madvise(MADV_POPULATE_WRITE)` failed. From [`populate`], the
    /// failing chunk and the populated ones were given back
    /// (`MADV_DONTNEED`, as far as the kernel lets); from
    /// [`populate_mapping`] (and `HugeRegion::populate`) they stay.
    Madvise(io::Error),
}

impl fmt::Display for PopulateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PopulateError::Job(e) => write!(
                f,
                "the range to populate must be whole base pages, page-aligned: {e}"
            ),
            PopulateError::Madvise(e)
                if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) =>
            {
                write!(
                    f,
                    "madvise(MADV_POPULATE_WRITE) failed ({e}): it needs Linux 5.14, a page-aligned \
                     pointer, and a writable mapping (private or shared) of memory the kernel can \
                     fault in (not a device's I/O or PFN mapping)"
                )
            }
            PopulateError::Madvise(e) => {
                let why = match e.raw_os_error().map(rustix::io::Errno::from_raw_os_error) {
                    Some(rustix::io::Errno::NOMEM) => {
                        ": part of the range is not mapped, or memory ran short"
                    }
                    Some(rustix::io::Errno::FAULT) => {
                        ": a touch there would raise SIGBUS (a hugetlb pool short of free pages, \
                         a file mapping past the file's end)"
                    }
                    _ => "",
                };
                write!(f, "madvise(MADV_POPULATE_WRITE) failed ({e}){why}")
            }
        }
    }
}

impl std::error::Error for PopulateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PopulateError::Job(e) => Some(e),
            PopulateError::Madvise(e) => Some(e),
        }
    }
}

/// Faults in `[ptr, ptr + len)` writable on up to `max_threads` threads
/// (0 is taken as 1), one `madvise(MADV_POPULATE_WRITE)` per chunk: the
/// kernel's zeroing of anonymous memory (a shared or file mapping keeps
/// its contents), in parallel, where `MAP_POPULATE` faults in on one
/// thread. If a chunk fails, it and every chunk done are released with
/// `MADV_DONTNEED` (a shared mapping's pages stay in its file or shmem;
/// only this mapping's page tables go), as far as the kernel lets: over
/// hugetlb memory it frees only whole huge pages (Linux 5.18+; before,
/// nothing), so chunks there keep what they populated.
///
/// # Errors
/// [`PopulateError::Job`] for a length that is not whole pages;
/// [`PopulateError::Madvise`] with the kernel's error: `EINVAL` before
/// Linux 5.14 (no `MADV_POPULATE_WRITE`) or for a mapping that cannot be
/// populated writable (read-only, a device's); `ENOMEM` for a range not
/// all mapped, or out of memory; `EFAULT` where an access would have
/// raised SIGBUS (a hugetlb pool with too few free pages, a file mapping
/// past the file's end).
///
/// [`populate_mapping`] is the safe form for a [`Mapping`].
///
/// # Safety
/// - `[ptr, ptr + len)` is a mapping the caller owns, page-aligned, whose
///   contents may be discarded (on failure they are released).
pub unsafe fn populate(ptr: *mut u8, len: usize, max_threads: usize) -> Result<(), PopulateError> {
    // SAFETY: the caller's promise.
    unsafe { populate_aligned(ptr, len, page_size(), MIN_CHUNK, max_threads, true) }
}

/// [`populate`] of a [`Mapping`] the caller holds: every page of it
/// faulted in writable on up to `max_threads` threads (0 is taken as 1),
/// safely, since the mapping is borrowed exclusively. On failure nothing
/// is released (the contents are the caller's, as `HugeRegion::populate`
/// keeps its pages): the chunks done stay resident until the mapping
/// drops. Chunks are whole pages of the mapping's
/// [`page_size`](Mapping::page_size) (and at least [`MIN_CHUNK`]): over
/// hugetlb memory no two threads fault one huge page, where chunks of
/// base pages had threads wait on each other's (a 1 GiB page zeroed by
/// one thread while the others wait for it).
///
/// # Errors
/// As [`populate`]'s: [`PopulateError::Madvise`] with `EINVAL` for a
/// mapping not writable, `EFAULT` where a touch would raise SIGBUS (a
/// file mapping past the file's end, a short hugetlb pool).
///
/// ```
/// use mmbatch_ktask::{Mapping, populate_mapping};
///
/// let mut m = Mapping::anonymous(64 << 20)?;
/// populate_mapping(&mut m, 2)?; // two threads fault in 64 MiB
/// assert!(m.as_slice().expect("readable").iter().all(|b| *b == 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn populate_mapping(map: &mut Mapping, max_threads: usize) -> Result<(), PopulateError> {
    let (page, min_chunk) = chunking(map);
    // The kernel maps whole pages: the rest of the last one is the mapping's.
    let len = map.len().div_ceil(page) * page;
    // SAFETY: `map` is a mapping we borrow exclusively, aligned to its
    // pages, of `len` bytes once rounded to whole pages; nothing is
    // released (`release` false), so its contents are kept.
    unsafe { populate_aligned(map.as_ptr(), len, page, min_chunk, max_threads, false) }
}

/// [`populate_mapping`]'s chunks of `map`: aligned to its pages, and at
/// least [`MIN_CHUNK`] and one page long.
fn chunking(map: &Mapping) -> (usize, usize) {
    let page = map.page_size().max(page_size());
    (page, MIN_CHUNK.max(page))
}

/// [`populate`] in chunks aligned to `align` (a multiple of the base page
/// size) and at least `min_chunk` long; on failure the chunks populated
/// are released only if `release`.
///
/// # Safety
/// As [`populate`]'s (whose contents-may-be-discarded clause only with
/// `release`).
pub(crate) unsafe fn populate_aligned(
    ptr: *mut u8,
    len: usize,
    align: usize,
    min_chunk: usize,
    max_threads: usize,
    release: bool,
) -> Result<(), PopulateError> {
    let base = Base(ptr);
    let advise = move |range: std::ops::Range<usize>, advice| {
        let base = base;
        // SAFETY: the range is inside the caller's mapping (caller's
        // promise); madvise only changes its residency.
        unsafe {
            madvise(
                base.0.wrapping_add(range.start).cast::<c_void>(),
                range.len(),
                advice,
            )
        }
        .map_err(io::Error::from)
    };
    run_with_undo(
        &Job::with_all(0, len, align, min_chunk, max_threads.max(1)),
        // A chunk that fails part way is released as well: the pages it
        // faulted in before the failure stay resident otherwise.
        |range| {
            advise(range.clone(), Advice::LinuxPopulateWrite).inspect_err(|_| {
                if release {
                    let _ = advise(range, Advice::LinuxDontNeed);
                }
            })
        },
        |range| {
            if release {
                let _ = advise(range, Advice::LinuxDontNeed);
            }
        },
    )
    .map_err(|e| match e {
        RunError::Job(e) => PopulateError::Job(e),
        RunError::Failed(e) => PopulateError::Madvise(e),
    })
}

fn page_size() -> usize {
    rustix::param::page_size()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `populate_mapping` chunks a mapping by its own pages: a hugetlb
    /// one by whole huge pages, so no two threads fault one (it chunked
    /// by base pages, 1 GiB pages shared by the threads that populated
    /// them). Needs a 2 MiB huge page in the pool (root).
    #[test]
    fn chunks_are_whole_pages_of_the_mapping() {
        let base = page_size();
        let m = Mapping::anonymous(base).unwrap();
        assert_eq!(chunking(&m), (base, MIN_CHUNK));
        let Some(_pool) = mmbatch_testkit::huge::Pool::grow(1) else {
            return;
        };
        let flags = mmbatch_mmap::MapFlags::PRIVATE
            | mmbatch_mmap::MapFlags::HUGETLB
            | mmbatch_mmap::MapFlags::HUGE_2MB;
        let rw = mmbatch_mmap::ProtFlags::READ | mmbatch_mmap::ProtFlags::WRITE;
        let mut huge = Mapping::new(2 << 20, rw, flags).unwrap();
        assert_eq!(chunking(&huge), (2 << 20, MIN_CHUNK.max(2 << 20)));
        populate_mapping(&mut huge, 2).unwrap();
        assert!(huge.as_slice().unwrap().iter().all(|b| *b == 0));
    }
}
