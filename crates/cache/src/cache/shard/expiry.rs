//! Expiry on a shard: each entry's deadline, the shard's next expiry
//! (a lower bound on its deadlines, as the kernel's timer base keeps
//! `next_expiry`), and the sweep that reclaims expired entries with the
//! shard's own writes.

use super::*;

impl<K, V> Lruvec<K, V> {
    /// Entry `i`'s deadline (`u64::MAX`, never, when nothing expires).
    pub(in crate::cache) fn deadline(&self, i: u32) -> u64 {
        if self.expiring {
            self.deadlines[i as usize].load(Ordering::Relaxed)
        } else {
            u64::MAX
        }
    }

    /// Entry `i`'s deadline and cap.
    pub(in crate::cache) fn deadline_of(&self, i: u32) -> Deadline {
        Deadline {
            at: self.deadline(i),
            cap: if self.capped {
                self.caps[i as usize]
            } else {
                u64::MAX
            },
        }
    }

    /// Whether entry `i` is live at `now` (its deadline after it); no
    /// deadline is read while none of the shard's is due.
    #[inline]
    pub(in crate::cache) fn live_at(&self, i: u32, now: u64) -> bool {
        now < self.next_expiry.load(Ordering::Relaxed) || self.deadline(i) > now
    }

    /// Keeps `next_expiry` at or below `deadline`, one about to be set,
    /// and the recomputation's floor with it.
    #[inline]
    pub(super) fn note_deadline(&self, deadline: u64) {
        if deadline < self.next_expiry.load(Ordering::Relaxed) {
            self.next_expiry.fetch_min(deadline, Ordering::Relaxed);
        }
        self.note_recalc(deadline);
    }

    /// Keeps the recomputation's floor at or below `deadline`.
    #[inline]
    pub(super) fn note_recalc(&self, deadline: u64) {
        if deadline < self.recalc_floor.load(Ordering::Relaxed) {
            self.recalc_floor.fetch_min(deadline, Ordering::Relaxed);
        }
    }

    /// Whether an entry may have expired at `now` (the next expiry has
    /// come): read under either lock.
    pub(in crate::cache) fn due(&self, now: u64) -> bool {
        self.expiring && now >= self.next_expiry.load(Ordering::Relaxed)
    }

    /// Removes every entry expired at `now` into `out` and makes the
    /// earliest deadline left the next expiry, reading the whole shard
    /// under the write lock (the kernel's `__run_timers` for every
    /// bucket at once, for [`LruCache::purge_expired`](crate::LruCache::purge_expired)).
    pub(in crate::cache) fn purge_expired(&mut self, now: u64, out: &mut Vec<Node<K, V>>) {
        if !self.expiring {
            return;
        }
        self.now = now;
        let mut earliest = u64::MAX;
        // From the last slot down: a removal moves the last entry, already
        // looked at, into the freed slot.
        for i in (0..self.nodes.len() as u32).rev() {
            let d = self.deadline(i);
            if d > now {
                earliest = earliest.min(d);
            } else {
                let mut none = NIL;
                out.push(self.remove(i, &mut none));
            }
        }
        // Every deadline was read just now, with no reader to move one.
        self.recalc_floor.store(u64::MAX, Ordering::Relaxed);
        self.next_expiry.store(earliest, Ordering::Relaxed);
        self.recalc_pos = 0;
        self.recalc_min = u64::MAX;
    }

    /// Reads up to [`RECALC_CHUNK`] more deadlines toward the earliest
    /// the shard holds, and once it has read them all makes that the
    /// next expiry and starts over (`timer_recalc_next_expiry`, a piece
    /// at a time so that no write reads the whole shard), under the
    /// write lock.
    pub(super) fn recalc_next_expiry(&mut self) {
        let len = self.nodes.len();
        let from = (self.recalc_pos as usize).min(len);
        let to = (from + RECALC_CHUNK).min(len);
        for d in &self.deadlines[from..to] {
            self.recalc_min = self.recalc_min.min(d.load(Ordering::Relaxed));
        }
        self.recalc_pos = to as u32;
        if to == len {
            let floor = self.recalc_floor.swap(u64::MAX, Ordering::Relaxed);
            self.next_expiry
                .store(self.recalc_min.min(floor), Ordering::Relaxed);
            self.recalc_pos = 0;
            self.recalc_min = u64::MAX;
        }
    }

    /// Sets entry `i`'s deadline (under the write lock).
    pub(super) fn set_deadline(&mut self, i: u32, deadline: Deadline) {
        if self.expiring {
            self.deadlines[i as usize].store(deadline.at, Ordering::Relaxed);
            self.note_deadline(deadline.at);
        }
        if self.capped {
            self.caps[i as usize] = deadline.cap;
        }
    }

    /// A deadline for the entry pushed last.
    pub(super) fn push_deadline(&mut self, deadline: Deadline) {
        if self.expiring {
            self.deadlines.push(AtomicU64::new(deadline.at));
            self.note_deadline(deadline.at);
        }
        if self.capped {
            self.caps.push(deadline.cap);
        }
    }

    /// Moves entry `i`'s deadline from `was` to `next` (a read's
    /// `expire_after_read`, under the read lock). `later`: only ever later
    /// (`fetch_max`: of racing reads the one that read the clock last
    /// wins, and no read undoes a later one's); else unless another read
    /// moved it first (a compare-exchange: an `Expiry` may shorten it).
    pub(in crate::cache) fn move_deadline(&self, i: u32, was: u64, next: u64, later: bool) {
        if self.expiring {
            let d = &self.deadlines[i as usize];
            if later {
                d.fetch_max(next, Ordering::Relaxed);
            } else {
                // The bound first: no reader sees the deadline before it
                // (lowered in vain if the exchange loses to a concurrent
                // read, whose deadline then stands).
                self.note_deadline(next);
                let _ = d.compare_exchange(was, next, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }

    /// Whether entry `i` had expired at the write section's `now`.
    pub(super) fn expired(&self, i: u32) -> bool {
        !self.live_at(i, self.now)
    }

    /// Why entry `i`, leaving now, leaves: it expired, or the policy
    /// evicted it.
    pub(super) fn cause(&self, i: u32) -> RemovalCause {
        if self.expired(i) {
            RemovalCause::Expired
        } else {
            RemovalCause::Evicted
        }
    }

    /// Looks at two slots at the sweep's hand, and while the shard is full
    /// up to [`SWEEP_WHEN_FULL`], and removes those expired at `now` into
    /// `out` (the shard's own work reclaims expired entries: each slot is
    /// looked at within `len / 2` writes, and an insert into a full shard
    /// takes an expired entry's room near the hand before the policy
    /// evicts a live one).
    ///
    /// Does nothing unless expiry is on and a deadline may be due (`now`
    /// at or past the shard's `next_expiry`): that test is inlined into every
    /// insertion, the sweep is not, so a cache without expiry makes no
    /// call (docs/cache.md, "Calls the usual path no longer makes").
    #[inline(always)]
    pub(in crate::cache) fn sweep_expired(&mut self, out: &mut Evicted<K, V>) {
        if self.expiring && self.now >= self.next_expiry.load(Ordering::Relaxed) {
            self.sweep_due(out);
        }
    }

    /// [`sweep_expired`](Self::sweep_expired) once a deadline is due.
    #[inline(never)]
    fn sweep_due(&mut self, out: &mut Evicted<K, V>) {
        // Bounded by construction (a `for`): at most SWEEP_WHEN_FULL slots
        // under the write lock, and RECALC_CHUNK deadlines below, whatever
        // the shard holds.
        for looked in 0..SWEEP_WHEN_FULL {
            let len = self.nodes.len() as u32;
            if (looked >= 2 && !self.is_full()) || len == 0 {
                break;
            }
            let i = self.sweep % len;
            if self.expired(i) {
                // The last entry moves into `i`: looked at next time.
                let mut none = NIL;
                let n = self.remove(i, &mut none);
                out.push((n.key, n.value, RemovalCause::Expired));
            } else {
                // Taken modulo the length where it is used.
                self.sweep = i + 1;
            }
        }
        self.recalc_next_expiry();
    }
}
