//! What the kernel keeps in `mm/mlock.c`: mlock and munlock of a frame
//! (`mlock_folio`, `munlock_folio`), batched per thread
//! (`mlock_folio_batch`) or applied at once. Seed 000's `munlock_range`
//! replay is [`super::munlock_series`].

use super::*;

/// What an mlock batch entry does (`mlock_lru` tags in `mlock_fbatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MlockOp {
    Mlock,
    Munlock,
}

/// The target of the mlock batcher (`mlock_folio_batch`).
#[derive(Debug)]
pub(super) struct MlockMove {
    pub(super) shared: Arc<Shared>,
}

impl Apply for MlockMove {
    type Op = (Pfn, MlockOp);
    type Key = u32;
    type Guard<'a> = LruvecGuard<'a>;

    fn key(&self, op: &(Pfn, MlockOp)) -> u32 {
        self.shared.frames.get(op.0).node
    }

    fn lock(&self, node: u32) -> LruvecGuard<'_> {
        self.shared.lock(node)
    }

    fn apply(&self, g: &mut LruvecGuard<'_>, (pfn, op): (Pfn, MlockOp)) {
        match op {
            MlockOp::Mlock => self.shared.mlock_one(g, pfn),
            MlockOp::Munlock => self.shared.munlock_one(g, pfn),
        }
        self.shared.frames.get(pfn).put_ref();
    }
}

impl Shared {
    /// `__mlock_folio`.
    pub(super) fn mlock_one(&self, g: &mut LruvecGuard<'_>, pfn: Pfn) {
        let f = self.frames.get(pfn);
        // Nothing more can be done while it is off the LRU: lru_add will
        // cull it to the unevictable list when it comes back.
        if !f.test_and_clear(Flags::LRU) {
            return;
        }
        if !f.test(Flags::MLOCKED) {
            // Munlocked meanwhile by another thread: rescue if needed.
            if f.test(Flags::UNEVICTABLE) {
                g.del(pfn);
                f.clear(Flags::UNEVICTABLE);
                g.add(pfn);
                g.count(Event::Rescued, 1);
            }
        } else if f.test(Flags::UNEVICTABLE) {
            let n = f.mlock_count.load(Ordering::Relaxed);
            f.mlock_count.store(n + 1, Ordering::Relaxed);
        } else {
            g.del(pfn);
            f.clear(Flags::ACTIVE);
            f.set(Flags::UNEVICTABLE);
            f.mlock_count.store(1, Ordering::Relaxed);
            g.add(pfn);
            g.count(Event::Culled, 1);
        }
        f.set(Flags::LRU);
    }

    /// `__munlock_folio`.
    pub(super) fn munlock_one(&self, g: &mut LruvecGuard<'_>, pfn: Pfn) {
        let f = self.frames.get(pfn);
        let isolated = f.test_and_clear(Flags::LRU);
        if isolated && f.test(Flags::UNEVICTABLE) {
            // mlock_count is maintained but may undercount; it never
            // underflows.
            let n = f.mlock_count.load(Ordering::Relaxed).saturating_sub(1);
            f.mlock_count.store(n, Ordering::Relaxed);
            if n > 0 {
                f.set(Flags::LRU);
                return;
            }
        }
        // Else assume that was the last mlock: reclaim fixes it if not.
        if f.test_and_clear(Flags::MLOCKED) {
            self.vmstat.add(Stat::NrMlock, -1);
            if isolated || !f.test(Flags::UNEVICTABLE) {
                g.count(Event::Munlocked, 1);
            } else {
                g.count(Event::Stranded, 1);
            }
        }
        if isolated && f.test(Flags::UNEVICTABLE) && !f.test(Flags::MLOCKED) {
            g.del(pfn);
            f.clear(Flags::UNEVICTABLE);
            g.add(pfn);
            g.count(Event::Rescued, 1);
        }
        if isolated {
            f.set(Flags::LRU);
        }
    }
}

impl Engine {
    /// Mlocks a frame (`mlock_folio`): sets MLOCKED (counting `NR_MLOCK`
    /// once), then moves it to the unevictable list or counts one more
    /// mlock there.
    #[doc(alias = "mlock_folio")]
    pub fn mlock(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.live(pfn)?;
        if !f.test_and_set(Flags::MLOCKED) {
            self.shared.vmstat.add(Stat::NrMlock, 1);
            self.shared.vmstat.add(Stat::Mlocked, 1);
        }
        self.mlock_op(f, pfn, MlockOp::Mlock);
        Ok(())
    }

    /// Drops one mlock of a frame (`munlock_folio`); the last returns it to
    /// an evictable list.
    #[doc(alias = "munlock_folio")]
    pub fn munlock(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.live(pfn)?;
        if !f.test(Flags::MLOCKED) {
            return Err(LruError::NotMlocked(pfn));
        }
        self.mlock_op(f, pfn, MlockOp::Munlock);
        Ok(())
    }

    pub(super) fn mlock_op(&self, f: &Frame, pfn: Pfn, op: MlockOp) {
        match self.modes.mlock {
            Mode::Immediate => {
                let mut g = self.shared.lock(f.node);
                match op {
                    MlockOp::Mlock => self.shared.mlock_one(&mut g, pfn),
                    MlockOp::Munlock => self.shared.munlock_one(&mut g, pfn),
                }
            }
            Mode::Batched => {
                if Self::try_get(f) {
                    self.mlock.queue((pfn, op));
                }
            }
        }
    }
}
