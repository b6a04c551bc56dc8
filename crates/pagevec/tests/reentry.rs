//! Apply code that calls back into the batcher applying it. The slot lock
//! it holds is not reentrant: before, each of these calls waited forever
//! for it (seen: every case below hung to the limit). Now each panics
//! naming the call, the panic leaves the batcher working, and the same
//! calls from other Apply code that holds no lock of it still work.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Mutex, MutexGuard, OnceLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use mmbatch_pagevec::{Apply, Batcher};
use mmbatch_testkit::child;

const LIMIT: Duration = Duration::from_secs(20);

/// What the Apply code calls back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Stats,
    DrainAll,
    DrainLocal,
    AnyLocal,
    Disable,
    /// `N` queues: the batch fills and must be applied.
    QueuePastFull,
}

/// The calls that panic from Apply code.
const CALLS: [Call; 6] = [
    Call::Stats,
    Call::DrainAll,
    Call::DrainLocal,
    Call::AnyLocal,
    Call::Disable,
    Call::QueuePastFull,
];

/// [`CALL`]'s value for a `Debug` print of the batcher from Apply code,
/// which does not panic: the print goes to [`PRINTED`].
const DEBUG: usize = 100;
static PRINTED: Mutex<String> = Mutex::new(String::new());

const N: usize = 4;

/// A total behind one lock; op 1 calls back into [`BATCHER`] with the
/// call numbered [`CALL`] (op 0 is plain).
#[derive(Debug)]
struct Reenter(Mutex<u64>);

static CALL: AtomicUsize = AtomicUsize::new(usize::MAX);
static APPLIED: AtomicU64 = AtomicU64::new(0);
static BATCHER: OnceLock<Batcher<Reenter, N>> = OnceLock::new();

fn batcher() -> &'static Batcher<Reenter, N> {
    BATCHER.get_or_init(|| Batcher::new(Reenter(Mutex::new(0))))
}

impl Apply for Reenter {
    type Op = u64;
    type Key = ();
    type Guard<'a> = MutexGuard<'a, u64>;
    fn key(&self, _: &u64) {}
    fn lock(&self, _: ()) -> MutexGuard<'_, u64> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    fn apply(&self, total: &mut MutexGuard<'_, u64>, op: u64) {
        **total += 1;
        APPLIED.fetch_add(1, Ordering::Relaxed);
        if op != 1 {
            return;
        }
        let b = batcher();
        match CALLS.get(CALL.load(Ordering::Relaxed)) {
            Some(Call::Stats) => drop(b.stats()),
            Some(Call::DrainAll) => b.drain_all(),
            Some(Call::DrainLocal) => b.drain_local(),
            Some(Call::AnyLocal) => drop(b.any_local(|_| true)),
            Some(Call::Disable) => b.disable(),
            Some(Call::QueuePastFull) => (0..N).for_each(|_| b.queue(0)),
            None if CALL.load(Ordering::Relaxed) == DEBUG => {
                *PRINTED.lock().unwrap() = format!("{b:?}");
            }
            None => {}
        }
    }
}

/// Queues a full batch whose second op calls back with `call`: the
/// callback panics, and the panic comes out of `queue`.
fn reenter(call: Call) -> String {
    CALL.store(
        CALLS.iter().position(|&c| c == call).unwrap(),
        Ordering::Relaxed,
    );
    let b = batcher();
    let err = catch_unwind(AssertUnwindSafe(|| {
        for op in [0, 1, 0, 0] {
            b.queue(op);
        }
    }))
    .expect_err("calling back into the applying batcher must panic");
    CALL.store(usize::MAX, Ordering::Relaxed);
    err.downcast_ref::<String>().cloned().unwrap_or_default()
}

#[test]
fn apply_code_calling_back_into_its_batcher_panics_instead_of_hanging() {
    // Miri cannot start a child (and runs the fixed code, which returns).
    if !cfg!(miri) {
        if let Some(run) = child::parent(
            "apply_code_calling_back_into_its_batcher_panics_instead_of_hanging",
            LIMIT,
        ) {
            run.expect_success();
            return;
        }
    }
    for call in CALLS {
        let msg = reenter(call);
        assert!(
            msg.contains("was called from Apply code") && msg.contains("forever"),
            "{call:?}: {msg}"
        );
        // The batcher goes on: the slot lock is free, queueing and draining
        // apply, and the calls work outside Apply code.
        let before = APPLIED.load(Ordering::Relaxed);
        batcher().queue(0);
        batcher().drain_all();
        let applied = APPLIED.load(Ordering::Relaxed) - before;
        assert!(applied > 0, "{call:?}");
        if call == Call::QueuePastFull {
            // The refused drain left this thread's ring full: the next
            // queue applies those N ops first, and its own op is not lost.
            assert_eq!(applied, N as u64 + 1, "{call:?}");
        }
        assert_eq!(batcher().stats().pending, 0, "{call:?}");
        assert!(!batcher().any_local(|_| true));
        assert!(
            !batcher().is_disabled(),
            "{call:?}: a refused disable stays in effect"
        );
    }
}

/// A `Debug` print of the batcher from its Apply code (a log line, a
/// panic message) prints, without the statistics it cannot take there.
/// It panicked as `stats` does, and from a panic message (a panic while
/// panicking) aborted the process.
#[test]
fn apply_code_may_print_its_batcher() {
    if !cfg!(miri) {
        if let Some(run) = child::parent("apply_code_may_print_its_batcher", LIMIT) {
            run.expect_success();
            return;
        }
    }
    CALL.store(DEBUG, Ordering::Relaxed);
    for op in [0, 1, 0, 0] {
        batcher().queue(op);
    }
    CALL.store(usize::MAX, Ordering::Relaxed);
    let printed = PRINTED.lock().unwrap().clone();
    assert!(printed.starts_with("Batcher { capacity: 4"), "{printed}");
    assert!(
        printed.contains("while this thread applies it"),
        "{printed}"
    );
    let outside = format!("{:?}", batcher());
    assert!(outside.contains("stats: BatchStats {"), "{outside}");
}

/// The same calls from Apply code that `drain_all` runs for another
/// thread's batch: the thread holds that slot's lock and the target's, not
/// its own slot's. Before, `drain_local` (with ops of its own waiting) and
/// `queue` past a full batch took the target's lock again and hung.
#[test]
fn apply_code_draining_another_threads_batch_panics_instead_of_hanging() {
    if !cfg!(miri) {
        if let Some(run) = child::parent(
            "apply_code_draining_another_threads_batch_panics_instead_of_hanging",
            LIMIT,
        ) {
            run.expect_success();
            return;
        }
    }
    for call in CALLS {
        CALL.store(
            CALLS.iter().position(|&c| c == call).unwrap(),
            Ordering::Relaxed,
        );
        let b = batcher();
        // Another thread's batch holds the op that calls back; this
        // thread's own holds one more, so `drain_local` has work.
        std::thread::scope(|s| {
            s.spawn(|| b.queue(1));
        });
        let err = catch_unwind(AssertUnwindSafe(|| {
            b.queue(0);
            b.drain_all();
        }))
        .expect_err("calling back into the applying batcher must panic");
        CALL.store(usize::MAX, Ordering::Relaxed);
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("was called from Apply code") && msg.contains("forever"),
            "{call:?}: {msg}"
        );
        b.drain_all();
        assert_eq!(b.stats().pending, 0, "{call:?}");
        assert!(!b.is_disabled(), "{call:?}");
    }
}

/// A `disable` whose drain pass panics (in Apply code) is taken back: the
/// caller has no `disable` to match with `enable`. Before, the batcher
/// stayed disabled for good.
#[test]
fn a_disable_whose_pass_panics_is_undone() {
    #[derive(Debug)]
    struct Panics;
    impl Apply for Panics {
        type Op = bool;
        type Key = ();
        type Guard<'a> = ();
        fn key(&self, _: &bool) {}
        fn lock(&self, _: ()) {}
        fn apply(&self, _: &mut (), op: bool) {
            assert!(!op, "the Apply code panicked");
        }
    }
    let b: Batcher<Panics, N> = Batcher::new(Panics);
    b.queue(true);
    assert!(catch_unwind(AssertUnwindSafe(|| b.disable())).is_err());
    assert!(!b.is_disabled());
    b.queue(false);
    assert_eq!(b.stats().pending, 1, "ops batch again");
}

/// `any_local`'s predicate is user code under the slot lock too: calling
/// back from it panics as from Apply code (it hung on the code before this
/// check covered it; found by a review helper).
#[test]
fn any_local_predicate_calling_back_panics_instead_of_hanging() {
    if !cfg!(miri) {
        if let Some(run) = child::parent(
            "any_local_predicate_calling_back_panics_instead_of_hanging",
            LIMIT,
        ) {
            run.expect_success();
            return;
        }
    }
    let b: Batcher<Reenter, N> = Batcher::new(Reenter(Mutex::new(0)));
    b.queue(0);
    let err = catch_unwind(AssertUnwindSafe(|| b.any_local(|_| b.stats().ops > 0)))
        .expect_err("stats from any_local's predicate must panic");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("Batcher::stats was called from Apply code"),
        "{msg}"
    );
    assert!(b.any_local(|_| true), "the batcher goes on");
}

/// Calls that take no lock the thread holds still work from Apply code:
/// into another batcher (here one inside the target, at its start, where
/// it could share the outer batcher's address), and into the applying
/// thread's own slot while it drains another thread's.
#[test]
fn apply_code_may_use_other_batchers_and_other_slots() {
    #[derive(Debug)]
    struct Outer {
        inner: Batcher<Reenter, N>,
    }
    impl Apply for Outer {
        type Op = u64;
        type Key = ();
        type Guard<'a> = ();
        fn key(&self, _: &u64) {}
        fn lock(&self, _: ()) {}
        fn apply(&self, _: &mut (), _op: u64) {
            // Past a full batch of the inner batcher (plain ops: 0), and
            // its counters.
            for _ in 0..=N {
                self.inner.queue(0);
            }
            assert!(self.inner.stats().ops > 0);
        }
    }
    let outer: Batcher<Outer, N> = Batcher::new(Outer {
        inner: Batcher::new(Reenter(Mutex::new(0))),
    });
    // Another thread's ops, drained from here: the Apply code queues into
    // this thread's inner slots, which this thread does not hold.
    std::thread::scope(|s| {
        s.spawn(|| outer.queue(2));
    });
    outer.drain_all();
    outer.queue(3);
    outer.drain_local();
    let inner = &outer.target().inner;
    inner.drain_all();
    assert_eq!(inner.stats().ops, 2 * (N as u64 + 1));
    assert_eq!(inner.stats().pending, 0);
}
