//! Removals by key: `remove`, `remove_if` and `remove_entry`.

use super::*;

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// Removes `key`, returning its value (no shadow is left: a removal is
    /// not an eviction). A load of the key in flight
    /// ([`get_or_insert_with`](Self::get_or_insert_with) and the other
    /// loading forms) still returns its value to its callers but does not
    /// cache it: the value may predate what made the key stale.
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.remove_value(key, |_| true, true)
    }

    /// Removes `key` if `f` says so of its live value, returning the
    /// value: one step, so that no other call changes the entry between
    /// the look and the removal (quick_cache's `remove_if`). `f` runs under
    /// the shard's write lock, as [`retain`](Self::retain)'s predicate
    /// does, and not at all for a key absent or expired. Unlike
    /// [`remove`](Self::remove), it leaves a load of the key in flight
    /// alone: it decides on a cached value, which that load has not made.
    ///
    /// # Panics
    /// As [`insert`](Self::insert); and if `f` uses this cache's shard
    /// (see [`LruCache`]'s guarantees). A panic of `f` leaves the entry.
    pub fn remove_if<Q>(&self, key: &Q, f: impl FnOnce(&V) -> bool) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.remove_value(key, f, false)
    }

    /// [`remove`](Self::remove) and [`remove_if`](Self::remove_if): the
    /// value taken out by [`take_live`](Self::take_live), heard as removed.
    fn remove_value<Q>(&self, key: &Q, f: impl FnOnce(&V) -> bool, invalidate: bool) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let node = self.take_live(key, f, invalidate)?;
        if self.hears_every_cause() {
            let v = node.value.clone();
            self.notify(
                std::iter::once((node.key, node.value)),
                RemovalCause::Removed,
            );
            return Some(v);
        }
        Some(node.value)
    }

    /// Removes `key`, returning the key the cache held with its value (the
    /// cached key may differ from an equal `key`, as a `String` from a
    /// `&str`, or in fields `Eq` ignores). A load of the key in flight is
    /// not cached, as for [`remove`](Self::remove).
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn remove_entry<Q>(&self, key: &Q) -> Option<(K, V)>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let node = self.take_live(key, |_| true, true)?;
        if self.hears_every_cause() {
            let back = (node.key.clone(), node.value.clone());
            self.notify(
                std::iter::once((node.key, node.value)),
                RemovalCause::Removed,
            );
            return Some(back);
        }
        Some((node.key, node.value))
    }

    /// Takes `key`'s entry out if it is live and `f` says so of its value,
    /// for the caller to hand back; an expired entry is taken out and heard
    /// as such (gone already, as far as a reader could tell), and gives
    /// `None`. With `invalidate`, a load of the key in flight is not
    /// cached when it lands (see `Flight::invalidated`).
    fn take_live<Q>(
        &self,
        key: &Q,
        f: impl FnOnce(&V) -> bool,
        invalidate: bool,
    ) -> Option<shard::Node<K, V>>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hash(key);
        let (node, expired) = {
            let mut lv = self.shard(hash).write();
            // The key's flights, marked only once the user code here (the
            // key's `Equivalent`, the clock) has run: a panic in it leaves
            // the shard as it was.
            let flights = if invalidate && !lv.flights.is_empty() {
                lv.flights.ids_of(hash, |k| key.equivalent(k))
            } else {
                Vec::new()
            };
            let found = lv.find(hash, |k| key.equivalent(k));
            let expired = found.map(|i| !lv.live_at(i, self.now()));
            lv.flights.invalidate(hash, &flights);
            let (i, expired) = (found?, expired?);
            if !expired && !f(&lv.node(i).value) {
                return None;
            }
            let mut none = u32::MAX;
            (lv.remove(i, &mut none), expired)
        };
        if expired {
            self.notify(
                std::iter::once((node.key, node.value)),
                RemovalCause::Expired,
            );
            return None;
        }
        Some(node)
    }
}
