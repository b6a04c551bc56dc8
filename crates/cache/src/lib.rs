//! A concurrent, bounded in-memory cache: [`LruCache`]. Any number of
//! threads `get` and `insert` through `&self`, and a hit takes only its
//! shard's read lock. Its eviction is the Linux kernel's page
//! replacement, and by default ([`Policy::Adaptive`]) it adapts to the
//! workload: each cache replays a sample of its own requests through four
//! policies and runs whichever hits most.
//!
//! It also has a weigher and a capacity in weight, `max_entries`, an eviction
//! or removal listener, single-flight loading
//! ([`LruCache::get_or_insert_with`]: one loader per key at a time, and
//! its async form; or by a [`LoadGuard`] the caller inserts through),
//! expiry ([`Builder::time_to_live`], an [`Expiry`]),
//! atomic updates of one key ([`LruCache::compute`]), pinned entries
//! ([`Builder::pinned`]), iteration, resizing,
//! warm restarts ([`LruCache::save`], [`LruCache::warm`]), counters
//! ([`CacheStats`]), and exact LRU ([`Policy::Lru`] with
//! [`Builder::batching`]`(false)`) where a workload needs it.
//!
//! # How it evicts
//! Each shard is an lruvec as in `mm/vmscan.c`: new entries start on an
//! inactive list (probation), entries hit there move to the active list,
//! and reclaim evicts from the inactive tail. A hit takes only its shard's
//! read lock: it marks the entry, and the shard's next reclaim applies the
//! mark, as the kernel batches `mark_page_accessed` (while the default
//! policy runs LRU, the hit that fills a batch of moves also takes the
//! write lock if it can without waiting). Under
//! [`Policy::Workingset`], an evicted entry leaves a shadow, and a miss
//! that finds its shadow within the shard's reach is a refault that goes
//! straight to the active list (`mm/workingset.c`), so a working set
//! larger than probation is kept and one-off scans are not;
//! [`Policy::Lirs`] ranks entries by reuse distance on the same lists,
//! which keeps loops and interleaved patterns, and [`Policy::LirsTinyLfu`]
//! adds TinyLFU's frequency sketch in front of it, which keeps keys reused
//! at a steady rate among many others. The default, [`Policy::Adaptive`],
//! runs whichever of them, or LRU, hits most on a sample of the cache's
//! own keys.
//!
//! # What to expect
//! - **Values come back as clones** (`get` returns `V`, not a reference
//!   into the cache, which a concurrent eviction could free): wrap large
//!   values in an `Arc`.
//! - **An insertion may not be kept.** Under the default policy, while
//!   its shards run [`Policy::LirsTinyLfu`], a new key in a full shard
//!   is admitted only if it was seen more often than the entry it would
//!   evict, and with a weigher, while they run [`Policy::Lirs`] (as they
//!   do first), a new key heavier than the HIR entries it would evict is
//!   declined until it is requested again soon (a refused or declined key
//!   goes to the listener as evicted, [`CacheStats::not_admitted`]); with
//!   a weigher, an entry heavier than
//!   its shard's share of the capacity is not cached at all
//!   ([`CacheStats::rejected`]; fewer shards, [`Builder::shards`], give
//!   each a larger share), nor is a new entry in a shard whose entries
//!   are all [pinned](Builder::pinned). A cache is not a map: read it through
//!   [`LruCache::get_or_insert_with`] or handle the miss.
//! - **Which policy**: keep the default unless a workload needs a
//!   guarantee of its own — exact LRU order ([`Policy::Lru`] with
//!   batching off, one shard), or the lowest cost per lookup on a small
//!   cache ([`Policy::ActiveInactive`], the kernel's two lists with no
//!   history).
//! - **Speed by size**: the policy's work per operation (history, the
//!   default's sampled simulations) hides behind memory latency in a
//!   large cache and shows in a small one (a few hundred entries, all in
//!   the CPU's caches), where the default is the slowest of the policies
//!   and [`Policy::ActiveInactive`] and [`Policy::LirsTinyLfu`] read
//!   through fastest ([figures][small-caches]).
//! - **Sharing**: a cache is `Send` and `Sync` when its keys, values,
//!   hasher and weigher are (the default hasher and weigher are); share
//!   it by reference (`std::thread::scope`) or in an `Arc`.
//!
//! [small-caches]: https://github.com/mmbatch/mmbatch/blob/main/docs/cache.md#small-caches
//!
//! # Example
//!
//! ```
//! use mmbatch_cache::{LruCache, Policy};
//!
//! // The kernel's two lists; by default (`Policy::Adaptive`) each shard
//! // runs whichever of Workingset, LIRS (with or without admission) and
//! // LRU hits most on a sample.
//! let cache: LruCache<String, u64> = LruCache::new(10_000);
//! cache.insert("answer".to_owned(), 42);
//! assert_eq!(cache.get("answer"), Some(42));
//! // One loader per key at a time; other callers wait for its value.
//! assert_eq!(cache.get_or_insert_with("question".to_owned(), || 6 * 7), 42);
//!
//! // Exact LRU with a weigher and an eviction listener.
//! let exact = LruCache::builder(10)
//!     .policy(Policy::Lru)
//!     .batching(false) // every hit reorders at once: one shard, exact order
//!     .weigher(|_: &u32, v: &String| v.len() as u64)
//!     .eviction_listener(|k, _| println!("evicted {k}"))
//!     .build()
//!     .expect("a capacity up to MAX_CAPACITY");
//! exact.insert(1, "12345".to_owned());
//! exact.insert(2, "67890".to_owned());
//! exact.insert(3, "abc".to_owned()); // weight 13 > 10: evicts key 1
//! assert!(!exact.contains_key(&1));
//! assert_eq!(exact.weight(), 8);
//! ```
//!
//! # Platforms
//! Any platform with `std`. On Linux a shard that no insertion has reached
//! for a while lets lookups skip their memory barrier, and the insertion
//! that ends the spell calls `membarrier(2)` ([`Builder::fast_reads`]);
//! elsewhere, or where that call is not permitted, every lookup takes its
//! barrier. No system library is needed.
//!
//! # Guarantees under faults
//! What happens when user code panics or an argument is out of range;
//! each line is checked by the crate's tests and fuzz targets.
//! - **Sizes that cannot exist** are errors, not aborts: a capacity
//!   above [`LruCache::MAX_CAPACITY`] given to a builder ([`CacheError`];
//!   [`LruCache::new`] takes it as that largest). A capacity of 0
//!   (or `max_entries(0)`) is a cache that stores nothing.
//! - **User code panics** — `Hash`, `Eq` or `Clone` of a key, `Clone` of
//!   a value, the weigher, a loader: the panic reaches the caller, the
//!   cache is as before the call (user code runs outside the shard's lock,
//!   or under it where a panic leaves the entries as they were), its invariants
//!   check clean and it keeps working (a property test injects a panic
//!   at every such call in turn), so the cache is `UnwindSafe` and
//!   `RefUnwindSafe` when its keys, values, hasher and weigher are. A
//!   loader that panics wakes the callers waiting on it; one of them
//!   loads next.
//! - **The eviction listener panics**: the other entries evicted by the
//!   same insertion still reach it; the first panic then continues in the
//!   inserting caller.
//! - **User code calls back into the cache** under a shard's lock: a call
//!   that can proceed does, one that would wait for its own thread panics
//!   naming the cause (see [`LruCache`]'s guarantees).
//! - **More threads than a shard lock has stripes**: [`CacheStats`]'
//!   hits and misses only grow.
//! - **Crossed nested reads** (a value's `Clone` under shard A reads B on
//!   one thread, under B reads A on another) with an insertion waiting on
//!   each shard: every call finishes; a writer that has waited a while
//!   for readers steps back and lets waiting readers in.
//! - **`membarrier(2)` fails after registering** (a seccomp filter
//!   installed later): no shard goes fast again, and the change ending a
//!   fast spell has its barrier by moving onto each CPU in turn; with
//!   `sched_setaffinity` refused too it panics, naming both and
//!   [`Builder::fast_reads`]`(false)`, and the shard stays fast.
//! - **`max_entries`** bounds the entries held, whatever their weight.
//! - **Weights**: 0 counts as 1; an entry heavier than its shard's share
//!   of the capacity (`u64::MAX`, say) is not cached and goes to the
//!   listener ([`CacheStats::rejected`]). A weighted cache does not know
//!   how many entries its capacity holds: tell it
//!   ([`Builder::estimated_entries`]) and its shards follow them, as an
//!   unweighted cache's follow its capacity; untold, it takes one shard a
//!   CPU.
#![deny(unsafe_code)]

mod cache;
mod sync;

pub use cache::{
    AsyncLoadGuard, Builder, CacheError, CacheStats, Clock, Compute, Computed, DefaultHashBuilder,
    Equivalent, Expiry, Iter, LoadGuard, LruCache, MAX_CAPACITY, MAX_SHARDS, Policy, PolicyState,
    PolicyStateError, RemovalCause, Saved, SavedKey, UnitWeigher, Weigher,
};

/// This crate's README examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
