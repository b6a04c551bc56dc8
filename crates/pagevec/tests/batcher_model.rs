//! `Batcher` against the sequential reference model in `model/mod.rs`:
//! random step sequences (weighted towards queueing) from several threads.

use mmbatch_models::batcher as model;

use std::sync::{Mutex, MutexGuard};

use mmbatch_pagevec::{Apply, Batcher};
use model::{KEYS, Lists, Step, THREADS, run};
use proptest::prelude::*;

fn step() -> impl Strategy<Value = Step> {
    let t = 0..THREADS;
    prop_oneof![
        12 => (t.clone(), 0..KEYS).prop_map(|(t, k)| Step::Queue(t, k)),
        1 => (t.clone(), 0..KEYS).prop_map(|(t, k)| Step::ApplyNow(t, k)),
        2 => t.clone().prop_map(Step::DrainLocal),
        1 => t.clone().prop_map(Step::DrainAll),
        1 => t.clone().prop_map(Step::Disable),
        1 => t.prop_map(Step::Enable),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 128 },
        // Miri's isolation forbids the file access persistence needs.
        failure_persistence: if cfg!(miri) {
            None
        } else {
            ProptestConfig::default().failure_persistence
        },
        ..ProptestConfig::default()
    })]

    #[test]
    fn batcher_matches_sequential_model(
        steps in prop::collection::vec(step(), 1..if cfg!(miri) { 20 } else { 60 })
    ) {
        run(&steps).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn full_batch_relocks_only_on_key_change() {
    let b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    for (i, k) in [0, 0, 0, 1, 1, 0, 2, 2].into_iter().enumerate() {
        b.queue((0, i as u32, k));
    }
    let s = b.stats();
    assert_eq!((s.batches, s.lock_acquisitions, s.pending), (1, 4, 0));
}

#[test]
fn any_local_sees_only_the_callers_waiting_ops() {
    let b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    b.queue((0, 1, 0));
    b.queue((0, 2, 1));
    assert!(b.any_local(|op| op.1 == 2));
    std::thread::scope(|s| {
        s.spawn(|| assert!(!b.any_local(|op| op.1 == 2), "another thread's batch"));
    });
    b.drain_local();
    assert!(!b.any_local(|_| true), "applied ops are not waiting");
}

#[test]
fn drop_applies_waiting_ops_and_into_inner_returns_them() {
    let b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    b.queue((0, 1, 0));
    std::thread::scope(|s| {
        s.spawn(|| b.queue((1, 1, 1)));
    });
    assert_eq!(b.stats().pending, 2);
    let lists = b.into_inner();
    assert_eq!(lists.log.lock().unwrap().len(), 2);
}

#[test]
fn ops_of_exited_threads_wait_for_drain_all() {
    let b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    std::thread::scope(|s| {
        for t in 0..4 {
            let b = &b;
            s.spawn(move || b.queue((t, 1, 0)));
        }
    });
    assert_eq!(b.stats().pending, 4);
    b.drain_all();
    let s = b.stats();
    assert_eq!((s.pending, s.drain_all_passes), (0, 1));
    // An exited thread's id (and slot) is reused by the next thread, so the
    // four ops sat in one to four slots.
    assert!((1..=4).contains(&s.drains), "{s:?}");
    assert_eq!(b.target().log.lock().unwrap().len(), 4);
}

#[test]
fn apply_panic_drops_the_rest_of_the_batch_and_keeps_working() {
    struct Picky(Mutex<Vec<u32>>);
    impl Apply for Picky {
        type Op = u32;
        type Key = ();
        type Guard<'a> = MutexGuard<'a, Vec<u32>>;
        fn key(&self, _: &u32) {}
        fn lock(&self, _: ()) -> Self::Guard<'_> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
        fn apply(&self, v: &mut Self::Guard<'_>, op: u32) {
            assert_ne!(op, 13, "unlucky op");
            v.push(op);
        }
    }
    let b: Batcher<Picky, 4> = Batcher::new(Picky(Mutex::new(vec![])));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        [12, 13, 14, 15].into_iter().for_each(|op| b.queue(op));
    }));
    assert!(r.is_err());
    // 14 and 15 were dropped with the batch; the slot is usable again.
    [1, 2, 3, 4].into_iter().for_each(|op| b.queue(op));
    assert_eq!(
        *b.target().0.lock().unwrap_or_else(|e| e.into_inner()),
        [12, 1, 2, 3, 4]
    );
    assert_eq!(b.stats().pending, 0);
}

#[test]
#[should_panic(expected = "more times than Batcher::disable")]
fn enable_without_disable_panics() {
    let b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    b.enable();
}

#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(miri, ignore = "membarrier is a system call")]
fn membarrier_is_used_where_the_kernel_offers_it() {
    use rustix::thread::{MembarrierCommand, membarrier_query};
    let _b: Batcher<Lists, 8> = Batcher::new(Lists::default());
    let offered = membarrier_query().contains_command(MembarrierCommand::PrivateExpedited);
    if !offered {
        eprintln!("this kernel offers no private expedited membarrier: queue() uses a full fence");
    }
    assert_eq!(mmbatch_pagevec::uses_membarrier(), offered);
}
