//! The caches under test behind one trait ([`Cache`]), each driven
//! through its own API, and [`build`], which makes one of each
//! [`Impl`].

use std::{num::NonZeroUsize, sync::Mutex};

use mmbatch_cache::{LruCache, Policy};

use super::Impl;
use crate::cache_hits::weighted::{QcWeigh, VARYING_MEAN, varying};

/// A cache under test: the two operations the workloads use.
pub trait Cache: Sync {
    /// Whether `key` was found.
    fn get(&self, key: u64) -> bool;
    /// Caches `value` under `key`.
    fn insert(&self, key: u64, value: u64);
    /// The value of `key` by the cache's loader API, loading `key` itself
    /// on a miss; counts each load in `loads`.
    fn load(&self, key: u64, loads: &mut u64) -> u64;
    /// Applies work the cache deferred (moka's pending evictions), untimed.
    fn settle(&self) {}
}

impl Cache for Mutex<lru::LruCache<u64, u64>> {
    fn get(&self, key: u64) -> bool {
        self.lock().unwrap().get(&key).is_some()
    }
    fn insert(&self, key: u64, value: u64) {
        self.lock().unwrap().put(key, value);
    }
    fn load(&self, key: u64, loads: &mut u64) -> u64 {
        *self.lock().unwrap().get_or_insert(key, || {
            *loads += 1;
            key
        })
    }
}

impl Cache for moka::sync::Cache<u64, u64> {
    fn get(&self, key: u64) -> bool {
        moka::sync::Cache::get(self, &key).is_some()
    }
    fn insert(&self, key: u64, value: u64) {
        moka::sync::Cache::insert(self, key, value);
    }
    fn load(&self, key: u64, loads: &mut u64) -> u64 {
        self.get_with(key, || {
            *loads += 1;
            key
        })
    }
    fn settle(&self) {
        self.run_pending_tasks();
    }
}

/// quick_cache, unweighted or weighted (`QcWeigh`).
impl<W> Cache for quick_cache::sync::Cache<u64, u64, W>
where
    W: quick_cache::Weighter<u64, u64> + Clone + Send + Sync,
{
    fn get(&self, key: u64) -> bool {
        quick_cache::sync::Cache::get(self, &key).is_some()
    }
    fn insert(&self, key: u64, value: u64) {
        quick_cache::sync::Cache::insert(self, key, value);
    }
    fn load(&self, key: u64, loads: &mut u64) -> u64 {
        let loaded = self.get_or_insert_with(&key, || {
            *loads += 1;
            Ok::<_, std::convert::Infallible>(key)
        });
        match loaded {
            Ok(v) => v,
        }
    }
}

impl<S, W> Cache for LruCache<u64, u64, S, W>
where
    S: std::hash::BuildHasher + Sync,
    W: mmbatch_cache::Weigher<u64, u64> + Sync,
    LruCache<u64, u64, S, W>: Sync,
{
    fn get(&self, key: u64) -> bool {
        LruCache::get(self, &key).is_some()
    }
    fn insert(&self, key: u64, value: u64) {
        LruCache::insert(self, key, value);
    }
    fn load(&self, key: u64, loads: &mut u64) -> u64 {
        self.get_or_insert_with(key, || {
            *loads += 1;
            key
        })
    }
}

/// Builds an empty cache of `capacity` entries (weighted: of their mean
/// weight).
pub fn build(which: Impl, capacity: usize) -> Box<dyn Cache> {
    let nz = NonZeroUsize::new(capacity.max(1)).expect("at least 1");
    // The weighted caches' capacity: `capacity` entries of mean weight.
    let weight = capacity as u64 * VARYING_MEAN;
    let mmbatch = |policy: Policy, batching: bool, fast_reads: bool| {
        LruCache::<u64, u64>::builder(capacity as u64)
            .policy(policy)
            .batching(batching)
            .fast_reads(fast_reads)
            .build()
            .expect("a valid capacity")
    };
    match which {
        Impl::MutexLru => Box::new(Mutex::new(lru::LruCache::new(nz))),
        Impl::Moka => Box::new(moka::sync::Cache::new(capacity as u64)),
        Impl::QuickCache => Box::new(quick_cache::sync::Cache::new(capacity)),
        Impl::MmbatchNoBatch => Box::new(mmbatch(Policy::ActiveInactive, false, true)),
        Impl::Mmbatch(_, policy) => Box::new(mmbatch(policy, true, true)),
        Impl::MmbatchPortable => Box::new(mmbatch(Policy::default(), true, false)),
        Impl::MmbatchTtl => Box::new(
            LruCache::<u64, u64>::builder(capacity as u64)
                .time_to_live(super::TTL)
                .build()
                .expect("a valid capacity"),
        ),
        Impl::QuickCacheWeighted => Box::new(quick_cache::sync::Cache::with_weighter(
            capacity,
            weight,
            QcWeigh(varying),
        )),
        Impl::MmbatchWeighted | Impl::MmbatchWeightedTold => {
            let b = LruCache::<u64, u64>::builder(weight).weigher(|k: &u64, _: &u64| varying(*k));
            let b = if which == Impl::MmbatchWeightedTold {
                b.estimated_entries(capacity)
            } else {
                b
            };
            Box::new(b.build().expect("a valid capacity"))
        }
        Impl::MokaTtl => Box::new(
            moka::sync::Cache::builder()
                .max_capacity(capacity as u64)
                .time_to_live(super::TTL)
                .build(),
        ),
    }
}
