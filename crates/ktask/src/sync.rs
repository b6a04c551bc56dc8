//! The crate's door to atomics and locks: std, or loom under `cfg(mmbatch_loom)`.

// Loom's models are meaningless without the debug assertions they check
// (tokio's guard): `cargo xtask loom` builds them optimized (the
// workspace's `loom` profile) with `-C debug-assertions=on`.
#[cfg(all(mmbatch_loom, not(debug_assertions)))]
compile_error!("loom models need debug assertions: run them with `cargo xtask loom`");

#[cfg(mmbatch_loom)]
pub(crate) use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};
#[cfg(not(mmbatch_loom))]
pub(crate) use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
