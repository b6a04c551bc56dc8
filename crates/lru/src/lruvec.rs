//! Lruvecs: one per node, three intrusive lists under one `lru_lock`, with
//! list sizes and event counters kept under that lock.

use crossbeam_utils::CachePadded;

use crate::{
    frame::{Flags, FrameTable, LruList, NIL, Pfn},
    sync::{Mutex, MutexGuard, Ordering, lock},
};

/// Events counted under the lru_lock (`enum vm_event_item`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// `PGACTIVATE`: moved to the active list.
    Activate,
    /// `PGDEACTIVATE`: moved to the inactive list.
    Deactivate,
    /// `PGROTATED`: moved to the inactive tail for reclaim.
    Rotated,
    /// `UNEVICTABLE_PGCULLED`: moved to the unevictable list.
    Culled,
    /// `UNEVICTABLE_PGRESCUED`: moved off the unevictable list.
    Rescued,
    /// `UNEVICTABLE_PGMUNLOCKED`: last mlock dropped.
    Munlocked,
    /// `UNEVICTABLE_PGSTRANDED`: mlock dropped while off the LRU.
    Stranded,
    /// `PGSCAN`: isolated from the inactive list by reclaim.
    Scan,
    /// `PGSTEAL`: evicted by reclaim.
    Steal,
    /// `PGREFILL`: isolated from the active list by reclaim.
    Refill,
    /// Moved to the head of its list by [`Engine::promote`]
    /// (exact-LRU promotion; no kernel counterpart).
    ///
    /// [`Engine::promote`]: crate::Engine::promote
    Promoted,
}

impl Event {
    /// Number of events.
    pub const COUNT: usize = 11;
    /// Every event, in index order.
    pub const ALL: [Event; Self::COUNT] = [
        Event::Activate,
        Event::Deactivate,
        Event::Rotated,
        Event::Culled,
        Event::Rescued,
        Event::Munlocked,
        Event::Stranded,
        Event::Scan,
        Event::Steal,
        Event::Refill,
        Event::Promoted,
    ];

    /// The kernel's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Event::Activate => "pgactivate",
            Event::Deactivate => "pgdeactivate",
            Event::Rotated => "pgrotated",
            Event::Culled => "unevictable_pgs_culled",
            Event::Rescued => "unevictable_pgs_rescued",
            Event::Munlocked => "unevictable_pgs_munlocked",
            Event::Stranded => "unevictable_pgs_stranded",
            Event::Scan => "pgscan",
            Event::Steal => "pgsteal",
            Event::Refill => "pgrefill",
            Event::Promoted => "promoted",
        }
    }
}

/// What an lruvec's lock guards.
#[derive(Debug)]
pub(crate) struct LruvecState {
    first: [u32; 3],
    last: [u32; 3],
    sizes: [u64; 3],
    pub(crate) events: [u64; Event::COUNT],
    pub(crate) lock_acquisitions: u64,
}

/// One node's LRU (`struct lruvec`), its lock on its own cache line.
#[derive(Debug)]
pub(crate) struct Lruvec {
    state: CachePadded<Mutex<LruvecState>>,
}

impl Lruvec {
    pub(crate) fn new() -> Self {
        Self {
            state: CachePadded::new(Mutex::new(LruvecState {
                first: [NIL; 3],
                last: [NIL; 3],
                sizes: [0; 3],
                events: [0; Event::COUNT],
                lock_acquisitions: 0,
            })),
        }
    }

    /// Takes the lru_lock (`lruvec_lock_irq`), counting the acquisition.
    pub(crate) fn lock<'a>(&'a self, frames: &'a FrameTable) -> LruvecGuard<'a> {
        let mut state = lock(&self.state);
        state.lock_acquisitions += 1;
        LruvecGuard { state, frames }
    }
}

/// The held lru_lock of one lruvec, and the list operations it allows.
#[derive(Debug)]
pub(crate) struct LruvecGuard<'a> {
    pub(crate) state: MutexGuard<'a, LruvecState>,
    frames: &'a FrameTable,
}

impl LruvecGuard<'_> {
    /// `lruvec_add_folio`: at the head of the list its flags name.
    pub(crate) fn add(&mut self, pfn: Pfn) {
        let list = self.frames.get(pfn).flags().lru_list() as usize;
        let f = self.frames.get(pfn);
        let first = self.state.first[list];
        f.prev.store(NIL, Ordering::Relaxed);
        f.next.store(first, Ordering::Relaxed);
        if first == NIL {
            self.state.last[list] = pfn.0;
        } else {
            self.frames
                .get(Pfn(first))
                .prev
                .store(pfn.0, Ordering::Relaxed);
        }
        self.state.first[list] = pfn.0;
        self.state.sizes[list] += 1;
    }

    /// `lruvec_add_folio_tail`: at the tail, where reclaim looks first.
    pub(crate) fn add_tail(&mut self, pfn: Pfn) {
        let list = self.frames.get(pfn).flags().lru_list() as usize;
        let f = self.frames.get(pfn);
        let last = self.state.last[list];
        f.next.store(NIL, Ordering::Relaxed);
        f.prev.store(last, Ordering::Relaxed);
        if last == NIL {
            self.state.first[list] = pfn.0;
        } else {
            self.frames
                .get(Pfn(last))
                .next
                .store(pfn.0, Ordering::Relaxed);
        }
        self.state.last[list] = pfn.0;
        self.state.sizes[list] += 1;
    }

    /// `lruvec_del_folio`: from the list its flags name.
    pub(crate) fn del(&mut self, pfn: Pfn) {
        let list = self.frames.get(pfn).flags().lru_list() as usize;
        let f = self.frames.get(pfn);
        let (prev, next) = (
            f.prev.load(Ordering::Relaxed),
            f.next.load(Ordering::Relaxed),
        );
        if prev == NIL {
            debug_assert_eq!(self.state.first[list], pfn.0, "{pfn} is not on {list}");
            self.state.first[list] = next;
        } else {
            self.frames
                .get(Pfn(prev))
                .next
                .store(next, Ordering::Relaxed);
        }
        if next == NIL {
            self.state.last[list] = prev;
        } else {
            self.frames
                .get(Pfn(next))
                .prev
                .store(prev, Ordering::Relaxed);
        }
        f.prev.store(NIL, Ordering::Relaxed);
        f.next.store(NIL, Ordering::Relaxed);
        self.state.sizes[list] -= 1;
    }

    /// The frame at the tail of `list`, if any.
    pub(crate) fn tail(&self, list: LruList) -> Option<Pfn> {
        let last = self.state.last[list as usize];
        (last != NIL).then_some(Pfn(last))
    }

    /// Counts `n` of `event` (`__count_vm_events`, under the lock).
    pub(crate) fn count(&mut self, event: Event, n: u64) {
        self.state.events[event as usize] += n;
    }

    pub(crate) fn size(&self, list: LruList) -> u64 {
        self.state.sizes[list as usize]
    }

    /// The frames of `list`, head to tail.
    pub(crate) fn walk(&self, list: LruList) -> Vec<Pfn> {
        let mut out = Vec::new();
        let mut at = self.state.first[list as usize];
        while at != NIL {
            out.push(Pfn(at));
            at = self.frames.get(Pfn(at)).next.load(Ordering::Relaxed);
            assert!(out.len() as u64 <= self.size(list), "cycle in {list:?}");
        }
        out
    }

    /// The frame's flags, read under the lock.
    pub(crate) fn flags(&self, pfn: Pfn) -> Flags {
        self.frames.get(pfn).flags()
    }
}
