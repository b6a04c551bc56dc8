//! A hit's path through the shard: the index's probe, the reference
//! count (`folio_mark_accessed`), the moves LRU batches, the hit under
//! the write lock, and the hand-off of sampled hits to the duel.

use super::*;

impl<K, V> Lruvec<K, V> {
    /// Under [`Policy::Adaptive`], after a hit of the key of `hash`
    /// (either lock): hands it to the duel if the key is sampled.
    #[inline]
    pub(in crate::cache) fn sample_hit(&self, hash: u64) {
        let h = short_hash(hash);
        // No duel, no key under the bound: one comparison for most keys.
        if self.samples(h) {
            if let Some((duel, sampled)) = &self.duel {
                // Twice the sampled keys the shard holds: a run of hits
                // over all of them (a loop's, a zigzag's) reaches the
                // duel whole; a read-only phase costs it that many.
                // (Weighted, the entries it holds now: until it evicts,
                // and while a new shift waits for its next write, the
                // entries it would hold are not known.)
                let held = if self.weighted {
                    self.len()
                } else {
                    self.full_entries
                };
                let cap = u32::try_from(held >> self.duel_shift)
                    .unwrap_or(u32::MAX)
                    .saturating_mul(2)
                    .max(duel::SAMPLED as u32);
                duel.hit(sampled, h, cap);
            }
        }
    }

    /// Whether [`sample_hit`](Self::sample_hit) hands the hit of `hash` to
    /// the duel.
    #[inline(always)]
    pub(in crate::cache) fn samples_hash(&self, hash: u64) -> bool {
        self.samples(short_hash(hash))
    }

    /// Whether the key of short hash `h` is in the duel's sample of 1 key
    /// in `2^duel_shift` (never without a duel): its
    /// [`sample_key`](duel::sample_key) under the bound the shard keeps.
    #[inline]
    pub(super) fn samples(&self, h: u32) -> bool {
        duel::sample_key(h) < self.sample_below
    }

    /// The entry of `hash` whose key satisfies `eq`.
    #[inline(always)]
    pub(in crate::cache) fn find(&self, hash: u64, eq: impl Fn(&K) -> bool) -> Option<u32> {
        let nodes = &self.nodes;
        self.table
            .find(index_hash(short_hash(hash)), |i| eq(&nodes[i as usize].key))
    }

    /// `folio_mark_accessed`, under the read lock: a hit
    /// counts one more reference, up to 4 (1 under [`Policy::Lru`]). Counts
    /// already saturated are not written again, so hot entries cost no
    /// stores. The count is a hint, as the kernel's are: only lookups write
    /// it while the lock is read (writers exclude them), and two racing
    /// lookups may lose a count or set it back by one. A plain store, not a
    /// compare-and-swap: the swap's `lock` prefix drained the store buffer
    /// on every counted hit. Under [`Policy::Lirs`] a counted hit also
    /// stamps the entry; a hit of an entry whose count is saturated does
    /// not (reclaim spends its references before it can be demoted or
    /// evicted, and the next hit stamps it), so that a hot entry's hits
    /// read no line beside its flags; hit ratios moved by 0.1 at most
    /// (docs/cache.md). Under [`Policy::Adaptive`] while the shard runs
    /// [`Policy::Lru`], a counted hit is also batched for a move to the
    /// head (see [`drain_moves`](Self::drain_moves)); returns whether this
    /// hit filled the batch, which the caller then drains (under the write
    /// lock, if it can have it without waiting).
    ///
    /// The saturated test is inlined into the lookup, the counting is
    /// not: a hot entry's hit then makes no call (docs/cache.md, "Calls
    /// the usual path no longer makes").
    #[inline(always)]
    pub(in crate::cache) fn mark_accessed(&self, i: u32) -> bool {
        let flags = &self.flags[i as usize];
        let f = flags.load(Ordering::Relaxed);
        if f & REFS < self.max_refs {
            self.inc_refs(i, f)
        } else {
            false
        }
    }

    /// Whether entry `i`'s reference count is saturated: a hit's
    /// [`mark_accessed`](Self::mark_accessed) writes nothing.
    #[inline(always)]
    pub(in crate::cache) fn refs_saturated(&self, i: u32) -> bool {
        self.flags[i as usize].load(Ordering::Relaxed) & REFS >= self.max_refs
    }

    /// `folio_inc_refs`: [`mark_accessed`](Self::mark_accessed) for entry
    /// `i`, whose count in flags `f` is not saturated. Stores one more
    /// reference; stamps the entry if the shard keeps stamps; under
    /// [`Policy::Lru`] with a batch of moves, pushes the entry onto it and
    /// returns whether that filled the batch (false otherwise).
    #[inline(never)]
    pub(super) fn inc_refs(&self, i: u32, f: u8) -> bool {
        // A lost race loses a count: a hint, as the kernel's are.
        self.flags[i as usize].store(Self::hit_flags(f), Ordering::Relaxed);
        if self.stamped {
            self.stamp(i);
        }
        if self.policy == Policy::Lru {
            if let Some(moves) = &self.moves {
                // `i + 1`: 0 marks an empty slot.
                return moves.push(i + 1);
            }
        }
        false
    }

    /// `folio_batch_move_lru` for the moves [`mark_accessed`](Self::mark_accessed)
    /// batched under the read lock: while the shard runs [`Policy::Lru`],
    /// each entry hit since the last drain goes to the head in the order
    /// of its first hit, which is exact LRU's order up to a batch. Drained
    /// at each insertion and replacement, and by the lookup that fills the
    /// batch if it can have the write lock without waiting, as the kernel
    /// drains a full `folio_batch` under the lruvec lock; a hit that finds
    /// it full keeps its count, a second chance as CLOCK gives. Why:
    /// `Adaptive` takes LRU up where its simulation of exact LRU leads,
    /// and CLOCK kept fewer hits there (`docs/cache.md`, "The duel's LRU
    /// moves hits"). A shard leaving LRU drops what is batched
    /// ([`adopt`](Self::adopt)), so under the other policies this reads
    /// nothing. Inline up to the test for LRU, which shards under the
    /// other policies fail on every insertion: the drain is a call of its
    /// own.
    #[inline]
    pub(in crate::cache) fn drain_moves(&mut self) {
        if self.policy == Policy::Lru {
            self.drain_moves_now();
        }
    }

    /// [`drain_moves`](Self::drain_moves)' work, under [`Policy::Lru`].
    #[inline(never)]
    fn drain_moves_now(&mut self) {
        let Some(moves) = &self.moves else {
            return;
        };
        if moves.is_empty() {
            return;
        }
        let (mut batch, mut n) = ([0u32; LRU_MOVES], 0);
        moves.drain(|v| {
            batch[n] = v;
            n += 1;
        });
        for &v in &batch[..n] {
            let i = v - 1;
            // Indices are those of the read sections before this write
            // section; one that another write section has since freed or
            // reused holds no count, or one of its own: moved, the entry
            // it holds was hit since reclaim last looked.
            if (i as usize) < self.len() && self.flags(i) & REFS != 0 {
                self.move_to_head(i);
            }
        }
    }

    /// Under [`Policy::Lru`], `folio_activate_fn` on its one list: entry
    /// `i` goes to the head with no count (exact LRU's move on a hit).
    pub(in crate::cache) fn move_to_head(&mut self, i: u32) {
        let list = self.list_of(i);
        self.unlink(i, list);
        // Left on the active list by another policy (`adopt`), which LRU
        // drains from its tail: to the head of the one LRU keeps.
        self.set_flags(i, self.flags(i) & !(ACTIVE_FLAG | REFS));
        self.link_head(i, INACTIVE);
    }

    /// A hit with batching off, under the write lock: [`Policy::Lru`]
    /// moves the entry to the head (exact LRU); the two-list policies
    /// activate an inactive entry hit before (`folio_activate` unbatched)
    /// and count the hit otherwise.
    pub(in crate::cache) fn touch(&mut self, i: u32) {
        if self.stamped {
            self.stamp(i);
        }
        if self.policy == Policy::Lru {
            self.move_to_head(i);
            return;
        }
        let f = self.flags(i);
        if f & ACTIVE_FLAG == 0 && f & REFS >= 1 {
            // The hit counts towards a trial before the activation keeps
            // what is left of it.
            self.set_flags(i, Self::hit_flags(f));
            // A HIR entry hit while resident, as reclaim counts one.
            self.adapt_hir(true);
            self.activate(i);
        } else if f & REFS < self.max_refs {
            self.set_flags(i, Self::hit_flags(f));
        }
    }

    /// Flags `f` after one more hit: a reference more, and an activation
    /// on trial (`UNHIT`) paid at its second hit, as an inactive folio is
    /// activated at its second `folio_mark_accessed`. Every key of a loop
    /// larger than the cache is hit once between two refaults: paid at the
    /// first hit, the loop's refault activations all passed
    /// (`docs/cache.md#policy-measurements`).
    pub(super) fn hit_flags(f: u8) -> u8 {
        let g = f + 1;
        match (f & UNHIT != 0, f & HIT_ONCE != 0) {
            (false, _) => g,
            (true, false) => g | HIT_ONCE,
            (true, true) => g & !(UNHIT | HIT_ONCE),
        }
    }
}
