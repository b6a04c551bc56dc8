//! The pool lock's and growth's tests: threads, thread exits, forks and
//! processes, each bounded.

use std::{sync::mpsc, time::Duration};

use super::*;

/// How long a thread of these tests waits for the lock before it
/// panics ([`scaled`](mmbatch_testkit::child::scaled) to the machine): a
/// lock a broken release (a `drop` made a no-op) never lets go fails the
/// tests that need it in seconds, where an unbounded wait ran them into
/// cargo-mutants' limit (a timeout, not a failure). The tests hold it for
/// at most 300 ms.
fn wait_limit() -> Duration {
    mmbatch_testkit::child::scaled(Duration::from_secs(5))
}

/// [`HugePageSize::lock_pool`]'s wait for another thread of the process
/// to let the lock go, bounded by [`wait_limit`].
pub(super) fn wait_bounded<'a>(
    freed: &std::sync::Condvar,
    holder: std::sync::MutexGuard<'a, Holder>,
) -> std::sync::MutexGuard<'a, Holder> {
    let (held_by, limit) = (holder.thread, wait_limit());
    let (holder, waited) = freed
        .wait_timeout(holder, limit)
        .unwrap_or_else(PoisonError::into_inner);
    assert!(
        !waited.timed_out() || holder.thread != held_by,
        "the pool's lock held by {held_by:?} for {limit:?}: a lock never released \
         (or held that long, a `flock` wait for another process included)"
    );
    holder
}

/// [`HugePageSize::lock_pool`]'s `flock` for the thread that claimed
/// `lock`, waiting for another process, polled and bounded by
/// [`wait_limit`]: past it, the claim is given up (so the next test is
/// not blamed) and it panics. A refusal other than a wait leaves the
/// serialisation to this process's threads, as the unbounded `flock`
/// does.
pub(super) fn flock_bounded(f: &fs::File, lock: &ThreadLock) {
    let (start, limit) = (std::time::Instant::now(), wait_limit());
    loop {
        match rustix::fs::flock(f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Err(rustix::io::Errno::INTR | rustix::io::Errno::WOULDBLOCK)
                if start.elapsed() < limit =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(rustix::io::Errno::INTR | rustix::io::Errno::WOULDBLOCK) => {
                let mut holder = lock.holder.lock().unwrap_or_else(PoisonError::into_inner);
                (holder.thread, holder.depth, holder.file) = (None, 0, None);
                lock.freed.notify_all();
                drop(holder);
                panic!(
                    "the pool's file lock held by another process for {limit:?}: a lock never \
                     released, or held that long"
                );
            }
            _ => return,
        }
    }
}

/// Another thread asking for `size`'s lock: the receiver hears once
/// it has it (and has let it go).
fn another_thread_locks(size: HugePageSize) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(size.lock_pool());
        let _ = tx.send(());
    });
    rx
}

/// Fails unless another thread can take `size`'s lock (its wait is
/// bounded by [`wait_limit`]; a panic there ends the channel): a lock an
/// earlier test never let go (a broken release) fails the test that
/// needs it in bounded time, not at the binary's limit.
fn assert_free(size: HugePageSize) {
    another_thread_locks(size)
        .recv_timeout(wait_limit() * 2)
        .expect("another thread could not take the pool's lock: an earlier lock never released");
}

/// A thread takes its own lock again, and the lock is held until the
/// thread's last `PoolLock` drops, whichever drops first; another
/// thread then gets it.
#[test]
fn a_thread_relocks_and_holds_until_its_last_lock_drops() {
    let _hang = mmbatch_testkit::hang_guard("a_thread_relocks_and_holds_until_its_last_lock_drops");
    let size = HugePageSize::Size1G;
    assert_free(size);
    let first = size.lock_pool();
    let second = size.lock_pool();
    assert_eq!(second.size(), size);
    drop(first);
    let other = another_thread_locks(size);
    assert!(
        other.recv_timeout(Duration::from_millis(100)).is_err(),
        "another thread locked the pool while this one held it"
    );
    // Another size's lock is another lock, to other threads too.
    another_thread_locks(HugePageSize::Size2M)
        .recv_timeout(wait_limit() * 2)
        .expect("the 2 MiB pool's lock waited for the 1 GiB pool's");
    drop(second);
    other
        .recv_timeout(wait_limit() * 2)
        .expect("the lock was not released with the thread's last PoolLock");
    // And taken again afresh.
    let again = size.lock_pool();
    let other = another_thread_locks(size);
    assert!(other.recv_timeout(Duration::from_millis(100)).is_err());
    drop(again);
    other.recv_timeout(wait_limit() * 2).unwrap();
}

/// A lock taken in a thread-local's destructor at the thread's exit
/// (a growth kept in a thread-local), after the other thread-locals
/// a lock once kept (its first one panicked there, gone, which
/// aborts the process), works and is released. In a child, whose
/// abort the parent sees.
#[test]
fn a_lock_taken_as_a_thread_exits_works() {
    use std::{cell::RefCell, sync::atomic::AtomicBool};
    const NAME: &str = "pool::tests::a_lock_taken_as_a_thread_exits_works";
    if let Some(run) = mmbatch_testkit::child::parent(NAME, Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    static LOCKED: AtomicBool = AtomicBool::new(false);
    struct LocksOnDrop;
    impl Drop for LocksOnDrop {
        fn drop(&mut self) {
            drop(HugePageSize::Size2M.lock_pool());
            LOCKED.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    std::thread_local! {
        static LATE: RefCell<Option<LocksOnDrop>> = const { RefCell::new(None) };
    }
    std::thread::spawn(|| {
        // Registered first, so destroyed last: after any
        // thread-local registered as the lock is taken.
        LATE.with(|l| *l.borrow_mut() = Some(LocksOnDrop));
        drop(HugePageSize::Size2M.lock_pool());
    })
    .join()
    .unwrap();
    assert!(LOCKED.load(std::sync::atomic::Ordering::SeqCst));
    // Released: another thread takes it.
    another_thread_locks(HugePageSize::Size2M)
        .recv_timeout(wait_limit() * 2)
        .expect("the lock taken at the thread's exit was not released");
}

/// Two locks of one size nested in a thread-local's destructor at the
/// thread's exit (a growth kept in a thread-local dropped with a lock
/// held): the second takes it again at once. When the lock kept its
/// holders in a thread-local of its own, gone by then, the second
/// waited on its own thread for good. In a child, under a limit.
#[test]
fn nested_locks_at_a_threads_exit_take_it_again() {
    use std::{cell::RefCell, sync::atomic::AtomicBool};
    const NAME: &str = "pool::tests::nested_locks_at_a_threads_exit_take_it_again";
    if let Some(run) = mmbatch_testkit::child::parent(NAME, Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    static NESTED: AtomicBool = AtomicBool::new(false);
    struct LocksTwiceOnDrop;
    impl Drop for LocksTwiceOnDrop {
        fn drop(&mut self) {
            let outer = HugePageSize::Size2M.lock_pool();
            let inner = HugePageSize::Size2M.lock_pool();
            drop(outer);
            drop(inner);
            NESTED.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    std::thread_local! {
        static LATE: RefCell<Option<LocksTwiceOnDrop>> = const { RefCell::new(None) };
    }
    std::thread::spawn(|| {
        // Registered first, so destroyed last: after any
        // thread-local registered as the lock is taken.
        LATE.with(|l| *l.borrow_mut() = Some(LocksTwiceOnDrop));
        drop(HugePageSize::Size2M.lock_pool());
    })
    .join()
    .unwrap();
    assert!(NESTED.load(std::sync::atomic::Ordering::SeqCst));
    another_thread_locks(HugePageSize::Size2M)
        .recv_timeout(wait_limit() * 2)
        .expect("the locks taken at the thread's exit were not released");
}

/// Forks a child that runs `verdict` and exits with what it returns (7
/// for a pass) without the test harness's exit, or by SIGALRM after 10
/// s: a hang must end, since the forked child holds the test's output
/// pipe, which its parent's limit does not close. Returns its pid.
fn fork_child(verdict: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: each caller's `verdict` makes system calls, takes only
    // locks no other thread held at the fork (glibc's allocator is
    // fork-safe), and the child exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: async-signal-safe; the default action ends the child.
        unsafe { libc::alarm(10) };
        // A panic (a bounded wait's) is the child's failure, not an
        // unwind into the forked copy of the harness.
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(verdict)).unwrap_or(101);
        // SAFETY: ends the forked child, skipping the harness's exit.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits for [`fork_child`]'s child `pid`; panics with `what` and its
/// status unless it exited 7.
fn expect_passed(pid: libc::pid_t, what: &str) {
    let mut status = 0;
    // SAFETY: waits for a child this process forked.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid: {}", io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
        "{what}: status {status:#x}"
    );
}

/// A child forked by a thread that holds the lock takes it at once,
/// as that thread would (the `flock`ed file is the child's too), and
/// lets it go with its last lock, the inherited one. In a child process
/// of the test, under a limit.
#[test]
fn a_child_forked_under_the_lock_takes_it() {
    const NAME: &str = "pool::tests::a_child_forked_under_the_lock_takes_it";
    if let Some(run) = mmbatch_testkit::child::parent(NAME, Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    assert_free(HugePageSize::Size1G);
    let mut held = Some(HugePageSize::Size1G.lock_pool());
    let pid = fork_child(|| {
        let again = HugePageSize::Size1G.lock_pool();
        let slot = &THREADS[HugePageSize::Size1G.index()];
        let depth = |d| slot.holder.lock().map_or(usize::MAX, |h| h.depth) == d;
        let counted = depth(2);
        drop(again);
        let counted = counted && depth(1);
        drop(held.take());
        if counted && depth(0) { 7 } else { 8 }
    });
    expect_passed(pid, "the forked child did not take the lock and let it go");
    drop(held);
}

/// A child forked by a thread that does not hold the lock, while
/// another of the process's threads does, waits for that thread's
/// release (the `flock`), which a marker file written just before it
/// tells: the holder's `PoolLock`s are not the child's to let go, and
/// a child that took the lock over would never let it go.
#[test]
fn a_child_forked_beside_the_holder_waits_for_it() {
    const NAME: &str = "pool::tests::a_child_forked_beside_the_holder_waits_for_it";
    if let Some(run) = mmbatch_testkit::child::parent(NAME, Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    let size = HugePageSize::Size2M;
    if fs::File::open(size.pool_file("nr_hugepages")).is_err() {
        eprintln!("no 2 MiB pool here (no flock to wait on): not exercised");
        return;
    }
    assert_free(size);
    let marker = std::env::temp_dir().join(format!("mmbatch-pool-fork-{}", std::process::id()));
    let _ = fs::remove_file(&marker);
    let (locked, held) = mpsc::channel();
    let (release, go) = mpsc::channel::<()>();
    let m = marker.clone();
    let holder = std::thread::spawn(move || {
        let lock = size.lock_pool();
        locked.send(()).unwrap();
        let _ = go.recv();
        fs::write(&m, b"released").unwrap();
        drop(lock);
    });
    held.recv().unwrap();
    let path = std::ffi::CString::new(marker.to_str().unwrap()).unwrap();
    // The holder's claim ended before it signalled: no thread holds the
    // lock's mutex at the fork.
    let pid = fork_child(|| {
        let lock = size.lock_pool();
        // SAFETY: a C string; `access` only reads it.
        let after = unsafe { libc::access(path.as_ptr(), libc::F_OK) } == 0;
        drop(lock);
        if after { 7 } else { 9 }
    });
    std::thread::sleep(Duration::from_millis(300));
    release.send(()).unwrap();
    holder.join().unwrap();
    let passed = std::panic::catch_unwind(|| {
        expect_passed(
            pid,
            "the forked child did not wait for the holder's release",
        )
    });
    let _ = fs::remove_file(&marker);
    if let Err(e) = passed {
        std::panic::resume_unwind(e);
    }
}

/// Env var: the path a child writes once it holds the pool's lock.
const CHILD: &str = "MMBATCH_POOL_LOCK_CHILD";

/// The lock holds between processes (the `flock`): a child asking for
/// it while this process holds it gets it only after the release,
/// which a marker file written just before the release tells.
#[test]
fn another_process_waits_for_the_lock() {
    let _hang = mmbatch_testkit::hang_guard("another_process_waits_for_the_lock");
    const NAME: &str = "pool::tests::another_process_waits_for_the_lock";
    let size = HugePageSize::Size2M;
    if let Ok(marker) = std::env::var(CHILD) {
        let lock = size.lock_pool();
        assert!(
            std::path::Path::new(&marker).exists(),
            "the child locked the pool while its parent held it"
        );
        drop(lock);
        return;
    }
    if std::fs::File::open(size.pool_file("nr_hugepages")).is_err() {
        eprintln!("no 2 MiB pool here: not exercised");
        return;
    }
    let marker = std::env::temp_dir().join(format!("mmbatch-pool-lock-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    assert_free(size);
    let lock = size.lock_pool();
    let path = marker.to_str().unwrap().to_owned();
    let child = std::thread::spawn(move || {
        // Under the hang guard's limit: a lock never released fails.
        mmbatch_testkit::child::run(NAME, Duration::from_secs(20), &[(CHILD, &path)])
    });
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&marker, b"released").unwrap();
    drop(lock);
    let run = child.join().unwrap();
    let _ = std::fs::remove_file(&marker);
    run.expect_success();
}

/// As root: a growth of two pages shows in the pool's counts, says
/// so, and is taken back out when dropped; its lock dropped first or
/// held (the drop takes it again).
#[test]
fn a_growth_is_counted_and_given_back() {
    let _hang = mmbatch_testkit::hang_guard("a_growth_is_counted_and_given_back");
    // The pool to this test: the binary's other pool tests wait.
    let _turn = mmbatch_testkit::huge::hold();
    let size = HugePageSize::Size2M;
    assert_free(size);
    let (Some(total), Some(surplus)) = (
        size.pool_count("nr_hugepages"),
        size.pool_count("surplus_hugepages"),
    ) else {
        eprintln!("no 2 MiB pool here: not exercised");
        return;
    };
    // No other process overcommits meanwhile on a test host.
    let before = total - surplus;
    assert_eq!(size.persistent_pages(), Some(before));
    let lock = size.lock_pool();
    // Nothing asked, nothing written (not even the total, which would
    // make surplus pages persistent): as any user.
    assert_eq!(lock.grow(0).unwrap().pages(), 0);
    assert_eq!(size.pool_count("nr_hugepages"), Some(total));
    let growth = match lock.grow(2) {
        Ok(g) => g,
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("needs root"), "{msg}");
            assert!(msg.contains("hugepages-2048kB/nr_hugepages"), "{msg}");
            eprintln!("not root: the pool cannot grow here; not exercised ({msg})");
            return;
        }
    };
    // Whether it grew is read from sysfs itself, not from the growth;
    // with a gigabyte available, it must have.
    if size.pool_count("nr_hugepages") < Some(total + 2) {
        drop(growth);
        let available = crate::huge::meminfo_bytes("MemAvailable").ok().flatten();
        assert!(
            available.is_none_or(|a| a < 1 << 30),
            "the pool did not grow by 2 pages with {available:?} bytes available"
        );
        eprintln!("no memory for two 2 MiB pages: not exercised");
        return;
    }
    // Surplus pages there were are persistent now, and counted.
    assert_eq!((growth.pages(), growth.size()), (2 + surplus, size));
    assert_eq!(size.persistent_pages(), Some(before + 2 + surplus));
    // Given back under the lock this thread holds, which it takes
    // again.
    drop(growth);
    assert_eq!(size.persistent_pages(), Some(before));
    let growth = lock.grow(1).unwrap();
    drop(lock);
    assert_eq!(size.persistent_pages(), Some(before + growth.pages()));
    drop(growth);
    assert_eq!(size.persistent_pages(), Some(before));
    assert_eq!(size.pool_count("nr_hugepages"), Some(total));
}
