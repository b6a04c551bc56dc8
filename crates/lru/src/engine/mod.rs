//! The engine: frames, one lruvec per node, and the kernel's LRU operations,
//! each batched through a [`Batcher`] or applied immediately.

mod munlock;
#[cfg(all(test, loom))]
mod tests;

pub use munlock::{MunlockStats, MunlockStep};

use std::{
    fmt,
    panic::{self, AssertUnwindSafe},
};

use mmbatch_pagevec::{Apply, BatchStats, Batcher, PAGEVEC_SIZE, PageVec, apply_batch};

use crate::{
    LruError,
    frame::{Flags, Frame, FrameState, FrameTable, LruList, Pfn},
    lruvec::{Event, Lruvec, LruvecGuard},
    sync::{Arc, Ordering},
    vmstat::{Stat, VmStat},
};

/// Capacity of every per-thread batch: the kernel's 31, shrunk under loom
/// so that models reach full batches in few steps.
pub const BATCH: usize = if cfg!(loom) { 2 } else { PAGEVEC_SIZE };

/// `SWAP_CLUSTER_MAX`: frames reclaim isolates per lock hold.
pub const SWAP_CLUSTER_MAX: usize = 32;

/// How an operation reaches the lru_lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Take the lock for this frame now.
    Immediate,
    /// Queue on the calling thread's batch; a full batch takes the lock
    /// once per node.
    #[default]
    Batched,
}

/// The mode of each batched operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Modes {
    /// `folio_add_lru` (`cpu_fbatches.lru_add`).
    pub lru_add: Mode,
    /// `folio_activate` (`cpu_fbatches.activate`).
    pub activate: Mode,
    /// `folio_deactivate` (`cpu_fbatches.lru_deactivate`).
    pub deactivate: Mode,
    /// `folio_rotate_reclaimable` (`cpu_fbatches.lru_move_tail`).
    pub rotate: Mode,
    /// `mlock_folio` / `munlock_folio` (`mlock_fbatch`).
    pub mlock: Mode,
}

impl Modes {
    /// Everything batched, as the kernel does today.
    pub const BATCHED: Modes = Modes {
        lru_add: Mode::Batched,
        activate: Mode::Batched,
        deactivate: Mode::Batched,
        rotate: Mode::Batched,
        mlock: Mode::Batched,
    };
    /// Everything immediate: one lock acquisition per operation.
    pub const IMMEDIATE: Modes = Modes {
        lru_add: Mode::Immediate,
        activate: Mode::Immediate,
        deactivate: Mode::Immediate,
        rotate: Mode::Immediate,
        mlock: Mode::Immediate,
    };
}

/// How frames are spread over nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NodeLayout {
    /// Node `n` holds one contiguous range of frames.
    #[default]
    Contiguous,
    /// Frame `i` is on node `i % nodes` (`numactl --interleave`).
    Interleave,
}

/// What to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Frames in the table.
    pub frames: usize,
    /// NUMA nodes, one lruvec each.
    pub nodes: usize,
    /// Which frame lives on which node.
    pub layout: NodeLayout,
    /// Batched or immediate, per operation.
    pub modes: Modes,
}

impl Config {
    /// `frames` frames on one node, everything batched.
    pub fn new(frames: usize) -> Self {
        Self {
            frames,
            nodes: 1,
            layout: NodeLayout::Contiguous,
            modes: Modes::BATCHED,
        }
    }
}

/// The most nodes an engine has: the kernel's `MAX_NUMNODES` with
/// x86-64's largest `NODES_SHIFT` (10).
pub const MAX_NUMNODES: usize = 1 << 10;

/// What one [`Engine::shrink`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShrinkStats {
    /// Frames isolated from the inactive tail.
    pub scanned: u64,
    /// Frames the evict callback took.
    pub evicted: u64,
    /// Referenced frames given a second chance on the active list.
    pub activated: u64,
    /// Frames kept on the inactive list (locked, busy, refused, mlocked).
    pub kept: u64,
    /// Frames moved from the active to the inactive list first.
    pub deactivated: u64,
}

/// Counters of the whole engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Events counted under the lru_locks, summed over nodes, indexed by
    /// [`Event`].
    pub events: [u64; Event::COUNT],
    /// lru_lock acquisitions by operations (inspection is not counted).
    pub lock_acquisitions: u64,
    /// `NR_MLOCK`.
    pub nr_mlock: i64,
    /// `UNEVICTABLE_PGMLOCKED`.
    pub mlocked: i64,
    /// Updates of the vmstat counters (`Stat`).
    pub stat_updates: u64,
    /// The per-thread batches, summed over every kind.
    pub batches: BatchStats,
}

impl EngineStats {
    /// The count of `event`.
    pub fn event(&self, event: Event) -> u64 {
        self.events[event as usize]
    }
}

/// The state every batcher's target shares.
#[derive(Debug)]
struct Shared {
    frames: FrameTable,
    lruvecs: Box<[Lruvec]>,
    vmstat: VmStat,
}

/// Which move a batch applies (the `move_fn` of `folio_batch_move_lru`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MoveKind {
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

/// What an mlock batch entry does (`mlock_lru` tags in `mlock_fbatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MlockOp {
    Mlock,
    Munlock,
}

/// The target of the LRU batchers: one move kind over the shared lruvecs.
#[derive(Debug)]
struct LruMove {
    shared: Arc<Shared>,
    kind: MoveKind,
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

/// The target of the mlock batcher (`mlock_folio_batch`).
#[derive(Debug)]
struct MlockMove {
    shared: Arc<Shared>,
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
    fn lock(&self, node: u32) -> LruvecGuard<'_> {
        self.lruvecs[node as usize].lock(&self.frames)
    }

    /// One frame of `folio_batch_move_lru`: a frame whose LRU bit another
    /// thread took since it was queued (isolated) is skipped — it must not
    /// be moved twice — otherwise it is moved and its LRU bit restored.
    fn move_one(&self, g: &mut LruvecGuard<'_>, pfn: Pfn, kind: MoveKind) {
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

    /// `__mlock_folio`.
    fn mlock_one(&self, g: &mut LruvecGuard<'_>, pfn: Pfn) {
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
    fn munlock_one(&self, g: &mut LruvecGuard<'_>, pfn: Pfn) {
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

    /// `isolate_lru_folios`: up to `n` frames from the tail of `list`,
    /// each with its LRU bit taken and a reference held. A frame whose LRU
    /// bit another thread holds (it is about to move it) is rotated to the
    /// head and skipped.
    fn isolate_tail(&self, g: &mut LruvecGuard<'_>, list: LruList, n: usize) -> Vec<Pfn> {
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
    fn putback_locked(&self, g: &mut LruvecGuard<'_>, frames: &[Pfn]) {
        for &pfn in frames {
            self.move_one(g, pfn, MoveKind::Add);
            self.frames.get(pfn).put_ref();
        }
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

/// An LRU engine: a frame table, one lruvec per node, and per-thread
/// batches for each batched operation.
///
/// Operations follow the kernel's protocols: test-and-clear of a frame's
/// LRU bit is the ownership token of every list move, so a frame is
/// isolated at most once and a queued move of a frame isolated meanwhile is
/// skipped, its queued reference dropped. See the crate docs for an
/// example.
pub struct Engine {
    shared: Arc<Shared>,
    modes: Modes,
    lru_add: Batcher<LruMove, BATCH>,
    activate: Batcher<LruMove, BATCH>,
    deactivate: Batcher<LruMove, BATCH>,
    rotate: Batcher<LruMove, BATCH>,
    promote: Batcher<LruMove, BATCH>,
    mlock: Batcher<MlockMove, BATCH>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("frames", &self.shared.frames.len())
            .field("nodes", &self.shared.lruvecs.len())
            .field("modes", &self.modes)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Builds an engine with every frame free.
    pub fn new(config: Config) -> Result<Self, LruError> {
        if config.frames == 0 {
            return Err(LruError::ZeroFrames);
        }
        if config.nodes == 0 {
            return Err(LruError::ZeroNodes);
        }
        if config.frames >= u32::MAX as usize {
            return Err(LruError::TooManyFrames {
                frames: config.frames,
            });
        }
        if config.nodes > MAX_NUMNODES {
            return Err(LruError::TooManyNodes {
                nodes: config.nodes,
            });
        }
        let (frames, nodes) = (config.frames, config.nodes);
        let per_node = frames.div_ceil(nodes);
        let node_of = move |i: usize| -> u32 {
            match config.layout {
                NodeLayout::Contiguous => (i / per_node) as u32,
                NodeLayout::Interleave => (i % nodes) as u32,
            }
        };
        let shared = Arc::new(Shared {
            frames: FrameTable::new(frames, node_of),
            lruvecs: (0..nodes).map(|_| Lruvec::new()).collect(),
            vmstat: VmStat::default(),
        });
        let mover = |kind| {
            Batcher::new(LruMove {
                shared: shared.clone(),
                kind,
            })
        };
        Ok(Self {
            modes: config.modes,
            lru_add: mover(MoveKind::Add),
            activate: mover(MoveKind::Activate),
            deactivate: mover(MoveKind::Deactivate),
            rotate: mover(MoveKind::Rotate),
            promote: mover(MoveKind::Head),
            mlock: Batcher::new(MlockMove {
                shared: shared.clone(),
            }),
            shared,
        })
    }

    /// Number of frames.
    pub fn frames(&self) -> usize {
        self.shared.frames.len()
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.shared.lruvecs.len()
    }

    /// The modes this engine was built with.
    pub fn modes(&self) -> Modes {
        self.modes
    }

    fn frame(&self, pfn: Pfn) -> Result<&Frame, LruError> {
        if self.shared.frames.contains(pfn) {
            Ok(self.shared.frames.get(pfn))
        } else {
            Err(LruError::OutOfRange {
                pfn,
                frames: self.frames(),
            })
        }
    }

    /// A frame that is allocated (not free).
    fn live(&self, pfn: Pfn) -> Result<&Frame, LruError> {
        let f = self.frame(pfn)?;
        if f.refcount.load(Ordering::Acquire) == 0 {
            return Err(LruError::Free(pfn));
        }
        Ok(f)
    }

    /// `folio_try_get`: a reference for a queued op, unless the frame is
    /// being freed.
    fn try_get(f: &Frame) -> bool {
        f.refcount
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n > 0).then_some(n + 1)
            })
            .is_ok()
    }

    /// Adds a free frame to the LRU (`folio_add_lru`): the caller's
    /// allocation reference is taken, and the frame goes to the inactive
    /// list (or the unevictable one, if mlocked) when its batch is applied.
    pub fn lru_add(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.frame(pfn)?;
        f.refcount
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .map_err(|refcount| LruError::InUse { pfn, refcount })?;
        f.flags.store(0, Ordering::Release);
        self.add_held(f, pfn);
        Ok(())
    }

    /// `folio_add_lru` of a frame whose reference the caller holds.
    fn add_held(&self, f: &Frame, pfn: Pfn) {
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
    fn move_lru(
        &self,
        f: &Frame,
        pfn: Pfn,
        kind: MoveKind,
        mode: Mode,
        batcher: &Batcher<LruMove, BATCH>,
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
    fn lru_cache_activate(&self, f: &Frame, pfn: Pfn) {
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
    pub fn activate(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.live(pfn)?;
        self.activate_frame(f, pfn);
        Ok(())
    }

    fn activate_frame(&self, f: &Frame, pfn: Pfn) {
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
    /// but an exact LRU needs it on every hit ([`crate::Policy::Lru`]).
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

    /// Takes a frame off its list (`folio_isolate_lru`): true if this call
    /// took it (its LRU bit was set), false if it is not on the LRU. An
    /// isolated frame must be [put back](Self::putback) or
    /// [freed](Self::free_isolated).
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
    /// per-thread batches. Checks every frame first: on an error nothing
    /// was put back.
    pub fn putback_batch(&self, frames: &[Pfn]) -> Result<(), LruError> {
        for &pfn in frames {
            if !self.frame(pfn)?.test(Flags::ISOLATED) {
                return Err(LruError::NotIsolated(pfn));
            }
        }
        for (i, &pfn) in frames.iter().enumerate() {
            if !self.shared.frames.get(pfn).test_and_clear(Flags::ISOLATED) {
                // Another thread put it back between the check and here:
                // put back what we claimed, then report.
                self.putback_claimed(&frames[..i]);
                return Err(LruError::NotIsolated(pfn));
            }
        }
        self.putback_claimed(frames);
        Ok(())
    }

    fn putback_claimed(&self, frames: &[Pfn]) {
        let target = self.lru_add.target();
        for chunk in frames.chunks(BATCH) {
            let mut batch: PageVec<Pfn, BATCH> = PageVec::new();
            chunk.iter().for_each(|&pfn| {
                batch.push(pfn);
            });
            // LruMove{Add}: move, set LRU, put the (isolation) reference.
            apply_batch(target, &mut batch);
        }
    }

    /// Frees an isolated frame that nobody else holds (`folio_ref_freeze`
    /// to 0): it can be [`lru_add`](Self::lru_add)ed again.
    pub fn free_isolated(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.frame(pfn)?;
        if !f.test(Flags::ISOLATED) {
            return Err(LruError::NotIsolated(pfn));
        }
        f.refcount
            .compare_exchange(2, 0, Ordering::AcqRel, Ordering::Relaxed)
            .map_err(|refcount| LruError::Busy { pfn, refcount })?;
        f.flags.store(0, Ordering::Release);
        Ok(())
    }

    /// Reclaims from `node` (`shrink_lruvec`, one pass): refills the
    /// inactive list from the active tail when it is the smaller
    /// (`shrink_active_list`), then isolates up to `nr_to_scan` frames from
    /// the inactive tail (`shrink_inactive_list`). Referenced frames get a
    /// second chance on the active list; locked, mlocked and shared frames
    /// are kept; the rest are offered to `evict`, outside any lock, and
    /// those it accepts become free. Survivors go back under one lock.
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
                && f.refcount.compare_exchange(2, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            {
                // The callback is the caller's code: if it panics, this
                // frame and every other isolated one go back on the lists
                // before the panic continues, so none is lost.
                match panic::catch_unwind(AssertUnwindSafe(|| evict(pfn))) {
                    Ok(true) => {
                        f.flags.store(0, Ordering::Release);
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
    /// how many. [`shrink`](Self::shrink) does this itself when the
    /// inactive list is the smaller; a caller whose reclaim keeps failing
    /// on the inactive list (every frame there busy or referenced) calls
    /// it to give reclaim new candidates, as the kernel's rising scan
    /// priority does.
    pub fn shrink_active(&self, node: usize, nr_to_scan: usize) -> Result<u64, LruError> {
        let lruvec = self.shared.lruvecs.get(node).ok_or(LruError::NoSuchNode {
            node,
            nodes: self.nodes(),
        })?;
        let g = lruvec.lock(&self.shared.frames);
        Ok(self.shrink_active_list(g, lruvec, nr_to_scan).1)
    }

    /// Isolates up to `nr` frames from the active tail, clears ACTIVE
    /// outside the lock, and puts them back (onto the inactive head) under
    /// a new lock hold, which it returns.
    fn shrink_active_list<'a>(
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

    /// Mlocks a frame (`mlock_folio`): sets MLOCKED (counting `NR_MLOCK`
    /// once), then moves it to the unevictable list or counts one more
    /// mlock there.
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
    pub fn munlock(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.live(pfn)?;
        if !f.test(Flags::MLOCKED) {
            return Err(LruError::NotMlocked(pfn));
        }
        self.mlock_op(f, pfn, MlockOp::Munlock);
        Ok(())
    }

    fn mlock_op(&self, f: &Frame, pfn: Pfn, op: MlockOp) {
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

    /// Applies the calling thread's batches (`lru_add_drain` with
    /// `mlock_drain_local`).
    pub fn lru_add_drain(&self) {
        self.lru_add.drain_local();
        self.rotate.drain_local();
        self.deactivate.drain_local();
        self.activate.drain_local();
        self.promote.drain_local();
        self.mlock.drain_local();
    }

    /// Applies every thread's batches (`lru_add_drain_all`); concurrent
    /// callers fold into one pass per batch kind.
    pub fn lru_add_drain_all(&self) {
        self.lru_add.drain_all();
        self.rotate.drain_all();
        self.deactivate.drain_all();
        self.activate.drain_all();
        self.promote.drain_all();
        self.mlock.drain_all();
    }

    /// Until [`lru_cache_enable`](Self::lru_cache_enable), applies every
    /// operation at once, and applies all that wait now
    /// (`lru_cache_disable`): what page migration needs. Nests.
    pub fn lru_cache_disable(&self) {
        self.lru_add.disable();
        self.rotate.disable();
        self.deactivate.disable();
        self.activate.disable();
        self.promote.disable();
        self.mlock.disable();
    }

    /// Undoes one [`lru_cache_disable`](Self::lru_cache_disable).
    ///
    /// # Panics
    /// If the cache is not disabled.
    pub fn lru_cache_enable(&self) {
        self.lru_add.enable();
        self.rotate.enable();
        self.deactivate.enable();
        self.activate.enable();
        self.promote.enable();
        self.mlock.enable();
    }

    /// Tries the page lock (`folio_trylock`); reclaim skips locked frames.
    pub fn trylock_frame(&self, pfn: Pfn) -> Result<bool, LruError> {
        Ok(!self.live(pfn)?.test_and_set(Flags::LOCKED))
    }

    /// Whether the page lock is held (`folio_test_locked`).
    pub fn is_locked(&self, pfn: Pfn) -> Result<bool, LruError> {
        Ok(self.live(pfn)?.test(Flags::LOCKED))
    }

    /// Releases the page lock (`folio_unlock`).
    pub fn unlock_frame(&self, pfn: Pfn) -> Result<(), LruError> {
        self.live(pfn)?.clear(Flags::LOCKED);
        Ok(())
    }

    /// A frame's flags, references and mlock count right now.
    pub fn frame_state(&self, pfn: Pfn) -> Result<FrameState, LruError> {
        Ok(self.frame(pfn)?.state())
    }

    /// The frames on `list` of `node`, head (most recent) to tail.
    pub fn list(&self, node: usize, list: LruList) -> Result<Vec<Pfn>, LruError> {
        Ok(self.peek(node)?.walk(list))
    }

    /// List sizes of `node`, indexed by [`LruList`].
    pub fn list_sizes(&self, node: usize) -> Result<[u64; 3], LruError> {
        let g = self.peek(node)?;
        Ok(LruList::ALL.map(|l| g.size(l)))
    }

    /// The node's lock, for inspection: not counted as an acquisition.
    fn peek(&self, node: usize) -> Result<LruvecGuard<'_>, LruError> {
        let lv = self.shared.lruvecs.get(node).ok_or(LruError::NoSuchNode {
            node,
            nodes: self.nodes(),
        })?;
        let mut g = lv.lock(&self.shared.frames);
        g.state.lock_acquisitions -= 1;
        Ok(g)
    }

    /// Counters of the whole engine.
    pub fn stats(&self) -> EngineStats {
        let mut s = EngineStats::default();
        for node in 0..self.nodes() {
            let g = self.peek(node).expect("node in range");
            for (total, n) in s.events.iter_mut().zip(g.state.events) {
                *total += n;
            }
            s.lock_acquisitions += g.state.lock_acquisitions;
        }
        s.nr_mlock = self.shared.vmstat.read(Stat::NrMlock);
        s.mlocked = self.shared.vmstat.read(Stat::Mlocked);
        s.stat_updates = self.shared.vmstat.updates();
        for b in [
            self.lru_add.stats(),
            self.activate.stats(),
            self.deactivate.stats(),
            self.rotate.stats(),
            self.promote.stats(),
            self.mlock.stats(),
        ] {
            s.batches = add_stats(s.batches, b);
        }
        s
    }

    /// Checks the structural invariants (call when no operation is in
    /// flight): every frame on a list has LRU set, belongs to that node and
    /// list, and appears once; every frame with LRU set is on a list; list
    /// sizes equal the counted lengths; and, once no batch holds an op,
    /// mlocked frames on a list are on the unevictable one.
    pub fn check_invariants(&self) -> Result<(), String> {
        let drained = self.stats().batches.pending == 0;
        let mut seen = vec![false; self.frames()];
        for node in 0..self.nodes() {
            let g = self.peek(node).map_err(|e| e.to_string())?;
            for list in LruList::ALL {
                let frames = g.walk(list);
                if frames.len() as u64 != g.size(list) {
                    return Err(format!(
                        "node {node} {list:?}: size {} but {} frames linked",
                        g.size(list),
                        frames.len()
                    ));
                }
                for pfn in frames {
                    let flags = g.flags(pfn);
                    let f = self.shared.frames.get(pfn);
                    if std::mem::replace(&mut seen[pfn.0 as usize], true) {
                        return Err(format!("{pfn} is on two lists"));
                    }
                    if !flags.contains(Flags::LRU)
                        || flags.lru_list() != list
                        || f.node as usize != node
                    {
                        return Err(format!(
                            "{pfn} on node {node} {list:?} has {flags:?}, node {}",
                            f.node
                        ));
                    }
                    if drained && flags.contains(Flags::MLOCKED) && list != LruList::Unevictable {
                        return Err(format!("{pfn} is mlocked but on {list:?}"));
                    }
                }
            }
        }
        for (i, on_list) in seen.into_iter().enumerate() {
            let f = self.shared.frames.get(Pfn(i as u32));
            if f.test(Flags::LRU) && !on_list {
                return Err(format!("pfn {i} has LRU set but is on no list"));
            }
        }
        Ok(())
    }
}

fn add_stats(a: BatchStats, b: BatchStats) -> BatchStats {
    BatchStats {
        ops: a.ops + b.ops,
        immediate: a.immediate + b.immediate,
        batches: a.batches + b.batches,
        drains: a.drains + b.drains,
        lock_acquisitions: a.lock_acquisitions + b.lock_acquisitions,
        drain_all_passes: a.drain_all_passes + b.drain_all_passes,
        drain_all_folded: a.drain_all_folded + b.drain_all_folded,
        pending: a.pending + b.pending,
    }
}
