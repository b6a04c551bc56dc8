//! Single-flight loading: one loader per key at a time; the other callers
//! missing on that key wait for its value (moka's `get_with`,
//! quick_cache's placeholder guards).
//!
//! A [`Flight`] sits in its shard's `flights` from the moment a loader
//! claims the key until the loaded value is in the shard — both under the
//! shard's write lock, so a caller finds either the value or the flight,
//! never neither while a load is on. A caller that finds the flight waits
//! in its [`Room`], which the first such caller makes, under the same
//! lock: a load that nobody waits for allocates nothing and takes no lock
//! but the shard's. The loader takes the room out with the flight, in the
//! write section that stores the value, and completes it; a loader that
//! fails or panics completes it empty (`Landing`'s drop, in
//! `cache/load.rs`), and its waiters start over: one of them becomes the
//! next loader. Where that loader cannot change its shard (a fast shard
//! lock whose writer can have no barrier), it [abandons](Flight::abandon)
//! the flight in place, under a read lock, and a later claim takes it out
//! (the next claim of its key, or a sweep: `cache/flights.rs`). A
//! `LoadGuard`'s flight has its room from the claim on, held by the guard
//! too, which completes it empty (given up) with no shard lock: a flight
//! whose room failed is taken out alike. A failed load's room may hold its
//! error for the waiters that share it (`try_get_or_insert_shared`, moka's
//! `try_get_with`).

use std::{
    any::Any,
    task::{Context, Poll, Waker},
};

use crate::sync::{Arc, AtomicBool, Condvar, Mutex, Ordering, ThreadToken, thread_token};

/// A failed load's error as its waiters receive it, of the loader's
/// error type (each waiter takes it only if it asked for that type).
pub(super) type SharedError = std::sync::Arc<dyn Any + Send + Sync>;

/// How a load ended, as its waiters see it: the value, or a failure
/// with the error shared with them, if any (`None`: they start over).
pub(super) type Outcome<V> = Result<V, Option<SharedError>>;

/// How a load's error reaches the callers waiting on it: marks
/// [`NotShared`] and [`Shared`], as a loading call is asked.
pub(super) trait ShareError<E> {
    /// The error for the waiters (`None`: they start over).
    fn share(error: &E) -> Option<SharedError>;
    /// A waiter's error from a shared one (`None`: the loader's error
    /// was of another type, and this waiter starts over).
    fn receive(error: SharedError) -> Option<E>;
}

/// Waiters start over on an error (`try_get_or_insert_with`, quick_cache's
/// guards).
pub(super) struct NotShared;

impl<E> ShareError<E> for NotShared {
    fn share(_: &E) -> Option<SharedError> {
        None
    }
    fn receive(_: SharedError) -> Option<E> {
        None
    }
}

/// Waiters that asked for errors of the loader's type get its error
/// (`try_get_or_insert_shared`, moka's `try_get_with`).
pub(super) struct Shared;

impl<E: Send + Sync + 'static> ShareError<std::sync::Arc<E>> for Shared {
    fn share(error: &std::sync::Arc<E>) -> Option<SharedError> {
        Some(error.clone())
    }
    fn receive(error: SharedError) -> Option<std::sync::Arc<E>> {
        error.downcast().ok()
    }
}

enum State<V> {
    Loading,
    Loaded(V),
    Failed(Option<SharedError>),
}

/// One key's load in progress, in its shard's `flights` (read and written
/// under the shard's write lock; only [`abandon`](Flight::abandon), which
/// touches nothing but an atomic and the room, under its read lock).
pub(super) struct Flight<K, V> {
    pub(super) hash: u64,
    pub(super) key: K,
    /// This load among the shard's (its `Landing` finds it by this, with
    /// no user code: a key's `Eq` may panic).
    pub(super) id: u64,
    /// The thread running the loader: a caller on it that finds this
    /// flight would wait for itself (see [`Flight::is_own`]). `None` for
    /// an async load, whose task may move between threads and share one
    /// with its waiters.
    loader: Option<ThreadToken>,
    /// Where callers wait for the value, made by the first of them.
    room: Option<Arc<Room<V>>>,
    /// Its loader is gone, unlanded, and could not take it out.
    abandoned: AtomicBool,
    /// The key was removed (or the cache cleared or drained) while it loaded: its
    /// value may predate the removal, so it reaches the callers already
    /// waiting but is not cached, and later callers load afresh
    /// (Caffeine's removal of a key in computation; Guava's bug 1881
    /// cached it). Written under the shard's write lock.
    pub(super) invalidated: bool,
}

impl<K, V> Flight<K, V> {
    /// A flight loaded by the calling thread (`sync`), or by a future
    /// (`!sync`); `room`, made with it for a guard, which completes it
    /// with no shard lock (see `Landing` in `cache/load.rs`).
    pub(super) fn new(hash: u64, key: K, id: u64, sync: bool, room: Option<Arc<Room<V>>>) -> Self {
        Self {
            hash,
            key,
            id,
            loader: sync.then(thread_token),
            room,
            abandoned: AtomicBool::new(false),
            invalidated: false,
        }
    }

    /// Whether its loader [abandoned](Self::abandon) it, or gave it up by
    /// completing its room empty while it was still in the shard (a
    /// guard's): a claimer takes it out and loads afresh.
    pub(super) fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed) || self.room.as_ref().is_some_and(|r| r.is_failed())
    }

    /// Marks it abandoned, under a read lock of its shard, for a loader
    /// that failed and cannot take it out; the caller completes the room
    /// empty after unlocking.
    /// (The next write section, which claims the key, sees the mark: the
    /// lock orders the two.)
    /// Returns the room, to be completed empty once the lock is released
    /// (completing wakes futures, whose wakers are executor code).
    pub(super) fn abandon(&self) -> Option<Arc<Room<V>>> {
        self.abandoned.store(true, Ordering::Relaxed);
        self.room.clone()
    }

    /// Whether the calling thread is this flight's loader: it reached the
    /// key again from inside its own loader, and waiting would never end.
    pub(super) fn is_own(&self) -> bool {
        self.loader == Some(thread_token())
    }

    /// Whether a caller that finds this flight, in `shard`, would wait for
    /// itself: it runs inside a poll of the flight's load future on this
    /// thread ([`polling`]), or it blocks (`sync`) on the thread of the
    /// flight's loader ([`is_own`](Self::is_own)). An async caller there
    /// does not: its wait returns `Pending`, and the loader's thread goes
    /// on (a guard's holder polling a waiter of its key, then inserting).
    pub(super) fn waits_for_itself(&self, shard: usize, sync: bool) -> bool {
        is_polled(shard, self.id) || (sync && self.is_own())
    }

    /// The room to wait in, made if this is the first caller to wait.
    pub(super) fn room(&mut self) -> Arc<Room<V>> {
        self.room
            .get_or_insert_with(|| Arc::new(Room::new()))
            .clone()
    }

    /// The flight's key, its room if anyone waits, and whether it was
    /// invalidated (the loader, as it takes the flight out of its shard).
    pub(super) fn into_parts(self) -> (K, Option<Arc<Room<V>>>, bool) {
        (self.key, self.room, self.invalidated)
    }
}

#[cfg(not(mmbatch_loom))]
std::thread_local! {
    /// The async loads being polled on this thread right now, innermost
    /// last: each its shard's address and its flight's id (unique while
    /// the flight lives).
    static POLLING: std::cell::RefCell<Vec<(usize, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}
// Loom's threads share the OS thread: each has its own with loom's.
#[cfg(mmbatch_loom)]
loom::thread_local! {
    static POLLING: std::cell::RefCell<Vec<(usize, u64)>> = std::cell::RefCell::new(Vec::new());
}

/// Marks the load of flight `id` in the shard at address `shard` as being
/// polled on this thread until the returned guard drops (after the poll,
/// or as a panic in it unwinds): a claim the poll makes that finds the
/// flight is the load asking for its own key, which would wait for ever
/// ([`Flight::waits_for_itself`]).
/// In a thread-local's destructor after `POLLING`'s own, nothing is
/// marked (`try_with`): the check is then not made, as before it was.
pub(super) fn polling(shard: usize, id: u64) -> Polling {
    let _ = POLLING.try_with(|p| p.borrow_mut().push((shard, id)));
    Polling(shard, id)
}

/// Whether the load of flight `id` of the shard at `shard` is being
/// polled on this thread ([`polling`]).
fn is_polled(shard: usize, id: u64) -> bool {
    POLLING
        .try_with(|p| p.borrow().contains(&(shard, id)))
        .unwrap_or(false)
}

/// A load marked as being polled ([`polling`]), unmarked when dropped:
/// its own mark, the last one of its flight.
pub(super) struct Polling(usize, u64);

impl Drop for Polling {
    fn drop(&mut self) {
        let _ = POLLING.try_with(|p| {
            let mut p = p.borrow_mut();
            if let Some(i) = p.iter().rposition(|&f| f == (self.0, self.1)) {
                p.remove(i);
            }
        });
    }
}

/// Where the callers that found a load in flight wait for its value:
/// threads on the condition variable, futures by their wakers, both
/// registered and woken under the one lock of the state, so a waiter
/// that saw `Loading` is always woken (loom: `loom_async_room.rs`).
pub(super) struct Room<V> {
    state: Mutex<Waiting<V>>,
    done: Condvar,
}

struct Waiting<V> {
    state: State<V>,
    /// The waiting futures' wakers, each in the slot its [`RoomWait`]
    /// holds: a future's re-poll replaces its own, and a future dropped
    /// while the load is on (a request that timed out) empties its slot
    /// for the next, so a hung load holds no waker of a gone task.
    wakers: Vec<Option<Waker>>,
    /// Emptied slots of `wakers`, to reuse.
    free: Vec<usize>,
}

impl<V> Room<V> {
    pub(super) fn new() -> Self {
        Self {
            state: Mutex::new(Waiting {
                state: State::Loading,
                wakers: Vec::new(),
                free: Vec::new(),
            }),
            done: Condvar::new(),
        }
    }

    /// Whether the load failed.
    pub(super) fn is_failed(&self) -> bool {
        matches!(crate::sync::lock(&self.state).state, State::Failed(_))
    }

    /// Completes the load with its outcome, waking every waiter.
    pub(super) fn complete(&self, outcome: Outcome<V>) {
        let wakers = {
            let mut w = crate::sync::lock(&self.state);
            w.state = match outcome {
                Ok(v) => State::Loaded(v),
                Err(error) => State::Failed(error),
            };
            w.free = Vec::new();
            std::mem::take(&mut w.wakers)
        };
        self.done.notify_all();
        // Outside the lock: a waker may run its task at once.
        for w in wakers.into_iter().flatten() {
            w.wake();
        }
    }
}

impl<V: Clone> Room<V> {
    /// Waits for the load's outcome.
    pub(super) fn wait(&self) -> Outcome<V> {
        let mut s = crate::sync::lock(&self.state);
        loop {
            match &s.state {
                State::Loading => {
                    s = self
                        .done
                        .wait(s)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                State::Loaded(v) => return Ok(v.clone()),
                State::Failed(error) => return Err(error.clone()),
            }
        }
    }

    /// [`wait`](Self::wait) until `deadline`: `None` once it has passed
    /// with the load still on.
    #[cfg(not(mmbatch_loom))]
    pub(super) fn wait_until(&self, deadline: std::time::Instant) -> Option<Outcome<V>> {
        let mut s = crate::sync::lock(&self.state);
        loop {
            match &s.state {
                State::Loading => {
                    let left = deadline
                        .checked_duration_since(std::time::Instant::now())
                        .filter(|left| !left.is_zero())?;
                    s = self
                        .done
                        .wait_timeout(s, left)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
                State::Loaded(v) => return Some(Ok(v.clone())),
                State::Failed(error) => return Some(Err(error.clone())),
            }
        }
    }

    /// [`wait`](Self::wait) for a future: ready with the outcome, else
    /// pending with `cx`'s waker registered in `slot` (the future's,
    /// taken on its first pending poll) under the same lock that
    /// [`complete`](Self::complete) takes.
    pub(super) fn poll_wait(
        &self,
        slot: &mut Option<usize>,
        cx: &mut Context<'_>,
    ) -> Poll<Outcome<V>> {
        // A waker replaced is dropped after the lock (executor code).
        let mut old = None;
        let mut guard = crate::sync::lock(&self.state);
        let s = &mut *guard;
        let r = match &s.state {
            State::Loading => {
                match *slot {
                    Some(i) => {
                        let w = &mut s.wakers[i];
                        if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                            old = w.replace(cx.waker().clone());
                        }
                    }
                    None => {
                        let w = Some(cx.waker().clone());
                        *slot = Some(match s.free.pop() {
                            Some(i) => {
                                s.wakers[i] = w;
                                i
                            }
                            None => {
                                s.wakers.push(w);
                                s.wakers.len() - 1
                            }
                        });
                    }
                }
                Poll::Pending
            }
            State::Loaded(v) => Poll::Ready(Ok(v.clone())),
            State::Failed(error) => Poll::Ready(Err(error.clone())),
        };
        drop(guard);
        drop(old);
        r
    }
}

impl<V> Room<V> {
    /// A waiting future's goodbye: empties its `slot` if the load is
    /// still on (once it is done the wakers are gone already).
    fn leave(&self, slot: usize) {
        let gone = {
            let mut s = crate::sync::lock(&self.state);
            if !matches!(s.state, State::Loading) {
                return;
            }
            s.free.push(slot);
            s.wakers[slot].take()
        };
        // Executor code, after the lock.
        drop(gone);
    }

    /// Wakers registered now (the loom model of a dropped wait).
    #[cfg(all(test, mmbatch_loom))]
    pub(super) fn wakers(&self) -> usize {
        crate::sync::lock(&self.state)
            .wakers
            .iter()
            .flatten()
            .count()
    }
}

/// The broken variant the loom model must catch: the state looked at
/// and the waker registered under two holds of the lock, so a completion
/// between them wakes nobody.
#[cfg(all(test, mmbatch_loom))]
impl<V: Clone> Room<V> {
    pub(super) fn poll_wait_racy(&self, cx: &mut Context<'_>) -> Poll<Outcome<V>> {
        let loading = matches!(crate::sync::lock(&self.state).state, State::Loading);
        if !loading {
            return self.poll_wait(&mut None, cx);
        }
        crate::sync::lock(&self.state)
            .wakers
            .push(Some(cx.waker().clone()));
        Poll::Pending
    }
}

/// A future's wait in a [`Room`]; dropped before the load ends, it takes
/// its waker out.
pub(super) struct RoomWait<V> {
    room: Arc<Room<V>>,
    /// Its slot among the room's wakers, from its first pending poll.
    slot: Option<usize>,
}

impl<V> RoomWait<V> {
    pub(super) fn new(room: Arc<Room<V>>) -> Self {
        Self { room, slot: None }
    }
}

impl<V: Clone> std::future::Future for RoomWait<V> {
    type Output = Outcome<V>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<V>> {
        let this = self.get_mut();
        let r = this.room.poll_wait(&mut this.slot, cx);
        if r.is_ready() {
            // The room's wakers are gone: nothing for the drop to take.
            this.slot = None;
        }
        r
    }
}

impl<V> Drop for RoomWait<V> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            self.room.leave(slot);
        }
    }
}
