//! [`Builder`], [`Weigher`]s, the [`RemovalCause`]s a listener hears,
//! and why a build fails: [`CacheError`].

use std::{fmt, hash::BuildHasher, sync::Arc, time::Duration};

#[cfg(doc)]
use super::CacheStats;
use super::{
    LruCache,
    expire::{Clock, Expire, Expiry, Kind, coarse_res, nanos},
    lock::{MAX_STRIPES, ShardLock},
    policy::Policy,
    shard::{Duel, Lruvec, index::NARROW_MAX},
};
use crate::sync::{AtomicU64, AtomicUsize};

/// The default hasher: foldhash's quality variant, randomly seeded. Why:
/// the cache takes a key's shard, index position and shadow tag from
/// different bits of one hash, so every bit must be well mixed.
pub type DefaultHashBuilder = foldhash::quality::RandomState;

/// How much an entry counts against the capacity: implemented for every
/// `Fn(&K, &V) -> u64`, which [`Builder::weigher`] takes; a type of your
/// own goes to [`Builder::weigher_with`].
pub trait Weigher<K, V> {
    /// The entry's weight; 0 counts as 1 (in quick_cache and Caffeine a
    /// weight of 0 exempts an entry from eviction: pin entries here with
    /// [`Builder::pinned`]).
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

/// Why an entry left the cache, as a
/// [`removal_listener`](Builder::removal_listener) hears it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemovalCause {
    /// Evicted for capacity by the replacement policy
    /// (`shrink_lruvec`); also an entry heavier than its shard's share
    /// of the capacity, never cached ([`CacheStats::rejected`]), and a new
    /// entry refused admission ([`CacheStats::not_admitted`]).
    Evicted,
    /// Its value was replaced by a new value of the same key (the old
    /// value is heard): an `insert`, a
    /// [`compute`](super::LruCache::compute) returning `Put`, or a load
    /// that replaces a cached value
    /// ([`get_or_insert_with_if`](super::LruCache::get_or_insert_with_if)
    /// and its kin).
    Replaced,
    /// Taken out by a call that names it or picks it:
    /// [`remove`](super::LruCache::remove), `remove_if`, `remove_entry`,
    /// [`retain`](super::LruCache::retain), `drain`, or a
    /// [`compute`](super::LruCache::compute) returning `Remove`.
    Removed,
    /// Dropped by [`clear`](super::LruCache::clear).
    Cleared,
    /// Its time to live or to idle ended (it was never returned after
    /// that): heard when the shard's own work reclaims it, or when a call
    /// that would take it out or write over it finds it expired
    /// ([`purge_expired`](super::LruCache::purge_expired), the removals,
    /// `retain`, `clear`, `drain`, or an `insert`, a `compute` that puts
    /// or removes, a load or a `warm` of its key).
    Expired,
}

/// The listener, and whether it hears every cause or evictions only.
pub(super) struct Listener<K, V> {
    pub(super) f: Box<dyn Fn(K, V, RemovalCause) + Send + Sync>,
    pub(super) every_cause: bool,
}

/// Why a cache could not be built (or resized:
/// [`LruCache::set_capacity`](super::LruCache::set_capacity)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheError {
    /// A capacity above [`LruCache::MAX_CAPACITY`]: the total weight of
    /// the entries must fit a `u64` with room to spare.
    CapacityTooLarge {
        /// The capacity asked for.
        capacity: u64,
    },
    /// A zero [`time_to_live`](Builder::time_to_live) or
    /// [`time_to_idle`](Builder::time_to_idle): no entry could be returned.
    ZeroLifetime {
        /// `"time_to_live"` or `"time_to_idle"`.
        setting: &'static str,
    },
    /// An [`expiry`](Builder::expiry) with a `time_to_live` or
    /// `time_to_idle`.
    Lifetimes,
    /// [`set_capacity`](LruCache::set_capacity) below the cache's number
    /// of shards, each of which must hold an entry.
    CapacityBelowShards {
        /// The capacity asked for.
        capacity: u64,
        /// The cache's shards.
        shards: usize,
    },
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::CapacityTooLarge { capacity } => write!(
                f,
                "capacity {capacity} is above the largest supported, mmbatch_cache::MAX_CAPACITY \
                 = {MAX_CAPACITY} (2^48): pass a smaller capacity (count weight in larger units)"
            ),
            CacheError::ZeroLifetime { setting } => write!(
                f,
                "{setting}(Duration::ZERO) would expire every entry as it is made: pass a \
                 positive duration, or leave it unset for entries that never expire"
            ),
            CacheError::Lifetimes => f.write_str(
                "an expiry decides every entry's lifetime, so it cannot be set with \
                 time_to_live or time_to_idle: leave those unset and have the Expiry apply them",
            ),
            CacheError::CapacityBelowShards { capacity, shards } => write!(
                f,
                "capacity {capacity} is below the cache's {shards} shards, each of which must \
                 hold an entry: pass at least {shards} (or 0, to store nothing), or build the \
                 cache with fewer shards (Builder::shards)"
            ),
        }
    }
}

impl std::error::Error for CacheError {}

/// Builds an [`LruCache`] with options; see [`LruCache::builder`].
pub struct Builder<K, V, S = DefaultHashBuilder, W = UnitWeigher> {
    pub(super) opts: Options<K, V>,
    pub(super) hasher: S,
    pub(super) weigher: W,
}

/// A builder's settings other than the hasher and the weigher, whose types
/// the builder's type names.
pub(super) struct Options<K, V> {
    pub(super) capacity: u64,
    pub(super) max_entries: Option<usize>,
    /// About how many entries a weighted cache holds (see
    /// [`Builder::estimated_entries`]).
    pub(super) estimated_entries: Option<usize>,
    pub(super) shards: Option<usize>,
    pub(super) policy: Policy,
    pub(super) batching: bool,
    pub(super) fast_reads: bool,
    pub(super) weighted: bool,
    /// Mix the hasher's output once more (a hasher other than foldhash).
    pub(super) spread: bool,
    pub(super) listener: Option<Listener<K, V>>,
    pub(super) time_to_live: Option<Duration>,
    pub(super) time_to_idle: Option<Duration>,
    pub(super) expiry: Option<Arc<dyn Expiry<K, V>>>,
    pub(super) clock: Option<Arc<dyn Clock>>,
    pub(super) pinned: Option<super::shard::Pinned<K, V>>,
}

impl<K, V, S, W> fmt::Debug for Builder<K, V, S, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("capacity", &self.opts.capacity)
            .field("max_entries", &self.opts.max_entries)
            .field("estimated_entries", &self.opts.estimated_entries)
            .field("shards", &self.opts.shards)
            .field("policy", &self.opts.policy)
            .field("batching", &self.opts.batching)
            .field("fast_reads", &self.opts.fast_reads)
            .finish_non_exhaustive()
    }
}

/// Entries per shard the default shard count aims for at least: fewer,
/// larger shards keep replacement close to one global order, but each
/// shard is one writer at a time. 512: larger floors kept slightly more
/// hits and cost two-thread read-through far more (measured:
/// `docs/cache.md#tunables-and-their-measurements`).
const MIN_SHARD_ENTRIES: u64 = 512;

/// The most shards the default takes so that each indexes its entries in
/// `u16`s (see [`Builder::shards`]): 256, enough for 16 Mi entries. Past
/// that a shard indexes in `u32`s rather than the cache taking more shard
/// headers for a capacity it may never fill (`LruCache::new(1 << 40)`
/// would otherwise take 65536).
const MAX_NARROW_SHARDS: usize = 256;

/// The largest capacity: 2^48 weight units (256 TiB counted in bytes).
pub const MAX_CAPACITY: u64 = 1 << 48;

/// The most shards a cache has: 65536. A larger [`Builder::shards`] is
/// cut to it.
pub const MAX_SHARDS: usize = 1 << 16;

impl<K, V, S, W> Builder<K, V, S, W> {
    /// The replacement policy (default [`Policy::Adaptive`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.opts.policy = policy;
        self
    }

    /// Whether a hit only marks the entry (the default: list moves wait
    /// for the shard's next write, as the kernel batches activations) or
    /// takes the shard's write lock to move it at once. Off, with
    /// [`Policy::Lru`], the cache is one exact LRU list (one shard): every
    /// hit serialises on its lock, for workloads whose correctness needs
    /// exact recency order. Mirrors the kernel's per-CPU folio batches
    /// (`folio_activate` into `cpu_fbatches`, drained under the lruvec
    /// lock).
    #[doc(alias = "folio_activate")]
    pub fn batching(mut self, on: bool) -> Self {
        self.opts.batching = on;
        self
    }

    /// Whether lookups may skip their memory barrier in a shard that
    /// nothing has changed for a while (the default, on Linux 4.14 and
    /// later): the change that ends such a spell then calls
    /// `membarrier(2)` (`MEMBARRIER_CMD_PRIVATE_EXPEDITED`, after a
    /// one-time `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`). Turn it off
    /// in a process whose seccomp filter kills on system calls it does
    /// not list, or to keep its changes from interrupting the other CPUs
    /// that run the process's threads. A filter that makes `membarrier`
    /// return an error, even one installed after the cache went fast, is
    /// fine: the change has its barrier by moving its thread across the
    /// CPUs (`sched_setaffinity(2)`), and no shard skips the barrier again.
    /// Where both are refused to a thread, or some thread of the process
    /// may run on a CPU this one cannot move to (another cpuset, as cgroup
    /// v2's threaded mode and per-thread v1 cpusets allow), a change it makes to a shard that was
    /// skipping the barrier panics, naming the cause, rather than trust
    /// readers the barrier did not reach.
    /// `CacheStats::fast_read_shards` counts the shards skipping it.
    pub fn fast_reads(mut self, on: bool) -> Self {
        self.opts.fast_reads = on;
        self
    }

    /// Number of shards, rounded down to a power of two, and cut to the
    /// capacity and to `max_entries` (every shard must hold an entry) and
    /// to [`MAX_SHARDS`]. The default: without a weigher, 8 per CPU, with
    /// at least 512 entries' worth of capacity each, but enough (up to 256)
    /// that none holds more than 65536 entries (the most a shard indexes
    /// in `u16`s); with a weigher, the same from
    /// [`estimated_entries`](Self::estimated_entries) where it is set (and
    /// at least 512 units of capacity each), else 1 per CPU with at least
    /// 512 units of capacity each. Capacity and `max_entries` are split
    /// evenly.
    /// [`Policy::Lru`] with batching off always uses one shard (exact
    /// order).
    ///
    /// Each shard evicts on its own, so a small cache used from one or two
    /// threads keeps more hits with fewer shards
    /// ([docs/cache.md][tunables-and-their-measurements]); fewer shards
    /// cost concurrent throughput, hence the default's floor of 512
    /// entries a shard. With a weigher, each shard's share of the capacity
    /// bounds the heaviest entry it caches: fewer shards for heavy
    /// entries.
    ///
    /// [tunables-and-their-measurements]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#tunables-and-their-measurements
    pub fn shards(mut self, shards: usize) -> Self {
        self.opts.shards = Some(shards.max(1));
        self
    }

    /// The most entries the cache holds, whatever their weight (default:
    /// the capacity, since every entry weighs at least 1). 0 stores
    /// nothing, as a capacity of 0 does, and for good: `set_capacity`
    /// keeps a `max_entries` that was set.
    pub fn max_entries(mut self, entries: usize) -> Self {
        self.opts.max_entries = Some(entries);
        self
    }

    /// About how many entries a weighted cache holds when full (its
    /// capacity over the entries' mean weight), as quick_cache's
    /// `with_weighter` asks. Why: a capacity in weight says nothing of how
    /// many entries it holds, and both the default shard count and
    /// [`Policy::Adaptive`]'s simulations follow the entries. Told them, a
    /// weighted cache takes the shards an unweighted cache of as many
    /// entries takes (8 a CPU, each with at least 512 entries' worth: see
    /// [`shards`](Self::shards)), and its simulations start at that size.
    /// Untold, it takes 1 shard a CPU whatever it holds: a large cache
    /// then serialises concurrent writes on few locks, and a small one on
    /// a host of many CPUs splits into shards too small to keep its hits
    /// ([docs/cache.md][told]). An estimate a few times off costs little:
    /// the simulations follow what the shards hold, only the shard count
    /// stays as built. Each shard's share of the capacity bounds the
    /// heaviest entry it caches ([`LruCache::max_entry_weight`]): with a
    /// right estimate, 512 mean entries' worth or more. Taken at most as
    /// [`max_entries`](Self::max_entries) and as the capacity (an entry
    /// weighs at least 1); 0 is no estimate. Where
    /// [`shards`](Self::shards) is set only the simulations use it.
    /// Ignored without a weigher (the capacity counts the entries).
    /// Nothing is allocated ahead for it.
    ///
    /// [told]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#a-weighted-cache-told-its-entries-builderestimated_entries
    pub fn estimated_entries(mut self, entries: usize) -> Self {
        self.opts.estimated_entries = Some(entries);
        self
    }

    /// Called with each entry the cache drops on its own — evicted for
    /// capacity, or expired — after every lock is released, on the thread
    /// whose call dropped it. It may use the cache. Replaces any
    /// [`removal_listener`](Self::removal_listener).
    pub fn eviction_listener(mut self, f: impl Fn(K, V) + Send + Sync + 'static) -> Self {
        self.opts.listener = Some(Listener {
            f: Box::new(move |k, v, _| f(k, v)),
            every_cause: false,
        });
        self
    }

    /// Called with each entry that leaves the cache and why — evicted,
    /// expired, replaced, removed or cleared — exactly once, after every lock is
    /// released, on the thread whose call removed it (it may use the
    /// cache). Entries [`drain`](super::LruCache::drain) returns are the
    /// caller's and not heard. Hearing removals and replacements costs a
    /// clone of each value they return as well; with only an
    /// [`eviction_listener`](Self::eviction_listener) they cost nothing.
    /// Replaces any eviction listener.
    pub fn removal_listener(
        mut self,
        f: impl Fn(K, V, RemovalCause) + Send + Sync + 'static,
    ) -> Self {
        self.opts.listener = Some(Listener {
            f: Box::new(f),
            every_cause: true,
        });
        self
    }

    /// Entries expire this long after they are inserted (or replaced):
    /// never returned after that (up to one tick of the coarse clock, 1-10
    /// ms, early). They are reclaimed, leaving [`len`](super::LruCache::len)
    /// and heard by the listener, by the shard's own writes (each within
    /// `len / 2` inserts into its shard) or by
    /// [`purge_expired`](super::LruCache::purge_expired): a cache that is
    /// only read keeps them until that is called, as moka's does until
    /// `run_pending_tasks` ([docs/cache.md][expiry]). Costs 8 bytes an
    /// entry; without expiry, nothing. `Duration::MAX` never expires;
    /// zero is refused at build.
    ///
    /// [expiry]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#expiry
    pub fn time_to_live(mut self, live: Duration) -> Self {
        self.opts.time_to_live = Some(live);
        self
    }

    /// Entries expire this long after they were last inserted or read
    /// (`get` and the loads; `peek` does not count), as
    /// [`time_to_live`](Self::time_to_live) otherwise. With a time to live
    /// too, an entry expires at whichever comes first (8 more bytes an
    /// entry, for the time to live's deadline).
    pub fn time_to_idle(mut self, idle: Duration) -> Self {
        self.opts.time_to_idle = Some(idle);
        self
    }

    /// Each entry's own expiry ([`Expiry`]), instead of a time to live or
    /// to idle.
    pub fn expiry(mut self, expiry: impl Expiry<K, V> + 'static) -> Self {
        self.opts.expiry = Some(Arc::new(expiry));
        self
    }

    /// The clock expiry reads, for tests that control time (default: the
    /// system's coarse monotonic clock, read as one tick ahead, so entries
    /// expire up to a tick — 1 to 10 ms on Linux — early, and late only by
    /// the kernel's delay in updating that clock: microseconds, more where
    /// a virtual machine's CPU waits for its host). A clock that goes back
    /// only delays expiry.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.opts.clock = Some(Arc::new(clock));
        self
    }

    /// Pins the entries for which `pinned` is true: reclaim passes them
    /// over, so they are not evicted for capacity while it holds
    /// (quick_cache's `Lifecycle::is_pinned`), for entries in use
    /// elsewhere that must stay findable. It is asked at eviction time, of
    /// each entry reclaim would evict, under the shard's lock (as a key's
    /// `Eq` runs): it must be quick and must not use the cache (a lookup
    /// of the same shard from it panics, naming the cause; of another
    /// shard it may deadlock, as from [`compute`](super::LruCache::compute);
    /// a panic in it reaches the caller, and the cache stays usable). A
    /// pinned entry still leaves by `remove`, `clear`, `retain`, `drain`
    /// and expiry, and by a replacement too heavy to fit beside the other
    /// pinned entries (with a weigher: the new value is not cached).
    /// Where reclaim finds only pinned entries to evict, a new entry is
    /// not cached (heard as evicted, counted in
    /// [`CacheStats::rejected`](super::CacheStats::rejected)): a cache
    /// never goes over its capacity to keep a pin, except that
    /// [`set_capacity`](super::LruCache::set_capacity) below what its
    /// pinned entries take is reached by the insertions after they unpin.
    pub fn pinned(mut self, pinned: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        self.opts.pinned = Some(Arc::new(pinned));
        self
    }

    /// Hashes keys with `hasher` instead of foldhash. Its hashes are mixed
    /// once more. Why: the cache takes
    /// its shard, its index position and its shadow tag from different
    /// bits of one hash, and a weak hash (the identity hash of integers,
    /// as `nohash-hasher` gives) would put most keys in one shard. The
    /// default hasher needs no mixing: leave the hasher unset for it
    /// (passing one here, even that one, pays for the mix).
    pub fn hasher<S2: BuildHasher>(self, hasher: S2) -> Builder<K, V, S2, W> {
        Builder {
            opts: Options {
                spread: true,
                ..self.opts
            },
            hasher,
            weigher: self.weigher,
        }
    }

    /// Weighs entries with `weigher`: the capacity becomes a total weight,
    /// split evenly between shards; an entry heavier than its shard's share
    /// ([`LruCache::max_entry_weight`], smaller on a host with more CPUs
    /// unless [`shards`](Self::shards) is set) is not cached
    /// ([`CacheStats::rejected`]). Tell it about how many entries it will
    /// hold ([`estimated_entries`](Self::estimated_entries)): the default
    /// shard count follows them. Under [`Policy::Lirs`] (and the default
    /// while it runs it) a new key heavier than the HIR entries it would
    /// evict is declined until it is requested again soon (see
    /// [`Policy::Lirs`]).
    ///
    /// A closure's argument types are inferred from the cache's:
    /// ```
    /// use mmbatch_cache::LruCache;
    ///
    /// let cache = LruCache::<u32, Vec<u8>>::builder(1 << 20)
    ///     .weigher(|_key, value| value.len() as u64)
    ///     .build()
    ///     .expect("a capacity up to MAX_CAPACITY");
    /// cache.insert(1, vec![0; 100]);
    /// assert_eq!(cache.weight(), 100);
    /// ```
    ///
    /// A closure's type cannot be named; a cache kept in a struct field
    /// takes a function instead:
    /// ```
    /// use mmbatch_cache::{DefaultHashBuilder, LruCache};
    ///
    /// type Weigh = fn(&u32, &Vec<u8>) -> u64;
    /// struct Store {
    ///     cache: LruCache<u32, Vec<u8>, DefaultHashBuilder, Weigh>,
    /// }
    /// fn bytes(_: &u32, v: &Vec<u8>) -> u64 {
    ///     v.len() as u64
    /// }
    /// let store = Store {
    ///     cache: LruCache::builder(1 << 20)
    ///         .weigher(bytes as Weigh)
    ///         .build()
    ///         .unwrap(),
    /// };
    /// store.cache.insert(1, vec![0; 10]);
    /// assert_eq!(store.cache.weight(), 10);
    /// ```
    pub fn weigher<W2>(self, weigher: W2) -> Builder<K, V, S, W2>
    where
        W2: Fn(&K, &V) -> u64,
    {
        self.weigher_with(weigher)
    }

    /// [`weigher`](Self::weigher) by any [`Weigher`]: a type of your own
    /// names the cache's type without a function pointer (whose every
    /// call is indirect), as quick_cache's `Weighter` does.
    /// ```
    /// use mmbatch_cache::{DefaultHashBuilder, LruCache, Weigher};
    ///
    /// struct Bytes;
    /// impl Weigher<u32, Vec<u8>> for Bytes {
    ///     fn weight(&self, _: &u32, v: &Vec<u8>) -> u64 {
    ///         v.len() as u64
    ///     }
    /// }
    /// struct Store {
    ///     cache: LruCache<u32, Vec<u8>, DefaultHashBuilder, Bytes>,
    /// }
    /// let store = Store {
    ///     cache: LruCache::builder(1 << 20).weigher_with(Bytes).build().unwrap(),
    /// };
    /// store.cache.insert(1, vec![0; 10]);
    /// assert_eq!(store.cache.weight(), 10);
    /// ```
    pub fn weigher_with<W2: Weigher<K, V>>(self, weigher: W2) -> Builder<K, V, S, W2> {
        Builder {
            opts: Options {
                weighted: true,
                ..self.opts
            },
            hasher: self.hasher,
            weigher,
        }
    }

    /// Builds the cache. Memory grows with the entries held.
    ///
    /// # Errors
    /// [`CacheError::CapacityTooLarge`] above [`MAX_CAPACITY`],
    /// [`CacheError::ZeroLifetime`] for a zero time to live or time to
    /// idle, and [`CacheError::Lifetimes`] for an
    /// [`expiry`](Self::expiry) set with either.
    pub fn build(self) -> Result<LruCache<K, V, S, W>, CacheError> {
        let o = &self.opts;
        if o.capacity > MAX_CAPACITY {
            return Err(CacheError::CapacityTooLarge {
                capacity: o.capacity,
            });
        }
        let max_entries = o
            .max_entries
            .unwrap_or(usize::try_from(o.capacity).unwrap_or(usize::MAX));
        for (setting, d) in [
            ("time_to_live", o.time_to_live),
            ("time_to_idle", o.time_to_idle),
        ] {
            if d == Some(Duration::ZERO) {
                return Err(CacheError::ZeroLifetime { setting });
            }
        }
        let kind = match (o.time_to_live, o.time_to_idle, o.expiry.clone()) {
            (None, None, None) => None,
            (Some(live), None, None) => Some(Kind::Live(nanos(Some(live)))),
            (None, Some(idle), None) => Some(Kind::Idle(nanos(Some(idle)))),
            (Some(live), Some(idle), None) => Some(Kind::Both {
                live: nanos(Some(live)),
                idle: nanos(Some(idle)),
            }),
            (None, None, Some(e)) => Some(Kind::Custom(e)),
            (_, _, Some(_)) => return Err(CacheError::Lifetimes),
        };
        let expire = kind.map(|kind| Expire {
            kind,
            clock: o.clock.clone(),
            res: if o.clock.is_none() { coarse_res() } else { 0 },
        });
        let (expiring, capped) = (
            expire.is_some(),
            expire.as_ref().is_some_and(Expire::capped),
        );
        let exact = o.policy == Policy::Lru && !o.batching;
        // The most entries the cache holds: unweighted, each counts 1
        // against the capacity too.
        let entries = if o.weighted {
            max_entries
        } else {
            max_entries.min(usize::try_from(o.capacity).unwrap_or(usize::MAX))
        };
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        // The entries the default shard count follows: unweighted, what
        // the capacity holds; weighted, the user's estimate, if any, at
        // most `max_entries` and the capacity's units (an entry weighs one
        // at least); 0 (or a capacity of 0) is no estimate.
        let known = if o.weighted {
            o.estimated_entries
                .map(|e| {
                    e.min(entries)
                        .min(usize::try_from(o.capacity).unwrap_or(usize::MAX))
                })
                .filter(|&e| e > 0)
        } else {
            Some(entries)
        };
        let wanted = if exact {
            1
        } else {
            o.shards
                .unwrap_or_else(|| default_shards(cpus, o.capacity, max_entries, known))
        };
        // Every shard must be able to hold an entry: no more shards than
        // entries, or than units of capacity.
        let cap = match o.capacity {
            // Stores nothing: the shards asked for (one by default, and
            // for exact LRU), for a cache turned on later (`set_capacity`).
            0 => wanted,
            c => wanted
                .min(max_entries)
                .min(usize::try_from(c).unwrap_or(usize::MAX)),
        }
        .clamp(1, MAX_SHARDS);
        let shards = 1usize << cap.ilog2();
        let share = |total: u64, i: usize| share(total, shards, i);
        // Two stripes per CPU, up to MAX_STRIPES (see `lock`); one when every
        // lookup writes the lruvec anyway (batching off).
        let stripes = if o.batching { stripes_for(cpus) } else { 1 };
        // Weighted, the cache's entries are known only as it fills: the
        // duel follows what its shards report.
        let duel = (o.policy == Policy::Adaptive).then(|| {
            crate::sync::Arc::new(if o.weighted {
                Duel::weighted(o.capacity, known, shards)
            } else {
                Duel::new(entries)
            })
        });
        let lruvecs = (0..shards)
            .map(|i| {
                let lv = Lruvec::new(
                    self.opts.policy,
                    self.opts.batching,
                    self.opts.weighted,
                    (expiring, capped),
                    share(o.capacity, i),
                    shard_entries(max_entries, shards, i),
                )
                .with_pinned(o.pinned.clone());
                crossbeam_utils::CachePadded::new(
                    ShardLock::new(
                        match &duel {
                            Some(d) => lv.with_duel(d.clone()),
                            None => lv,
                        },
                        stripes,
                    )
                    .fast_reads(self.opts.fast_reads),
                )
            })
            .collect();
        Ok(LruCache {
            shards: lruvecs,
            shard_mask: shards - 1,
            spread: self.opts.spread,
            hasher: self.hasher,
            weigher: self.weigher,
            capacity: AtomicU64::new(self.opts.capacity),
            max_entries: AtomicUsize::new(max_entries),
            max_entries_set: self.opts.max_entries.is_some(),
            resizing: std::sync::Mutex::new(()),
            policy: self.opts.policy,
            duel,
            batching: self.opts.batching,
            expire,
            listener: self.opts.listener,
            loads: AtomicU64::new(0),
            load_waits: AtomicU64::new(0),
            load_failures: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }
}

/// Shard `i`'s part of `total` split over `shards`: even, the remainder
/// to the first shards.
pub(super) fn share(total: u64, shards: usize, i: usize) -> u64 {
    let n = shards as u64;
    total / n + u64::from((i as u64) < total % n)
}

/// The smallest of `shards` shares of `total`: the last shard's, since
/// [`share`] gives the remainder to the first ones.
pub(super) fn smallest_share(total: u64, shards: usize) -> u64 {
    total / shards as u64
}

/// Shard `i`'s part of `max_entries` (a shard indexes its entries with
/// `u32`s).
pub(super) fn shard_entries(max_entries: usize, shards: usize, i: usize) -> usize {
    share(max_entries as u64, shards, i).min(u64::from(u32::MAX - 1)) as usize
}

/// The shards a cache of `capacity` (at most `max_entries` entries, of
/// which it holds `entries` if known: unweighted, or weighted with
/// [`Builder::estimated_entries`]) asks for on a host of `cpus` CPUs when
/// [`Builder::shards`] is not set, before the limits and the rounding down
/// to a power of two that every count takes: 8 a CPU (1 a CPU for a
/// weighted cache of unknown entries), no more than the capacity and the
/// entries hold at [`MIN_SHARD_ENTRIES`] each, and, where the entries are
/// known, at least enough that each indexes its entries in `u16`s.
fn default_shards(cpus: usize, capacity: u64, max_entries: usize, entries: Option<usize>) -> usize {
    let by_size = capacity.min(max_entries as u64) / MIN_SHARD_ENTRIES;
    let Some(entries) = entries else {
        // Weighted, entries unknown: fewer, larger shares, so that heavy
        // entries fit their shard's.
        return cpus
            .min(usize::try_from(by_size).unwrap_or(usize::MAX))
            .max(1);
    };
    let by_size = by_size.min(entries as u64 / MIN_SHARD_ENTRIES);
    // 8 a CPU: with 4, two threads reading through a miss-heavy stream
    // waited on each other's writes (docs/cache.md, `Builder::shards`).
    let by_cpu = (8 * cpus).min(usize::try_from(by_size).unwrap_or(usize::MAX));
    // Enough shards that each indexes its entries in `u16`s: a wide index
    // costs 4 bytes an entry more (a cache of 1 Mi entries on 2 CPUs, 8
    // shards: 10 bytes an entry of index against 6).
    let narrow = entries
        .div_ceil(NARROW_MAX)
        .next_power_of_two()
        .min(MAX_NARROW_SHARDS);
    by_cpu.max(narrow)
}

/// Stripes per shard lock on a host of `cpus` CPUs: two per CPU, up to
/// [`MAX_STRIPES`], so that a pool of a thread per CPU and the thread that
/// built the cache each own a stripe number below it (see `lock`; with one
/// per CPU, one of two threads reading on a 2-CPU host shared a stripe).
/// Two under loom, so the models see readers on different stripes
/// whatever the host.
fn stripes_for(cpus: usize) -> usize {
    if cfg!(mmbatch_loom) {
        2
    } else {
        (2 * cpus).min(MAX_STRIPES)
    }
}

#[cfg(all(test, not(mmbatch_loom)))]
mod tests;
