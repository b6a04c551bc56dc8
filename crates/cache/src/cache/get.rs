//! Lookups: `get` (a batched hit's fast read, and the paths for the
//! others), `peek` and `contains_key`.

use super::*;

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// A clone of `key`'s live value (an expired entry is a miss),
    /// counting the lookup as a hit or a miss and marking the entry used
    /// for the policy (the kernel's `folio_mark_accessed`).
    ///
    /// `key` is any form of a key that is [`Equivalent`] to it and hashes
    /// as it does: the key itself, a `&str` for a `String` (any `Borrow`
    /// form), or a type of your own for a composite key, so that a lookup
    /// allocates nothing:
    ///
    /// ```
    /// use std::hash::{Hash, Hasher};
    /// use mmbatch_cache::{Equivalent, LruCache};
    ///
    /// // Looks up a `(String, u32)` key without making a `String`.
    /// #[derive(Hash)]
    /// struct Ref<'a>(&'a str, u32);
    ///
    /// impl Equivalent<(String, u32)> for Ref<'_> {
    ///     fn equivalent(&self, key: &(String, u32)) -> bool {
    ///         self.0 == key.0 && self.1 == key.1
    ///     }
    /// }
    ///
    /// let cache = LruCache::new(100);
    /// cache.insert(("user".to_owned(), 7), 42);
    /// assert_eq!(cache.get(&Ref("user", 7)), Some(42));
    /// assert_eq!(cache.get(&("user".to_owned(), 7)), Some(42));
    /// ```
    ///
    /// # Panics
    /// If called from user code that the cache runs under this shard's
    /// write lock (`compute`'s closure, `retain`'s predicate, a key's `Eq`
    /// during an insertion): the lookup would wait for the caller's own
    /// change (see [`LruCache`]'s guarantees).
    /// With batching off every lookup takes the write lock, and `get`
    /// panics as [`insert`](Self::insert) does.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        // The usual lookup (batched, no expiry, its thread's read fast) on
        // a path of its own that makes no call, so that it keeps its
        // values in registers: the reads that are not fast, the hits that
        // count a reference or that the duel samples, and the looks for
        // quiet go elsewhere (docs/cache.md, "The fast read's own path").
        if self.expire.is_none() && self.batching {
            let hash = self.hash(key);
            let shard = self.shard(hash);
            let lv = match shard.try_read_fast() {
                Ok(lv) => lv,
                Err(not_fast) => return Self::get_batched(key, hash, shard, not_fast),
            };
            let Some(i) = lv.find(hash, |k: &K| key.equivalent(k)) else {
                if lv.count(false) {
                    return Self::look_for_quiet(shard, lv, None);
                }
                return None;
            };
            let v = lv.node(i).value.clone();
            if lv.refs_saturated(i) && !lv.samples_hash(hash) {
                if lv.count(true) {
                    return Self::look_for_quiet(shard, lv, Some(v));
                }
                return Some(v);
            }
            return Self::hit_counted(shard, lv, i, hash, v);
        }
        self.get_expiring_or_unbatched(key)
    }

    /// [`get`](Self::get)'s hit, by a fast read, of an entry that counts
    /// one more reference or whose key the duel samples: the rest of the
    /// batched hit, out of line so that the usual hit (saturated, not
    /// sampled) makes no call.
    #[inline(never)]
    fn hit_counted(
        shard: &Shard<K, V>,
        lv: lock::ReadGuard<'_, Lruvec<K, V>>,
        i: u32,
        hash: u64,
        v: V,
    ) -> Option<V> {
        let full = lv.mark_accessed(i);
        lv.sample_hit(hash);
        Self::end_read(shard, lv, Some(v), full)
    }

    /// [`get`](Self::get)'s look for quiet after a fast read, every so
    /// many lookups of its stripe ([`ShardLock::look_for_quiet`]); returns
    /// `found`.
    #[cold]
    #[inline(never)]
    fn look_for_quiet(
        shard: &Shard<K, V>,
        lv: lock::ReadGuard<'_, Lruvec<K, V>>,
        found: Option<V>,
    ) -> Option<V> {
        shard.look_for_quiet(lv.stripe());
        found
    }

    /// [`get`](Self::get) batched, by a read that is not fast
    /// ([`ShardLock::try_read_fast`] returned `not_fast`): `hash` is the
    /// key's, `shard` its shard.
    #[inline(always)]
    fn get_batched<'a, Q>(
        key: &Q,
        hash: u64,
        shard: &'a Shard<K, V>,
        not_fast: lock::NotFast<'a>,
    ) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let lv = shard.read_not_fast(not_fast);
        let mut full = false;
        let found = lv.find(hash, |k: &K| key.equivalent(k)).map(|i| {
            let v = lv.node(i).value.clone();
            full = lv.mark_accessed(i);
            lv.sample_hit(hash);
            v
        });
        Self::end_read(shard, lv, found, full)
    }

    /// The end of a batched lookup under read lock `lv`: counts it (and
    /// looks for quiet when the count says), unlocks, and drains the
    /// shard's batch of moves if its hit filled it (`full`); returns
    /// `found`.
    #[inline(always)]
    fn end_read(
        shard: &Shard<K, V>,
        lv: lock::ReadGuard<'_, Lruvec<K, V>>,
        found: Option<V>,
        full: bool,
    ) -> Option<V> {
        if lv.count(found.is_some()) {
            shard.look_for_quiet(lv.stripe());
        }
        drop(lv);
        if full {
            Self::drain_moves(shard);
        }
        found
    }

    /// [`get`](Self::get) with expiry on (batched or not) or batching off.
    #[inline(never)]
    fn get_expiring_or_unbatched<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        if let Some(e) = &self.expire {
            return self.get_expiring(key, e);
        }
        let hash = self.hash(key);
        let mut lv = self.shard(hash).write();
        let found = lv.find(hash, |k: &K| key.equivalent(k)).map(|i| {
            let v = lv.node(i).value.clone();
            lv.touch(i);
            lv.sample_hit(hash);
            v
        });
        lv.count(found.is_some());
        found
    }

    /// After a lookup whose hit filled its shard's batch of moves (see
    /// `Lruvec::drain_moves`): drains it, as the kernel drains a full
    /// `folio_batch` under the lruvec lock; left to the next insertion
    /// where the write lock cannot be had without waiting (this thread
    /// holds the shard's lock already, another writer has it, a reader
    /// stays inside, or the write would owe a heavy barrier: the lock is
    /// fast).
    #[cold]
    fn drain_moves(shard: &Shard<K, V>) {
        if let Some(mut lv) = shard.write_if_cheap() {
            lv.drain_moves();
        }
    }

    /// [`get`](Self::get) with expiry on: an expired entry is a miss, a
    /// hit moves its deadline as `expire_after_read` says.
    fn get_expiring<Q>(&self, key: &Q, e: &expire::Expire<K, V>) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let eq = |k: &K| key.equivalent(k);
        if self.batching {
            let lv = shard.read();
            let mut full = false;
            // The clock is read under the lock (no reader acts on a moment
            // before a writer's that it follows), and only for a key found.
            let found = lv.find(hash, eq).and_then(|i| {
                let now = e.now();
                lv.live_at(i, now).then(|| {
                    let v = Self::read_expiring(e, &lv, i, now);
                    full = lv.mark_accessed(i);
                    lv.sample_hit(hash);
                    v
                })
            });
            Self::end_read(shard, lv, found, full)
        } else {
            let mut lv = shard.write();
            let found = lv.find(hash, eq).and_then(|i| {
                let now = e.now();
                lv.live_at(i, now).then(|| {
                    let v = Self::read_expiring(e, &lv, i, now);
                    lv.touch(i);
                    lv.sample_hit(hash);
                    v
                })
            });
            lv.count(found.is_some());
            found
        }
    }

    /// The value of live entry `i`, read at `now` under its shard's lock
    /// (either): its deadline moves as `expire_after_read` says. Racing
    /// reads keep the latest deadline under a time to idle (a read never
    /// moves one back), and one of theirs under an `Expiry`, which may
    /// shorten it. The policy sees the cached value, so a panic in it
    /// drops nothing under the lock.
    pub(super) fn read_expiring(
        e: &expire::Expire<K, V>,
        lv: &Lruvec<K, V>,
        i: u32,
        now: u64,
    ) -> V {
        let n = lv.node(i);
        if !e.reads_move_deadlines() {
            // A time to live: the deadline stays, and is not even read.
            return n.value.clone();
        }
        let was = lv.deadline_of(i);
        let next = e.read(&n.key, &n.value, now, was);
        // Unchanged: no store, no line written.
        if next != was.at {
            lv.move_deadline(i, was.at, next, e.reads_only_extend());
        }
        n.value.clone()
    }

    /// The value of `key` without recording a hit or counting a lookup.
    ///
    /// # Panics
    /// If called from user code that the cache runs under this shard's
    /// write lock (`compute`'s closure, `retain`'s predicate, a key's `Eq`
    /// during an insertion): the lookup would wait for the caller's own
    /// change (see [`LruCache`]'s guarantees).
    pub fn peek<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hash(key);
        let lv = self.shard(hash).read();
        // The clock is read only for a key that is there, as `get` does.
        lv.find(hash, |k| key.equivalent(k))
            .filter(|&i| lv.live_at(i, self.now()))
            .map(|i| lv.node(i).value.clone())
    }

    /// Whether `key` is cached (no hit recorded).
    ///
    /// # Panics
    /// If called from user code that the cache runs under this shard's
    /// write lock (`compute`'s closure, `retain`'s predicate, a key's `Eq`
    /// during an insertion): the lookup would wait for the caller's own
    /// change (see [`LruCache`]'s guarantees).
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hash(key);
        let lv = self.shard(hash).read();
        lv.find(hash, |k| key.equivalent(k))
            .is_some_and(|i| lv.live_at(i, self.now()))
    }
}
