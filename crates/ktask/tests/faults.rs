//! Bad input and refusals: a job never deadlocks, wraps, divides by zero
//! or runs part of its work silently. Scenarios that hung on the old code
//! run in a child process with a bounded wait.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use mmbatch_ktask::{Job, JobError, RunError, run};
use mmbatch_testkit::child;

const LIMIT: Duration = Duration::from_secs(30);

fn threads_now() -> u64 {
    std::fs::read_dir("/proc/self/task").unwrap().count() as u64
}

/// The OS refuses the job's second helper thread (RLIMIT_NPROC, as a
/// cgroup's pids.max would): the old code panicked in `Scope::spawn` while
/// the first helper waited at the start barrier for threads that never
/// came — a deadlock. Now the job runs on the threads that started, as
/// padata does, and does all its work.
#[test]
fn refused_threads_run_the_job_on_those_that_started() {
    if let Some(run) = child::parent("refused_threads_run_the_job_on_those_that_started", LIMIT) {
        run.expect_success();
        return;
    }
    // RLIMIT_NPROC binds only without CAP_SYS_RESOURCE: drop root first
    // (process-wide: glibc's setgid/setuid reach every thread).
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // SAFETY: as above.
        assert_eq!(unsafe { libc::setgid(65534) }, 0);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::setuid(65534) }, 0);
    }
    // This user's tasks are this process's threads: allow one more.
    let n = (threads_now() + 1) as libc::rlim_t;
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: a valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &lim) }, 0);
    let sum = AtomicUsize::new(0);
    let job = Job::new(0, 1 << 16).align(1).min_chunk(1).max_threads(4);
    run::<()>(&job, |r| {
        sum.fetch_add(r.sum(), Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    assert_eq!(sum.into_inner(), (0..1usize << 16).sum::<usize>());
}

/// `start + size` past `usize::MAX` wrapped: no chunk was made and the job
/// "succeeded" without running.
#[test]
fn a_job_past_the_end_of_usize_is_refused() {
    let job = Job::new(usize::MAX - 7, 8)
        .align(1)
        .min_chunk(1)
        .max_threads(2);
    let e = job.plan().unwrap_err();
    assert!(matches!(e, JobError::Overflow { .. }), "{e}");
    assert!(matches!(run::<()>(&job, |_| Ok(())), Err(RunError::Job(_))));
    // Right at the end is fine.
    let job = Job::new(usize::MAX - 8, 8).max_threads(2);
    let calls = AtomicUsize::new(0);
    run::<()>(&job, |r| {
        calls.fetch_add(r.len(), Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    assert_eq!(calls.into_inner(), 8);
}

/// `min_chunk: usize::MAX` with `align: 2` rounded the chunk up past
/// `usize::MAX` to 0, then divided by it.
#[test]
fn huge_min_chunks_and_thread_counts_do_not_overflow() {
    for (min_chunk, align, max_threads) in [
        (usize::MAX, 2, 4),
        (usize::MAX - 1, 4, usize::MAX),
        (1, 1, usize::MAX),
    ] {
        let job = Job::new(0, 1 << 20)
            .align(align)
            .min_chunk(min_chunk)
            .max_threads(max_threads);
        let plan = job.plan().unwrap();
        assert!(plan.chunk > 0 && plan.chunk % align == 0, "{plan:?}");
        let covered: usize = plan.chunks().map(|r| r.len()).sum();
        assert_eq!(covered, 1 << 20, "{job:?}");
        if min_chunk > 1 << 20 {
            // A chunk larger than the job: the whole job is one chunk,
            // the largest multiple of `align` standing in for a rounding
            // that would overflow.
            assert_eq!(plan.chunks().count(), 1, "{plan:?}");
            assert_eq!(plan.chunk, usize::MAX / align * align, "{plan:?}");
        }
    }
}

/// A panicking chunk: the chunks that completed are undone, as for an
/// error, before the panic reaches the caller (the old code resumed it
/// with them left done: "undone 0 of N finished chunks").
#[test]
fn a_panicking_chunk_undoes_the_completed_ones() {
    let job = Job::new(0, 1 << 12).align(1).min_chunk(8).max_threads(2);
    let (done, undone) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        mmbatch_ktask::run_with_undo::<()>(
            &job,
            |r| {
                if r.end == 1 << 12 {
                    panic!("the last chunk panicked");
                }
                done.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
            |_| {
                undone.fetch_add(1, Ordering::Relaxed);
            },
        )
    }));
    assert!(r.is_err());
    let (done, undone) = (done.into_inner(), undone.into_inner());
    assert_eq!(undone, done, "undone {undone} of {done} finished chunks");
    assert!(done > 0, "no chunk finished before the panic");
}

/// A refused `MADV_POPULATE_WRITE` says why: EINVAL names what the call
/// needs (Linux 5.14, a writable private or a shared mapping); any other
/// error says the populated chunks were given back.
#[test]
fn populate_errors_name_their_cause() {
    let einval =
        mmbatch_ktask::PopulateError::Madvise(std::io::Error::from_raw_os_error(libc::EINVAL))
            .to_string();
    assert!(einval.contains("Linux 5.14"), "{einval}");
    let eio = mmbatch_ktask::PopulateError::Madvise(std::io::Error::from_raw_os_error(libc::EIO))
        .to_string();
    assert!(eio.contains("os error 5") && !eio.contains("5.14"), "{eio}");
    let efault =
        mmbatch_ktask::PopulateError::Madvise(std::io::Error::from_raw_os_error(libc::EFAULT))
            .to_string();
    assert!(efault.contains("SIGBUS"), "{efault}");
    let enomem =
        mmbatch_ktask::PopulateError::Madvise(std::io::Error::from_raw_os_error(libc::ENOMEM))
            .to_string();
    assert!(enomem.contains("not mapped"), "{enomem}");
}

/// A chunk whose `MADV_POPULATE_WRITE` fails part way (here at a
/// read-only page, EFAULT: a write there would fault) is released too:
/// the error promises that nothing populated stays, and the old code
/// undid only the chunks that had finished, leaving the failing chunk's
/// first pages resident (511 of 512 here).
#[test]
fn a_populate_failing_part_way_leaves_nothing_resident() {
    let page = rustix::param::page_size();
    let len = 2 * mmbatch_ktask::MIN_CHUNK;
    let mut m = mmbatch_ktask::Mapping::anonymous(len).unwrap();
    let ptr = m.as_mut_slice().unwrap().as_mut_ptr();
    let last = mmbatch_ktask::MIN_CHUNK - page;
    // SAFETY: the last page of the first chunk of our own mapping.
    let r = unsafe { libc::mprotect(ptr.wrapping_add(last).cast(), page, libc::PROT_READ) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: our mapping, whose contents may be discarded.
    let e = unsafe { mmbatch_ktask::populate(ptr, len, 1) }.unwrap_err();
    println!("{e}");
    let mut present = vec![0u8; len / page];
    // SAFETY: our mapping, one byte per page out.
    let r = unsafe { libc::mincore(ptr.cast(), len, present.as_mut_ptr()) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    let resident = present.iter().filter(|&&b| b & 1 != 0).count();
    assert_eq!(resident, 0, "{resident} pages left resident");
}

/// A run's error says what went wrong: the job's own refusal as it is, a
/// chunk's failure with the note that finished chunks went to the undo.
#[test]
fn run_errors_print_their_cause() {
    let job: RunError<String> = RunError::Job(JobError::ZeroThreads);
    assert_eq!(job.to_string(), JobError::ZeroThreads.to_string());
    assert!(!job.to_string().is_empty());
    let failed: RunError<String> = RunError::Failed("disk on fire".into());
    let s = failed.to_string();
    assert!(s.contains("disk on fire") && s.contains("undo"), "{s}");
    // The job's refusal is the source an error chain shows.
    use std::error::Error as _;
    assert_eq!(
        job.source().map(ToString::to_string),
        Some(JobError::ZeroThreads.to_string())
    );
    assert!(failed.source().is_none());
}

/// The least work a memory job gives a thread is one 2 MiB huge page, as
/// the docs promise (a user sizes buffers by it).
#[test]
fn memory_jobs_give_a_thread_at_least_a_huge_page() {
    assert_eq!(mmbatch_ktask::MIN_CHUNK, 2 << 20);
}

/// A job of `n` threads has `n` threads working at once: every chunk
/// waits (20 s at most) until three distinct threads have entered one. A
/// job whose helpers never started, or never left the start gate, fails
/// here at that bound or at the child's, instead of running serially or
/// hanging the test binary.
#[test]
fn a_job_runs_on_all_its_threads_at_once() {
    if let Some(run) = child::parent("a_job_runs_on_all_its_threads_at_once", LIMIT) {
        run.expect_success();
        return;
    }
    let threads = std::sync::Mutex::new(std::collections::HashSet::new());
    let job = Job::new(0, 1 << 12).align(1).min_chunk(1).max_threads(3);
    assert_eq!(job.plan().unwrap().threads, 3);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let r = run(&job, |_| {
        threads.lock().unwrap().insert(std::thread::current().id());
        while threads.lock().unwrap().len() < 3 {
            if std::time::Instant::now() > deadline {
                return Err(threads.lock().unwrap().len());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    });
    assert!(r.is_ok(), "threads seen working: {r:?}");
}

/// `populate_mapping` is the safe form, and a failure keeps what the
/// mapping held: the old path's release (`MADV_DONTNEED`) would have
/// turned the finished chunks of a private mapping back into zeros.
#[test]
fn a_failed_populate_mapping_keeps_the_contents() {
    let page = rustix::param::page_size();
    let len = 4 * mmbatch_ktask::MIN_CHUNK;
    let mut m = mmbatch_ktask::Mapping::anonymous(len).unwrap();
    m.as_mut_slice().unwrap().fill(0xab);
    // The last page read-only: the chunk holding it fails (EINVAL: its
    // part of the mapping is not writable).
    let last = m.as_ptr().wrapping_add(len - page);
    // SAFETY: the last page of our own mapping; `m`'s views are only read
    // from here on, which PROT_READ keeps valid.
    let r = unsafe { libc::mprotect(last.cast(), page, libc::PROT_READ) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    let e = mmbatch_ktask::populate_mapping(&mut m, 2).unwrap_err();
    assert!(matches!(e, mmbatch_ktask::PopulateError::Madvise(_)), "{e}");
    let bytes = m.as_slice().unwrap();
    let lost = bytes.iter().filter(|b| **b != 0xab).count();
    assert_eq!(lost, 0, "{lost} bytes lost to the failed populate ({e})");
}

/// A mapping that cannot be written is refused with the cause named.
#[test]
fn populate_mapping_of_a_read_only_mapping_names_the_cause() {
    let mut m = mmbatch_ktask::Mapping::new(
        mmbatch_ktask::MIN_CHUNK,
        mmbatch_ktask::ProtFlags::READ,
        mmbatch_ktask::MapFlags::PRIVATE,
    )
    .unwrap();
    let e = mmbatch_ktask::populate_mapping(&mut m, 2).unwrap_err();
    println!("{e}");
    assert!(e.to_string().contains("writable"), "{e}");
}
