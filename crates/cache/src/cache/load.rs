//! Single-flight loading into an [`LruCache`]: `get_or_insert_with` and
//! `try_get_or_insert_with` claim a key's [`Flight`] in its shard, run the
//! loader outside every lock and land the value, or hand the waiters a
//! failed room when the loader fails, holding its error for a load whose
//! waiters share it (`flight.rs` has the flight and its room).

use std::{
    borrow::{Borrow, Cow},
    hash::{BuildHasher, Hash},
};

use super::{
    LruCache, RemovalCause, Shard, Weigher,
    flight::{Flight, NotShared, Room, RoomWait, ShareError, SharedError},
    lock::NoBarrier,
    shard::{Evicted, Lruvec},
};
use crate::sync::{Arc, AtomicU64, Ordering};

/// A load's flight from claim to landing: if the loader does not land it
/// (an error, or a panic in the loader, a key's `Eq` or a value's
/// `Clone`), takes the flight out of its shard and completes its room
/// failed: its waiters start over, or return the loader's error where
/// it was shared ([`fail`](Self::fail)). Where the shard cannot be changed (a
/// fast lock whose writer can have no barrier), it abandons the flight in
/// place instead, under a read lock (`Flight::abandon`). A `LoadGuard`'s
/// landing, which the user may drop anywhere (also where its thread holds
/// the shard's lock, where locking it again would panic), holds the room
/// from the claim on and completes it empty with no shard lock: the
/// flight, abandoned, stays until a later claim takes it out (see
/// `Flights`).
pub(super) struct Landing<'a, K, V> {
    shard: &'a Shard<K, V>,
    /// The flight's key's hash, and its id in its shard.
    hash: u64,
    id: u64,
    /// Whether the flight is out of its shard.
    taken: bool,
    /// Its room: once taken out if anyone waits, or from the claim on for
    /// a guard (whose landing then never locks the shard to give up).
    room: Option<Arc<Room<V>>>,
    /// The flight's copy of the key, dropped with the landing: after the
    /// shard's lock and after the room is complete, since a key's `Drop`
    /// may panic or use the cache (under the lock, a panic there stranded
    /// the waiters).
    key: Option<K>,
    /// The loader's error, for waiters that share it (see
    /// [`fail`](Self::fail)).
    error: Option<SharedError>,
    /// Whether the load ended with a value: stored (set by the store) or
    /// handed to its waiters ([`land`](Self::land)); one dropped without
    /// is counted in `failures`.
    landed: bool,
    /// The cache's count of loads that ended without a value.
    failures: &'a AtomicU64,
}

impl<K, V> Landing<'_, K, V> {
    /// Takes the flight out of `lv`, its shard, keeping its room and key;
    /// returns whether the key was removed while it loaded (its value is
    /// then not to be cached).
    #[inline]
    fn take(&mut self, lv: &mut Lruvec<K, V>) -> bool {
        let mut invalidated = false;
        if let Some(flight) = lv.flights.take(self.hash, self.id) {
            let (key, room, gone) = flight.into_parts();
            (self.key, self.room, invalidated) = (Some(key), room, gone);
        }
        self.taken = true;
        invalidated
    }

    /// Hands the loaded `value` to the waiters, if any: landed (after
    /// [`take`](Self::take)).
    fn land(mut self, value: V) {
        self.landed = true;
        if let Some(room) = self.room.take() {
            room.complete(Ok(value));
        }
    }

    /// Gives the load up on the loader's error, handing `error` (if any)
    /// to the waiters; they start over without one.
    fn fail(mut self, error: Option<SharedError>) {
        self.error = error;
    }
}

impl<K, V> Drop for Landing<'_, K, V> {
    fn drop(&mut self) {
        if !self.landed {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        // A room held before the flight is taken out is a guard's.
        if !self.taken && self.room.is_none() {
            match self.shard.try_write() {
                Ok(mut lv) => {
                    self.take(&mut lv);
                }
                // The shard cannot be changed now (a fast lock with no
                // barrier to be had; a write here would panic, during
                // unwinding an abort): wake the waiters through a read
                // lock instead, and leave the flight to the next claimer.
                Err(NoBarrier) => {
                    let room = {
                        let lv = self.shard.read();
                        lv.flights
                            .by_id(self.hash, self.id)
                            .and_then(Flight::abandon)
                    };
                    if let Some(room) = room {
                        room.complete(Err(self.error.take()));
                    }
                    return;
                }
            }
        }
        if let Some(room) = self.room.take() {
            room.complete(Err(self.error.take()));
        }
    }
}

/// What a claim on a key found.
pub(super) enum Claim<'a, K, V> {
    /// The key is cached: its value.
    Hit(V),
    /// Another load of the key is on: its room, and whether its loader is
    /// this thread (a sync loader reaching its own key).
    Wait(Arc<Room<V>>, bool),
    /// This caller loads the key: its landing and the key's hash.
    Load(Landing<'a, K, V>, u64),
}

/// `room`, for an async caller to wait in; panics where the caller would
/// wait for itself (`own`: it runs inside a poll of the key's own load),
/// which would never end.
pub(super) fn room_for<V>(room: Arc<Room<V>>, own: bool) -> Arc<Room<V>> {
    assert!(
        !own,
        "LruCache: an async load asked for its own key from inside its own loader (itself, \
         or a load it runs inside itself, while its future was polled); waiting would never \
         end. A loader must not need its own key"
    );
    room
}

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// The value of `key`, loading and caching it with `f` on a miss. One
    /// loader runs per key at a time: other callers missing on the same key
    /// meanwhile wait for its value. `f` runs outside every lock, and may
    /// use the cache, loading other keys. A value refused admission or
    /// declined (see [`insert`](Self::insert)) still reaches the loader's
    /// caller and its waiters; it is not cached, and the next miss loads
    /// again (with a weigher, a heavy key is loaded twice before it is
    /// cached if its second request comes soon enough). An `insert` of
    /// the key that lands while `f` runs wins: the caller and its waiters
    /// get the inserted value, and `f`'s is dropped. A [`remove`](Self::remove)
    /// or [`remove_entry`](Self::remove_entry) of the key, a
    /// [`compute`](Self::compute) that removes it, or a
    /// [`clear`](Self::clear) or [`drain`](Self::drain), while `f` runs
    /// outdates its value (it may
    /// have been read before the change that removed the key): the caller
    /// and the callers already waiting get it, it is not cached, and later
    /// callers load afresh (Caffeine's behaviour; the loading forms and
    /// [`LoadGuard`](crate::LoadGuard) alike).
    ///
    /// # Panics
    /// If `f` asks for `key` itself on its own thread (directly, or through
    /// the loaders of other keys): that call would wait for `f` to finish,
    /// which waits for that call. The panic unwinds through `f` as `f`'s
    /// own panic does (the waiters on `key` start over). Loaders on two
    /// threads that each wait for the other's key (A's loader asks for B
    /// while B's asks for A) are not detected and wait forever, as in
    /// moka's `get_with` — a cycle in the data the loaders read. Nor is a
    /// loader that hands its own key to other threads and waits for them
    /// (a parallel job whose chunks call `get_or_insert_with` for that
    /// key): they wait for the loader, which waits for them. Otherwise as
    /// [`insert`](Self::insert) (called under this shard's lock, a
    /// barrier that cannot be had, the listener's panic).
    ///
    /// # Blocking
    /// While another caller loads `key` this call blocks its thread, an
    /// async load's caller included: from async code, a call that finds
    /// a load of a task on its own thread (a current-thread runtime)
    /// never returns. Async code uses the async forms
    /// ([`get_or_insert_async`](Self::get_or_insert_async)). So do this
    /// method's other blocking forms and [`get_or_guard`](Self::get_or_guard).
    pub fn get_or_insert_with(&self, key: K, f: impl FnOnce() -> V) -> V {
        match self.try_get_or_insert_with(key, || Ok::<V, std::convert::Infallible>(f())) {
            Ok(v) => v,
        }
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with) for a fallible
    /// `f`: its error is returned and nothing is cached; callers that were
    /// waiting on it start over (one of them loads next). The error is
    /// not shared with them, as quick_cache's guards do it: against a
    /// backend that keeps failing, n callers waiting on one key make n
    /// calls to it, one after another.
    /// [`try_get_or_insert_shared`](Self::try_get_or_insert_shared) hands
    /// them the error instead (moka's `try_get_with`).
    ///
    /// # Errors
    /// `f`'s error, when this call ran the loader.
    ///
    /// # Panics
    /// As [`get_or_insert_with`](Self::get_or_insert_with).
    pub fn try_get_or_insert_with<E>(
        &self,
        key: K,
        f: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        self.load(Cow::Owned(key), f, |_| false, NotShared)
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with) by a borrowed key
    /// (a `&str` for a `String` key): a hit clones no key; a miss makes
    /// the owned key with `to_owned` twice (moka's `get_with_by_ref`):
    /// once for the waiters to match, under the shard's write lock, as a
    /// key's `Clone` runs, and once for the entry.
    ///
    /// # Panics
    /// As [`get_or_insert_with`](Self::get_or_insert_with).
    pub fn get_or_insert_with_ref<Q>(&self, key: &Q, f: impl FnOnce() -> V) -> V
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match self.try_get_or_insert_with_ref(key, || Ok::<V, std::convert::Infallible>(f())) {
            Ok(v) => v,
        }
    }

    /// [`try_get_or_insert_with`](Self::try_get_or_insert_with) by a
    /// borrowed key, as [`get_or_insert_with_ref`](Self::get_or_insert_with_ref).
    ///
    /// # Errors
    /// `f`'s error, when this call ran the loader.
    ///
    /// # Panics
    /// As [`get_or_insert_with`](Self::get_or_insert_with).
    pub fn try_get_or_insert_with_ref<Q, E>(
        &self,
        key: &Q,
        f: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.load(Cow::Borrowed(key), f, |_| false, NotShared)
    }

    /// The single-flight load of `key`: on a miss its flight holds a copy
    /// (for waiters to match), and the entry takes `key` itself, owned
    /// (moved, or made with `to_owned` from a borrowed key). `_sharing`
    /// says whether the loader's error goes to the waiters.
    pub(super) fn load<Q, E, X: ShareError<E>>(
        &self,
        key: Cow<'_, Q>,
        f: impl FnOnce() -> Result<V, E>,
        mut replace_if: impl FnMut(&V) -> bool,
        _sharing: X,
    ) -> Result<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let owned = || (*key).to_owned();
        let mut f = Some(f);
        loop {
            let (landing, hash) = match self.claim(&*key, &owned, true, false, &mut replace_if) {
                Claim::Hit(v) => return Ok(v),
                Claim::Wait(room, own) => {
                    assert!(
                        !own,
                        "LruCache::get_or_insert_with: the loader of a key (or the holder of its \
                         LoadGuard) asked for that same key on its own thread (directly or through \
                         other loads); waiting would never end. A loader must not need its own key"
                    );
                    match room.wait() {
                        Ok(v) => return Ok(v),
                        Err(error) => match error.and_then(X::receive) {
                            Some(e) => return Err(e),
                            None => continue, // the loader failed: start over
                        },
                    }
                }
                Claim::Load(landing, hash) => (landing, hash),
            };
            let load = f.take().expect("the loader runs once");
            return match load() {
                Ok(value) => Ok(self.store(landing, hash, key.into_owned(), value, replace_if)),
                Err(e) => {
                    landing.fail(X::share(&e));
                    Err(e)
                }
            };
        }
    }

    /// Looks `key` up, and on a miss claims its flight (`sync`: for a
    /// loader on this thread; `eager`: with its room made now, for a
    /// guard, see [`Landing`]) or joins the one in progress.
    pub(super) fn claim<'a, Q>(
        &'a self,
        key: &Q,
        owned: &impl Fn() -> K,
        sync: bool,
        eager: bool,
        replace_if: &mut impl FnMut(&V) -> bool,
    ) -> Claim<'a, K, V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(v) = self.get(key) {
            if !replace_if(&v) {
                return Claim::Hit(v);
            }
            // The caller did not get it: a miss (see `stats`).
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let shard_addr = std::ptr::from_ref(shard).addr();
        // Flights their loaders abandoned (`Flight::abandon`) that this
        // claim takes out (its key's, or a sweep's); dropped after the lock, and
        // after this claim's `Landing` exists (a key's `Drop` may panic).
        let mut abandoned = Vec::new();
        let claimed = {
            let mut lv = shard.write();
            let now = self.now();
            // An expired entry is a miss: the load's store replaces it.
            if let Some(i) = lv
                .find(hash, |k| k.borrow() == key)
                .filter(|&i| lv.live_at(i, now))
            {
                // A value to replace stays until the load's store; any
                // other is a hit as `get`'s, its deadline moved as a read's.
                if !replace_if(&lv.node(i).value) {
                    return Claim::Hit(match &self.expire {
                        Some(e) => Self::read_expiring(e, &lv, i, now),
                        None => lv.node(i).value.clone(),
                    });
                }
            }
            // An invalidated flight's value is not this call's to wait
            // for: it may predate a removal that came before this call.
            match lv
                .flights
                .find_live(hash, |k| k.borrow() == key, &mut abandoned)
            {
                Some(fl) => Err((fl.room(), fl.waits_for_itself(shard_addr, sync))),
                None => {
                    let id = lv.flights.next_id();
                    let room = eager.then(|| Arc::new(Room::new()));
                    lv.flights.push(
                        Flight::new(hash, owned(), id, sync, room.clone()),
                        &mut abandoned,
                    );
                    Ok((id, room))
                }
            }
        };
        match claimed {
            Ok((id, room)) => {
                self.loads.fetch_add(1, Ordering::Relaxed);
                let landing = Landing {
                    shard,
                    hash,
                    id,
                    taken: false,
                    room,
                    key: None,
                    error: None,
                    landed: false,
                    failures: &self.load_failures,
                };
                drop(abandoned);
                Claim::Load(landing, hash)
            }
            Err((room, own)) => {
                drop(abandoned);
                // A call for its own thread's load panics: it never waits.
                if !own {
                    self.load_waits.fetch_add(1, Ordering::Relaxed);
                }
                Claim::Wait(room, own)
            }
        }
    }

    /// Stores a loaded `value` under `key` (unless a live entry of the key
    /// that `replace_if` keeps is there, an insert that came first, whose
    /// value is returned instead) and lands the flight.
    pub(super) fn store(
        &self,
        mut landing: Landing<'_, K, V>,
        hash: u64,
        key: K,
        value: V,
        mut replace_if: impl FnMut(&V) -> bool,
    ) -> V {
        let shard = landing.shard;
        let mut entry = Some(key);
        let weight = self.weigh(entry.as_ref().expect("the caller's key"), &value);
        let mut evicted = Evicted::new();
        let mut replaced = None;
        let value = {
            let mut lv = shard.write();
            let now = self.now();
            lv.now = now;
            // Out with the flight, in the section that stores the
            // value: a caller finds one or the other.
            let invalidated = landing.take(&mut lv);
            // A plain insert of the key meanwhile wins, as it would
            // have had it come after; an expired entry is replaced.
            let key = entry.as_ref().expect("the caller's key");
            let found = lv.find(hash, |k| k == key);
            let live = found.filter(|&i| lv.live_at(i, now));
            match live {
                Some(i) if !replace_if(&lv.node(i).value) => lv.node(i).value.clone(),
                // The key was removed while this loaded: the value goes to
                // this caller and its waiters, not into the cache.
                _ if invalidated => value,
                // New, or replacing the value the load was for (or an
                // insert's since): its `Expiry` asked under the lock, as
                // an insert's is, before anything changes.
                _ => {
                    let k = entry.take().expect("the caller's key");
                    let kv = (hash, k, value.clone(), weight);
                    replaced = self.put_locked(shard, &mut lv, kv, (found, live), &mut evicted);
                    // Stored (or refused as too heavy): not a failed load,
                    // whatever panics from here.
                    landing.landed = true;
                    value
                }
            }
        };
        // An owned key not stored is dropped outside the lock.
        drop(entry);
        // Landed (for the waiters) only once they have their value: a
        // key's `Eq` or a value's `Clone` panicking above or here must
        // still wake them (they start over, and find the value if it was
        // cached).
        landing.land(value.clone());
        let replaced = replaced
            .filter(|_| self.hears_every_cause())
            .map(|(k, v)| (k, v, RemovalCause::Replaced));
        self.notify_each(evicted.into_iter().chain(replaced));
        value
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with) for a loader that
    /// is a future: one load per key at a time, whichever task or thread
    /// asks; the others await its value. Executor-agnostic (the cache
    /// wakes waiting tasks through their wakers; it spawns nothing).
    /// Dropping this future while it loads stops the load: its waiters
    /// wake and one of them loads next; dropping it while it waits leaves
    /// the load alone. So a timeout around a call that loads (a request's
    /// deadline) restarts the load with the next caller: to bound a load,
    /// time out inside `load`; to let it finish whatever happens to the
    /// caller, run it on a task of its own (holding an `Arc` of the cache)
    /// and await that. A loader that asks for its own key while it is
    /// polled (itself, or a load it runs inside itself, async or blocking;
    /// under a timeout too) panics, naming the cause: it would wait for
    /// itself forever. A cycle across tasks (the loader of one key awaits
    /// another's, whose loader, on another task, awaits the first) is not
    /// caught: it waits forever. A blocking
    /// [`get_or_insert_with`](Self::get_or_insert_with) of a key an async
    /// load holds blocks its thread until the load lands: on a
    /// single-threaded executor, whose thread that is, it never lands —
    /// do not mix the two on one key there.
    ///
    /// # Panics
    /// As [`insert`](Self::insert), and with the loader's panic (its
    /// waiters start over).
    pub async fn get_or_insert_async(&self, key: K, load: impl Future<Output = V>) -> V {
        let infallible = async { Ok::<V, std::convert::Infallible>(load.await) };
        match self.try_get_or_insert_async(key, infallible).await {
            Ok(v) => v,
        }
    }

    /// [`get_or_insert_async`](Self::get_or_insert_async) for a fallible
    /// loader: its error is returned and nothing is cached; waiters start
    /// over (one of them loads next). The error is not shared with them:
    /// against a backend that keeps failing, n tasks waiting on one key
    /// make n calls to it, one after another.
    /// [`try_get_or_insert_async_shared`](Self::try_get_or_insert_async_shared)
    /// hands them the error instead (moka's `try_get_with`).
    ///
    /// # Errors
    /// The loader's error, when this call ran it.
    ///
    /// # Panics
    /// As [`get_or_insert_async`](Self::get_or_insert_async).
    pub async fn try_get_or_insert_async<E>(
        &self,
        key: K,
        load: impl Future<Output = Result<V, E>>,
    ) -> Result<V, E> {
        self.load_async(Cow::Owned(key), load, |_| false, NotShared)
            .await
    }

    /// [`get_or_insert_async`](Self::get_or_insert_async) by a borrowed
    /// key (a `&str` for a `String` key), as
    /// [`get_or_insert_with_ref`](Self::get_or_insert_with_ref) is to
    /// [`get_or_insert_with`](Self::get_or_insert_with): a hit makes no
    /// owned key, a miss makes two with `to_owned` (moka's
    /// `future::Cache::get_with_by_ref`).
    ///
    /// # Panics
    /// As [`get_or_insert_async`](Self::get_or_insert_async).
    pub async fn get_or_insert_async_ref<Q>(&self, key: &Q, load: impl Future<Output = V>) -> V
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let infallible = async { Ok::<V, std::convert::Infallible>(load.await) };
        match self.try_get_or_insert_async_ref(key, infallible).await {
            Ok(v) => v,
        }
    }

    /// [`try_get_or_insert_async`](Self::try_get_or_insert_async) by a
    /// borrowed key, as [`get_or_insert_async_ref`](Self::get_or_insert_async_ref).
    ///
    /// # Errors
    /// The loader's error, when this call ran it.
    ///
    /// # Panics
    /// As [`get_or_insert_async`](Self::get_or_insert_async).
    pub async fn try_get_or_insert_async_ref<Q, E>(
        &self,
        key: &Q,
        load: impl Future<Output = Result<V, E>>,
    ) -> Result<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.load_async(Cow::Borrowed(key), load, |_| false, NotShared)
            .await
    }

    /// The async single-flight load of `key`, as [`load`](Self::load)
    /// does it for a loader that blocks.
    pub(super) async fn load_async<Q, E, X: ShareError<E>>(
        &self,
        key: Cow<'_, Q>,
        load: impl Future<Output = Result<V, E>>,
        mut replace_if: impl FnMut(&V) -> bool,
        _sharing: X,
    ) -> Result<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let owned = || (*key).to_owned();
        let mut load = Some(load);
        loop {
            let (landing, hash) = match self.claim(&*key, &owned, false, false, &mut replace_if) {
                Claim::Hit(v) => return Ok(v),
                Claim::Wait(room, own) => match RoomWait::new(room_for(room, own)).await {
                    Ok(v) => return Ok(v),
                    Err(error) => match error.and_then(X::receive) {
                        Some(e) => return Err(e),
                        None => continue, // the loader failed or was dropped
                    },
                },
                Claim::Load(landing, hash) => (landing, hash),
            };
            // Dropped here (this future dropped, or the loader's panic),
            // the landing wakes the waiters. Each poll of the load is
            // marked as its flight's: a claim inside it that finds the
            // flight panics rather than wait for ever.
            let mut load = std::pin::pin!(load.take().expect("the loader runs once"));
            let flight = (std::ptr::from_ref(landing.shard).addr(), landing.id);
            let loaded = std::future::poll_fn(|cx| {
                let _polling = super::flight::polling(flight.0, flight.1);
                load.as_mut().poll(cx)
            })
            .await;
            return match loaded {
                Ok(value) => Ok(self.store(landing, hash, key.into_owned(), value, replace_if)),
                Err(e) => {
                    landing.fail(X::share(&e));
                    Err(e)
                }
            };
        }
    }
}
