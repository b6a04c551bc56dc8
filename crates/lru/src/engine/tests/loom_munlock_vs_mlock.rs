//! A munlock_range batch racing mlock of the same frame from another
//! thread, at the per-page, batched, fast-putback and PTE-walk steps: after
//! the batches apply, a frame is on the unevictable list exactly when it is
//! mlocked, NR_MLOCK counts the mlocked frames, mlock_count never
//! underflows, and no reference leaks.

use loom::{sync::Arc, thread};

use super::{engine, list_of, model};
use crate::{Flags, LruList, MunlockStep, PageTables, Pfn};

fn check_end(e: &crate::Engine) {
    e.check_invariants().unwrap();
    let mut mlocked = 0;
    for p in [Pfn(0), Pfn(1)] {
        let st = e.frame_state(p).unwrap();
        assert_eq!(st.refcount, 1, "{p}: a reference leaked");
        assert!(st.mlock_count <= 2, "{p}: mlock_count underflowed");
        let locked = st.flags.contains(Flags::MLOCKED);
        mlocked += i64::from(locked);
        let on = list_of(e, p);
        assert_eq!(
            on == Some(LruList::Unevictable),
            locked,
            "{p}: on {on:?} with {:?}",
            st.flags
        );
    }
    assert_eq!(e.stats().nr_mlock, mlocked);
}

/// Two frames on the unevictable list, mapped at virtual pages 0 and 1.
fn mlocked_pair() -> (Arc<crate::Engine>, Arc<PageTables>) {
    let e = engine(2);
    let pt = PageTables::new(2);
    for i in 0..2 {
        pt.map(i, Pfn(i as u32)).unwrap();
        e.mlock(Pfn(i as u32)).unwrap();
    }
    e.lru_add_drain();
    (Arc::new(e), Arc::new(pt))
}

/// A thread that munlocks both pages at `step` and drains its batches.
fn spawn_munlocker(
    e: &Arc<crate::Engine>,
    pt: &Arc<PageTables>,
    step: u8,
) -> thread::JoinHandle<()> {
    let (e, pt) = (e.clone(), pt.clone());
    thread::spawn(move || {
        let st = MunlockStep::new(step).unwrap();
        e.munlock_range(&pt, 0..2, st).unwrap();
        e.lru_add_drain();
    })
}

fn munlock_vs_mlock(step: u8) {
    model(move || {
        let (e, pt) = mlocked_pair();
        let munlocker = spawn_munlocker(&e, &pt, step);
        let e2 = e.clone();
        let locker = thread::spawn(move || {
            e2.mlock(Pfn(0)).unwrap();
            e2.lru_add_drain();
        });
        munlocker.join().unwrap();
        locker.join().unwrap();
        check_end(&e);
    });
}

#[test]
fn munlock_vs_mlock_step0() {
    munlock_vs_mlock(0);
}

#[test]
fn munlock_vs_mlock_step5() {
    munlock_vs_mlock(5);
}

#[test]
fn munlock_vs_mlock_step7() {
    munlock_vs_mlock(7);
}

fn munlock_vs_isolate(step: u8) {
    model(move || {
        let (e, pt) = mlocked_pair();
        let munlocker = spawn_munlocker(&e, &pt, step);
        // Reclaim (or migration) isolating the frame meanwhile.
        let e2 = e.clone();
        let reclaim = thread::spawn(move || {
            if e2.isolate(Pfn(1)).unwrap() {
                e2.putback(Pfn(1)).unwrap();
                e2.lru_add_drain();
            }
        });
        munlocker.join().unwrap();
        reclaim.join().unwrap();
        check_end(&e);
        // Nothing was mlocked again: everything ends evictable.
        assert_eq!(e.list_sizes(0).unwrap()[LruList::Unevictable as usize], 0);
    });
}

#[test]
fn munlock_vs_isolate_step0() {
    munlock_vs_isolate(0);
}

#[test]
fn munlock_vs_isolate_step7() {
    munlock_vs_isolate(7);
}
