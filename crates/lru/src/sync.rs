//! The crate's only door to atomics and locks: std normally, loom under
//! `cfg(mmbatch_loom)` (after sharded-slab's `src/sync.rs`).

// Loom's models are meaningless without the debug assertions they check
// (tokio's guard): `cargo xtask loom` builds them optimized (the
// workspace's `loom` profile) with `-C debug-assertions=on`.
#[cfg(all(mmbatch_loom, not(debug_assertions)))]
compile_error!("loom models need debug assertions: run them with `cargo xtask loom`");

#[cfg(mmbatch_loom)]
pub(crate) use loom::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicI64, AtomicU32, Ordering},
};

#[cfg(not(mmbatch_loom))]
pub(crate) use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicI64, AtomicU32, Ordering},
};

/// Locks `m`, ignoring poisoning: lruvec state is consistent whenever user
/// code (an evict callback) can run, and that code runs unlocked anyway.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
