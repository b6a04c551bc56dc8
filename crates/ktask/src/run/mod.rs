//! Running a [`Job`]: helpers claim chunks until none are left
//! (`padata_mt_helper`), the caller works too, and the caller waits for
//! every helper (`padata_do_multithreaded`'s completion, which here is
//! the join at the end of `std::thread::scope`).
//!
//! - Every helper is spawned and waiting at a start gate before any chunk
//!   runs (spawning a thread maps its stack, taking the mmap lock for
//!   writing, which helpers already faulting pages in would contend on);
//!   helpers the
//!   OS refuses are not waited for (padata runs with the works it got).
//! - Chunks are claimed with one `fetch_add`: each runs exactly once.
//! - The first error stops new claims; once every helper has finished,
//!   `undo` runs over exactly the chunks that completed, and the error is
//!   returned. A panic in any thread stops new claims the same way, the
//!   completed chunks are undone as for an error, and the panic is resumed
//!   on the caller. A panicking undo of one chunk does not stop the
//!   others'.

#[cfg(all(test, mmbatch_loom))]
mod tests;

use std::{any::Any, fmt, ops::Range, panic::AssertUnwindSafe};

#[cfg(not(mmbatch_loom))]
use crate::Job;
use crate::{
    JobError,
    sync::{AtomicBool, AtomicUsize, Mutex, Ordering, lock},
};

/// Why a job did not complete.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError<E> {
    /// The job itself is invalid.
    Job(JobError),
    /// A chunk failed with this error (the first one); the job stopped
    /// (no chunk is claimed once a thread has seen the failure), and the
    /// chunks that had completed went to [`run_with_undo`]'s `undo`
    /// ([`run`] has none).
    Failed(E),
}

impl<E: fmt::Display> fmt::Display for RunError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Job(e) => write!(f, "{e}"),
            RunError::Failed(e) => write!(
                f,
                "a chunk failed (the job stopped, and the chunks that had finished went to the \
                 undo, if one was given): {e}"
            ),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for RunError<E> {
    /// The job's error; a chunk's error is shown in the message (`E` need
    /// not be an `Error`).
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Job(e) => Some(e),
            RunError::Failed(_) => None,
        }
    }
}

impl<E> From<JobError> for RunError<E> {
    fn from(e: JobError) -> Self {
        RunError::Job(e)
    }
}

/// What the threads of one job share.
pub(crate) struct Shared<E> {
    chunks: Vec<Range<usize>>,
    /// Next chunk to claim.
    next: AtomicUsize,
    /// Set by the first failure: no new claims.
    stop: AtomicBool,
    /// Chunk i completed.
    done: Box<[AtomicBool]>,
    error: Mutex<Option<E>>,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl<E> Shared<E> {
    pub(crate) fn new(chunks: Vec<Range<usize>>) -> Self {
        let done = chunks.iter().map(|_| AtomicBool::new(false)).collect();
        Self {
            chunks,
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            done,
            error: Mutex::new(None),
            panic: Mutex::new(None),
        }
    }

    /// One thread's share (`padata_mt_helper`): claim chunks until none
    /// are left or a failure stops the job.
    pub(crate) fn work(&self, f: &impl Fn(Range<usize>) -> Result<(), E>) {
        while !self.stop.load(Ordering::Acquire) {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(range) = self.chunks.get(i) else {
                break;
            };
            match std::panic::catch_unwind(AssertUnwindSafe(|| f(range.clone()))) {
                Ok(Ok(())) => self.done[i].store(true, Ordering::Release),
                Ok(Err(e)) => {
                    lock(&self.error).get_or_insert(e);
                    self.stop.store(true, Ordering::Release);
                }
                Err(p) => {
                    lock(&self.panic).get_or_insert(p);
                    self.stop.store(true, Ordering::Release);
                }
            }
        }
    }

    /// A thread that could not start (its start hook panicked): stops the
    /// job as a panicking chunk does.
    #[cfg(not(mmbatch_loom))]
    pub(crate) fn abandon(&self, p: Box<dyn Any + Send>) {
        lock(&self.panic).get_or_insert(p);
        self.stop.store(true, Ordering::Release);
    }

    /// Once every thread that worked has been joined: undoes the
    /// completed chunks if a chunk failed, and returns the outcome;
    /// resumes a panic.
    pub(crate) fn finish(self, undo: &impl Fn(Range<usize>)) -> Result<(), RunError<E>> {
        let panic = lock(&self.panic).take();
        let error = lock(&self.error).take();
        if panic.is_none() && error.is_none() {
            return Ok(());
        }
        // A panic undoes the finished chunks as an error does.
        let finished = self
            .chunks
            .iter()
            .zip(self.done.iter())
            .filter(|(_, done)| done.load(Ordering::Acquire))
            .map(|(range, _)| range.clone());
        let undo_panic = undo_each(finished, undo);
        if let Some(p) = panic.or(undo_panic) {
            std::panic::resume_unwind(p);
        }
        error.map_or(Ok(()), |e| Err(RunError::Failed(e)))
    }
}

/// Runs `undo` over every range, each even if one before it panicked,
/// and returns the first panic: a panicking undo of one chunk must not
/// leave the others done.
pub(crate) fn undo_each(
    ranges: impl Iterator<Item = Range<usize>>,
    undo: &impl Fn(Range<usize>),
) -> Option<Box<dyn Any + Send>> {
    let mut first = None;
    for range in ranges {
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| undo(range))) {
            first.get_or_insert(p);
        }
    }
    first
}

/// Runs `f` over the job's chunks in parallel; see [`run_with_undo`].
#[cfg(not(mmbatch_loom))]
#[doc(alias = "padata_do_multithreaded")]
#[doc(alias = "ktask_run")]
pub fn run<E: Send>(
    job: &Job,
    f: impl Fn(Range<usize>) -> Result<(), E> + Sync,
) -> Result<(), RunError<E>> {
    run_with_undo(job, f, |_| {})
}

/// Runs `f` over every chunk of `job` on `plan.threads` threads (the
/// caller is one; with one thread it runs inline). If a chunk fails, no new
/// chunk starts, and once every thread has stopped `undo` runs over exactly
/// the chunks that completed (never the one that failed: `f` leaves its
/// own chunk as `undo` needs nothing of); the first error is returned. A
/// panic in any chunk stops the job the same way (the completed chunks
/// undone) and is resumed on the caller. A panic in `undo` does not stop
/// the other chunks' undo: it is resumed once they are done, unless a
/// chunk panicked (whose panic goes first). Each call starts its helper threads and joins
/// them before it returns (there is no pool), as many as the plan says
/// whatever the CPUs: size `max_threads` to the machine (or the node)
/// the job runs on.
///
/// # Errors
/// [`RunError::Job`] for a job that cannot be planned, and
/// [`RunError::Failed`] with the first chunk's error.
///
/// # Panics
/// With the first chunk's panic, once the completed chunks are undone;
/// else with the first panic of `undo`.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use mmbatch_ktask::{Job, RunError, run_with_undo};
///
/// // Marks items 0..1000 done; the chunk holding item 700 fails, and
/// // every chunk that had finished is unmarked: all or nothing.
/// let done: Vec<AtomicBool> = (0..1000).map(|_| AtomicBool::new(false)).collect();
/// let job = Job::new(0, 1000).min_chunk(100).max_threads(4);
/// let r = run_with_undo(
///     &job,
///     |range| {
///         if range.contains(&700) {
///             return Err("item 700 is bad");
///         }
///         range.for_each(|i| done[i].store(true, Ordering::Relaxed));
///         Ok(())
///     },
///     |range| range.for_each(|i| done[i].store(false, Ordering::Relaxed)),
/// );
/// assert!(matches!(r, Err(RunError::Failed("item 700 is bad"))));
/// assert!(done.iter().all(|d| !d.load(Ordering::Relaxed)));
/// ```
#[cfg(not(mmbatch_loom))]
#[doc(alias = "ktask_ctl_set_undo_func")]
pub fn run_with_undo<E: Send>(
    job: &Job,
    f: impl Fn(Range<usize>) -> Result<(), E> + Sync,
    undo: impl Fn(Range<usize>) + Sync,
) -> Result<(), RunError<E>> {
    run_bound(job, &|| {}, &f, &undo)
}

/// `run_with_undo`, with `on_start` run first on every thread (the caller
/// included) before the start gate: how NUMA jobs bind their threads.
///
/// Helpers the OS refuses (`RLIMIT_NPROC`, a cgroup's `pids.max`) are not
/// waited for: the job runs on the threads that started, as
/// `padata_do_multithreaded` runs with the works it could allocate. A
/// panic in a helper's `on_start` stops the job like a panic in a chunk.
#[cfg(not(mmbatch_loom))]
pub(crate) fn run_bound<E: Send>(
    job: &Job,
    on_start: &(dyn Fn() + Sync),
    f: &(impl Fn(Range<usize>) -> Result<(), E> + Sync),
    undo: &(impl Fn(Range<usize>) + Sync),
) -> Result<(), RunError<E>> {
    let plan = job.plan()?;
    let shared = Shared::new(plan.chunks().collect());
    on_start();
    if plan.threads == 1 {
        shared.work(f);
        return shared.finish(undo);
    }
    // Every helper that started waits at the gate until the caller has
    // started all it can; none waits for a helper that was refused.
    let gate = Gate::default();
    std::thread::scope(|s| {
        // Opened however the spawning ends: a panic here would otherwise
        // leave the helpers started so far at the gate, and the scope
        // waiting for them.
        let opener = OpenOnDrop(&gate);
        for i in 1..plan.threads {
            let (gate, shared) = (&gate, &shared);
            let spawned = spawn_helper(i, s, move || {
                let started = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    // Fail point `ktask::start`: the hook panics.
                    fail_point!("ktask::start");
                    on_start();
                }));
                gate.wait();
                match started {
                    Ok(()) => shared.work(f),
                    Err(p) => shared.abandon(p),
                }
            });
            if spawned.is_err() {
                break;
            }
        }
        drop(opener);
        shared.work(f);
        // The scope joins every helper it started before it returns.
    });
    shared.finish(undo)
}

/// Spawns helper `i` in `s`; fail point `ktask::spawn` refuses it as the
/// OS would (EAGAIN, `WouldBlock`).
#[cfg(not(mmbatch_loom))]
fn spawn_helper<'scope>(
    i: usize,
    s: &'scope std::thread::Scope<'scope, '_>,
    body: impl FnOnce() + Send + 'scope,
) -> std::io::Result<()> {
    fail_point!("ktask::spawn", |_| Err(std::io::Error::from(
        std::io::ErrorKind::WouldBlock
    )));
    std::thread::Builder::new()
        .name(format!("ktask-{i}"))
        .spawn_scoped(s, body)
        .map(drop)
}

/// Opens its gate on drop.
#[cfg(not(mmbatch_loom))]
struct OpenOnDrop<'a>(&'a Gate);

#[cfg(not(mmbatch_loom))]
impl Drop for OpenOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// The start gate: helpers wait until the caller opens it.
#[cfg(not(mmbatch_loom))]
#[derive(Default)]
struct Gate {
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

#[cfg(not(mmbatch_loom))]
impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.opened.notify_all();
    }
}
