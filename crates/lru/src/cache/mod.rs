//! [`LruCache`]: a bounded concurrent cache whose replacement is the
//! engine's LRU and whose hits are recorded through batched promotion.

#[cfg(all(test, loom))]
mod tests;

use std::{
    borrow::Borrow,
    fmt,
    hash::{BuildHasher, Hash},
    mem,
    panic::{self, AssertUnwindSafe},
};

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;

use crate::{
    BATCH, Config, Engine, LruError, Modes, Pfn, SWAP_CLUSTER_MAX,
    frame::Flags,
    sync::{AtomicU64, AtomicUsize, Mutex, Ordering, RwLock, lock, read, write, yield_now},
};

/// The default hasher: foldhash's, as hashbrown's and quick_cache's.
pub type DefaultHashBuilder = foldhash::fast::RandomState;

/// How a hit reorders the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Policy {
    /// The kernel's two lists (`folio_mark_accessed`): a new entry goes on
    /// the inactive list; its first hit sets REFERENCED, its second moves
    /// it to the active list; reclaim refills the inactive list from the
    /// active tail and gives referenced entries a second chance. A hot
    /// entry's hits skip the frame until reclaim next deactivates frames
    /// (see [`LruCache`]'s "How it works"), and a one-off scan cannot flush
    /// hot entries.
    #[default]
    ActiveInactive,
    /// Exact LRU: every hit moves the entry to the head of one list
    /// ([`Engine::promote`]) and eviction takes the tail. With batching
    /// off and one thread the eviction order is exactly LRU's (the `lru`
    /// crate is the oracle of its property tests); with batching on, hits
    /// reach the list a batch at a time.
    Lru,
}

/// How much an entry counts against the capacity.
pub trait Weigher<K, V> {
    /// The entry's weight; 0 counts as 1 (every entry holds a frame).
    fn weight(&self, key: &K, value: &V) -> u64;
}

/// Every entry weighs 1: the capacity is a number of entries.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnitWeigher;

impl<K, V> Weigher<K, V> for UnitWeigher {
    #[inline]
    fn weight(&self, _: &K, _: &V) -> u64 {
        1
    }
}

impl<K, V, F: Fn(&K, &V) -> u64> Weigher<K, V> for F {
    #[inline]
    fn weight(&self, key: &K, value: &V) -> u64 {
        self(key, value)
    }
}

type Listener<K, V> = Box<dyn Fn(K, V) + Send + Sync>;

/// Counters of a cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// `get`s that found their key.
    pub hits: u64,
    /// `get`s that did not.
    pub misses: u64,
    /// Entries evicted for capacity (each offered to the listener).
    pub evictions: u64,
}

impl CacheStats {
    /// hits / (hits + misses), 0 before any `get`.
    pub fn hit_ratio(&self) -> f64 {
        let gets = self.hits + self.misses;
        if gets == 0 {
            0.0
        } else {
            self.hits as f64 / gets as f64
        }
    }
}

/// Why a cache could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheError {
    /// A capacity of 0: the cache could hold nothing.
    ZeroCapacity,
    /// `max_entries(0)`.
    ZeroEntries,
    /// A capacity above [`LruCache::MAX_CAPACITY`]: the total weight of
    /// the entries and of insertions in flight must fit a `u64`.
    CapacityTooLarge {
        /// The capacity asked for.
        capacity: u64,
    },
    /// More frames than the engine can name (`u32::MAX - 1`).
    TooManyEntries {
        /// Frames the configuration asked for: max entries plus spare.
        frames: usize,
    },
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::ZeroCapacity => {
                f.write_str("a cache capacity of 0 can hold nothing: pass a capacity of at least 1")
            }
            CacheError::ZeroEntries => {
                f.write_str("max_entries(0) can hold nothing: pass at least 1")
            }
            CacheError::CapacityTooLarge { capacity } => write!(
                f,
                "a capacity of {capacity} exceeds LruCache::MAX_CAPACITY ({}): weigh entries \
                 in larger units (KiB rather than bytes) or pass at most that",
                LruCache::<(), ()>::MAX_CAPACITY
            ),
            CacheError::TooManyEntries { frames } => write!(
                f,
                "{frames} entries (max entries plus spare frames) exceed the engine's {} \
                 frames; with a weigher whose capacity counts bytes, set max_entries to \
                 the most entries the cache will hold",
                u32::MAX - 1
            ),
        }
    }
}

impl std::error::Error for CacheError {}

/// One cached entry, in its shard's table.
struct Entry<K, V> {
    hash: u64,
    key: K,
    value: V,
    /// The engine frame standing for this entry on the LRU lists.
    pfn: Pfn,
    weight: u64,
    /// The reclaim epoch in which a hit found the frame settled (active
    /// and referenced): until the next reclaim pass, hits need not touch
    /// the frame, a cache miss away in the frame table.
    settled: AtomicU64,
}

/// One shard of the map, padded so that shards do not share lines. Its hit
/// and miss counters sit in the line of its lock, which a lookup has just
/// written: counting costs no other line (a per-thread counter costs a
/// thread-local lookup, measured at about 10% of a hit).
#[repr(C)]
struct Shard<K, V> {
    hits: AtomicU64,
    misses: AtomicU64,
    map: RwLock<HashTable<Entry<K, V>>>,
}

/// Builds an [`LruCache`] with options; see [`LruCache::builder`].
pub struct Builder<K, V, S = DefaultHashBuilder, W = UnitWeigher> {
    opts: Options<K, V>,
    hasher: S,
    weigher: W,
}

/// A builder's settings other than the hasher and the weigher, whose types
/// the builder's type names.
struct Options<K, V> {
    capacity: u64,
    max_entries: Option<usize>,
    spare_frames: Option<usize>,
    shards: Option<usize>,
    policy: Policy,
    batching: bool,
    weighted: bool,
    listener: Option<Listener<K, V>>,
}

impl<K, V, S, W> fmt::Debug for Builder<K, V, S, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("capacity", &self.opts.capacity)
            .field("max_entries", &self.opts.max_entries)
            .field("policy", &self.opts.policy)
            .field("batching", &self.opts.batching)
            .finish_non_exhaustive()
    }
}

impl<K, V, S, W> Builder<K, V, S, W> {
    /// The replacement policy (default [`Policy::ActiveInactive`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.opts.policy = policy;
        self
    }

    /// Whether hits, insertions and removals reach the LRU lists through
    /// per-thread batches (the default) or one lock acquisition each.
    pub fn batching(mut self, on: bool) -> Self {
        self.opts.batching = on;
        self
    }

    /// Number of map shards, rounded up to a power of two (default: 32
    /// per CPU, at most one per entry). A hit writes its shard's lock word,
    /// so hot keys sharing a shard make its line bounce between CPUs: more
    /// shards than CPUs keep two CPUs' hits on different lines more often.
    pub fn shards(mut self, shards: usize) -> Self {
        self.opts.shards = Some(shards.max(1));
        self
    }

    /// The most entries the cache holds, whatever their weight (default:
    /// the capacity, since every entry weighs at least 1). Set it when a
    /// weigher's capacity counts bytes: each entry costs a frame, and
    /// frames are allocated up front.
    pub fn max_entries(mut self, entries: usize) -> Self {
        self.opts.max_entries = Some(entries);
        self
    }

    /// Frames beyond `max_entries` for removed entries whose frames wait
    /// for reclaim and for insertions in flight (default: 1/16 of
    /// `max_entries` plus two batches).
    pub fn spare_frames(mut self, frames: usize) -> Self {
        self.opts.spare_frames = Some(frames);
        self
    }

    /// Called with each entry evicted for capacity, after every lock is
    /// released, on the thread whose insertion evicted it.
    pub fn eviction_listener(mut self, f: impl Fn(K, V) + Send + Sync + 'static) -> Self {
        self.opts.listener = Some(Box::new(f));
        self
    }

    /// Hashes keys with `hasher` instead of foldhash.
    pub fn hasher<S2: BuildHasher>(self, hasher: S2) -> Builder<K, V, S2, W> {
        Builder {
            opts: self.opts,
            hasher,
            weigher: self.weigher,
        }
    }

    /// Weighs entries with `weigher`: the capacity becomes a total weight.
    pub fn weigher<W2: Weigher<K, V>>(self, weigher: W2) -> Builder<K, V, S, W2> {
        Builder {
            opts: Options {
                weighted: true,
                ..self.opts
            },
            hasher: self.hasher,
            weigher,
        }
    }

    /// Builds the cache, allocating its frames.
    pub fn build(self) -> Result<LruCache<K, V, S, W>, CacheError> {
        if self.opts.capacity == 0 {
            return Err(CacheError::ZeroCapacity);
        }
        if self.opts.capacity > LruCache::<K, V>::MAX_CAPACITY {
            return Err(CacheError::CapacityTooLarge {
                capacity: self.opts.capacity,
            });
        }
        let max_entries = self
            .opts
            .max_entries
            .unwrap_or(usize::try_from(self.opts.capacity).unwrap_or(usize::MAX));
        if max_entries == 0 {
            return Err(CacheError::ZeroEntries);
        }
        let spare = self
            .opts
            .spare_frames
            .unwrap_or(max_entries / 16 + 2 * BATCH)
            .max(1);
        let frames = max_entries.saturating_add(spare);
        let engine = Engine::new(Config {
            modes: if self.opts.batching {
                Modes::BATCHED
            } else {
                Modes::IMMEDIATE
            },
            ..Config::new(frames)
        })
        .map_err(|e| match e {
            LruError::TooManyFrames { frames } => CacheError::TooManyEntries { frames },
            e => unreachable!("a valid engine configuration: {e}"),
        })?;
        let exact = self.opts.policy == Policy::Lru && !self.opts.batching;
        let gap = if exact {
            0
        } else if self.opts.weighted {
            self.opts.capacity / 64
        } else {
            (self.opts.capacity / 64).min(SWAP_CLUSTER_MAX as u64)
        };
        let entries_gap = if exact {
            0
        } else {
            (max_entries / 64).min(SWAP_CLUSTER_MAX)
        };
        let shards = self
            .opts
            .shards
            .unwrap_or_else(|| {
                32 * std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
            })
            .min(max_entries)
            .next_power_of_two();
        Ok(LruCache {
            engine,
            policy: self.opts.policy,
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(Shard {
                        hits: AtomicU64::new(0),
                        misses: AtomicU64::new(0),
                        map: RwLock::new(HashTable::new()),
                    })
                })
                .collect(),
            shard_mask: shards - 1,
            hasher: self.hasher,
            slots: (0..frames).map(|_| Mutex::new(None)).collect(),
            // Popped from the end: hand out low frames first.
            free: Mutex::new((0..frames as u32).rev().map(Pfn).collect()),
            weigher: self.weigher,
            capacity: self.opts.capacity,
            low_watermark: self.opts.capacity - gap,
            max_entries,
            low_entries: max_entries - entries_gap,
            weight: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            evictions: AtomicU64::new(0),
            epoch: CachePadded::new(AtomicU64::new(1)),
            listener: self.opts.listener,
        })
    }
}

/// A bounded, concurrent cache whose replacement is the engine's LRU and
/// whose hits are recorded through per-thread batches, so a hit never
/// takes a global lock.
///
/// ```
/// use std::sync::Arc;
/// use mmbatch_lru::LruCache;
///
/// let cache: Arc<LruCache<u64, String>> = Arc::new(LruCache::new(2));
/// cache.insert(1, "one".to_owned());
/// cache.insert(2, "two".to_owned());
/// assert_eq!(cache.get(&1).as_deref(), Some("one")); // 1 was used last
/// cache.insert(3, "three".to_owned()); // over capacity: evicts 2
/// assert_eq!(cache.len(), 2);
/// assert_eq!(cache.get(&2), None);
///
/// // Shared by threads: each hit is queued on the thread's own batch.
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             let v = cache.get_or_insert_with(4, || "four".to_owned());
///             assert_eq!(v, "four");
///         });
///     }
/// });
/// assert_eq!(cache.peek(&4).as_deref(), Some("four"));
/// assert!(cache.len() <= cache.capacity() as usize);
/// assert_eq!(cache.stats().evictions, 2);
/// ```
///
/// # How it works
/// Entries live in a sharded hash map (a read-write lock per shard); each
/// holds a frame of an [`Engine`], and the frame's place on the engine's
/// lists is the entry's place in the replacement order. A hit clones the
/// value under the shard's read lock and calls
/// [`Engine::mark_accessed_settled`] (or [`Engine::promote`] under
/// [`Policy::Lru`]), which at most queues the frame on the calling thread's
/// batch. Once a hit finds the frame active and referenced, the entry
/// remembers the reclaim epoch, and later hits skip the frame (a cache miss
/// in the frame table) until a reclaim pass deactivates frames. An
/// insertion past the capacity evicts down to a low watermark through
/// [`Engine::shrink`], whose evict callback removes the victim from its
/// shard.
///
/// # Guarantees
/// - An insertion never evicts the entry it makes, so a `get` right after
///   an `insert` on the same thread sees the value unless another thread
///   evicted or removed it meanwhile; a `remove` is seen at once by every
///   thread.
/// - The total weight exceeds the capacity only while insertions are in
///   flight, by at most the weight those insertions add, and is back
///   within the capacity when each insertion returns, once the entries
///   ahead of it in the eviction order are not being hit at the same
///   moment (reclaim rescans, widening as the kernel's priority does,
///   until it succeeds).
/// - The eviction listener runs outside every lock, with each evicted
///   entry exactly once.
/// - A hit on an entry being removed or evicted at the same moment may
///   set the reference hint of the frame's next entry; it is a hint only.
/// - Memory: frames for `max_entries` plus spare are allocated up front
///   (about 48 bytes each plus the key's size); a removed entry's frame
///   is freed by reclaim.
pub struct LruCache<K, V, S = DefaultHashBuilder, W = UnitWeigher> {
    engine: Engine,
    policy: Policy,
    shards: Box<[CachePadded<Shard<K, V>>]>,
    shard_mask: usize,
    hasher: S,
    /// The hash and key of the entry that holds each frame; `None` for a
    /// free frame or a removed entry's frame awaiting reclaim. Whoever
    /// takes the key from a slot decides the entry's fate (see `evict`).
    /// The hash is kept so that eviction runs no user code (`Hash`) inside
    /// the engine's reclaim.
    slots: Box<[Mutex<Option<Slot<K>>>]>,
    free: Mutex<Vec<Pfn>>,
    weigher: W,
    capacity: u64,
    /// Where reclaim stops: the capacity less a gap of min(32, 1/64 of it)
    /// entries (1/64 of the weight with a weigher), or exactly the capacity
    /// under `Policy::Lru` with batching off, whose order is exact.
    low_watermark: u64,
    /// The most entries held ([`Builder::max_entries`]) and where reclaim
    /// started on the entry count stops (the same gap as the weight's).
    max_entries: usize,
    low_entries: usize,
    weight: AtomicU64,
    len: AtomicUsize,
    evictions: AtomicU64,
    /// Reclaim passes so far, plus one: bumped before each pass that may
    /// clear a frame's ACTIVE or REFERENCED flag (see `Entry::settled`).
    epoch: CachePadded<AtomicU64>,
    listener: Option<Listener<K, V>>,
}

impl<K, V, S, W> fmt::Debug for LruCache<K, V, S, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LruCache")
            .field("capacity", &self.capacity)
            .field("len", &self.len.load(Ordering::Relaxed))
            .field("weight", &self.weight.load(Ordering::Relaxed))
            .field("policy", &self.policy)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl<K, V> LruCache<K, V> {
    /// The largest capacity (2^48 weight units, 256 TiB counted in bytes):
    /// the weights of the entries (each at most the capacity) and of the
    /// insertions in flight then sum within a `u64` up to 65,535
    /// concurrent insertions.
    pub const MAX_CAPACITY: u64 = 1 << 48;
}

impl<K: Hash + Eq + Clone, V: Clone> LruCache<K, V> {
    /// A cache of at most `capacity` entries, with the kernel's two lists
    /// and batching on.
    ///
    /// # Panics
    /// If `capacity` is 0 or above `u32::MAX - 2` (use
    /// [`builder`](Self::builder) to get the error instead).
    pub fn new(capacity: usize) -> Self {
        Self::builder(capacity as u64)
            .build()
            .unwrap_or_else(|e| panic!("LruCache::new({capacity}): {e}"))
    }

    /// A builder for a cache of total weight `capacity`.
    pub fn builder(capacity: u64) -> Builder<K, V> {
        Builder {
            opts: Options {
                capacity,
                max_entries: None,
                spare_frames: None,
                shards: None,
                policy: Policy::default(),
                batching: true,
                weighted: false,
                listener: None,
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
    /// The value of `key`, recording a hit: the entry moves up the
    /// replacement order (through this thread's batch, when batching).
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        let map = read(&shard.map);
        match map.find(hash, |e| e.key.borrow() == key) {
            Some(e) => {
                let value = e.value.clone();
                // Under the read lock, so the frame still holds this entry.
                self.hit(e);
                drop(map);
                shard.hits.fetch_add(1, Ordering::Relaxed);
                Some(value)
            }
            None => {
                drop(map);
                shard.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The value of `key` without recording a hit or counting a lookup.
    pub fn peek<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.look(key, |e| e.value.clone())
    }

    /// Whether `key` is cached (no hit recorded).
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.look(key, |_| ()).is_some()
    }

    /// `f` of `key`'s entry, under its shard's read lock, recording nothing.
    fn look<Q, R>(&self, key: &Q, f: impl FnOnce(&Entry<K, V>) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        read(&self.shard(hash).map)
            .find(hash, |e| e.key.borrow() == key)
            .map(f)
    }

    /// Caches `value` under `key`, returning the value it replaces; a
    /// replaced entry keeps its place and records a hit, as in `lru`'s
    /// `put`. Evicts past the capacity before returning, then runs the
    /// listener. An entry heavier than the whole capacity is not cached:
    /// it goes straight to the listener, and any old value of `key` is
    /// removed.
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        match self.insert_inner(key, value, false) {
            Ok(old) => old,
            Err(_) => unreachable!("insert replaces"),
        }
    }

    /// The value of `key`, computing and caching it with `f` on a miss.
    /// `f` runs outside every lock; threads missing on the same key at
    /// once may each run it, and the first to insert wins: every caller
    /// returns the value that was cached.
    pub fn get_or_insert_with(&self, key: K, f: impl FnOnce() -> V) -> V {
        match self.try_get_or_insert_with(key, || Ok::<V, std::convert::Infallible>(f())) {
            Ok(v) => v,
        }
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with) for a fallible
    /// `f`: its error is returned and nothing is cached.
    pub fn try_get_or_insert_with<E>(
        &self,
        key: K,
        f: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        if let Some(v) = self.get(&key) {
            return Ok(v);
        }
        let value = f()?;
        Ok(match self.insert_inner(key, value.clone(), true) {
            Ok(_) => value,
            Err(existing) => existing,
        })
    }

    /// Removes `key`, returning its value. Its frame is rotated to the
    /// reclaim end of the lists and freed by the next reclaim.
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut map = write(&self.shard(hash).map);
        let (e, _) = map
            .find_entry(hash, |e| e.key.borrow() == key)
            .ok()?
            .remove();
        self.unaccount(&e);
        self.retire(e.pfn);
        drop(map);
        Some(e.value)
    }

    /// Removes every entry (the listener is not called).
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            let mut map = write(&shard.map);
            for e in map.drain() {
                self.unaccount(&e);
                self.retire(e.pfn);
            }
        }
    }

    /// Entries cached now.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity: a number of entries, or a total weight with a
    /// weigher.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The total weight cached now (the number of entries without a
    /// weigher).
    pub fn weight(&self) -> u64 {
        self.weight.load(Ordering::Relaxed)
    }

    /// The replacement policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Hits, misses and evictions so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self
                .shards
                .iter()
                .map(|s| s.hits.load(Ordering::Relaxed))
                .sum(),
            misses: self
                .shards
                .iter()
                .map(|s| s.misses.load(Ordering::Relaxed))
                .sum(),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    /// The engine underneath: its lock acquisitions, batches and lists.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Checks that the map, the frames and the engine agree (call when no
    /// operation is in flight): each entry's frame is live and its slot
    /// names the entry's key, no frame is used twice, free frames are free,
    /// len and weight are the entries' count and sum and within the
    /// capacity, and the engine's own invariants hold.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.engine.check_invariants()?;
        let drained = self.engine.stats().batches.pending == 0;
        let mut used = vec![false; self.slots.len()];
        let (mut len, mut weight) = (0usize, 0u64);
        for (i, shard) in self.shards.iter().enumerate() {
            for e in read(&shard.map).iter() {
                let pfn = e.pfn.0 as usize;
                if (e.hash >> 32) as usize & self.shard_mask != i {
                    return Err(format!("{} is in shard {i}, not its hash's", e.pfn));
                }
                if mem::replace(&mut used[pfn], true) {
                    return Err(format!("{} holds two entries", e.pfn));
                }
                if lock(&self.slots[pfn]).as_ref().map(|(_, k)| k) != Some(&e.key) {
                    return Err(format!("{}'s slot does not name its entry's key", e.pfn));
                }
                let state = self.engine.frame_state(e.pfn).map_err(|e| e.to_string())?;
                if state.refcount == 0 || (drained && !state.flags.contains(Flags::LRU)) {
                    return Err(format!("{} holds an entry but is {state:?}", e.pfn));
                }
                len += 1;
                weight = weight.saturating_add(e.weight);
            }
        }
        for &pfn in lock(&self.free).iter() {
            if mem::replace(&mut used[pfn.0 as usize], true) {
                return Err(format!("free {pfn} is in use or free twice"));
            }
            let state = self.engine.frame_state(pfn).map_err(|e| e.to_string())?;
            if state.refcount != 0 || lock(&self.slots[pfn.0 as usize]).is_some() {
                return Err(format!("free {pfn} is {state:?} or has a key"));
            }
        }
        for (i, _) in used.iter().enumerate().filter(|&(_, &u)| !u) {
            // A removed entry's frame: still allocated, awaiting reclaim.
            let state = self.engine.frame_state(Pfn(i as u32)).unwrap();
            if lock(&self.slots[i]).is_some() || state.refcount == 0 {
                return Err(format!(
                    "pfn {i} is lost: neither free nor awaiting reclaim"
                ));
            }
        }
        if (len, weight) != (self.len(), self.weight()) {
            return Err(format!(
                "entries sum to len {len}, weight {weight}; counted {}, {}",
                self.len(),
                self.weight()
            ));
        }
        if weight > self.capacity {
            return Err(format!("weight {weight} over capacity {}", self.capacity));
        }
        if len > self.max_entries {
            return Err(format!(
                "{len} entries, over max_entries {}",
                self.max_entries
            ));
        }
        Ok(())
    }

    fn shard(&self, hash: u64) -> &Shard<K, V> {
        // Bits 32.. : hashbrown uses the low bits for the bucket and the
        // top 7 for its tag.
        &self.shards[(hash >> 32) as usize & self.shard_mask]
    }

    /// Records a hit on `e` (whose shard lock the caller holds, so its
    /// frame still holds it). Errors mean the frame is being reclaimed this
    /// instant: nothing to record.
    #[inline]
    fn hit(&self, e: &Entry<K, V>) {
        match self.policy {
            Policy::ActiveInactive => {
                // Load the epoch first: a pass starting after this load
                // makes what we store stale.
                let epoch = self.epoch.load(Ordering::Acquire);
                if e.settled.load(Ordering::Relaxed) == epoch {
                    return;
                }
                if let Ok(true) = self.engine.mark_accessed_settled(e.pfn) {
                    e.settled.store(epoch, Ordering::Relaxed);
                }
            }
            Policy::Lru => {
                let _ = self.engine.promote(e.pfn);
            }
        }
    }

    fn unaccount(&self, e: &Entry<K, V>) {
        self.weight.fetch_sub(e.weight, Ordering::Relaxed);
        self.len.fetch_sub(1, Ordering::Relaxed);
    }

    /// Retires the frame of an entry just removed from its shard (whose
    /// lock the caller holds, so no reclaim can free and reuse the frame
    /// meanwhile): rotates it to the inactive tail, where reclaim frees
    /// it next, and clears its slot. If reclaim has taken the slot first,
    /// it frees the frame once it finds the entry gone.
    fn retire(&self, pfn: Pfn) {
        let _ = self.engine.rotate(pfn);
        lock(&self.slots[pfn.0 as usize]).take();
    }

    /// Inserts, or with `absent_only` returns the value already cached as
    /// `Err`.
    fn insert_inner(&self, key: K, value: V, absent_only: bool) -> Result<Option<V>, V> {
        let hash = self.hasher.hash_one(&key);
        let weight = self.weigher.weight(&key, &value).max(1);
        let mut evicted = Vec::new();
        if weight > self.capacity {
            let old = if absent_only {
                if let Some(v) = self.get(&key) {
                    return Err(v);
                }
                None
            } else {
                self.remove(&key)
            };
            self.evictions.fetch_add(1, Ordering::Relaxed);
            self.notify(vec![(key, value)]);
            return Ok(old);
        }
        let shard = &self.shard(hash).map;
        // A frame taken from the free list goes back to it if user code
        // (`Eq`, `Clone`) panics before the entry holds it.
        let mut spare = Taken::new(&self.free);
        let mut fresh = None;
        let (mut map, mut taken) = loop {
            let map = write(shard);
            if map.find(hash, |e| e.key == key).is_some() {
                break (map, Taken::new(&self.free));
            }
            if spare.0.is_some() {
                break (map, mem::replace(&mut spare, Taken::new(&self.free)));
            }
            if let Some(pfn) = lock(&self.free).pop() {
                break (map, Taken(Some(pfn), &self.free));
            }
            // Out of frames: reclaim one, without holding the shard lock
            // (eviction takes shard locks).
            drop(map);
            spare.0 = Some(self.reclaim_frame(&mut evicted));
        };
        let result = match taken.0 {
            Some(pfn) => {
                let slot_key = key.clone();
                taken.0 = None; // the entry holds it from here: no user code
                fresh = Some(pfn);
                *lock(&self.slots[pfn.0 as usize]) = Some((hash, slot_key));
                map.insert_unique(
                    hash,
                    Entry {
                        hash,
                        key,
                        value,
                        pfn,
                        weight,
                        settled: AtomicU64::new(0),
                    },
                    |e| e.hash,
                );
                self.weight.fetch_add(weight, Ordering::Relaxed);
                self.len.fetch_add(1, Ordering::Relaxed);
                // Last, under the shard lock: reclaim cannot find the frame
                // before its entry is complete.
                self.engine.lru_add(pfn).expect("a free frame");
                Ok(None)
            }
            None => {
                let e = map
                    .find_mut(hash, |e| e.key == key)
                    .expect("found under this lock");
                self.hit(e);
                if absent_only {
                    Err(e.value.clone())
                } else {
                    let old_weight = mem::replace(&mut e.weight, weight);
                    if weight != old_weight {
                        self.weight.fetch_add(weight, Ordering::Relaxed);
                        self.weight.fetch_sub(old_weight, Ordering::Relaxed);
                    }
                    Ok(Some(mem::replace(&mut e.value, value)))
                }
            }
        };
        drop(map);
        // A frame reclaimed for a key another thread inserted meanwhile
        // goes back to the free list.
        drop(spare);
        self.reclaim_excess(fresh, &mut evicted);
        self.notify(evicted);
        result
    }

    /// Hands each evicted entry to the listener. A listener that panics
    /// still hears the rest; the first panic then continues in the caller.
    fn notify(&self, evicted: Vec<(K, V)>) {
        let Some(listener) = &self.listener else {
            return;
        };
        let mut first_panic = None;
        for (k, v) in evicted {
            if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| listener(k, v))) {
                first_panic.get_or_insert(p);
            }
        }
        if let Some(p) = first_panic {
            panic::resume_unwind(p);
        }
    }

    /// Past the capacity or `max_entries`: reclaim must run.
    fn over(&self) -> bool {
        self.weight.load(Ordering::Relaxed) > self.capacity
            || self.len.load(Ordering::Relaxed) > self.max_entries
    }

    /// Whether reclaim that has started should go on: above the low
    /// watermark of the weight or of the entry count.
    fn above_low(&self) -> bool {
        self.weight.load(Ordering::Relaxed) > self.low_watermark
            || self.len.load(Ordering::Relaxed) > self.low_entries
    }

    /// Entries to evict to get down to both low watermarks, the weight's
    /// estimated with the mean weight.
    fn excess_entries(&self) -> usize {
        let weight = self.weight.load(Ordering::Relaxed);
        let len = self.len.load(Ordering::Relaxed);
        let excess = weight.saturating_sub(self.low_watermark);
        let mean = (weight / len.max(1) as u64).max(1);
        let by_count = len.saturating_sub(self.low_entries) as u64;
        excess
            .div_ceil(mean)
            .max(by_count)
            .clamp(1, SWAP_CLUSTER_MAX as u64) as usize
    }

    /// Past the capacity, evicts down to the low watermark (kswapd's
    /// high/low watermarks: one reclaim pass per batch of insertions, not
    /// per insertion), sparing the entry this insertion just made
    /// (`fresh`), so that a `get` right after it on this thread finds it.
    fn reclaim_excess(&self, fresh: Option<Pfn>, evicted: &mut Vec<(K, V)>) {
        if !self.over() {
            return;
        }
        let mut stalls = 0;
        // Stop when only the spared entry is left: it alone may lie between
        // the low watermark and the capacity.
        let spared = usize::from(fresh.is_some());
        while self.above_low() && self.len() > spared {
            let freed = self.shrink(self.excess_entries(), false, fresh, stalls, evicted);
            let progress = !freed.is_empty();
            lock(&self.free).extend(freed);
            stalls = if progress {
                0
            } else {
                self.stalled(stalls, self.excess_entries())
            };
        }
    }

    /// Frees one frame for an insertion, evicting the tail entry if no
    /// removed entry's frame is there to free.
    fn reclaim_frame(&self, evicted: &mut Vec<(K, V)>) -> Pfn {
        let mut stalls = 0;
        loop {
            if let Some(pfn) = lock(&self.free).pop() {
                return pfn;
            }
            let need = if self.above_low() {
                self.excess_entries()
            } else {
                1
            };
            let mut freed = self.shrink(need, true, None, stalls, evicted);
            if let Some(pfn) = freed.pop() {
                lock(&self.free).extend(freed);
                return pfn;
            }
            stalls = self.stalled(stalls, need);
        }
    }

    /// A reclaim pass found nothing to free: frames may wait in per-thread
    /// batches (off the lists), carry references of queued hits, or be
    /// referenced, or the inactive list may hold only the spared entry.
    /// Drain this thread's batches, then everyone's; age the active list;
    /// scan wider each pass (`sc->priority`); let other threads run.
    fn stalled(&self, stalls: u32, need: usize) -> u32 {
        match stalls {
            0 => self.engine.lru_add_drain(),
            1 => self.engine.lru_add_drain_all(),
            _ => yield_now(),
        }
        if stalls > 0 {
            let deactivated = self
                .engine
                .shrink_active(0, need << stalls.min(24))
                .expect("node 0 exists");
            self.deactivated(deactivated);
        }
        stalls + 1
    }

    /// One [`Engine::shrink`] pass over `need` frames (twice as many per
    /// stall), never evicting `keep`, returning the frames it freed —
    /// handed out only now that the engine has cleared them.
    fn shrink(
        &self,
        need: usize,
        want_frame: bool,
        keep: Option<Pfn>,
        stalls: u32,
        evicted: &mut Vec<(K, V)>,
    ) -> Vec<Pfn> {
        let nr = need
            .saturating_mul(1 << stalls.min(24))
            .min(self.slots.len());
        let mut freed = Vec::new();
        let stats = self
            .engine
            .shrink(0, nr, |pfn| {
                if Some(pfn) == keep {
                    return false;
                }
                let force = want_frame && freed.is_empty();
                let took = self.evict(pfn, force, evicted);
                if took {
                    freed.push(pfn);
                }
                took
            })
            .expect("node 0 exists");
        self.deactivated(stats.deactivated);
        freed
    }

    /// After reclaim cleared ACTIVE on `n` frames: their entries' settled
    /// hints are stale. A hit loads the epoch before the frame's flags, so
    /// bumping after the flags were cleared is soon enough (a hit that saw
    /// them set stored the old epoch). Second chances need no bump: they
    /// take frames from the inactive list, whose entries are not settled.
    fn deactivated(&self, n: u64) {
        if n > 0 {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The evict callback, run by reclaim outside the lru_lock with the
    /// frame's references frozen at 0. A frame whose slot is empty belongs
    /// to a removed entry: free it. Otherwise evict its entry if the cache
    /// is over capacity (or `force`, to free a frame): take the key from
    /// the slot — from then on whoever removes the entry leaves the frame
    /// to us — and remove the entry if it still holds this frame.
    fn evict(&self, pfn: Pfn, force: bool, evicted: &mut Vec<(K, V)>) -> bool {
        let mut slot = lock(&self.slots[pfn.0 as usize]);
        if slot.is_some() && !(force || self.above_low()) {
            return false;
        }
        let Some((hash, key)) = slot.take() else {
            return true;
        };
        drop(slot);
        drop(key); // the entry's own copy is the one handed out
        let mut map = write(&self.shard(hash).map);
        if let Ok(found) = map.find_entry(hash, |e| e.pfn == pfn) {
            let (e, _) = found.remove();
            self.unaccount(&e);
            drop(map);
            self.evictions.fetch_add(1, Ordering::Relaxed);
            evicted.push((e.key, e.value));
        }
        true
    }
}

/// What a frame's slot names: the hash and key of the entry holding it.
type Slot<K> = (u64, K);

/// A frame taken off the free list for an insertion: back to the list on
/// drop unless the entry took it (`.0 = None`), so that a panic in user
/// code (`Eq`, `Clone`) between taking and using it loses no frame.
struct Taken<'a>(Option<Pfn>, &'a Mutex<Vec<Pfn>>);

impl<'a> Taken<'a> {
    fn new(free: &'a Mutex<Vec<Pfn>>) -> Self {
        Taken(None, free)
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(pfn) = self.0.take() {
            lock(self.1).push(pfn);
        }
    }
}
