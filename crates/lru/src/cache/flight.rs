//! Single-flight loading: one loader per key at a time; the other callers
//! missing on that key wait for its value (moka's `get_with`,
//! quick_cache's placeholder guards).
//!
//! A [`Flight`] sits in its shard's `flights` from the moment a loader
//! claims the key until the loaded value is in the shard — both under the
//! shard's write lock, so a caller finds either the value or the flight,
//! never neither while a load is on. The loader then completes the flight;
//! a loader that fails or panics completes it empty (`Landing`'s drop, in `cache/mod.rs`),
//! and its waiters start over: one of them becomes the next loader.

use crate::sync::{Condvar, Mutex, ThreadId, current_thread};

enum State<V> {
    Loading,
    Loaded(V),
    Failed,
}

/// A load's state, and whether any caller waits for it.
struct Status<V> {
    state: State<V>,
    waited: bool,
}

/// One key's load in progress.
pub(super) struct Flight<K, V> {
    pub(super) hash: u64,
    pub(super) key: K,
    /// The thread running the loader: a caller on it that finds this
    /// flight would wait for itself (see [`Flight::is_own`]).
    loader: ThreadId,
    state: Mutex<Status<V>>,
    done: Condvar,
}

impl<K, V> Flight<K, V> {
    /// A flight loaded by the calling thread.
    pub(super) fn new(hash: u64, key: K) -> Self {
        Self {
            hash,
            key,
            loader: current_thread().id(),
            state: Mutex::new(Status {
                state: State::Loading,
                waited: false,
            }),
            done: Condvar::new(),
        }
    }

    /// Whether the calling thread is this flight's loader: it reached the
    /// key again from inside its own loader, and waiting would never end.
    pub(super) fn is_own(&self) -> bool {
        self.loader == current_thread().id()
    }

    /// Completes the load, waking every waiter. Only if there is one: a
    /// futex condition variable's `notify_all` makes a system call
    /// whether or not anyone waits, and almost every load has no waiter.
    /// A caller marks itself waiting under the same lock before it waits,
    /// so none is missed. Notifying always, one-thread read-through by
    /// `get_or_insert_with` ran at 0.37x of `get` and `insert` at Zipf 0.9
    /// (0.64x of quick_cache's `get_or_insert_with`), and at 0.57x at
    /// Zipf 1.1 (an ad-hoc harness driving the `cache` experiment's
    /// `load` read-through, one thread, fresh caches).
    pub(super) fn complete(&self, value: Option<V>) {
        let waited = {
            let mut s = crate::sync::lock(&self.state);
            s.state = match value {
                Some(v) => State::Loaded(v),
                None => State::Failed,
            };
            s.waited
        };
        if waited {
            self.done.notify_all();
        }
    }
}

impl<K, V: Clone> Flight<K, V> {
    /// Waits for the load: its value, or `None` if the loader failed.
    pub(super) fn wait(&self) -> Option<V> {
        let mut s = crate::sync::lock(&self.state);
        loop {
            match &s.state {
                State::Loading => {
                    s.waited = true;
                    s = self
                        .done
                        .wait(s)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                State::Loaded(v) => return Some(v.clone()),
                State::Failed => return None,
            }
        }
    }
}
