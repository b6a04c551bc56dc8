//! [`LruCache`]: a bounded concurrent cache whose replacement is the
//! kernel's: per-shard lruvecs with the active/inactive lists, hits marked
//! under a read lock and applied by the shard's next reclaim (as the kernel
//! batches activations), and refault detection from `mm/workingset.c`.
//!
//! - `builder`: [`Builder`], [`Policy`], [`Weigher`], [`CacheStats`],
//!   [`CacheError`].
//! - `get`: lookups — `get`'s fast read and its other paths, `peek`,
//!   `contains_key`.
//! - `shard`: one shard's lruvec — slab, index, lists, reclaim.
//! - `workingset`: shadows and the refault test.
//! - `flight`, `load`: single-flight loading (the flight and its room;
//!   `get_or_insert_with`).

mod builder;
mod compute;
mod expire;
mod flight;
mod flights;
mod get;
mod guard;
mod iter;
mod load;
mod load_if;
mod load_shared;
#[allow(unsafe_code)] // the lock's protocol: see its docs
mod lock;
mod policy;
#[allow(unsafe_code)] // a prefetch instruction, at the MSRV
mod prefetch;
mod remove;
mod restart;
mod shard;
mod stats;
mod workingset;

#[cfg(all(test, not(mmbatch_loom)))]
mod get_tests;
#[cfg(all(test, mmbatch_loom))]
mod tests;

use std::{
    fmt,
    hash::{BuildHasher, Hash},
    panic::{self, AssertUnwindSafe},
};

pub use builder::{
    Builder, CacheError, DefaultHashBuilder, MAX_CAPACITY, MAX_SHARDS, RemovalCause, UnitWeigher,
    Weigher,
};
use builder::{Listener, Options};
pub use compute::{Compute, Computed};
use crossbeam_utils::CachePadded;
pub use equivalent::Equivalent;
pub use expire::{Clock, Expiry};
pub use guard::{AsyncLoadGuard, LoadGuard};
pub use iter::Iter;
use lock::ShardLock;
pub use policy::Policy;
pub use restart::{PolicyState, PolicyStateError, Saved, SavedKey};
use shard::{Deadline, Evicted, Inserted, Lruvec};
pub use stats::CacheStats;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// One shard: its lruvec behind a lock striped by thread, whose stripes
/// also hold the hit and miss counters, in the line a lookup has just
/// written (counting costs no other line).
type Shard<K, V> = ShardLock<Lruvec<K, V>>;

/// A bounded, concurrent cache with the kernel's replacement.
///
/// Despite the name, its default policy is not LRU: [`Policy::Adaptive`]
/// runs whichever of LIRS, LIRS with TinyLFU admission, the kernel's
/// workingset or LRU its sampled requests favour, and may decline a new
/// key (see the guarantees below). [`Policy::Lru`] with batching off is
/// exact LRU.
///
/// ```
/// use mmbatch_cache::LruCache;
///
/// let cache: LruCache<u64, String> = LruCache::new(2);
/// cache.insert(1, "one".to_owned());
/// cache.insert(2, "two".to_owned());
/// assert_eq!(cache.get(&1).as_deref(), Some("one"));
/// cache.insert(3, "three".to_owned()); // over capacity: one entry goes (here 2)
/// assert_eq!(cache.len(), 2);
/// assert_eq!(cache.get(&2), None);
///
/// // Shared by threads; one loader per key, the others wait for it.
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             let v = cache.get_or_insert_with(4, || "four".to_owned());
///             assert_eq!(v, "four");
///         });
///     }
/// });
/// assert_eq!(cache.peek(&4).as_deref(), Some("four"));
/// assert_eq!(cache.stats().loads, 1);
/// ```
///
/// # How it works
/// Keys hash to shards, each an lruvec of its own (the kernel keeps one
/// per node and memory cgroup) with the active and inactive lists and its
/// share of the capacity. A hit takes only its shard's read lock (with
/// batching on, the default) and marks the entry referenced (under
/// [`Policy::Adaptive`] while its shards run LRU, the hit that fills its
/// shard's batch of moves then takes the write lock to apply them, if
/// it can without waiting); an insertion takes the write lock and evicts from
/// the shard's own lists until the new entry fits (or, under
/// [`Policy::LirsTinyLfu`], refuses a new key seen less often than its
/// victim; with a weigher, under [`Policy::Lirs`], declines a cold key
/// heavier than the HIR entries it would evict). [`Policy`] says how
/// entries are ordered; [ARCHITECTURE.md][architecture] ("LruCache") gives the
/// layout and the lock protocol.
///
/// [architecture]: https://github.com/mmbatch/mmbatch/blob/main/ARCHITECTURE.md#33-lrucache-cachemodrs
///
/// # Guarantees
/// - An insertion makes room by evicting other entries, never the one it
///   makes or replaces; but that entry is not kept where it cannot fit: one heavier
///   than its shard's share of the capacity
///   ([`max_entry_weight`](Self::max_entry_weight)), or one that the
///   shard's [pinned](Builder::pinned) entries leave no room for, is not
///   cached (or no longer, for a replaced key) and goes to the listener
///   ([`CacheStats::rejected`]). Under [`Policy::LirsTinyLfu`], and under
///   the default [`Policy::Adaptive`] while its shards run it, a new key
///   in a full shard may be refused admission instead of cached (a key
///   seen for the first time lately always is); with a weigher, under
///   [`Policy::Lirs`] and the default while it runs it (as it does
///   first), so may a new key heavier than the resident HIR entries it
///   would evict and the free room: the listener hears it as evicted
///   ([`CacheStats::not_admitted`]), and a later miss of the key loads it
///   again.
/// - Each shard holds at most its share of the capacity and of
///   `max_entries` at every moment; the cache's total never exceeds
///   either. One exception: pinned entries ([`Builder::pinned`]) that a
///   [`set_capacity`](Self::set_capacity) below their weight leaves over
///   it stay; the cache comes back under it as they are removed, or as
///   the insertions after they unpin evict them.
/// - The listener runs outside every lock (it may use the cache), with
///   each evicted entry exactly once (a removal listener: each entry that
///   leaves, with its [`RemovalCause`], but for those
///   [`drain`](Self::drain) returns to the caller).
/// - User code runs under the lock of an entry's shard: a key's `Eq`,
///   `Clone` and `Borrow` (or a lookup form's `Equivalent`), and a
///   value's `Clone`; under the write lock also an
///   [`Expiry`], a [`Clock`], the
///   [`pinned`](Builder::pinned) predicate, and the weigher of a
///   `compute`. Under `get` (batching
///   on), `peek` and `contains_key` that is the read lock, and the code may
///   look that shard up with the same three calls, even while another
///   thread's insertion waits for the lock. Under every other call
///   (`insert`, `remove`, `get_or_insert_with`, `get` with batching off;
///   so too `compute`'s function and the predicates of `retain`,
///   `remove_if` and the `_if` loaders) it is the write lock, and any use of that shard panics;
///   so does a change of the shard from under its read lock. Each panic
///   names the cause where the call would deadlock. The same holds
///   through chains of shards (a `Clone` under shard A that reads B,
///   whose `Clone` reads or changes A), and across threads: two threads
///   reading A then B and B then A, with an insertion waiting on each
///   shard, finish (a writer that has waited a while for readers steps
///   back and lets the waiting readers in). A `get_or_insert_with` called
///   under a shard's lock whose loader waits for another thread that
///   needs that shard can still hang: the cache cannot see another
///   thread's wait.
/// - `get_or_insert_with` runs one loader per key at a time; a loader that
///   returns an error or panics wakes its waiters, one of which loads next
///   (with `try_get_or_insert_shared`, they return its error instead).
/// - Memory grows linearly with the entries held (no allocation per
///   entry: each shard keeps them in one slab), plus, once a shard first
///   evicts, a bounded history of evicted keys (shadows) in proportion to
///   its entries. Per-entry figures: [docs/cache.md][layout-measurements].
///
/// [layout-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#layout-measurements
pub struct LruCache<K, V, S = DefaultHashBuilder, W = UnitWeigher> {
    shards: Box<[CachePadded<Shard<K, V>>]>,
    shard_mask: usize,
    spread: bool,
    hasher: S,
    weigher: W,
    /// The capacity and `max_entries`: stored after the shards shrink
    /// and before they grow, so the shards' total never exceeds them.
    capacity: AtomicU64,
    max_entries: AtomicUsize,
    /// Whether `max_entries` was set (else it follows the capacity).
    max_entries_set: bool,
    /// Held by `set_capacity`: one resize at a time.
    resizing: std::sync::Mutex<()>,
    policy: Policy,
    /// [`Policy::Adaptive`]'s duel, which the shards share.
    duel: Option<crate::sync::Arc<shard::Duel>>,
    batching: bool,
    listener: Option<Listener<K, V>>,
    /// Expiry, when on: its policy and clock.
    expire: Option<expire::Expire<K, V>>,
    loads: AtomicU64,
    load_waits: AtomicU64,
    load_failures: AtomicU64,
    /// Hits of the loads' first lookups whose values `replace_if` refused:
    /// [`stats`](Self::stats) counts them as misses.
    refused: AtomicU64,
}

impl<K, V, S, W> fmt::Debug for LruCache<K, V, S, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LruCache")
            .field("capacity", &self.capacity.load(Ordering::Relaxed))
            .field("shards", &self.shards.len())
            .field("policy", &self.policy)
            .field("batching", &self.batching)
            .finish_non_exhaustive()
    }
}

// A call whose user code panicked leaves the cache consistent and
// usable, its invariants whole ("Guarantees under faults" in the crate's
// docs: as before the call, but for a listener's panic, heard after the
// call's work, and a pinned predicate's, mid-reclaim), so a cache may
// cross `catch_unwind` as `std::sync::Mutex` does (which poisons
// instead). What the boxed listener, expiry, pinned predicate and clock
// capture is theirs to keep consistent, as with any closure the caller
// wraps in `AssertUnwindSafe`.
impl<K, V, S, W> panic::UnwindSafe for LruCache<K, V, S, W>
where
    K: panic::RefUnwindSafe,
    V: panic::RefUnwindSafe,
    S: panic::RefUnwindSafe,
    W: panic::RefUnwindSafe,
{
}

impl<K, V, S, W> panic::RefUnwindSafe for LruCache<K, V, S, W>
where
    K: panic::RefUnwindSafe,
    V: panic::RefUnwindSafe,
    S: panic::RefUnwindSafe,
    W: panic::RefUnwindSafe,
{
}

impl<K, V, S, W> LruCache<K, V, S, W> {
    /// The largest capacity: [`crate::MAX_CAPACITY`], here
    /// for `LruCache::<K, V>::MAX_CAPACITY`.
    pub const MAX_CAPACITY: u64 = MAX_CAPACITY;
}

impl<K: Hash + Eq + Clone, V: Clone> LruCache<K, V> {
    /// A cache of at most `capacity` entries with the default policy
    /// ([`Policy::Adaptive`]). A capacity of 0 stores nothing (see
    /// [`builder`](Self::builder)): a configuration can turn caching off.
    /// A capacity above [`MAX_CAPACITY`](Self::MAX_CAPACITY) (2^48) is
    /// taken as that, and so is `usize::MAX` on every target, so
    /// `new(usize::MAX)` is a cache bounded only by memory, as
    /// quick_cache's is; nothing is allocated for it ahead.
    pub fn new(capacity: usize) -> Self {
        // On a 32-bit target `usize::MAX` is below 2^48, and taken as the
        // largest all the same.
        #[cfg(not(target_pointer_width = "64"))]
        let capacity = if capacity == usize::MAX {
            MAX_CAPACITY
        } else {
            capacity as u64
        };
        #[cfg(target_pointer_width = "64")]
        let capacity = (capacity as u64).min(MAX_CAPACITY);
        Self::builder(capacity)
            .build()
            .unwrap_or_else(|e| panic!("LruCache::new({capacity}): {e}"))
    }

    /// A builder for a cache of total weight `capacity`. A capacity of 0
    /// stores nothing, as moka's does: every insertion goes to the
    /// listener as evicted and counts as
    /// [`rejected`](CacheStats::rejected), and a loaded value is not kept,
    /// so the next loading call loads again (callers waiting on one load
    /// share its value, as ever). A cache's shards are fixed at build, and
    /// one built with capacity 0 has one (or [`Builder::shards`]): build a
    /// cache that will be turned off and on again with the capacity it
    /// will have, and [`set_capacity`](Self::set_capacity)`(0)` it.
    pub fn builder(capacity: u64) -> Builder<K, V> {
        Builder {
            opts: Options {
                capacity,
                max_entries: None,
                estimated_entries: None,
                shards: None,
                policy: Policy::default(),
                batching: true,
                fast_reads: true,
                weighted: false,
                spread: false,
                listener: None,
                time_to_live: None,
                time_to_idle: None,
                expiry: None,
                clock: None,
                pinned: None,
            },
            hasher: DefaultHashBuilder::default(),
            weigher: UnitWeigher,
        }
    }
}

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// The key's hash; a user's hasher's, mixed (see
    /// [`Builder::hasher`](super::Builder::hasher)): the fold brings high
    /// bits into the multiply, the multiply spreads low bits upwards and
    /// the last fold brings the product's high bits back to the middle
    /// ones (the shard's bits are 40 and up, the index's and shadows' 8 to
    /// 40).
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        let h = self.hasher.hash_one(key);
        if self.spread {
            let h = (h ^ (h >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^ (h >> 29)
        } else {
            h
        }
    }

    fn shard(&self, hash: u64) -> &Shard<K, V> {
        &self.shards[self.shard_index(hash)]
    }

    /// The shard of the key of `hash` (the cache's hash of it), by the
    /// hash's high bits: hashbrown takes its buckets from the low ones.
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 40) as usize & self.shard_mask
    }

    /// Now on the expiry clock, in nanoseconds; 0 without expiry (nothing
    /// is ever expired at 0: deadlines are then `u64::MAX`).
    fn now(&self) -> u64 {
        self.expire.as_ref().map_or(0, expire::Expire::now)
    }

    /// The life of `value` created under `key` (`expire_after_create`;
    /// without expiry, forever).
    fn created(&self, key: &K, value: &V) -> Option<expire::Life> {
        self.expire.as_ref().map(|e| e.create(key, value))
    }

    /// The deadline of an entry made at `now` with `life`.
    fn deadline(now: u64, life: Option<expire::Life>) -> Deadline {
        life.map_or(Deadline::NEVER, |l| l.at(now))
    }

    /// Caches `value` under `key`, returning the value it replaces; a
    /// replaced entry keeps its place and is marked used, as a hit marks
    /// it (as in `lru`'s `put`; [`CacheStats::hits`] counts lookups
    /// only). Evicts past the shard's capacity before returning, then runs
    /// the listener. An entry heavier than its shard's share of the
    /// capacity is not cached: it goes straight to the listener
    /// ([`CacheStats::rejected`]), and any old value of `key` is removed
    /// and still returned (so `Some` does not mean the new value is
    /// cached). Under [`Policy::LirsTinyLfu`] a new key in a full shard may
    /// be refused admission, and with a weigher under [`Policy::Lirs`] a
    /// new key heavier than the HIR entries it would evict and the free
    /// room is declined (see [`Policy::Lirs`]), as under
    /// [`Policy::Adaptive`] while its shards run either: it goes to the
    /// listener as evicted ([`CacheStats::not_admitted`]).
    ///
    /// # Panics
    /// If called from user code that the cache runs under this shard's
    /// lock (a key's `Eq`, a value's `Clone`): the change would wait for
    /// the caller's own lookup. If the shard was skipping its readers'
    /// barrier and no barrier can be had ([`Builder::fast_reads`] says
    /// when). With the listener's panic, after the insertion is done.
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        let (hash, weight) = (self.hash(&key), self.weigh(&key, &value));
        let shard = self.shard(hash);
        let mut evicted = Evicted::new();
        let old = {
            let mut lv = shard.write();
            // Under the lock: no write acts on a moment before one it
            // follows (an entry a reader saw expire stays expired).
            let now = self.now();
            lv.now = now;
            let found = lv.find(hash, |k| *k == key);
            let live = found.filter(|&i| lv.live_at(i, now));
            self.put_locked(
                shard,
                &mut lv,
                (hash, key, value, weight),
                (found, live),
                &mut evicted,
            )
        };
        // The stored key equals the caller's, which is heard with the
        // replaced value (after the evictions, even if one panics).
        let (old, replaced) = match old {
            Some((k, v)) => {
                let heard = self
                    .hears_every_cause()
                    .then(|| (k, v.clone(), RemovalCause::Replaced));
                (Some(v), heard)
            }
            None => (None, None),
        };
        self.notify_each(evicted.into_iter().chain(replaced));
        old
    }

    /// Hands the shard its lookups' counts when it asks for them (see
    /// `Lruvec::lookups`): a read of each stripe's line, once per window of
    /// evictions.
    fn look_at_lookups(shard: &Shard<K, V>, lv: &mut Lruvec<K, V>) {
        if lv.looks_at_lookups() {
            let (hits, misses) = shard.lookups();
            lv.lookups(hits, misses);
        }
    }

    fn weigh(&self, key: &K, value: &V) -> u64 {
        self.weigher.weight(key, value).max(1)
    }

    /// Removes every entry and shadow; a
    /// [`removal_listener`](Builder::removal_listener) hears each entry
    /// ([`RemovalCause::Cleared`]), an eviction listener none; either
    /// hears an entry that had expired as [`RemovalCause::Expired`], as
    /// the shard's own work would have reclaimed it. Loads in flight still
    /// return their values to their callers, but do not cache them.
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn clear(&self) {
        let mut first = None;
        for shard in self.shards.iter() {
            let nodes = {
                let mut lv = shard.write();
                // A load in flight lands uncached: its value may predate
                // the clear.
                lv.flights.invalidate_all();
                let now = self.now();
                let expired: Vec<bool> =
                    (0..lv.len() as u32).map(|i| !lv.live_at(i, now)).collect();
                lv.clear().into_iter().zip(expired)
            };
            // User Drop and the listener, outside the lock; every shard is
            // cleared before a listener's panic continues.
            let every = self.hears_every_cause();
            let mut kept = Vec::new();
            let p = self.hear(nodes.filter_map(|(n, gone)| match (gone, every) {
                (true, _) => Some((n.key, n.value, RemovalCause::Expired)),
                (false, true) => Some((n.key, n.value, RemovalCause::Cleared)),
                (false, false) => {
                    kept.push(n);
                    None
                }
            }));
            drop(kept);
            first = first.or(p);
        }
        if let Some(p) = first {
            panic::resume_unwind(p);
        }
    }

    /// Entries cached now, counting expired entries that their shards
    /// have not reclaimed yet (no lookup returns them; `iter` skips them;
    /// [`purge_expired`](Self::purge_expired) reclaims them). Reads each
    /// shard in turn under its read lock: O(shards), and not a snapshot
    /// while other threads change the cache.
    ///
    /// # Panics
    /// If called from user code that the cache runs under any shard's
    /// write lock: it reads every shard.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    /// Whether nothing is cached (as [`len`](Self::len) counts: expired
    /// entries not yet reclaimed count).
    ///
    /// # Panics
    /// If called from user code that the cache runs under any shard's
    /// write lock: it reads every shard.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity: a number of entries, or a total weight with a
    /// weigher.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    /// Changes the capacity at run time. Shrinking evicts each shard down
    /// to its new share through the policy, as an insertion would (the
    /// listener hears each eviction); growing evicts nothing and rebuilds
    /// nothing. `max_entries`
    /// follows the capacity unless it was set. Safe alongside every other
    /// call: the shards' total never exceeds [`capacity`](Self::capacity).
    ///
    /// A capacity of 0 evicts every entry (but pinned ones) and stores
    /// nothing from then on, until a later call gives the cache room
    /// again. Pinned entries a smaller capacity cannot hold stay over it
    /// until they are removed, or evicted by insertions once unpinned.
    ///
    /// # Errors
    /// A capacity above [`LruCache::MAX_CAPACITY`], or other than 0 and
    /// below the number of [`shards`](Self::shards) (each must hold an
    /// entry); the cache is left as it was.
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn set_capacity(&self, capacity: u64) -> Result<(), CacheError> {
        if capacity > MAX_CAPACITY {
            return Err(CacheError::CapacityTooLarge { capacity });
        }
        let shards = self.shards.len();
        if capacity != 0 && capacity < shards as u64 {
            return Err(CacheError::CapacityBelowShards { capacity, shards });
        }
        let one = self.resizing.lock().unwrap_or_else(|e| e.into_inner());
        let entries = if self.max_entries_set {
            self.max_entries.load(Ordering::Relaxed)
        } else {
            usize::try_from(capacity).unwrap_or(usize::MAX)
        };
        let growing = capacity >= self.capacity();
        if growing {
            self.capacity.store(capacity, Ordering::Release);
            self.max_entries.store(entries, Ordering::Release);
        }
        // Heard once every shard is resized and the resize lock released
        // (a listener may resize the cache itself).
        // The duel's simulations follow, sampled at a rate for the new
        // size, which every shard takes up below (a weighted cache's
        // follow the entries its shards report instead: its rate stands
        // here).
        let shift = self
            .duel
            .as_ref()
            .map(|d| d.resize(entries.min(usize::try_from(capacity).unwrap_or(usize::MAX))));
        let mut evicted = Vec::new();
        for (i, shard) in self.shards.iter().enumerate() {
            let mut out = Evicted::new();
            let mut lv = shard.write();
            if let Some(shift) = shift {
                lv.set_duel_shift(shift);
            }
            lv.now = self.now();
            lv.set_capacity(
                builder::share(capacity, shards, i),
                builder::shard_entries(entries, shards, i),
                &mut out,
            );
            drop(lv);
            evicted.extend(out);
        }
        if !growing {
            self.capacity.store(capacity, Ordering::Release);
            self.max_entries.store(entries, Ordering::Release);
        }
        drop(one);
        self.notify_each(evicted);
        Ok(())
    }

    /// The heaviest entry the cache keeps: the smallest shard's share of
    /// the capacity. A heavier entry is not cached ([`insert`](Self::insert)
    /// hands it to the listener, [`CacheStats::rejected`] counts it). The
    /// default shard count grows with the CPUs (and with
    /// [`Builder::estimated_entries`]), and so this shrinks with them: set
    /// [`Builder::shards`] where entries can be large.
    pub fn max_entry_weight(&self) -> u64 {
        builder::smallest_share(self.capacity(), self.shards.len())
    }

    /// The total weight cached now (the number of entries without a
    /// weigher).
    ///
    /// # Panics
    /// If called from user code that the cache runs under any shard's
    /// write lock: it reads every shard.
    pub fn weight(&self) -> u64 {
        self.shards.iter().map(|s| s.read().weight()).sum()
    }

    /// The replacement policy the cache was built with: under the default
    /// [`Policy::Adaptive`], what its shards run now is in
    /// [`stats`](Self::stats) (`workingset_shards`, `lirs_shards`, ...).
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Counters so far (and a few gauges of now), summed shard by shard
    /// while other threads go on: not a snapshot of one moment.
    ///
    /// # Panics
    /// If called from user code that the cache runs under any shard's
    /// write lock: it reads every shard.
    pub fn stats(&self) -> CacheStats {
        // Never more failures than loads in one call (the two counters
        // are read one after the other while loads go on).
        let load_failures = self.load_failures.load(Ordering::Relaxed);
        let loads = self.loads.load(Ordering::Relaxed);
        let mut st = CacheStats {
            loads,
            load_waits: self.load_waits.load(Ordering::Relaxed),
            load_failures: load_failures.min(loads),
            ..CacheStats::default()
        };
        for s in self.shards.iter() {
            st.fast_read_shards += u64::from(s.is_fast());
            let (hits, misses) = s.lookups();
            st.hits += hits;
            st.misses += misses;
            let lv = s.read();
            st.evictions += lv.evictions + lv.rejected + lv.not_admitted;
            st.rejected += lv.rejected;
            st.not_admitted += lv.not_admitted;
            st.refaults += lv.refaults;
            st.refault_activations += lv.activations;
            st.shadows += lv.shadows.len() as u64;
            st.thrashing_shards += u64::from(lv.thrashing());
            st.lirs_shards += u64::from(lv.runs() == Policy::Lirs);
            st.lru_shards += u64::from(lv.runs() == Policy::Lru);
            st.tinylfu_shards += u64::from(lv.runs() == Policy::LirsTinyLfu);
            st.workingset_shards += u64::from(lv.runs() == Policy::Workingset);
        }
        // Each refusal was counted as a hit first; while lookups race
        // this read, at most the hits read are moved.
        let refused = self.refused.load(Ordering::Relaxed).min(st.hits);
        st.hits -= refused;
        st.misses += refused;
        st
    }

    /// Checks every shard's structure (lists, index, weights, bounds,
    /// shadows) and that each key is in its hash's shard. Not part of the
    /// API: for this crate's tests, fuzz targets and benchmarks, and free
    /// to change.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let before = (self.capacity(), self.max_entries.load(Ordering::Acquire));
        let (mut len, mut weight, mut pins) = (0, 0, false);
        for (i, s) in self.shards.iter().enumerate() {
            let lv = s.read();
            lv.check().map_err(|e| format!("shard {i}: {e}"))?;
            len += lv.len();
            weight += lv.weight();
            pins |= lv.pins();
        }
        // The larger of the bounds before and after the sums: a resize
        // running meanwhile moves them.
        let (capacity, max_entries) = (
            before.0.max(self.capacity()),
            before.1.max(self.max_entries.load(Ordering::Acquire)),
        );
        // Pinned entries may hold a cache over a capacity made smaller.
        if (weight > capacity || len > max_entries) && !pins {
            return Err(format!(
                "{len} entries of weight {weight} over {max_entries} / {capacity}"
            ));
        }
        Ok(())
    }

    /// Whether a removal listener wants more than evictions.
    fn hears_every_cause(&self) -> bool {
        self.listener.as_ref().is_some_and(|l| l.every_cause)
    }

    /// Gives `entries` to the listener with `cause`, outside every lock
    /// (without a listener they are dropped). A listener that panics still
    /// gets the rest; the first panic then continues in the caller.
    fn notify(&self, entries: impl IntoIterator<Item = (K, V)>, cause: RemovalCause) {
        self.notify_each(entries.into_iter().map(|(k, v)| (k, v, cause)));
    }

    /// [`notify`](Self::notify) with a cause per entry.
    fn notify_each(&self, entries: impl IntoIterator<Item = (K, V, RemovalCause)>) {
        if let Some(p) = self.hear(entries) {
            panic::resume_unwind(p);
        }
    }

    /// Gives `entries` to the listener, each even if one panics; returns
    /// the first panic, for the caller to continue once its work is done.
    fn hear(
        &self,
        entries: impl IntoIterator<Item = (K, V, RemovalCause)>,
    ) -> Option<Box<dyn std::any::Any + Send>> {
        let Some(listener) = &self.listener else {
            return None;
        };
        let mut first = None;
        for (k, v, cause) in entries {
            let heard = panic::catch_unwind(AssertUnwindSafe(|| (listener.f)(k, v, cause)));
            if let Err(p) = heard {
                first.get_or_insert(p);
            }
        }
        first
    }
}
