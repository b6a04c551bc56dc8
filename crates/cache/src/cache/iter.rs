//! Iteration, `retain`, `drain`: a shard at a time, each under its own
//! lock, so that no call holds two shards and a cache of any size is
//! never stopped whole.

use std::hash::{BuildHasher, Hash};

use super::{DefaultHashBuilder, LruCache, RemovalCause, UnitWeigher, Weigher};

/// The entries of an [`LruCache`], cloned a shard at a time; from
/// [`LruCache::iter`] (or a `for` loop over `&cache`).
pub struct Iter<'a, K, V, S = DefaultHashBuilder, W = UnitWeigher> {
    cache: &'a LruCache<K, V, S, W>,
    /// The next shard to read.
    shard: usize,
    /// The current shard's entries still to yield, coldest first (popped
    /// from the end).
    batch: Vec<(K, V)>,
}

impl<K, V, S, W> std::fmt::Debug for Iter<'_, K, V, S, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter")
            .field("shard", &self.shard)
            .field("left_in_shard", &self.batch.len())
            .finish_non_exhaustive()
    }
}

impl<K, V, S, W> Iterator for Iter<'_, K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        loop {
            if let Some(kv) = self.batch.pop() {
                return Some(kv);
            }
            let shard = self.cache.shards.get(self.shard)?;
            self.shard += 1;
            let lv = shard.read();
            let now = self.cache.now();
            self.batch
                .extend(lv.in_order().filter(|&i| lv.live_at(i, now)).map(|i| {
                    let n = lv.node(i);
                    (n.key.clone(), n.value.clone())
                }));
            drop(lv);
            self.batch.reverse();
        }
    }
}

/// Past the last shard, `next` stays `None`.
impl<K, V, S, W> std::iter::FusedIterator for Iter<'_, K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
}

/// `for (k, v) in &cache`: [`LruCache::iter`].
impl<'a, K, V, S, W> IntoIterator for &'a LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    type Item = (K, V);
    type IntoIter = Iter<'a, K, V, S, W>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// The cached entries, cloned a shard at a time under its read lock:
    /// weakly consistent, as a concurrent map's iterator is. Each shard's
    /// entries are those of one moment, hottest first (its active list,
    /// then its inactive list, each from the most recent end); an entry
    /// inserted or removed in a shard not yet read may or may not appear,
    /// and no key appears twice. Records no hit and counts no lookup.
    ///
    /// Each shard's entries are cloned into a buffer while its read lock
    /// is held, so the iterator holds one shard's worth of clones at a
    /// time, and writers of that shard wait for the copy.
    ///
    /// # Panics
    /// If called from user code that the cache runs under any shard's
    /// write lock, when the iteration reaches that shard.
    pub fn iter(&self) -> Iter<'_, K, V, S, W> {
        Iter {
            cache: self,
            shard: 0,
            batch: Vec::new(),
        }
    }

    /// Keeps only the entries for which `keep` returns true, a shard at a
    /// time under its write lock (so `keep` must not use the cache: it
    /// runs where `insert`'s `Eq` does, and a use of that shard panics);
    /// returns how many were removed. Removal leaves no shadow, as
    /// [`remove`](Self::remove); the removed entries are dropped (or heard
    /// by a removal listener, [`RemovalCause::Removed`]) outside the lock.
    /// If `keep` panics, the entries it already judged stay judged and the
    /// panic continues. Entries that have expired are removed without
    /// being shown to `keep` (no call returns them), heard as
    /// [`RemovalCause::Expired`], and not counted.
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn retain(&self, mut keep: impl FnMut(&K, &V) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut gone = Vec::new();
            let mut expired = Vec::new();
            // `keep` may panic: what it removed before is still heard.
            let judged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut lv = shard.write();
                let now = self.now();
                // From the last slot down: a removal moves the last entry,
                // already judged, into the freed slot.
                for i in (0..lv.len() as u32).rev() {
                    let mut none = u32::MAX;
                    // Expired: out, unjudged (never returned, so never
                    // one `keep` could see).
                    if !lv.live_at(i, now) {
                        expired.push(lv.remove(i, &mut none));
                        continue;
                    }
                    let n = lv.node(i);
                    if !keep(&n.key, &n.value) {
                        gone.push(lv.remove(i, &mut none));
                    }
                }
            }));
            removed += gone.len();
            // User Drop and the listener, outside the lock, in one pass: a
            // listener that panics on one entry still hears the rest.
            let every = self.hears_every_cause();
            let expired = expired
                .into_iter()
                .map(|n| (n.key, n.value, RemovalCause::Expired));
            let heard = if every {
                let gone = std::mem::take(&mut gone);
                self.hear(
                    expired.chain(
                        gone.into_iter()
                            .map(|n| (n.key, n.value, RemovalCause::Removed)),
                    ),
                )
            } else {
                self.hear(expired)
            };
            drop(gone);
            if let Err(p) = judged {
                std::panic::resume_unwind(p);
            }
            if let Some(p) = heard {
                std::panic::resume_unwind(p);
            }
        }
        removed
    }

    /// Removes every entry whose time to live or to idle has ended and
    /// returns how many, a shard at a time (a shard with none due is only
    /// read-locked; one with some is write-locked while its entries are
    /// read); a listener hears each (a removal listener as
    /// [`RemovalCause::Expired`]).
    /// Expired entries are never returned, and each shard's own writes
    /// reclaim them; a cache that is only read keeps them, in [`len`](Self::len)
    /// and in memory, until this is called (moka's `run_pending_tasks`,
    /// Caffeine's `cleanUp`). Without expiry, 0 at once. If the listener
    /// panics, every shard is still purged, and the first panic
    /// continues.
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn purge_expired(&self) -> usize {
        if self.expire.is_none() {
            return 0;
        }
        let (mut purged, mut first) = (0, None);
        for shard in self.shards.iter() {
            // The clock under the lock, as every call reads it.
            if !shard.read().due(self.now()) {
                continue;
            }
            let mut expired = Vec::new();
            {
                let mut lv = shard.write();
                let now = self.now();
                lv.purge_expired(now, &mut expired);
            }
            purged += expired.len();
            let heard = self.hear(
                expired
                    .into_iter()
                    .map(|n| (n.key, n.value, RemovalCause::Expired)),
            );
            if let Some(p) = heard {
                first.get_or_insert(p);
            }
        }
        if let Some(p) = first {
            std::panic::resume_unwind(p);
        }
        purged
    }

    /// Removes every live entry and returns them, a shard at a time
    /// (hottest first within each shard, as [`iter`](Self::iter)); as
    /// [`clear`](Self::clear), the shadows go too. The entries returned
    /// are the caller's, and no listener hears them; an entry that had
    /// expired is not returned (a listener hears it as
    /// [`RemovalCause::Expired`]). Entries inserted meanwhile into a
    /// shard already drained stay cached; loads in flight then are not
    /// cached when they land (as for [`clear`](Self::clear)). If the listener panics on an
    /// expired entry, every shard is still drained, and the panic
    /// continues: the live entries drained are dropped, not returned.
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn drain(&self) -> std::vec::IntoIter<(K, V)> {
        let mut all = Vec::with_capacity(self.len());
        let mut first = None;
        for shard in self.shards.iter() {
            let mut lv = shard.write();
            let now = self.now();
            // As `clear`: a load in flight lands uncached.
            lv.flights.invalidate_all();
            let order: Vec<u32> = lv.in_order().collect();
            let expired: Vec<bool> = (0..lv.len() as u32).map(|i| !lv.live_at(i, now)).collect();
            let mut nodes: Vec<Option<super::shard::Node<K, V>>> =
                lv.clear().into_iter().map(Some).collect();
            drop(lv);
            // Expired ones out of the order first: heard, not returned.
            let gone = nodes
                .iter_mut()
                .zip(expired)
                .filter_map(|(n, gone)| if gone { n.take() } else { None })
                .map(|n| (n.key, n.value, RemovalCause::Expired));
            let gone: Vec<_> = gone.collect();
            first = first.or(self.hear(gone));
            all.extend(
                order
                    .into_iter()
                    .filter_map(|i| nodes[i as usize].take().map(|n| (n.key, n.value))),
            );
        }
        if let Some(p) = first {
            std::panic::resume_unwind(p);
        }
        all.into_iter()
    }
}
