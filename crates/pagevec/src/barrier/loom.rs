//! Under loom, `light()` is nothing — what it compiles to on a membarrier
//! host, and the weakest case — unless the model pairs it with `heavy()`.
//! Loom's SeqCst fence is stronger than a C++ one (it orders against every
//! earlier release), so a fence here would hide ordering bugs in the ring
//! protocol that production, where `light()` is a compiler fence, has.

use std::cell::Cell;

use crate::sync::{Ordering, fence};

// Loom runs a model's threads as coroutines on the test's own OS thread,
// so a std thread-local is per model.
std::thread_local!(static PAIRED: Cell<bool> = const { Cell::new(false) });

/// Declares that this model calls `heavy()` (`Batcher::disable`), so the
/// light barrier must be modelled as the SeqCst fence it acts as then.
pub(crate) fn model_with_heavy_barrier() {
    PAIRED.with(|p| p.set(true));
}

pub(crate) fn init() {}

pub(crate) fn expedited() -> bool {
    false
}

pub(crate) fn light() {
    if PAIRED.with(Cell::get) {
        fence(Ordering::SeqCst);
    }
}

pub(crate) fn heavy() {
    assert!(
        PAIRED.with(Cell::get),
        "a loom model that calls Batcher::disable must call \
         barrier::model_with_heavy_barrier() first"
    );
    fence(Ordering::SeqCst);
}
