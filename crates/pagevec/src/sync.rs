//! The crate's only door to atomics and locks: std normally, loom under
//! `cfg(mmbatch_loom)` so the model checker sees every synchronising operation
//! (after sharded-slab's `src/sync.rs` and tokio's `src/loom/`).

// Loom's models are meaningless without the debug assertions they check
// (tokio's guard): `cargo xtask loom` builds them optimized (the
// workspace's `loom` profile) with `-C debug-assertions=on`.
#[cfg(all(mmbatch_loom, not(debug_assertions)))]
compile_error!("loom models need debug assertions: run them with `cargo xtask loom`");

#[cfg(mmbatch_loom)]
pub(crate) use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicUsize, Ordering, fence},
};
#[cfg(all(target_os = "linux", not(any(mmbatch_loom, miri))))]
pub(crate) use std::sync::atomic::compiler_fence;
#[cfg(not(mmbatch_loom))]
pub(crate) use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicUsize, Ordering, fence},
};

/// Locks `m`, ignoring poisoning: every structure here is left consistent
/// before user code (which may panic) runs under a lock.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(mmbatch_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std::cell::UnsafeCell` with loom's closure API, so the same code is
/// checked for data races under loom.
#[cfg(not(mmbatch_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(mmbatch_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
