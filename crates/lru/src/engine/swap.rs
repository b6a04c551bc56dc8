//! What the kernel keeps in `mm/swap.c`: adding frames to the LRU, the
//! moves hits and hints make (activate, deactivate, rotate, and exact-LRU
//! promotion), each batched per thread or applied at once, and the drains
//! (`lru_add_drain[_all]`, `lru_cache_disable`).

use super::*;

/// Which move a batch applies (the `move_fn` of `folio_batch_move_lru`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MoveKind {
    /// `lru_add`.
    Add,
    /// `lru_activate`.
    Activate,
    /// `lru_deactivate`.
    Deactivate,
    /// `lru_move_tail`.
    Rotate,
    /// To the head of its list: exact-LRU promotion (no kernel
    /// counterpart).
    Head,
}

/// The target of the LRU batchers: one move kind over the shared lruvecs.
#[derive(Debug)]
pub(super) struct LruMove {
    pub(super) shared: Arc<Shared>,
    pub(super) kind: MoveKind,
}

impl Apply for LruMove {
    type Op = Pfn;
    type Key = u32;
    type Guard<'a> = LruvecGuard<'a>;

    fn key(&self, pfn: &Pfn) -> u32 {
        self.shared.frames.get(*pfn).node
    }

    fn lock(&self, node: u32) -> LruvecGuard<'_> {
        self.shared.lock(node)
    }

    /// The loop body of `folio_batch_move_lru`, then `folios_put`.
    fn apply(&self, g: &mut LruvecGuard<'_>, pfn: Pfn) {
        self.shared.move_one(g, pfn, self.kind);
        self.shared.frames.get(pfn).put_ref();
    }
}

impl Shared {
    /// One frame of `folio_batch_move_lru`: a frame whose LRU bit another
    /// thread took since it was queued (isolated) is skipped — it must not
    /// be moved twice — otherwise it is moved and its LRU bit restored.
    pub(super) fn move_one(&self, g: &mut LruvecGuard<'_>, pfn: Pfn, kind: MoveKind) {
        let f = self.frames.get(pfn);
        if kind != MoveKind::Add && !f.test_and_clear(Flags::LRU) {
            return;
        }
        match kind {
            MoveKind::Add => lru_add(g, f, pfn),
            MoveKind::Activate => lru_activate(g, f, pfn),
            MoveKind::Deactivate => lru_deactivate(g, f, pfn),
            MoveKind::Rotate => lru_move_tail(g, f, pfn),
            MoveKind::Head => lru_move_head(g, f, pfn),
        }
        f.set(Flags::LRU);
    }
}

/// `lru_add`: onto the list the frame's flags name, or culled to the
/// unevictable list if it is mlocked.
fn lru_add(g: &mut LruvecGuard<'_>, f: &Frame, pfn: Pfn) {
    let was_unevictable = f.test_and_clear(Flags::UNEVICTABLE);
    if !f.test(Flags::MLOCKED) {
        if was_unevictable {
            g.count(Event::Rescued, 1);
        }
    } else {
        f.clear(Flags::ACTIVE);
        f.set(Flags::UNEVICTABLE);
        f.mlock_count.store(0, Ordering::Relaxed);
        if !was_unevictable {
            g.count(Event::Culled, 1);
        }
    }
    g.add(pfn);
}

/// `lru_activate`.
fn lru_activate(g: &mut LruvecGuard<'_>, f: &Frame, pfn: Pfn) {
    if f.test(Flags::ACTIVE) || f.test(Flags::UNEVICTABLE) {
        return;
    }
    g.del(pfn);
    f.set(Flags::ACTIVE);
    g.add(pfn);
    g.count(Event::Activate, 1);
}

/// `lru_deactivate`.
fn lru_deactivate(g: &mut LruvecGuard<'_>, f: &Frame, pfn: Pfn) {
    if f.test(Flags::UNEVICTABLE) || !f.test(Flags::ACTIVE) {
        return;
    }
    g.del(pfn);
    f.clear(Flags::ACTIVE | Flags::REFERENCED);
    g.add(pfn);
    g.count(Event::Deactivate, 1);
}

/// Exact-LRU promotion: to the head of the list the frame is on.
fn lru_move_head(g: &mut LruvecGuard<'_>, f: &Frame, pfn: Pfn) {
    if f.test(Flags::UNEVICTABLE) {
        return;
    }
    g.del(pfn);
    g.add(pfn);
    g.count(Event::Promoted, 1);
}

/// `lru_move_tail`.
fn lru_move_tail(g: &mut LruvecGuard<'_>, f: &Frame, pfn: Pfn) {
    if f.test(Flags::UNEVICTABLE) {
        return;
    }
    g.del(pfn);
    f.clear(Flags::ACTIVE);
    g.add_tail(pfn);
    g.count(Event::Rotated, 1);
}

impl Engine {
    /// Adds a free frame to the LRU (`folio_add_lru`): the caller's
    /// allocation reference is taken, and the frame goes to the inactive
    /// list (or the unevictable one, if mlocked) when its batch is applied.
    #[doc(alias = "folio_add_lru")]
    pub fn lru_add(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.frame(pfn)?;
        f.refcount
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .map_err(|refcount| match refcount {
                FROZEN => LruError::Reclaiming(pfn),
                refcount => LruError::InUse { pfn, refcount },
            })?;
        f.reset_flags();
        self.add_held(f, pfn);
        Ok(())
    }

    /// `folio_add_lru` of a frame whose reference the caller holds.
    pub(super) fn add_held(&self, f: &Frame, pfn: Pfn) {
        match self.modes.lru_add {
            Mode::Immediate => {
                self.shared
                    .move_one(&mut self.shared.lock(f.node), pfn, MoveKind::Add)
            }
            Mode::Batched => {
                f.get_ref();
                self.lru_add.queue(pfn);
            }
        }
    }

    /// Queues (or applies) a move of a frame on the LRU.
    pub(super) fn move_lru(
        &self,
        f: &Frame,
        pfn: Pfn,
        kind: MoveKind,
        mode: Mode,
        batcher: &Batcher<LruMove, BATCH_LEN>,
    ) {
        match mode {
            Mode::Immediate => self
                .shared
                .move_one(&mut self.shared.lock(f.node), pfn, kind),
            Mode::Batched => {
                if Self::try_get(f) {
                    batcher.queue(pfn);
                }
            }
        }
    }

    /// Notes an access (`folio_mark_accessed`): the first sets REFERENCED,
    /// the second activates the frame — through the activate batch if it
    /// is on the LRU, or by marking it active if it still waits in this
    /// thread's lru_add batch.
    #[doc(alias = "folio_mark_accessed")]
    pub fn mark_accessed(&self, pfn: Pfn) -> Result<(), LruError> {
        self.mark_accessed_settled(pfn).map(drop)
    }

    /// [`mark_accessed`](Self::mark_accessed), answering whether the frame
    /// was already active and referenced — settled: further accesses change
    /// nothing until reclaim clears a flag. A caller may skip marking a
    /// settled frame until its next reclaim pass.
    pub fn mark_accessed_settled(&self, pfn: Pfn) -> Result<bool, LruError> {
        let f = self.frame(pfn)?;
        // The hot path: one load (a free frame has neither flag).
        if f.flags().contains(Flags::ACTIVE | Flags::REFERENCED) {
            return Ok(true);
        }
        let f = self.live(pfn)?;
        if !f.test(Flags::REFERENCED) {
            f.set(Flags::REFERENCED);
        } else if f.test(Flags::UNEVICTABLE) {
            // The unevictable list is never rotated: nothing to do.
        } else if !f.test(Flags::ACTIVE) {
            if f.test(Flags::LRU) {
                self.activate_frame(f, pfn);
            } else {
                self.lru_cache_activate(f, pfn);
            }
            f.clear(Flags::REFERENCED);
        }
        Ok(false)
    }

    /// `__lru_cache_activate_folio`: a frame waiting in this thread's
    /// lru_add batch is marked active, so lru_add puts it on the active
    /// list. The flag is set while the batch's slot lock is held, so no
    /// drain can add the frame to a list in between.
    pub(super) fn lru_cache_activate(&self, f: &Frame, pfn: Pfn) {
        self.lru_add.any_local(|queued| {
            let found = *queued == pfn;
            if found {
                f.set(Flags::ACTIVE);
            }
            found
        });
    }

    /// Moves a frame to the active list (`folio_activate`); nothing if it
    /// is not on the LRU, already active, or unevictable.
    #[doc(alias = "folio_activate")]
    pub fn activate(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.live(pfn)?;
        self.activate_frame(f, pfn);
        Ok(())
    }

    pub(super) fn activate_frame(&self, f: &Frame, pfn: Pfn) {
        let flags = f.flags();
        if flags.contains(Flags::LRU)
            && !flags.contains(Flags::ACTIVE)
            && !flags.contains(Flags::UNEVICTABLE)
        {
            self.move_lru(
                f,
                pfn,
                MoveKind::Activate,
                self.modes.activate,
                &self.activate,
            );
        }
    }

    /// Moves an active frame to the inactive list, clearing REFERENCED
    /// (`folio_deactivate`).
    #[doc(alias = "folio_deactivate")]
    pub fn deactivate(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.live(pfn)?;
        let flags = f.flags();
        if flags.contains(Flags::LRU)
            && flags.contains(Flags::ACTIVE)
            && !flags.contains(Flags::UNEVICTABLE)
        {
            self.move_lru(
                f,
                pfn,
                MoveKind::Deactivate,
                self.modes.deactivate,
                &self.deactivate,
            );
        }
        Ok(())
    }

    /// Moves a frame to the inactive tail, next in line for reclaim
    /// (`folio_rotate_reclaimable`); nothing if it is locked or
    /// unevictable.
    #[doc(alias = "folio_rotate_reclaimable")]
    pub fn rotate(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.live(pfn)?;
        let flags = f.flags();
        if flags.contains(Flags::LRU)
            && !flags.contains(Flags::LOCKED)
            && !flags.contains(Flags::UNEVICTABLE)
        {
            self.move_lru(f, pfn, MoveKind::Rotate, self.modes.rotate, &self.rotate);
        }
        Ok(())
    }

    /// Moves a frame to the head of its list, most recently used. The
    /// kernel has no such move — it approximates recency with two lists —
    /// but an exact LRU built on the engine needs it on every hit.
    /// Batched or immediate as [`Modes::activate`], since it stands for
    /// a hit's activation; nothing if the frame is off the LRU or
    /// unevictable.
    pub fn promote(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.live(pfn)?;
        let flags = f.flags();
        if flags.contains(Flags::LRU) && !flags.contains(Flags::UNEVICTABLE) {
            self.move_lru(f, pfn, MoveKind::Head, self.modes.activate, &self.promote);
        }
        Ok(())
    }

    /// Applies the calling thread's batches (`lru_add_drain` with
    /// `mlock_drain_local`).
    #[doc(alias = "mlock_drain_local")]
    pub fn lru_add_drain(&self) {
        self.batchers().iter().for_each(|b| b.drain_local());
    }

    /// Applies every thread's batches (`lru_add_drain_all`); concurrent
    /// callers fold into one pass per batch kind.
    pub fn lru_add_drain_all(&self) {
        self.batchers().iter().for_each(|b| b.drain_all());
    }

    /// Until [`lru_cache_enable`](Self::lru_cache_enable), applies every
    /// operation at once, and applies all that wait now
    /// (`lru_cache_disable`): what page migration needs. Nests.
    ///
    /// # Panics
    /// As [`Batcher::disable`](mmbatch_pagevec::Batcher::disable): where
    /// `membarrier(2)` has failed since registering and
    /// `sched_setaffinity(2)` is refused too.
    pub fn lru_cache_disable(&self) {
        self.batchers().iter().for_each(|b| b.disable());
    }

    /// Undoes one [`lru_cache_disable`](Self::lru_cache_disable).
    ///
    /// # Panics
    /// If the cache is not disabled.
    pub fn lru_cache_enable(&self) {
        // Checked here, in the engine's words: the batchers' own check
        // names `Batcher`, which a user of the engine never sees.
        assert!(
            self.batchers().iter().all(|b| b.is_disabled()),
            "Engine::lru_cache_enable called more times than Engine::lru_cache_disable"
        );
        self.batchers().iter().for_each(|b| b.enable());
    }
}
