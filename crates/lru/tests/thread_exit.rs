//! The engine called from a thread-local's destructor, as a thread exits:
//! after the per-thread state of the engine's counters may be gone.

use std::{cell::Cell, sync::LazyLock, time::Duration};

use mmbatch_lru::{Config, Engine, Pfn};

/// A thread-local first touched before the thread's first engine call
/// mlocks and munlocks a frame in its destructor, which runs after the
/// engine's per-thread counters are torn down; and one whose thread got
/// its `thread_local` id from another `ThreadLocal` and never called the
/// engine before. The engine's counters took a new id there, which
/// panicked in a thread-local's destructor: the process aborted
/// ("cannot access a Thread Local Storage value during or after
/// destruction"). Now the counts go to the shared total. In a child: an
/// abort would end the test binary.
#[test]
fn an_engine_call_from_a_thread_locals_destructor_is_counted() {
    let name = "an_engine_call_from_a_thread_locals_destructor_is_counted";
    if let Some(run) = mmbatch_testkit::child::parent(name, Duration::from_secs(20)) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    static ENGINE: LazyLock<Engine> = LazyLock::new(|| {
        let e = Engine::new(Config::new(8)).unwrap();
        for i in 0..8 {
            e.lru_add(Pfn(i)).unwrap();
        }
        e.lru_add_drain();
        e
    });
    /// Mlocks and munlocks its frame when its thread exits.
    struct LockOnExit(u32);
    impl Drop for LockOnExit {
        fn drop(&mut self) {
            ENGINE.mlock(Pfn(self.0)).unwrap();
            ENGINE.munlock(Pfn(self.0)).unwrap();
        }
    }
    thread_local! {
        static EXIT: Cell<Option<LockOnExit>> = const { Cell::new(None) };
    }
    LazyLock::force(&ENGINE);
    std::thread::spawn(|| {
        EXIT.with(|e| e.set(Some(LockOnExit(1))));
        ENGINE.mlock(Pfn(2)).unwrap();
    })
    .join()
    .unwrap();
    static OTHER: LazyLock<thread_local::ThreadLocal<u8>> =
        LazyLock::new(thread_local::ThreadLocal::new);
    std::thread::spawn(|| {
        EXIT.with(|e| e.set(Some(LockOnExit(3))));
        OTHER.get_or(|| 1);
    })
    .join()
    .unwrap();
    ENGINE.lru_add_drain_all();
    let st = ENGINE.stats();
    // Frames 1, 2 and 3 mlocked once each; 2 is still.
    assert_eq!((st.mlocked, st.nr_mlock), (3, 1), "{st:?}");
    ENGINE.check_invariants().unwrap();
}
