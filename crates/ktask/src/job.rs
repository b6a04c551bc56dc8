//! [`Job`] and its split into chunks, as `padata_do_multithreaded` does.

use std::{fmt, ops::Range};

/// Work over `[start, start + size)`, split into chunks run in parallel
/// (`struct padata_mt_job`): [`Job::new`], then the setters.
///
/// ```
/// use mmbatch_ktask::Job;
///
/// let job = Job::new(0, 1000).align(10).min_chunk(100).max_threads(4);
/// assert_eq!(job.plan().unwrap().threads, 4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Job {
    /// First unit of work.
    pub start: usize,
    /// Units of work.
    pub size: usize,
    /// Chunk boundaries fall on multiples of this (from 0), and `start` and
    /// `size` must be multiples of it.
    pub align: usize,
    /// The least work worth a thread (and the least chunk).
    pub min_chunk: usize,
    /// Threads at most, the caller included.
    pub max_threads: usize,
}

/// Why a job cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobError {
    /// `start + size` is past `usize::MAX`.
    Overflow {
        /// First unit.
        start: usize,
        /// Units.
        size: usize,
    },
    /// `max_threads` was 0.
    ZeroThreads,
    /// `align` was 0.
    ZeroAlign,
    /// `start` or `size` is not a multiple of `align`.
    Misaligned {
        /// Which (`"start"` or `"size"`).
        what: &'static str,
        /// Its value.
        value: usize,
        /// The alignment.
        align: usize,
    },
    /// A [`run_slice`](crate::run_slice) job ends past its slice.
    PastSlice {
        /// The job's end, `start + size`.
        end: usize,
        /// The slice's length.
        len: usize,
    },
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::ZeroThreads => {
                f.write_str("max_threads is 0: a job needs at least one thread (the caller)")
            }
            JobError::ZeroAlign => f.write_str("align is 0: use 1 for no alignment"),
            JobError::Overflow { start, size } => write!(
                f,
                "job start {start} + size {size} is past usize::MAX: the job's units must be \
                 addressable"
            ),
            JobError::Misaligned { what, value, align } => write!(
                f,
                "job {what} {value} is not a multiple of align {align}: round it to {}",
                value.div_ceil(*align).saturating_mul(*align)
            ),
            JobError::PastSlice { end, len } => write!(
                f,
                "the job ends at {end}, past the slice's {len} items: its start + size must be \
                 at most the slice's length (`Job::new(0, items.len())` covers it all)"
            ),
        }
    }
}

impl std::error::Error for JobError {}

/// How a job is split: the kernel's formula.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Threads, the caller included: `min(max(size / max(min_chunk,
    /// align), 1), max_threads)`, at most [`MAX_THREADS`].
    pub threads: usize,
    /// Chunk size: `roundup(max(size / (threads * 4), min_chunk, 1),
    /// align)` — four chunks per thread, for load balance.
    pub chunk: usize,
    start: usize,
    end: usize,
}

/// Chunks per thread the split aims for (padata's `load_balance_factor`).
pub const LOAD_BALANCE_FACTOR: usize = 4;

/// The most threads a job (or each node of a NUMA job) runs on, whatever
/// `max_threads` says.
pub const MAX_THREADS: usize = 1024;

impl Job {
    /// A job over `start..start + size` with no alignment, chunks of at
    /// least one unit, and a thread per CPU.
    pub fn new(start: usize, size: usize) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_all(start, size, 1, 1, cpus)
    }

    /// Every field given: the crate's own jobs, which set `max_threads`
    /// themselves (`new` asks the system for its CPUs, a cgroup read).
    pub(crate) fn with_all(
        start: usize,
        size: usize,
        align: usize,
        min_chunk: usize,
        max_threads: usize,
    ) -> Self {
        Self {
            start,
            size,
            align,
            min_chunk,
            max_threads,
        }
    }

    /// With chunk boundaries on multiples of `align` (`start` and `size`
    /// must be multiples of it; [`plan`](Self::plan) checks).
    #[must_use]
    pub fn align(mut self, align: usize) -> Self {
        self.align = align;
        self
    }

    /// With `min_chunk` the least work worth a thread.
    #[must_use]
    pub fn min_chunk(mut self, min_chunk: usize) -> Self {
        self.min_chunk = min_chunk;
        self
    }

    /// With at most `max_threads` threads, the caller included.
    #[must_use]
    pub fn max_threads(mut self, max_threads: usize) -> Self {
        self.max_threads = max_threads;
        self
    }

    /// Checks the job and computes its split.
    pub fn plan(&self) -> Result<Plan, JobError> {
        if self.max_threads == 0 {
            return Err(JobError::ZeroThreads);
        }
        if self.align == 0 {
            return Err(JobError::ZeroAlign);
        }
        for (what, value) in [("start", self.start), ("size", self.size)] {
            if value % self.align != 0 {
                return Err(JobError::Misaligned {
                    what,
                    value,
                    align: self.align,
                });
            }
        }
        let end = self
            .start
            .checked_add(self.size)
            .ok_or(JobError::Overflow {
                start: self.start,
                size: self.size,
            })?;
        let works = (self.size / self.min_chunk.max(self.align)).max(1);
        let threads = works.min(self.max_threads).min(MAX_THREADS);
        // Rounding a min_chunk near usize::MAX up to `align` would wrap:
        // the largest multiple of `align` is as good (one chunk).
        let chunk = (self.size / threads.saturating_mul(LOAD_BALANCE_FACTOR))
            .max(self.min_chunk)
            .max(1)
            .div_ceil(self.align)
            .checked_mul(self.align)
            .unwrap_or(usize::MAX / self.align * self.align);
        Ok(Plan {
            threads,
            chunk,
            start: self.start,
            end,
        })
    }
}

impl Plan {
    /// The chunks, in order: each ends at the next multiple of `chunk`
    /// (`padata_mt_helper`: `roundup(start + 1, chunk_size)`), or at the end.
    pub fn chunks(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let mut at = self.start;
        std::iter::from_fn(move || {
            if at >= self.end {
                return None;
            }
            let end = (at + 1)
                .div_ceil(self.chunk)
                .checked_mul(self.chunk)
                .map_or(self.end, |e| e.min(self.end));
            debug_assert!(
                end > at,
                "an empty chunk at {at}: the split would not advance"
            );
            let r = at..end;
            at = end;
            Some(r)
        })
    }
}
