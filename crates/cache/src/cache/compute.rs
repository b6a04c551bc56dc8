//! [`LruCache::compute`]: a read-modify-write of one key under its
//! shard's write lock, and the insertion that it and `insert` share.

use std::hash::{BuildHasher, Hash};

use super::{Deadline, Evicted, Inserted, LruCache, Lruvec, RemovalCause, Shard, builder::Weigher};

/// What [`LruCache::compute`]'s function does with the key's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compute<V> {
    /// Cache this value: insert it, or replace the entry's.
    Put(V),
    /// Remove the entry.
    Remove,
    /// Leave things as they are.
    Nop,
}

/// What [`LruCache::compute`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Computed<V> {
    /// The key had no live entry, and the value was offered to the cache:
    /// cached, or (heavier than its shard's share, or refused admission)
    /// handed straight to the listener. `Inserted` does not say which; a
    /// `get` does.
    Inserted,
    /// The entry's value was replaced: the old value. (A new value
    /// heavier than the shard's share is not cached, and the entry is
    /// gone: as [`LruCache::insert`] returns the old value then.)
    Replaced(V),
    /// The entry was removed: its value.
    Removed(V),
    /// Nothing changed: the entry's value, if it had one.
    Unchanged(Option<V>),
}

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// Decides what becomes of `key`'s entry from its value now (`None`:
    /// absent or expired) and does it, atomically: no other change of the
    /// key comes between (moka's sync `and_compute_with`; `f` cannot
    /// await, and other callers of the shard wait while it runs: keep it
    /// short). `f` runs under the
    /// write lock of the key's shard, where a key's `Eq` runs, and must
    /// not use the cache: a use of that shard panics, naming the cause,
    /// and one of another shard can deadlock with a `compute` there that
    /// uses this one.
    /// A `Put` is an [`insert`](Self::insert) (the listener hears a
    /// replaced value as [`RemovalCause::Replaced`]), a `Remove` a
    /// [`remove`](Self::remove) (a load of the key in flight does not
    /// cache its value, whether or not a value was cached, and an expired
    /// entry is taken out, heard as expired); `Nop` records no hit. If `f` (or the
    /// weigher, or an [`Expiry`](super::Expiry)) panics, the cache is as
    /// before the call.
    ///
    /// ```
    /// use mmbatch_cache::{Compute, Computed, LruCache};
    ///
    /// // A read-modify-write no other change of the key comes between
    /// // (the entry may still be evicted later, as any entry may).
    /// let hits: LruCache<&str, u64> = LruCache::new(100);
    /// let count = |n: Option<&u64>| Compute::Put(n.copied().unwrap_or(0) + 1);
    /// assert_eq!(hits.compute("home", count), Computed::Inserted);
    /// assert_eq!(hits.compute("home", count), Computed::Replaced(1));
    /// assert_eq!(hits.get("home"), Some(2));
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn compute(&self, key: K, f: impl FnOnce(Option<&V>) -> Compute<V>) -> Computed<V> {
        let hash = self.hash(&key);
        let shard = self.shard(hash);
        let mut evicted = Evicted::new();
        // What `f` decided; an entry it took out (a removed or a replaced
        // value, with its key) is handed over outside the lock.
        let done = {
            let mut lv = shard.write();
            let now = self.now();
            lv.now = now;
            let found = lv.find(hash, |k| *k == key);
            let live = found.filter(|&i| lv.live_at(i, now));
            match f(live.map(|i| &lv.node(i).value)) {
                Compute::Nop => Ok(Computed::Unchanged(live.map(|i| lv.node(i).value.clone()))),
                Compute::Remove => {
                    // As `remove`: a load of the key in flight returns its
                    // value but does not cache it. Its flights are found
                    // (the key's `Eq`, user code) before any is marked.
                    let flights = lv.flights.ids_of(hash, |k| *k == key);
                    lv.flights.invalidate(hash, &flights);
                    let mut none = u32::MAX;
                    match (live, found) {
                        (Some(i), _) => {
                            let n = lv.remove(i, &mut none);
                            Err((n.key, n.value, RemovalCause::Removed))
                        }
                        // An expired entry goes as `remove` takes one:
                        // heard as expired.
                        (None, Some(i)) => {
                            let n = lv.remove(i, &mut none);
                            evicted.push((n.key, n.value, RemovalCause::Expired));
                            Ok(Computed::Unchanged(None))
                        }
                        (None, None) => Ok(Computed::Unchanged(None)),
                    }
                }
                Compute::Put(value) => {
                    let weight = self.weigh(&key, &value);
                    match self.put_locked(
                        shard,
                        &mut lv,
                        (hash, key, value, weight),
                        (found, live),
                        &mut evicted,
                    ) {
                        Some((k, old)) => Err((k, old, RemovalCause::Replaced)),
                        None => Ok(Computed::Inserted),
                    }
                }
            }
        };
        let done = done.unwrap_or_else(|(k, v, cause)| {
            // A removal listener hears it, with a copy made outside the
            // lock and only for it; an eviction listener hears only what
            // the policy and expiry removed.
            if self.hears_every_cause() {
                evicted.push((k, v.clone(), cause));
            }
            if cause == RemovalCause::Removed {
                Computed::Removed(v)
            } else {
                Computed::Replaced(v)
            }
        });
        self.notify_each(evicted);
        done
    }

    /// Caches `value` under `key` in `lv`, the write-locked `shard` of
    /// `hash`, whose clock was read into `lv.now`: `found` is the key's
    /// slot, `live` the same if it has not expired. Evictions (and an
    /// expired entry of the key) go to `evicted`. Returns the value
    /// replaced, with the caller's key to hear it with (`None`: the key
    /// went in anew).
    #[inline]
    pub(super) fn put_locked(
        &self,
        shard: &Shard<K, V>,
        lv: &mut Lruvec<K, V>,
        (hash, key, value, weight): (u64, K, V, u64),
        (found, live): (Option<u32>, Option<u32>),
        evicted: &mut Evicted<K, V>,
    ) -> Option<(K, V)> {
        let now = lv.now;
        // The `Expiry` before anything changes: if it panics, the lock is
        // released and then the key and value dropped.
        let deadline = match (&self.expire, live) {
            (None, _) => Deadline::NEVER,
            (Some(e), Some(i)) => e.update(&key, &value, now, lv.deadline_of(i)),
            (Some(e), None) => e.create(&key, &value).at(now),
        };
        match (live, found) {
            (Some(i), _) => {
                // A live entry's replacement always gives its old value
                // back (heavier than the shard's share, the new one went
                // to `evicted`).
                let old = match lv.replace(i, value, weight, deadline, evicted) {
                    Inserted::Replaced(v) => Some((key, v)),
                    Inserted::New | Inserted::Rejected => None,
                };
                lv.sweep_expired(evicted);
                old
            }
            (None, expired) => {
                // Expired: out (heard so), and the key goes in anew.
                if let Some(i) = expired {
                    let mut none = u32::MAX;
                    let n = lv.remove(i, &mut none);
                    evicted.push((n.key, n.value, RemovalCause::Expired));
                }
                // Expired entries before the policy's victims: room the
                // sweep frees is room no live entry gives up.
                lv.sweep_expired(evicted);
                lv.insert_new(hash, key, value, weight, deadline, evicted);
                Self::look_at_lookups(shard, lv);
                None
            }
        }
    }
}
