//! The crate's only door to atomics and locks: std normally, loom under
//! `cfg(loom)` (after sharded-slab's `src/sync.rs`).

// Loom's models are meaningless without the debug assertions they check
// (tokio's guard): `cargo xtask loom` builds them in release with
// `-C debug-assertions=on`.
#[cfg(all(loom, not(debug_assertions)))]
compile_error!("loom models need debug assertions: run them with `cargo xtask loom`");

#[cfg(loom)]
pub(crate) use loom::sync::{
    Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    atomic::{AtomicI64, AtomicU8, AtomicU32, AtomicU64, Ordering},
};

#[cfg(not(loom))]
pub(crate) use std::sync::{
    Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    atomic::{AtomicI64, AtomicU8, AtomicU32, AtomicU64, Ordering},
};

#[cfg(loom)]
pub(crate) use loom::thread::{ThreadId, current as current_thread};
#[cfg(not(loom))]
pub(crate) use std::thread::{ThreadId, current as current_thread};

/// Locks `m`, ignoring poisoning: lruvec state is consistent whenever user
/// code (an evict callback) can run, and that code runs unlocked anyway.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Read-locks `l`, ignoring poisoning (see [`lock`]; a cache shard is
/// consistent whenever user code — `Hash`, `Eq`, `Clone` — can panic).
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write-locks `l`, ignoring poisoning (see [`read`]).
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}
