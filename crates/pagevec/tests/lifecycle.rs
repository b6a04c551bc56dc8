//! What a `Batcher`'s end does with the ops still waiting: the promises
//! its docs make to a user who drops it or takes its target back.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{Arc, Mutex, MutexGuard},
};

use mmbatch_pagevec::{Apply, Batcher};

/// Applied ops, in order, shared with the test.
#[derive(Debug, Default, Clone)]
struct Log(Arc<Mutex<Vec<u32>>>);

impl Apply for Log {
    type Op = u32;
    type Key = ();
    type Guard<'a> = MutexGuard<'a, Vec<u32>>;
    fn key(&self, _: &u32) {}
    fn lock(&self, _: ()) -> Self::Guard<'_> {
        self.0.lock().unwrap()
    }
    fn apply(&self, log: &mut Self::Guard<'_>, op: u32) {
        log.push(op);
    }
}

impl Log {
    fn ops(&self) -> Vec<u32> {
        self.0.lock().unwrap().clone()
    }
}

#[test]
fn dropping_a_batcher_applies_what_waits() {
    let log = Log::default();
    let b: Batcher<Log, 8> = Batcher::new(log.clone());
    for op in 1..=3 {
        b.queue(op);
    }
    assert_eq!(log.ops(), [] as [u32; 0], "fewer than a batch: waiting");
    drop(b);
    assert_eq!(log.ops(), [1, 2, 3]);
}

#[test]
fn into_inner_applies_what_waits_and_gives_the_target_back() {
    let log = Log::default();
    let b: Batcher<Log, 8> = Batcher::new(log.clone());
    b.queue(7);
    let target = b.into_inner();
    assert_eq!(target.ops(), [7]);
    assert_eq!(log.ops(), [7], "applied once, not again by drop");
}

/// Dropped while its thread unwinds, a batcher drops its waiting ops
/// rather than apply them (a second panic there would abort).
#[test]
fn a_batcher_dropped_by_a_panic_applies_nothing() {
    let log = Log::default();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let b: Batcher<Log, 8> = Batcher::new(log.clone());
        b.queue(1);
        panic!("the caller failed");
    }));
    assert!(r.is_err());
    assert_eq!(log.ops(), [] as [u32; 0]);
}

/// Ops that own something are dropped, not leaked, when a panic drops the
/// batcher holding them: each slot frees what it still holds.
#[test]
fn ops_a_panic_drops_are_freed() {
    /// Counts nothing; its ops only own a reference.
    struct Sink(Mutex<()>);
    impl Apply for Sink {
        type Op = Arc<()>;
        type Key = ();
        type Guard<'a> = MutexGuard<'a, ()>;
        fn key(&self, _: &Arc<()>) {}
        fn lock(&self, _: ()) -> Self::Guard<'_> {
            self.0.lock().unwrap()
        }
        fn apply(&self, _: &mut Self::Guard<'_>, _: Arc<()>) {}
    }
    let owned = Arc::new(());
    let r = catch_unwind(AssertUnwindSafe(|| {
        let b: Batcher<Sink, 8> = Batcher::new(Sink(Mutex::new(())));
        for _ in 0..3 {
            b.queue(owned.clone());
        }
        std::thread::scope(|s| {
            s.spawn(|| b.queue(owned.clone()));
        });
        assert_eq!(Arc::strong_count(&owned), 5, "four ops wait");
        panic!("the caller failed");
    }));
    assert!(r.is_err());
    assert_eq!(Arc::strong_count(&owned), 1, "ops leaked");
}

/// A thread-local whose destructor queues, first touched before the
/// thread's first `queue`: its destructor runs after the batcher's
/// per-thread state is torn down. It aborted the process ("cannot access
/// a Thread Local Storage value during or after destruction", then
/// "thread local panicked on drop"). Now the op is applied at once, after
/// the thread's earlier ops, and counted as immediate; the other order
/// batches as usual. In a child: the old code's abort would end the test
/// binary.
#[test]
#[cfg_attr(miri, ignore = "runs in a child process")]
fn a_thread_locals_destructor_can_queue() {
    use std::{sync::LazyLock, time::Duration};
    let name = "a_thread_locals_destructor_can_queue";
    if let Some(run) = mmbatch_testkit::child::parent(name, Duration::from_secs(20)) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    static LOG: LazyLock<Log> = LazyLock::new(Log::default);
    static B: LazyLock<Batcher<Log, 8>> = LazyLock::new(|| Batcher::new(LOG.clone()));
    /// Queues its op when its thread exits.
    struct QueueOnExit(u32);
    impl Drop for QueueOnExit {
        fn drop(&mut self) {
            B.queue(self.0);
        }
    }
    thread_local! {
        static EXIT: std::cell::Cell<Option<QueueOnExit>> = const { std::cell::Cell::new(None) };
    }
    // Touched first, then the batcher: torn down after it.
    std::thread::spawn(|| {
        EXIT.with(|e| e.set(Some(QueueOnExit(3))));
        B.queue(1);
        B.queue(2);
    })
    .join()
    .unwrap();
    assert_eq!(LOG.ops(), [1, 2, 3], "in the thread's order");
    let st = B.stats();
    assert_eq!((st.ops, st.immediate, st.pending), (2, 1, 0), "{st:?}");
    // One key: each batch, drain and immediate op took the lock once.
    assert_eq!(
        st.lock_acquisitions,
        st.batches + st.drains + st.immediate,
        "{st:?}"
    );
    // The batcher first, then the thread-local: its destructor queues
    // while the thread's batch is still there.
    std::thread::spawn(|| {
        B.queue(4);
        EXIT.with(|e| e.set(Some(QueueOnExit(5))));
    })
    .join()
    .unwrap();
    B.drain_all();
    assert_eq!(LOG.ops(), [1, 2, 3, 4, 5]);
    assert_eq!(B.stats().immediate, 1);
    // The thread-local first, then another `ThreadLocal` (which gives the
    // thread its id, and frees it at exit before the thread-local's
    // destructor runs), and no `queue` until that destructor: taking a new
    // id there panicked, which aborted.
    static OTHER: LazyLock<thread_local::ThreadLocal<u8>> =
        LazyLock::new(thread_local::ThreadLocal::new);
    /// Queues two ops when its thread exits.
    struct QueueTwoOnExit(u32);
    impl Drop for QueueTwoOnExit {
        fn drop(&mut self) {
            B.queue(self.0);
            B.queue(self.0 + 1);
        }
    }
    thread_local! {
        static EXIT_TWO: std::cell::Cell<Option<QueueTwoOnExit>> = const { std::cell::Cell::new(None) };
    }
    std::thread::spawn(|| {
        EXIT_TWO.with(|e| e.set(Some(QueueTwoOnExit(5))));
        OTHER.get_or(|| 1);
    })
    .join()
    .unwrap();
    // The first at once (its call's `get_or` panicked, caught); the
    // second at once too, or batched where `thread_local` handed the
    // thread an id whose slot a dead thread left (both are each applied
    // exactly once, in order, by the next `drain_all` at the latest).
    let st = B.stats();
    assert!(st.immediate == 2 || st.immediate == 3, "{st:?}");
    B.drain_all();
    assert_eq!(LOG.ops(), [1, 2, 3, 4, 5, 5, 6]);
    assert_eq!(B.stats().pending, 0);
    // A destructor that drains, after the thread's slot is out of reach:
    // the thread's waiting op is applied (with everyone's), not left for
    // the next `drain_all`.
    struct DrainOnExit;
    impl Drop for DrainOnExit {
        fn drop(&mut self) {
            B.drain_local();
        }
    }
    thread_local! {
        static DRAIN: std::cell::Cell<Option<DrainOnExit>> = const { std::cell::Cell::new(None) };
    }
    std::thread::spawn(|| {
        DRAIN.with(|d| d.set(Some(DrainOnExit)));
        B.queue(7);
    })
    .join()
    .unwrap();
    assert_eq!(LOG.ops(), [1, 2, 3, 4, 5, 5, 6, 7]);
    assert_eq!(B.stats().pending, 0);
}
