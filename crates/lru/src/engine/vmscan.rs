//! What the kernel keeps in `mm/vmscan.c`: isolating frames from the
//! lists and putting them back, freeing isolated frames, and reclaim
//! (`shrink_lruvec`: `shrink_active_list`, `shrink_inactive_list`).

use super::*;

impl Shared {
    /// `isolate_lru_folios`: up to `n` frames from the tail of `list`,
    /// each with its LRU bit taken and a reference held. A frame whose LRU
    /// bit another thread holds (it is about to move it) is rotated to the
    /// head and skipped.
    pub(super) fn isolate_tail(
        &self,
        g: &mut LruvecGuard<'_>,
        list: LruList,
        n: usize,
    ) -> Vec<Pfn> {
        // A caller's scan count may be anything (`usize::MAX`): the list
        // bounds what can be taken.
        let n = n.min(usize::try_from(g.size(list)).unwrap_or(usize::MAX));
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let Some(pfn) = g.tail(list) else { break };
            let f = self.frames.get(pfn);
            if f.test_and_clear(Flags::LRU) {
                f.get_ref();
                g.del(pfn);
                out.push(pfn);
            } else {
                g.del(pfn);
                g.add(pfn);
            }
        }
        out
    }

    /// `move_folios_to_lru`: puts isolated frames back under one lock,
    /// dropping each isolation reference.
    pub(super) fn putback_locked(&self, g: &mut LruvecGuard<'_>, frames: &[Pfn]) {
        for &pfn in frames {
            self.move_one(g, pfn, MoveKind::Add);
            self.frames.get(pfn).put_ref();
        }
    }
}

impl Engine {
    /// Takes a frame off its list (`folio_isolate_lru`): true if this call
    /// took it (its LRU bit was set), false if it is not on the LRU. An
    /// isolated frame must be [put back](Self::putback) or
    /// [freed](Self::free_isolated).
    #[doc(alias = "folio_isolate_lru")]
    #[doc(alias = "isolate_lru_folios")]
    pub fn isolate(&self, pfn: Pfn) -> Result<bool, LruError> {
        let f = self.live(pfn)?;
        if !f.test_and_clear(Flags::LRU) {
            return Ok(false);
        }
        f.get_ref();
        self.shared.lock(f.node).del(pfn);
        f.set(Flags::ISOLATED);
        Ok(true)
    }

    /// Returns an isolated frame to the LRU (`folio_putback_lru`): through
    /// the lru_add batch, then drops the isolation reference.
    #[doc(alias = "folio_putback_lru")]
    pub fn putback(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.frame(pfn)?;
        if !f.test_and_clear(Flags::ISOLATED) {
            return Err(LruError::NotIsolated(pfn));
        }
        self.add_held(f, pfn);
        f.put_ref();
        Ok(())
    }

    /// Returns isolated frames to the LRU directly, one lock per run of
    /// frames on the same node (`move_folios_to_lru`), bypassing the
    /// per-thread batches. Claims every frame first: on an error nothing
    /// was put back (a frame named twice is not isolated the second
    /// time).
    #[doc(alias = "move_folios_to_lru")]
    pub fn putback_batch(&self, frames: &[Pfn]) -> Result<(), LruError> {
        for &pfn in frames {
            if !self.frame(pfn)?.test(Flags::ISOLATED) {
                return Err(LruError::NotIsolated(pfn));
            }
        }
        for (i, &pfn) in frames.iter().enumerate() {
            if !self.shared.frames.get(pfn).test_and_clear(Flags::ISOLATED) {
                // Named twice, or put back by another thread since the
                // check: the frames claimed so far are isolated again.
                for &p in &frames[..i] {
                    self.shared.frames.get(p).set(Flags::ISOLATED);
                }
                return Err(LruError::NotIsolated(pfn));
            }
        }
        self.putback_claimed(frames);
        Ok(())
    }

    pub(super) fn putback_claimed(&self, frames: &[Pfn]) {
        let target = self.lru_add.target();
        for chunk in frames.chunks(BATCH_LEN) {
            let mut batch: PageVec<Pfn, BATCH_LEN> = PageVec::new();
            chunk.iter().for_each(|&pfn| {
                batch.push(pfn);
            });
            // LruMove{Add}: move, set LRU, put the (isolation) reference.
            apply_batch(target, &mut batch);
        }
    }

    /// Frees an isolated frame that nobody else holds (`folio_ref_freeze`,
    /// then its flags reset): it can be [`lru_add`](Self::lru_add)ed
    /// again.
    #[doc(alias = "folio_ref_freeze")]
    pub fn free_isolated(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.frame(pfn)?;
        if !f.test(Flags::ISOLATED) {
            return Err(LruError::NotIsolated(pfn));
        }
        f.refcount
            .compare_exchange(2, FROZEN, Ordering::AcqRel, Ordering::Relaxed)
            .map_err(|refcount| match refcount {
                // Another free_isolated of the same isolation is freeing it.
                FROZEN => LruError::NotIsolated(pfn),
                refcount => LruError::Busy { pfn, refcount },
            })?;
        // Free only once its flags are reset: an `lru_add` of it meanwhile
        // is refused, not undone by the reset.
        f.reset_flags();
        f.refcount.store(0, Ordering::Release);
        Ok(())
    }

    /// Reclaims from `node` (`shrink_lruvec`, one pass): applies the calling
    /// thread's batches (`lru_add_drain`, as `shrink_inactive_list` does:
    /// other threads' wait for their drains), refills the
    /// inactive list from the active tail when it is the smaller
    /// (`shrink_active_list`), then isolates up to `nr_to_scan` frames from
    /// the inactive tail (`shrink_inactive_list`). Referenced frames get a
    /// second chance on the active list; locked, mlocked and shared frames
    /// are kept; the rest are offered to `evict`, outside any lock, and
    /// those it accepts become free. Survivors go back under one lock.
    /// While `evict` runs its frame is being freed: `lru_add` of it fails
    /// with [`LruError::Reclaiming`] (add it again after `shrink`
    /// returns, if evicted), and other calls see it as free.
    #[doc(alias = "shrink_lruvec")]
    #[doc(alias = "shrink_inactive_list")]
    pub fn shrink(
        &self,
        node: usize,
        nr_to_scan: usize,
        mut evict: impl FnMut(Pfn) -> bool,
    ) -> Result<ShrinkStats, LruError> {
        let lruvec = self.shared.lruvecs.get(node).ok_or(LruError::NoSuchNode {
            node,
            nodes: self.nodes(),
        })?;
        self.lru_add_drain();
        let frames = &self.shared.frames;
        let mut stats = ShrinkStats::default();
        let mut g = lruvec.lock(frames);
        if g.size(LruList::Inactive) < g.size(LruList::Active) {
            (g, stats.deactivated) = self.shrink_active_list(g, lruvec, nr_to_scan);
        }
        let isolated = self
            .shared
            .isolate_tail(&mut g, LruList::Inactive, nr_to_scan);
        g.count(Event::Scan, isolated.len() as u64);
        drop(g);
        stats.scanned = isolated.len() as u64;
        let mut keep = Vec::with_capacity(isolated.len());
        let mut isolated = isolated.into_iter();
        while let Some(pfn) = isolated.next() {
            let f = frames.get(pfn);
            if f.test_and_set(Flags::LOCKED) {
                keep.push(pfn); // folio_trylock failed
                stats.kept += 1;
                continue;
            }
            if f.test_and_clear(Flags::REFERENCED) {
                f.set(Flags::ACTIVE);
                stats.activated += 1;
            } else if !f.test(Flags::MLOCKED)
                // folio_ref_freeze: only the allocation and our isolation
                // references may exist.
                && f.refcount.compare_exchange(2, FROZEN, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            {
                // The callback is the caller's code: if it panics, this
                // frame and every other isolated one go back on the lists
                // before the panic continues, so none is lost.
                match panic::catch_unwind(AssertUnwindSafe(|| evict(pfn))) {
                    Ok(true) => {
                        // Free once its flags are reset (see
                        // `free_isolated`).
                        f.reset_flags();
                        f.refcount.store(0, Ordering::Release);
                        stats.evicted += 1;
                        continue;
                    }
                    Ok(false) => f.refcount.store(2, Ordering::Release),
                    Err(payload) => {
                        f.refcount.store(2, Ordering::Release);
                        f.clear(Flags::LOCKED);
                        keep.push(pfn);
                        keep.extend(isolated);
                        let mut g = lruvec.lock(frames);
                        g.count(Event::Steal, stats.evicted);
                        g.count(Event::Activate, stats.activated);
                        self.shared.putback_locked(&mut g, &keep);
                        drop(g);
                        panic::resume_unwind(payload);
                    }
                }
            }
            if !f.flags().contains(Flags::ACTIVE) {
                stats.kept += 1;
            }
            f.clear(Flags::LOCKED);
            keep.push(pfn);
        }
        let mut g = lruvec.lock(frames);
        g.count(Event::Steal, stats.evicted);
        g.count(Event::Activate, stats.activated);
        self.shared.putback_locked(&mut g, &keep);
        Ok(stats)
    }

    /// Ages the active list of `node` (`shrink_active_list`): moves up to
    /// `nr_to_scan` frames from its tail to the inactive list, returning
    /// how many, once the calling thread's batches are applied
    /// (`lru_add_drain`, as there). [`shrink`](Self::shrink) does this itself when the
    /// inactive list is the smaller; a caller whose reclaim keeps failing
    /// on the inactive list (every frame there busy or referenced) calls
    /// it to give reclaim new candidates, as the kernel's rising scan
    /// priority does.
    #[doc(alias = "shrink_active_list")]
    pub fn shrink_active(&self, node: usize, nr_to_scan: usize) -> Result<u64, LruError> {
        let lruvec = self.shared.lruvecs.get(node).ok_or(LruError::NoSuchNode {
            node,
            nodes: self.nodes(),
        })?;
        self.lru_add_drain();
        let g = lruvec.lock(&self.shared.frames);
        Ok(self.shrink_active_list(g, lruvec, nr_to_scan).1)
    }

    /// Isolates up to `nr` frames from the active tail, clears ACTIVE
    /// outside the lock, and puts them back (onto the inactive head) under
    /// a new lock hold, which it returns.
    pub(super) fn shrink_active_list<'a>(
        &'a self,
        mut g: LruvecGuard<'a>,
        lruvec: &'a Lruvec,
        nr: usize,
    ) -> (LruvecGuard<'a>, u64) {
        let frames = &self.shared.frames;
        let taken = self.shared.isolate_tail(&mut g, LruList::Active, nr);
        g.count(Event::Refill, taken.len() as u64);
        drop(g);
        for &pfn in &taken {
            frames.get(pfn).clear(Flags::ACTIVE);
        }
        let mut g = lruvec.lock(frames);
        g.count(Event::Deactivate, taken.len() as u64);
        self.shared.putback_locked(&mut g, &taken);
        (g, taken.len() as u64)
    }
}
