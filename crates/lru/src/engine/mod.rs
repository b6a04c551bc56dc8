//! The engine: frames, one lruvec per node, and the kernel's LRU operations,
//! each batched through a [`Batcher`] or applied immediately.

mod mlock;
mod munlock_series;
mod swap;
#[cfg(all(test, mmbatch_loom))]
mod tests;
#[cfg(all(test, not(mmbatch_loom)))]
mod unit_tests;
mod vmscan;

use mlock::MlockMove;
pub use munlock_series::{MunlockStats, MunlockStep};
use swap::{LruMove, MoveKind};

use std::{
    fmt,
    panic::{self, AssertUnwindSafe},
};

use mmbatch_pagevec::{Apply, BatchStats, Batcher, PAGEVEC_SIZE, PageVec, apply_batch};

use crate::{
    LruError,
    frame::{FROZEN, Flags, Frame, FrameState, FrameTable, LruList, Pfn},
    lruvec::{Event, Lruvec, LruvecGuard},
    sync::{Arc, Ordering},
    vmstat::{Stat, VmStat},
};

/// Capacity of every per-thread batch: the kernel's 31 (`PAGEVEC_SIZE`).
pub const BATCH: usize = PAGEVEC_SIZE;

/// What the engine's batches hold: [`BATCH`], shrunk under loom so that
/// models reach full batches in few steps.
pub(crate) const BATCH_LEN: usize = if cfg!(mmbatch_loom) { 2 } else { BATCH };

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

/// What to build: [`Config::new`], then the setters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
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

    /// With `nodes` NUMA nodes.
    #[must_use]
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes;
        self
    }

    /// With frames placed on nodes by `layout`.
    #[must_use]
    pub fn layout(mut self, layout: NodeLayout) -> Self {
        self.layout = layout;
        self
    }

    /// With `modes` (batched or immediate, per operation).
    #[must_use]
    pub fn modes(mut self, modes: Modes) -> Self {
        self.modes = modes;
        self
    }
}

/// The most nodes an engine has: the kernel's `MAX_NUMNODES` with
/// x86-64's largest `NODES_SHIFT` (10).
pub const MAX_NUMNODES: usize = 1 << 10;

/// What one [`Engine::shrink`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
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

impl Shared {
    fn lock(&self, node: u32) -> LruvecGuard<'_> {
        self.lruvecs[node as usize].lock(&self.frames)
    }
}

/// An LRU engine: a frame table, one lruvec per node, and per-thread
/// batches for each batched operation.
///
/// Operations follow the kernel's protocols: test-and-clear of a frame's
/// LRU bit is the ownership token of every list move, so a frame is
/// isolated at most once and a queued move of a frame isolated meanwhile is
/// skipped, its queued reference dropped. See the crate docs for an
/// example.
///
/// # Errors
/// Each operation that returns a `Result` refuses a frame not in the
/// state it needs with the [`LruError`] that names it (`InUse` for an
/// `lru_add` of a frame in use, `Free` for a frame never added or evicted,
/// `NotIsolated` for a putback the engine did not isolate, `NotMlocked`
/// for a munlock of a frame not mlocked, and so on).
pub struct Engine {
    shared: Arc<Shared>,
    modes: Modes,
    lru_add: Batcher<LruMove, BATCH_LEN>,
    activate: Batcher<LruMove, BATCH_LEN>,
    deactivate: Batcher<LruMove, BATCH_LEN>,
    rotate: Batcher<LruMove, BATCH_LEN>,
    promote: Batcher<LruMove, BATCH_LEN>,
    mlock: Batcher<MlockMove, BATCH_LEN>,
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
    ///
    /// # Errors
    /// [`LruError::ZeroFrames`], [`LruError::ZeroNodes`],
    /// [`LruError::TooManyFrames`] and [`LruError::TooManyNodes`] for a
    /// `Config` out of range; [`LruError::FrameTableTooLarge`] where the
    /// allocator refuses the frame table.
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
        let table =
            FrameTable::try_new(frames, node_of).ok_or(LruError::FrameTableTooLarge { frames })?;
        let shared = Arc::new(Shared {
            frames: table,
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

    /// A frame that is allocated (not free, nor being freed).
    fn live(&self, pfn: Pfn) -> Result<&Frame, LruError> {
        let f = self.frame(pfn)?;
        if matches!(f.refcount.load(Ordering::Acquire), 0 | FROZEN) {
            return Err(LruError::Free(pfn));
        }
        Ok(f)
    }

    /// `folio_try_get`: a reference for a queued op, unless the frame is
    /// being freed.
    fn try_get(f: &Frame) -> bool {
        f.refcount
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n > 0 && n != FROZEN).then_some(n + 1)
            })
            .is_ok()
    }

    /// Tries the page lock (`folio_trylock`); reclaim skips locked frames.
    /// The lock is the caller's until [`unlock_frame`](Self::unlock_frame)
    /// (from any thread); [`munlock_range`](Self::munlock_range) waits for
    /// it, but refuses a frame whose lock its own thread holds.
    #[doc(alias = "folio_trylock")]
    pub fn trylock_frame(&self, pfn: Pfn) -> Result<bool, LruError> {
        let f = self.live(pfn)?;
        if f.test_and_set(Flags::LOCKED) {
            return Ok(false);
        }
        f.locker
            .store(crate::frame::this_thread(), Ordering::Relaxed);
        Ok(true)
    }

    /// Whether the page lock is held (`folio_test_locked`).
    #[doc(alias = "folio_test_locked")]
    pub fn is_locked(&self, pfn: Pfn) -> Result<bool, LruError> {
        Ok(self.live(pfn)?.test(Flags::LOCKED))
    }

    /// Releases the page lock (`folio_unlock`).
    #[doc(alias = "folio_unlock")]
    pub fn unlock_frame(&self, pfn: Pfn) -> Result<(), LruError> {
        let f = self.live(pfn)?;
        // Before the lock is free: whoever takes it next finds no holder
        // recorded but its own.
        f.locker.store(0, Ordering::Relaxed);
        f.clear(Flags::LOCKED);
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
        for b in self.batchers() {
            s.batches += b.stats();
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

/// What the engine does with each of its batchers, whatever it applies:
/// the six are handled in one loop.
trait AnyBatcher {
    fn drain_local(&self);
    fn drain_all(&self);
    fn disable(&self);
    fn enable(&self);
    fn is_disabled(&self) -> bool;
    fn stats(&self) -> BatchStats;
}

impl<A: Apply, const N: usize> AnyBatcher for Batcher<A, N> {
    fn drain_local(&self) {
        Batcher::drain_local(self);
    }
    fn drain_all(&self) {
        Batcher::drain_all(self);
    }
    fn disable(&self) {
        Batcher::disable(self);
    }
    fn enable(&self) {
        Batcher::enable(self);
    }
    fn is_disabled(&self) -> bool {
        Batcher::is_disabled(self)
    }
    fn stats(&self) -> BatchStats {
        Batcher::stats(self)
    }
}

impl Engine {
    /// Every batcher, in the kernel's drain order (`lru_add_drain_cpu`:
    /// add, rotate, deactivate, activate; then promotion and mlock).
    fn batchers(&self) -> [&dyn AnyBatcher; 6] {
        [
            &self.lru_add,
            &self.rotate,
            &self.deactivate,
            &self.activate,
            &self.promote,
            &self.mlock,
        ]
    }
}
