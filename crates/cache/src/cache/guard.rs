//! Single-flight loading by guard: [`LruCache::get_or_guard`] hands the
//! caller that must load a key a [`LoadGuard`] instead of running a
//! closure, for a load that does not fit one (several steps, its own
//! error handling, a value made elsewhere); other callers missing on the
//! key wait for the guard's value as they wait for a loader's.

use std::{
    borrow::Borrow,
    fmt,
    hash::{BuildHasher, Hash},
    marker::PhantomData,
};

use super::{
    DefaultHashBuilder, LruCache, UnitWeigher, Weigher,
    flight::{Outcome, Room, RoomWait},
    load::{Claim, Landing},
};

/// The claim a guard holds: the key's flight in its shard, and the key.
struct Claimed<'a, K, V, S, W> {
    cache: &'a LruCache<K, V, S, W>,
    landing: Landing<'a, K, V>,
    hash: u64,
    key: K,
}

impl<K, V, S, W> Claimed<'_, K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    fn insert(self, value: V) -> V {
        self.cache
            .store(self.landing, self.hash, self.key, value, |_| false)
    }
}

/// The right to load a key that [`LruCache::get_or_guard`] found
/// missing: other callers missing on the key (by `get_or_guard` or the
/// `get_or_insert_with` family) wait until [`insert`](Self::insert) gives
/// them its value. Dropped without an insert (an error, a panic), it
/// wakes them, and one of them loads next (also from code the cache runs
/// under a lock). A guard leaked with `mem::forget` blocks the key's
/// callers for good. It stays on the thread that claimed it (not
/// `Send`), so that the thread's own wait for the key, which would never
/// end, is refused by a panic instead:
///
/// ```compile_fail
/// # use mmbatch_cache::LruCache;
/// let cache: LruCache<u64, u64> = LruCache::new(10);
/// let guard = cache.get_or_guard(&1).unwrap_err();
/// std::thread::scope(|s| {
///     s.spawn(move || guard.insert(2)); // a LoadGuard is not Send
/// });
/// ```
#[must_use = "dropping the guard gives the load up: call insert with the value"]
pub struct LoadGuard<'a, K, V, S = DefaultHashBuilder, W = UnitWeigher> {
    claimed: Claimed<'a, K, V, S, W>,
    _on_its_thread: PhantomData<*const ()>,
}

/// [`LoadGuard`] for async code, from [`LruCache::get_or_guard_async`]:
/// it may be held across an `.await` and move between threads with its
/// task. Dropping it (or the task that holds it) unfinished gives the
/// load up: a waiting caller loads the key instead. A task that awaits
/// its own guarded key waits forever (no thread identifies a task that
/// holds a guard; a [`get_or_insert_async`](LruCache::get_or_insert_async)
/// loader that asks for its own key is caught, as it is polled); and a
/// blocking [`get_or_guard`](LruCache::get_or_guard) (or
/// `get_or_insert_with`) of a key an async guard holds blocks its thread
/// until the guard is done: on a single-threaded executor, whose thread
/// that is, it never is. Do not mix the two on one key there.
#[must_use = "dropping the guard gives the load up: call insert with the value"]
pub struct AsyncLoadGuard<'a, K, V, S = DefaultHashBuilder, W = UnitWeigher> {
    claimed: Claimed<'a, K, V, S, W>,
}

macro_rules! guard_methods {
    ($guard:ident) => {
        impl<K, V, S, W> $guard<'_, K, V, S, W>
        where
            K: Hash + Eq + Clone,
            V: Clone,
            S: BuildHasher,
            W: Weigher<K, V>,
        {
            /// The key this guard loads.
            pub fn key(&self) -> &K {
                &self.claimed.key
            }

            /// Caches `value` under the key and hands it to the callers
            /// waiting on it; returns the value they got. An `insert` of
            /// the key that landed while the guard was held wins, as it
            /// does over a loader's value: its value is returned (and
            /// `value` dropped). A value refused admission or declined
            /// (see [`LruCache::insert`]) still reaches the waiters, as does
            /// one whose key was removed (or the cache cleared or drained) while the
            /// guard was held, which is not cached (see
            /// [`LruCache::get_or_insert_with`]).
            ///
            /// # Panics
            /// As [`LruCache::insert`].
            pub fn insert(self, value: V) -> V {
                self.claimed.insert(value)
            }
        }

        impl<K: fmt::Debug, V, S, W> fmt::Debug for $guard<'_, K, V, S, W> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($guard))
                    .field("key", &self.claimed.key)
                    .finish_non_exhaustive()
            }
        }
    };
}

guard_methods!(LoadGuard);
guard_methods!(AsyncLoadGuard);

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// `key`'s value if cached (a hit, as [`get`](Self::get) counts it),
    /// or, on a miss, the [`LoadGuard`] that loads it: one guard (or
    /// loader) per key at a time, and a caller that misses while another
    /// holds it waits for its value (quick_cache's `get_value_or_guard`).
    /// A miss makes the owned key with `to_owned` twice (the flight's, for
    /// waiters to match, and the guard's, for the entry); a hit makes
    /// none.
    ///
    /// ```
    /// use mmbatch_cache::LruCache;
    ///
    /// let cache: LruCache<String, u64> = LruCache::new(100);
    /// let v = match cache.get_or_guard("answer") {
    ///     Ok(v) => v,
    ///     Err(guard) => {
    ///         // Other threads asking for "answer" wait here.
    ///         let v = 6 * 7; // e.g. a query, in as many steps as it takes
    ///         guard.insert(v)
    ///     }
    /// };
    /// assert_eq!((v, cache.get("answer")), (42, Some(42)));
    /// ```
    ///
    /// # Errors
    /// `Err` is no failure: it is the guard of a miss this caller loads.
    ///
    /// # Panics
    /// If this thread holds the key's guard, or runs its loader (in a
    /// [`get_or_insert_with`](Self::get_or_insert_with) closure): the wait
    /// would never end. Otherwise as [`insert`](Self::insert).
    ///
    /// # Blocking
    /// As [`get_or_insert_with`](Self::get_or_insert_with) (its "Blocking"): async
    /// code uses [`get_or_guard_async`](Self::get_or_guard_async).
    pub fn get_or_guard<Q>(&self, key: &Q) -> Result<V, LoadGuard<'_, K, V, S, W>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.get_or_guard_waiting(key, |room| Some(room.wait()))
            .expect("a wait with no deadline ends with the load")
    }

    /// [`get_or_guard`](Self::get_or_guard) that waits at most `timeout`
    /// for another caller's load of `key`: `None` once it has waited that
    /// long with the load still on (quick_cache's `get_value_or_guard`
    /// with a timeout), so that a load that hangs (a backend that never
    /// answers) cannot hang its waiters too. The load goes on; a later
    /// call finds its value. A zero `timeout` does not wait; one past the
    /// clock's range waits as `get_or_guard` does. The deadline holds
    /// across a load that fails and the next one waited on.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mmbatch_cache::LruCache;
    ///
    /// let cache: LruCache<String, u64> = LruCache::new(100);
    /// let guard = cache.get_or_guard("answer").unwrap_err(); // this thread loads
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         // Another caller gives up after 10 ms of waiting.
    ///         assert!(cache.get_or_guard_timeout("answer", Duration::from_millis(10)).is_none());
    ///     });
    /// });
    /// guard.insert(42);
    /// let found = cache.get_or_guard_timeout("answer", Duration::ZERO);
    /// assert!(matches!(found, Some(Ok(42))));
    /// ```
    ///
    /// # Panics
    /// As [`get_or_guard`](Self::get_or_guard).
    #[cfg(not(mmbatch_loom))]
    pub fn get_or_guard_timeout<Q>(
        &self,
        key: &Q,
        timeout: std::time::Duration,
    ) -> Option<Result<V, LoadGuard<'_, K, V, S, W>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Past the clock's range: no deadline.
        let deadline = std::time::Instant::now().checked_add(timeout);
        self.get_or_guard_waiting(key, |room| match deadline {
            Some(deadline) => room.wait_until(deadline),
            None => Some(room.wait()),
        })
    }

    /// The two sync guard forms: `wait` waits in a load's room, `None`
    /// once it gave up waiting.
    fn get_or_guard_waiting<Q>(
        &self,
        key: &Q,
        wait: impl Fn(&Room<V>) -> Option<Outcome<V>>,
    ) -> Option<Result<V, LoadGuard<'_, K, V, S, W>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let owned = || key.to_owned();
        loop {
            match self.claim(key, &owned, true, true, &mut |_| false) {
                Claim::Hit(v) => return Some(Ok(v)),
                Claim::Wait(room, own) => {
                    assert!(
                        !own,
                        "LruCache::get_or_guard: this thread asked for a key it is loading (it \
                         holds the key's LoadGuard, or runs its get_or_insert_with loader); \
                         waiting would never end. Insert the value, or drop the guard, first"
                    );
                    match wait(&room)? {
                        Ok(v) => return Some(Ok(v)),
                        // The load was given up (or failed, its error not
                        // for a guard): start over.
                        Err(_) => continue,
                    }
                }
                Claim::Load(landing, hash) => {
                    return Some(Err(LoadGuard {
                        claimed: Claimed {
                            cache: self,
                            landing,
                            hash,
                            key: owned(),
                        },
                        _on_its_thread: PhantomData,
                    }));
                }
            }
        }
    }

    /// [`get_or_guard`](Self::get_or_guard) for async code: a caller that
    /// misses while another holds the key's guard (or runs its loader)
    /// awaits its value, on any executor (the cache wakes the task by its
    /// waker and spawns nothing), and the guard may be held across
    /// `.await`s (quick_cache's `get_value_or_guard_async`).
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub async fn get_or_guard_async<Q>(&self, key: &Q) -> Result<V, AsyncLoadGuard<'_, K, V, S, W>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let owned = || key.to_owned();
        loop {
            match self.claim(key, &owned, false, true, &mut |_| false) {
                Claim::Hit(v) => return Ok(v),
                Claim::Wait(room, own) => {
                    match RoomWait::new(super::load::room_for(room, own)).await {
                        Ok(v) => return Ok(v),
                        Err(_) => continue, // the load was given up: start over
                    }
                }
                Claim::Load(landing, hash) => {
                    return Err(AsyncLoadGuard {
                        claimed: Claimed {
                            cache: self,
                            landing,
                            hash,
                            key: owned(),
                        },
                    });
                }
            }
        }
    }
}
