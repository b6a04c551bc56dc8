//! Insertion (`filemap_add_folio` and `folio_add_lru`, as far as a
//! cache has them): a new entry, a replaced value, a warmed one, and
//! their index slots.

use super::*;

impl<K, V> Lruvec<K, V> {
    /// Whether the shard is over its capacity with `extra` more weight and
    /// `extra_entries` more entries.
    pub(super) fn over(&self, extra: u64, extra_entries: usize) -> bool {
        self.weight + extra > self.capacity || self.len() + extra_entries > self.max_entries
    }

    /// Caches a new entry (its key is absent), evicting to make room
    /// first: the new entry is never its own victim. Under
    /// [`Policy::Workingset`] a refault close enough goes active at once
    /// (`workingset_refault`).
    pub(in crate::cache) fn insert_new(
        &mut self,
        hash: u64,
        key: K,
        value: V,
        weight: u64,
        deadline: Deadline,
        out: &mut Evicted<K, V>,
    ) -> Inserted<V> {
        if weight > self.capacity {
            self.rejected += 1;
            out.push((key, value, RemovalCause::Evicted));
            return Inserted::Rejected;
        }
        debug_assert!(self.weighted || weight == 1, "unweighted entries weigh 1");
        let hash = short_hash(hash);
        self.duel(hash);
        if matches!(self.policy, Policy::Workingset | Policy::Lirs) {
            self.shadows.prefetch(hash);
        }
        // The usual insertion displaces one entry: the new one takes its
        // slot, so nothing in the slab moves (freeing the slot would move
        // the last entry into it and re-point its index entry).
        let mut none = NIL;
        let mut hole = NIL;
        // The usual victim's shadow is left last, after the new entry is
        // linked: its bucket loads meanwhile (see `evict_detached_later`).
        let mut shadow = None;
        if self.over(weight, 1) {
            if self.weighted && self.lirs && !self.admits && self.hir_cannot_hold(hash, weight) {
                return self.decline(hash, key, value, out);
            }
            if let Some(t) = self.pick_victim(&mut none) {
                if self.refuses(hash, t) {
                    // Counted after its contest, which it enters with
                    // what it had been seen before.
                    self.count(hash);
                    self.not_admitted += 1;
                    self.tick_refused();
                    // The victim stays, for another turn.
                    if self.lists[INACTIVE].tail == t {
                        self.rotate(INACTIVE);
                    }
                    out.push((key, value, RemovalCause::Evicted));
                    return Inserted::Rejected;
                }
                self.note_victim(t);
                shadow = self.evict_detached_later(t);
                hole = t;
                if self.over(weight, 0) {
                    // Heavier than what it displaced: free the slot and
                    // evict more.
                    let cause = self.cause(t);
                    let n = self.free_slot(t, &mut none);
                    out.push((n.key, n.value, cause));
                    hole = NIL;
                    self.evict_while_over(weight, 1, &mut none, out);
                }
            }
        }
        if hole == NIL && self.over(weight, 1) {
            // Reclaim found no room (every entry it could evict is
            // pinned): the new one is not cached, rather than overfill the
            // shard; counted as a refused key is.
            self.leave_shadow(shadow);
            self.count(hash);
            self.tick_refused();
            self.rejected += 1;
            out.push((key, value, RemovalCause::Evicted));
            return Inserted::Rejected;
        }
        self.count(hash);
        let (place, in_band) = match self.policy {
            Policy::Workingset => self.workingset_refault(hash),
            Policy::Lirs => (self.lirs_refault(hash), false),
            _ => (Place::Inactive, false),
        };
        let flags = place.flags() | if in_band { IN_BAND } else { 0 };
        let i = if hole == NIL {
            self.nodes.push(Node { key, value });
            self.flags.push(AtomicU8::new(flags));
            self.links.push(Link {
                prev: NIL,
                next: NIL,
                hash,
            });
            if self.weighted {
                self.weights.push(weight);
            }
            self.push_deadline(deadline);
            if self.stamped {
                self.stamps.push(AtomicU16::new(self.stamp_now()));
            }
            self.nodes.len() as u32 - 1
        } else {
            let cause = self.cause(hole);
            let n = &mut self.nodes[hole as usize];
            let old = (
                std::mem::replace(&mut n.key, key),
                std::mem::replace(&mut n.value, value),
                cause,
            );
            out.push(old);
            self.set_deadline(hole, deadline);
            if self.stamped {
                self.stamps[hole as usize].store(self.stamp_now(), Ordering::Relaxed);
            }
            self.links[hole as usize].hash = hash;
            self.set_flags(hole, flags);
            if self.weighted {
                self.weights[hole as usize] = weight;
            }
            hole
        };
        self.link_at(i, place.list(), place == Place::InactiveTail);
        self.index_slot(hash, i);
        self.weight += weight;
        self.leave_shadow(shadow);
        Inserted::New
    }

    /// Replaces entry `i`'s value (a hit on it, as `lru`'s `put`), then
    /// evicts others past the capacity. Too heavy for the shard: the entry
    /// is removed and the new value rejected.
    pub(in crate::cache) fn replace(
        &mut self,
        i: u32,
        value: V,
        weight: u64,
        deadline: Deadline,
        out: &mut Evicted<K, V>,
    ) -> Inserted<V> {
        if weight > self.capacity {
            let mut none = NIL;
            let n = self.remove(i, &mut none);
            self.rejected += 1;
            out.push((n.key, value, RemovalCause::Evicted));
            return Inserted::Replaced(n.value);
        }
        self.set_deadline(i, deadline);
        let old = std::mem::replace(&mut self.nodes[i as usize].value, value);
        if self.weighted {
            let was = std::mem::replace(&mut self.weights[i as usize], weight);
            self.weight = self.weight - was + weight;
        }
        if self.batching {
            // Under the write lock already: drained whether or not this hit
            // filled the batch.
            let _ = self.mark_accessed(i);
            self.drain_moves();
        } else {
            self.touch(i);
        }
        let mut protect = i;
        self.evict_while_over(0, 0, &mut protect, out);
        if self.over(0, 0) {
            // Every other entry is pinned: the new value does not fit.
            let mut none = NIL;
            let n = self.remove(protect, &mut none);
            self.rejected += 1;
            out.push((n.key, n.value, RemovalCause::Evicted));
        }
        Inserted::Replaced(old)
    }

    /// Inserts an absent key to warm the shard (`LruCache::warm`): at the
    /// tail of the active list if `active`, else of the inactive list, so
    /// that entries warmed hottest first keep that order; only into room
    /// it has (it evicts nothing: the entries already warmed are hotter),
    /// else hands the entry back.
    pub(in crate::cache) fn insert_warm(
        &mut self,
        hash: u64,
        key: K,
        value: V,
        weight: u64,
        deadline: Deadline,
        active: bool,
    ) -> Result<(), (K, V)> {
        if self.over(weight, 1) {
            return Err((key, value));
        }
        let hash = short_hash(hash);
        // Active as it was: not on trial (`UNHIT`), as a refault is.
        let (flags, list) = if active && self.policy != Policy::Lru {
            (ACTIVE_FLAG | WORKINGSET, ACTIVE)
        } else {
            (0, INACTIVE)
        };
        self.nodes.push(Node { key, value });
        self.flags.push(AtomicU8::new(flags));
        self.links.push(Link {
            prev: NIL,
            next: NIL,
            hash,
        });
        if self.weighted {
            self.weights.push(weight);
        }
        self.push_deadline(deadline);
        if self.stamped {
            self.stamps.push(AtomicU16::new(self.stamp_now()));
        }
        let i = self.nodes.len() as u32 - 1;
        self.link_at(i, list, true);
        self.index_slot(hash, i);
        self.weight += weight;
        Ok(())
    }

    /// Indexes slot `i`, just filled, under short hash `hash`, first
    /// making a narrow index wide if `i` is past what it holds: a
    /// weighted shard starts narrow whatever its `max_entries` (see
    /// [`new`](Self::new)), and any shard may grow past its first
    /// `max_entries` by `set_capacity`.
    #[inline]
    pub(super) fn index_slot(&mut self, hash: u32, i: u32) {
        let links = &self.links;
        if i as usize >= index::NARROW_MAX {
            // Once, at the shard's 65537th entry: a rehash of the table.
            self.table.widen(|j| index_hash(links[j as usize].hash));
        }
        self.table
            .insert(index_hash(hash), i, |j| index_hash(links[j as usize].hash));
    }
}
