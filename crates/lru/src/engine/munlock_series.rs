//! `munlock_range`: the kernel's `munlock_vma_pages_range` as it was before
//! Vlastimil Babka's 2013 series (merged in Linux 3.12), with each of the series' seven
//! patches as a cumulative, switchable step — so that every step's gain in
//! the engine comes from the same cause as in the kernel.

use std::ops::Range;

use mmbatch_pagevec::PageVec;

use super::{BATCH_LEN, Engine, MoveKind};
use crate::{
    LruError,
    frame::{Flags, Frame, Pfn},
    lruvec::{Event, LruvecGuard},
    pagetable::PageTables,
    sync::Ordering,
    vmstat::Stat,
};

/// How many patches of the series apply: 0 is the 3.11 baseline, 7 the
/// whole series. Each step includes every earlier one.
///
/// | step | patch | what changes in the engine |
/// |---|---|---|
/// | 0 | — | per page: PTE lookup under its table lock, get, lock_page, `lru_add_drain`, clear MLOCKED, `NR_MLOCK` update, isolate under the lru_lock, putback (deriving the list type) through the lru_add batch, unlock_page, put |
/// | 1 | putback_lru_page: no page_lru_base_type() | the putback stops re-deriving the list type |
/// | 2 | no lru_add_drain() per page | putbacks accumulate in the lru_add batch: one lock per batch |
/// | 3 | isolate a pagevec under one lru_lock | pages are gathered into a batch, isolated under one lock |
/// | 4 | batch NR_MLOCK updates | one `NR_MLOCK` update per batch |
/// | 5 | bypass the per-CPU batch for putback | the batch is put back directly, under one lock |
/// | 6 | no redundant get/put pair | the lookup's pin doubles as the isolation reference |
/// | 7 | manual PTE walk | a batch of consecutive pages is looked up under one table lock (the walk also finds the first page, for which the kernel still calls follow_page_mask) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MunlockStep(u8);

impl MunlockStep {
    /// The 3.11 baseline.
    pub const BASELINE: MunlockStep = MunlockStep(0);
    /// The whole series.
    pub const ALL: MunlockStep = MunlockStep(7);

    /// Step `n`, 0 to 7.
    pub fn new(n: u8) -> Result<Self, LruError> {
        if n <= 7 {
            Ok(MunlockStep(n))
        } else {
            Err(LruError::NoSuchStep(n))
        }
    }

    /// Its number.
    pub fn get(self) -> u8 {
        self.0
    }

    /// Every step, 0 to 7.
    pub fn all() -> impl Iterator<Item = MunlockStep> {
        (0..=7).map(MunlockStep)
    }
}

/// What one `munlock_range` did (cost counters; the result is the same at
/// every step).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MunlockStats {
    /// Frames whose MLOCKED bit this call cleared.
    pub munlocked: u64,
    /// Page-table lock acquisitions.
    pub pte_locks: u64,
    /// Atomic reference count operations (gets and puts, including the put
    /// each queued putback costs when its batch is applied).
    pub refcount_ops: u64,
    /// `lru_add_drain` calls.
    pub drains: u64,
    /// Batches munlocked (steps 3 and up).
    pub batches: u64,
}

impl Engine {
    /// Munlocks every frame mapped in `vpns` of `pt`
    /// (`munlock_vma_pages_range`), the way `step` of the 2013 series
    /// does it. Every frame is treated as mapped once, as in the series'
    /// benchmark: clearing MLOCKED makes it evictable, and it goes back to
    /// the inactive list (mlock_count reset). Putbacks may wait in the
    /// calling thread's lru_add batch afterwards, as in the kernel; call
    /// [`lru_add_drain`](Self::lru_add_drain) to apply them.
    ///
    /// # Errors
    /// [`LruError::RangeOutsidePageTables`]; a frame mapped in the range
    /// that is free ([`LruError::Free`]) or outside the table; and
    /// [`LruError::LockedByCaller`] for a frame whose page lock the
    /// calling thread holds ([`trylock_frame`](Self::trylock_frame)),
    /// where the kernel's `lock_page` would wait for good (a lock taken
    /// from a thread-local destructor, or past the `u32::MAX - 1`th
    /// thread, goes unrecorded and is waited for as the kernel would). The
    /// frames before the one in error are munlocked, and no reference is
    /// left behind.
    ///
    /// # Blocking
    /// It takes each frame's page lock (`lock_page`), waiting while
    /// another thread holds it.
    pub fn munlock_range(
        &self,
        pt: &PageTables,
        vpns: Range<u64>,
        step: MunlockStep,
    ) -> Result<MunlockStats, LruError> {
        if vpns.end > pt.len() {
            return Err(LruError::RangeOutsidePageTables {
                end: vpns.end,
                len: pt.len(),
            });
        }
        let mut st = MunlockStats::default();
        if step.0 < 3 {
            for vpn in vpns {
                st.pte_locks += 1;
                if let Some(pfn) = pt.lookup(vpn) {
                    self.munlock_one_page(pfn, step, &mut st)?;
                }
            }
        } else {
            self.munlock_batched(pt, vpns, step, &mut st)?;
        }
        Ok(st)
    }

    /// Steps 0–2: one page at a time.
    fn munlock_one_page(
        &self,
        pfn: Pfn,
        step: MunlockStep,
        st: &mut MunlockStats,
    ) -> Result<(), LruError> {
        let f = self.pin(pfn)?; // follow_page_mask(FOLL_GET)
        st.refcount_ops += 1;
        lock_page(f);
        if step.0 < 2 {
            self.lru_add_drain();
            st.drains += 1;
        }
        // munlock_vma_page
        if f.test_and_clear(Flags::MLOCKED) {
            st.munlocked += 1;
            self.shared.vmstat.add(Stat::NrMlock, -1);
            let mut g = self.shared.lock(f.node);
            if f.test_and_clear(Flags::LRU) {
                // isolate_lru_page
                f.get_ref();
                st.refcount_ops += 1;
                isolate_munlocked(&mut g, f, pfn);
                drop(g);
                // putback_lru_page
                if step == MunlockStep::BASELINE {
                    std::hint::black_box(f.flags().lru_list()); // page_lru_base_type
                }
                self.putback_slow(f, pfn, st);
            } else {
                isolation_failed(&mut g, f);
            }
        }
        f.clear(Flags::LOCKED); // unlock_page
        f.put_ref();
        st.refcount_ops += 1;
        Ok(())
    }

    /// `putback_lru_page` → `lru_cache_add`: through the lru_add batch
    /// (a get now, a put when the batch is applied), then the isolation
    /// reference is dropped.
    fn putback_slow(&self, f: &Frame, pfn: Pfn, st: &mut MunlockStats) {
        self.add_held(f, pfn);
        f.put_ref();
        st.refcount_ops += match self.modes.lru_add {
            super::Mode::Batched => 3,
            super::Mode::Immediate => 1,
        };
    }

    /// Steps 3–7: gather a batch of frames of one node, then
    /// `__munlock_pagevec` it.
    fn munlock_batched(
        &self,
        pt: &PageTables,
        vpns: Range<u64>,
        step: MunlockStep,
        st: &mut MunlockStats,
    ) -> Result<(), LruError> {
        let frames = &self.shared.frames;
        let mut vpn = vpns.start;
        if step.0 >= 7 {
            while vpn < vpns.end {
                let mut batch: PageVec<Pfn, BATCH_LEN> = PageVec::new();
                let mut node = None;
                let mut bad = None;
                // __munlock_pagevec_fill: the batch from one PTE walk,
                // skipping holes before its first page and stopping before a
                // hole, another node, the end of the table or a full batch.
                // (The kernel finds the first page with follow_page_mask,
                // which handles THP and special mappings; the engine has
                // neither, so the walk starts there: one table lock per
                // batch.)
                st.pte_locks += 1;
                let at = vpn;
                vpn = pt.walk(vpn, vpns.end, |_, e| {
                    let Some(pfn) = e else {
                        return batch.is_empty();
                    };
                    if !frames.contains(pfn) {
                        bad = Some(self.frame(pfn).err().unwrap_or(LruError::Free(pfn)));
                        return false;
                    }
                    let f = frames.get(pfn);
                    if batch.is_full() || node.is_some_and(|n| n != f.node) {
                        return false;
                    }
                    if !Engine::try_get(f) {
                        bad = Some(LruError::Free(pfn)); // mapped but free: no pin to take
                        return false;
                    }
                    if f.locked_by_caller() {
                        f.put_ref();
                        bad = Some(LruError::LockedByCaller(pfn));
                        return false;
                    }
                    node = Some(f.node);
                    st.refcount_ops += 1;
                    batch.push(pfn);
                    true
                });
                // Its first page is always visited (a hole or a page of
                // any node joins an empty batch) unless it is bad: a walk
                // that stopped there would loop here forever.
                debug_assert!(vpn > at || bad.is_some(), "a PTE walk stayed at {at}");
                if let Some(node) = node {
                    self.munlock_pagevec(&mut batch, node, step, st);
                }
                if let Some(e) = bad {
                    return Err(e);
                }
            }
            return Ok(());
        }
        // Steps 3-6: one follow_page_mask per page; a page on another node
        // ends the batch and, already pinned, starts the next. Each page of
        // the range is looked up once (a loop that did not advance, or
        // went past the end, would look forever).
        let pages = vpns.end.saturating_sub(vpn);
        let lookup = |vpn: u64, st: &mut MunlockStats| {
            debug_assert!(
                vpn < vpns.end && st.pte_locks < pages,
                "page {vpn} looked up again or past the range's end {}",
                vpns.end
            );
            st.pte_locks += 1;
            pt.lookup(vpn)
        };
        let mut carry: Option<Pfn> = None;
        loop {
            let first = match carry.take() {
                Some(pfn) => pfn,
                None => {
                    let mut found = None;
                    while vpn < vpns.end && found.is_none() {
                        found = lookup(vpn, st);
                        vpn += 1;
                    }
                    let Some(pfn) = found else { return Ok(()) };
                    self.pin(pfn)?;
                    st.refcount_ops += 1;
                    pfn
                }
            };
            let node = frames.get(first).node;
            let mut batch: PageVec<Pfn, BATCH_LEN> = PageVec::new();
            batch.push(first);
            while vpn < vpns.end && !batch.is_full() {
                let found = lookup(vpn, st);
                vpn += 1;
                let Some(pfn) = found else { continue };
                let f = match self.pin(pfn) {
                    Ok(f) => f,
                    Err(e) => {
                        // The pages pinned so far are munlocked and
                        // released before the error returns: the pins
                        // must not outlive the call.
                        self.munlock_pagevec(&mut batch, node, step, st);
                        return Err(e);
                    }
                };
                st.refcount_ops += 1;
                if f.node != node {
                    carry = Some(pfn);
                    break;
                }
                batch.push(pfn);
            }
            self.munlock_pagevec(&mut batch, node, step, st);
        }
    }

    /// The page-table lookup's pin (`follow_page_mask(FOLL_GET)`, a
    /// `folio_try_get`): the engine's page tables hold no reference, so a
    /// frame they map may be free — an error, never a reference taken on
    /// a free frame. A frame whose page lock the calling thread holds is
    /// refused too, its pin dropped ([`LruError::LockedByCaller`]):
    /// munlocking it would wait for itself in `lock_page`.
    fn pin(&self, pfn: Pfn) -> Result<&Frame, LruError> {
        let f = self.frame(pfn)?;
        if !Engine::try_get(f) {
            return Err(LruError::Free(pfn));
        }
        if f.locked_by_caller() {
            f.put_ref();
            return Err(LruError::LockedByCaller(pfn));
        }
        Ok(f)
    }

    /// `__munlock_pagevec`: each frame holds the lookup's pin.
    fn munlock_pagevec(
        &self,
        batch: &mut PageVec<Pfn, BATCH_LEN>,
        node: u32,
        step: MunlockStep,
        st: &mut MunlockStats,
    ) {
        let frames = &self.shared.frames;
        st.batches += 1;
        // Phase 1: isolate under one lock.
        let mut isolated: PageVec<Pfn, BATCH_LEN> = PageVec::new();
        let mut delta = 0;
        let mut g = self.shared.lock(node);
        for pfn in batch.drain() {
            let f = frames.get(pfn);
            if f.test_and_clear(Flags::MLOCKED) {
                st.munlocked += 1;
                if step.0 >= 4 {
                    delta -= 1;
                } else {
                    self.shared.vmstat.add(Stat::NrMlock, -1);
                }
                if f.test_and_clear(Flags::LRU) {
                    if step.0 < 6 {
                        f.get_ref();
                        st.refcount_ops += 1;
                    }
                    isolate_munlocked(&mut g, f, pfn);
                    isolated.push(pfn);
                    continue;
                }
                isolation_failed(&mut g, f);
            }
            // Not munlocked here: drop the lookup's pin.
            f.put_ref();
            st.refcount_ops += 1;
        }
        if delta != 0 {
            self.shared.vmstat.add(Stat::NrMlock, delta);
        }
        drop(g);
        // Phase 2: per page, under the page lock.
        let mut fast: PageVec<Pfn, BATCH_LEN> = PageVec::new();
        for pfn in isolated.drain() {
            let f = frames.get(pfn);
            lock_page(f);
            if step.0 >= 5 && !f.test(Flags::MLOCKED) {
                // __putback_lru_fast_prepare
                fast.push(pfn);
                f.clear(Flags::LOCKED);
                continue;
            }
            if step.0 >= 6 {
                // Slow path keeps the pin until unlock: get one for putback.
                f.get_ref();
                st.refcount_ops += 1;
            }
            self.putback_slow(f, pfn, st);
            f.clear(Flags::LOCKED);
            f.put_ref(); // the lookup's pin
            st.refcount_ops += 1;
        }
        // Phase 3: __putback_lru_fast, one lock for the batch.
        if !fast.is_empty() {
            let mut g = self.shared.lock(node);
            for &pfn in fast.iter() {
                self.shared.move_one(&mut g, pfn, MoveKind::Add);
            }
            drop(g);
            for pfn in fast.drain() {
                let f = frames.get(pfn);
                f.put_ref(); // release_pages
                st.refcount_ops += 1;
                if step.0 < 6 {
                    f.put_ref(); // the lookup's pin, redundant with the above
                    st.refcount_ops += 1;
                }
            }
        }
    }
}

/// `lock_page`: waits while another thread holds the page lock (frames
/// whose lock the caller holds were refused when pinned: `pin`).
fn lock_page(f: &Frame) {
    while f.test_and_set(Flags::LOCKED) {
        debug_assert!(
            !f.locked_by_caller(),
            "lock_page waiting for its own thread"
        );
        std::thread::yield_now();
    }
}

/// The isolation half of a munlock, under the lru_lock: off its list, and
/// no mlocks left (the frame is mapped once).
fn isolate_munlocked(g: &mut LruvecGuard<'_>, f: &Frame, pfn: Pfn) {
    g.del(pfn);
    f.mlock_count.store(0, Ordering::Relaxed);
    g.count(Event::Munlocked, 1);
}

/// `__munlock_isolation_failed`: another thread holds the frame off the
/// LRU; whoever puts it back re-evaluates it.
fn isolation_failed(g: &mut LruvecGuard<'_>, f: &Frame) {
    if f.test(Flags::UNEVICTABLE) {
        g.count(Event::Stranded, 1);
    } else {
        g.count(Event::Munlocked, 1);
    }
}
