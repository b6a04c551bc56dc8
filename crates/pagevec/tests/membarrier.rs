//! `Batcher::disable` once membarrier(2) fails after the batcher
//! registered it (a seccomp filter a sandbox installs after start-up):
//! its heavy barrier asserted and panicked, though queuers' light
//! barriers were compiler fences that only it could pair with. Now it has
//! the barrier the slow way and every op is applied; with no barrier to
//! be had at all it panics naming the calls, and the batcher is as before
//! the call. Each test runs in a child process: the filter is the
//! process's for good.
#![cfg(all(target_os = "linux", not(miri)))]

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use mmbatch_pagevec::{Apply, Batcher};
use mmbatch_testkit::{child, seccomp::refuse_syscalls};

const LIMIT: Duration = Duration::from_secs(60);

/// A total behind one lock.
struct Total(Mutex<u64>);

impl Apply for Total {
    type Op = u64;
    type Key = ();
    type Guard<'a> = MutexGuard<'a, u64>;
    fn key(&self, _: &u64) {}
    fn lock(&self, _: ()) -> MutexGuard<'_, u64> {
        self.0.lock().unwrap()
    }
    fn apply(&self, total: &mut MutexGuard<'_, u64>, op: u64) {
        **total += op;
    }
}

/// Queues ones on two threads while `f` runs, then drains; returns the
/// ones queued.
fn while_queueing(b: &Batcher<Total, 15>, f: impl FnOnce()) -> u64 {
    let stop = AtomicBool::new(false);
    let queued = std::thread::scope(|s| {
        let queuers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        b.queue(1);
                        n += 1;
                    }
                    b.drain_local();
                    n
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        let r = catch_unwind(AssertUnwindSafe(f));
        stop.store(true, Ordering::Relaxed);
        let n: u64 = queuers.into_iter().map(|q| q.join().unwrap()).sum();
        if let Err(e) = r {
            std::panic::resume_unwind(e);
        }
        n
    });
    b.drain_all();
    queued
}

#[test]
fn disable_after_membarrier_starts_failing_applies_every_op() {
    let name = "disable_after_membarrier_starts_failing_applies_every_op";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    assert!(
        !mmbatch_pagevec::uses_membarrier(),
        "known only once a Batcher is built"
    );
    let b: Batcher<Total, 15> = Batcher::new(Total(Mutex::new(0)));
    // MEMBARRIER_CMD_QUERY: what this kernel (or sandbox) offers.
    // SAFETY: no pointers; an unknown command is an error, not UB.
    let offered = unsafe { libc::syscall(libc::SYS_membarrier, 0, 0) };
    let private_expedited = offered > 0 && offered & (1 << 3) != 0;
    assert_eq!(mmbatch_pagevec::uses_membarrier(), private_expedited);
    refuse_syscalls(&[libc::SYS_membarrier]);
    let queued = while_queueing(&b, || {
        for _ in 0..3 {
            b.disable();
            std::thread::sleep(Duration::from_millis(5));
            b.enable();
        }
    });
    assert_eq!(*b.target().0.lock().unwrap(), queued);
    assert!(
        !mmbatch_pagevec::uses_membarrier(),
        "membarrier failed: the queue path's barrier is a real fence for good"
    );
}

#[test]
fn with_no_barrier_to_be_had_disable_panics_and_changes_nothing() {
    let name = "with_no_barrier_to_be_had_disable_panics_and_changes_nothing";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let b: Batcher<Total, 15> = Batcher::new(Total(Mutex::new(0)));
    refuse_syscalls(&[libc::SYS_membarrier, libc::SYS_sched_setaffinity]);
    let e = catch_unwind(AssertUnwindSafe(|| b.disable())).expect_err("disable went through");
    let msg = mmbatch_testkit::panic_message(&*e);
    println!("{msg}");
    assert!(
        msg.contains("membarrier") && msg.contains("sched_setaffinity"),
        "{msg}"
    );
    assert!(!b.is_disabled());
    // Asked again, it owes the same barrier: it panicked the first time
    // only, and the second disable went through on a plain fence, though
    // the queuers' earlier light barriers were compiler fences.
    for _ in 0..2 {
        let e = catch_unwind(AssertUnwindSafe(|| b.disable()))
            .expect_err("a disable after a failed one went through with no barrier");
        assert!(mmbatch_testkit::panic_message(&*e).contains("sched_setaffinity"));
        assert!(!b.is_disabled());
    }
    b.queue(2);
    b.drain_all();
    assert_eq!(*b.target().0.lock().unwrap(), 2);
}
