//! Unit tests of `fault`'s saved signal action.

use super::*;

fn action(handler: usize, flags: i32) -> libc::sigaction {
    // SAFETY: an all-zero sigaction is a valid empty value.
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    a.sa_sigaction = handler;
    a.sa_flags = flags;
    a
}

/// Both tests run in a child, bounded: a seqlock whose reader waits
/// on the wrong sequence spins forever.
const LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

#[test]
fn old_action_is_none_until_stored_then_the_last_stored() {
    let name = "fault::tests::old_action_is_none_until_stored_then_the_last_stored";
    if let Some(run) = mmbatch_testkit::child::parent(name, LIMIT) {
        return run.expect_success();
    }
    let old = OldAction::new();
    assert!(old.load().is_none());
    old.store(&action(0x1234, libc::SA_SIGINFO));
    let a = old.load().expect("stored");
    assert_eq!((a.sa_sigaction, a.sa_flags), (0x1234, libc::SA_SIGINFO));
    old.store(&action(0x5678, 0));
    let a = old.load().expect("stored");
    assert_eq!((a.sa_sigaction, a.sa_flags), (0x5678, 0));
}

/// The seqlock never hands out a torn copy: readers racing a writer
/// that alternates two actions see one or the other, whole.
#[test]
fn old_action_is_never_read_torn() {
    let name = "fault::tests::old_action_is_never_read_torn";
    if let Some(run) = mmbatch_testkit::child::parent(name, LIMIT) {
        return run.expect_success();
    }
    let old = OldAction::new();
    let a = action(usize::MAX, -1);
    let b = action(0, 0);
    old.store(&a);
    let stop = AtomicBool::new(false);
    /// Stops the writer however the reader leaves (a failed
    /// assertion too), so the scope can join it.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                old.store(if n % 2 == 0 { &b } else { &a });
                n += 1;
            }
        });
        let _stop = Stop(&stop);
        let start = std::time::Instant::now();
        let mut reads = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(300) {
            let r = old.load().expect("stored");
            let whole = (r.sa_sigaction, r.sa_flags) == (a.sa_sigaction, a.sa_flags)
                || (r.sa_sigaction, r.sa_flags) == (b.sa_sigaction, b.sa_flags);
            if !whole {
                panic!(
                    "torn read after {reads}: handler {:x}, flags {:x}",
                    r.sa_sigaction, r.sa_flags
                );
            }
            reads += 1;
        }
    });
}
