//! Single-flight loading: two callers missing on one key run one loader
//! and both get its value; a loader that fails wakes the other caller,
//! which loads in its turn. Broken on purpose three times: (1) a failing
//! loader that does not complete its flight's room (`Landing`'s drop)
//! leaves the waiter blocked — loom reports the deadlock; (2) taking the
//! flight out in its own write section before the value is inserted lets
//! the second caller find neither and load again — "loader ran 2 times";
//! (3) a waiter whose room is not the flight's (made apart from it, as if
//! outside the shard's lock, where the loader may already have taken the
//! flight out) waits forever — loom reports the deadlock in
//! `a_failed_loader_hands_over`.

use loom::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    thread,
};

use super::cache;
use crate::Policy;

#[test]
fn one_loader_for_two_callers() {
    super::model(|| {
        let (cache, _) = cache(4, Policy::Workingset, true);
        let cache = Arc::new(cache);
        let runs = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (c, runs) = (cache.clone(), runs.clone());
                thread::spawn(move || {
                    c.get_or_insert_with(7, || {
                        runs.fetch_add(1, Ordering::Relaxed);
                        70
                    })
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), 70);
        }
        let n = runs.load(Ordering::Relaxed);
        assert_eq!(n, 1, "loader ran {n} times");
        let st = cache.stats();
        assert_eq!(st.loads, 1);
        cache.check_invariants().unwrap();
    });
}

#[test]
fn a_failed_loader_hands_over() {
    super::model(|| {
        let (cache, _) = cache(4, Policy::Workingset, true);
        let cache = Arc::new(cache);
        let c = cache.clone();
        let failing = thread::spawn(move || c.try_get_or_insert_with(7, || Err::<u32, _>("down")));
        let ok = cache.try_get_or_insert_with(7, || Ok::<_, &str>(71));
        let failed = failing.join().unwrap();
        // Whoever loaded first decides: the failing loader's caller gets
        // its error or (if it waited) the other's value; the other caller
        // always ends with a value.
        assert_eq!(ok, Ok(71));
        assert!(matches!(failed, Err("down") | Ok(71)), "{failed:?}");
        assert_eq!(cache.peek(&7), Some(71));
        cache.check_invariants().unwrap();
    });
}
