//! The watchdog's ticket protocol (`watchdog.rs`, the real `Busy`): a
//! handler serving a fault (`begin`, the source's answer, `have_data`,
//! the copy, `end`) against the watchdog claiming it as stuck (`claim`,
//! then failing the page unless the handler had its data), with the
//! kernel's side of the page reduced to one cell that a copy or a poison
//! fills if empty (`mfill_atomic`: the loser gets EEXIST).
//!
//! The guarantees: exactly one side decides the page — the handler copies
//! it only if no claim came first, the watchdog poisons it only if the
//! handler did not have its data — and `end` tells the handler whether it
//! was claimed. A `have_data` that reads the ticket and then stores the
//! mark (the broken variant) lets a claim fall in between: both act, and
//! loom finds it.

use loom::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
};

use super::super::watchdog::Busy;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pte {
    Missing,
    Data,
    Poison,
}

#[test]
fn loom_one_side_decides_a_stuck_fault() {
    model(Busy::have_data);
}

#[test]
#[should_panic(expected = "both the handler and the watchdog acted")]
fn loom_marking_the_data_without_a_cas_is_caught() {
    model(Busy::have_data_racy);
}

fn model(have_data: fn(&Busy, u64) -> bool) {
    loom::model(move || {
        let slot = Arc::new(Busy::new());
        let pte = Arc::new(Mutex::new(Pte::Missing));
        let copied = Arc::new(AtomicBool::new(false));
        let handler = {
            let (slot, pte, copied) = (slot.clone(), pte.clone(), copied.clone());
            thread::spawn(move || {
                let t = slot.begin(5);
                slot.in_source(1);
                // ... the source answers ...
                if have_data(&slot, t) {
                    copied.store(true, Ordering::SeqCst);
                    let mut p = pte.lock().unwrap();
                    if *p == Pte::Missing {
                        *p = Pte::Data;
                    }
                }
                slot.end(t)
            })
        };
        // The watchdog, with the fault past its timeout.
        let claimed = slot.claim(u64::MAX);
        let mut poisoned = false;
        if let Some((page, had_data)) = claimed {
            assert_eq!(page, 5, "a claim sees its fault's page");
            if !had_data {
                poisoned = true;
                let mut p = pte.lock().unwrap();
                if *p == Pte::Missing {
                    *p = Pte::Poison;
                }
            }
        }
        let kept = handler.join().unwrap();
        let copied = copied.load(Ordering::SeqCst);
        assert!(
            !(copied && poisoned),
            "both the handler and the watchdog acted"
        );
        assert_eq!(
            kept,
            claimed.is_none(),
            "end tells the handler it was claimed"
        );
        let p = *pte.lock().unwrap();
        // Served, or failed: never left missing once both are done.
        assert!(p == Pte::Data || poisoned && p == Pte::Poison, "{p:?}");
    });
}
