//! The drain generation's fold decision, driven step by step.

use std::sync::{Mutex, MutexGuard};

use super::{Apply, Batcher};
use crate::sync::Ordering;

struct Count(Mutex<u32>);

impl Apply for Count {
    type Op = ();
    type Key = ();
    type Guard<'a> = MutexGuard<'a, u32>;
    fn key(&self, _: &()) {}
    fn lock(&self, _: ()) -> MutexGuard<'_, u32> {
        self.0.lock().unwrap()
    }
    fn apply(&self, n: &mut MutexGuard<'_, u32>, _: ()) {
        **n += 1;
    }
}

/// A `drain_all` caller reads the generation; a pass then begins (bumps
/// it) and is cut short by a panic in Apply code before it reaches the
/// caller's op; the caller gets the drain mutex. It must drain its op
/// itself. Before, it folded into the cut-short pass (the generation had
/// moved) and returned with its op still queued (seen failing: "folded
/// into a pass that never ended").
#[test]
fn a_caller_does_not_fold_into_a_pass_that_panicked() {
    let b: Batcher<Count, 8> = Batcher::new(Count(Mutex::new(0)));
    b.queue(());
    let seen = b.drain_gen.fetch_add(0, Ordering::AcqRel);
    // The pass that panics: it bumped the generation and never ended.
    b.drain_gen.fetch_add(1, Ordering::AcqRel);
    b.drain_all_since(seen, false);
    assert_eq!(
        *b.target().0.lock().unwrap(),
        1,
        "folded into a pass that never ended"
    );
    assert_eq!(b.stats().drain_all_folded, 0);
}

/// A pass that began after the caller's read and ended whole still takes
/// the caller's work (the fold the kernel's `lru_drain_gen` allows).
#[test]
fn a_caller_folds_into_a_whole_pass_that_began_after_it() {
    let b: Batcher<Count, 8> = Batcher::new(Count(Mutex::new(0)));
    let seen = b.drain_gen.fetch_add(0, Ordering::AcqRel);
    b.queue(());
    b.drain_all(); // begins after `seen`, ends whole
    b.drain_all_since(seen, false);
    let st = b.stats();
    assert_eq!((st.drain_all_passes, st.drain_all_folded), (1, 1));
    assert_eq!(*b.target().0.lock().unwrap(), 1);
}
