//! mlock racing munlock of a frame that was culled to the unevictable list
//! while isolated (so its mlock_count is 0, an undercount): the count never
//! underflows, and after the batches apply the frame is on the unevictable
//! list exactly when it is mlocked, with NR_MLOCK agreeing.

use loom::{sync::Arc, thread};

use super::{engine, list_of, model};
use crate::{Flags, LruList, Pfn};

#[test]
fn mlock_vs_munlock() {
    model(|| {
        let e = engine(1);
        let p = Pfn(0);
        // Mlocked while isolated: putback culls it with mlock_count 0.
        assert!(e.isolate(p).unwrap());
        e.mlock(p).unwrap();
        e.lru_add_drain(); // __mlock_folio finds it off the LRU
        e.putback(p).unwrap();
        e.lru_add_drain();
        assert_eq!(list_of(&e, p), Some(LruList::Unevictable));
        assert_eq!(e.frame_state(p).unwrap().mlock_count, 0);
        let e = Arc::new(e);
        let e1 = e.clone();
        let locker = thread::spawn(move || {
            e1.mlock(p).unwrap();
            e1.lru_add_drain();
        });
        let e2 = e.clone();
        let unlocker = thread::spawn(move || {
            // NotMlocked is a correct answer if the flag is already gone.
            let _ = e2.munlock(p);
            e2.lru_add_drain();
        });
        locker.join().unwrap();
        unlocker.join().unwrap();
        e.check_invariants().unwrap();
        let st = e.frame_state(p).unwrap();
        assert!(
            st.mlock_count <= 2,
            "mlock_count underflowed: {}",
            st.mlock_count
        );
        let mlocked = st.flags.contains(Flags::MLOCKED);
        let want = if mlocked {
            LruList::Unevictable
        } else {
            LruList::Inactive
        };
        assert_eq!(list_of(&e, p), Some(want));
        assert_eq!(e.stats().nr_mlock, i64::from(mlocked));
    });
}
