//! The model's state and the kernel's rules it applies: each simulated
//! CPU's pending queues, the three lists, and the flags, references and
//! mlock counts of every frame.

use std::collections::VecDeque;

use mmbatch_lru::{Event, Flags, LruError, Mode, Modes, Pfn};

use super::{FRAMES, Outcome, Step, THREADS};

/// The engine's batch capacity: `mmbatch_lru::BATCH`, or 2 in a build with
/// `--cfg mmbatch_loom`, where the engine shrinks its batches (this crate is built
/// with the same flags).
const ENGINE_BATCH: usize = if cfg!(mmbatch_loom) {
    2
} else {
    mmbatch_lru::BATCH
};

const LRU: u32 = Flags::LRU.bits();
const ACTIVE: u32 = Flags::ACTIVE.bits();
const REF: u32 = Flags::REFERENCED.bits();
const UNEV: u32 = Flags::UNEVICTABLE.bits();
const MLOCKED: u32 = Flags::MLOCKED.bits();
const ISOLATED: u32 = Flags::ISOLATED.bits();

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Add = 0,
    Rotate = 1,
    Deactivate = 2,
    Activate = 3,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum MlockOp {
    Mlock,
    Munlock,
}

pub(super) struct Model {
    pub(super) modes: Modes,
    pub(super) flags: Vec<u32>,
    pub(super) refs: Vec<u32>,
    pub(super) mlock_count: Vec<u32>,
    pub(super) lists: [VecDeque<u32>; 3],
    /// Per thread: lru_add, rotate, deactivate, activate queues.
    pub(super) pending: Vec<[Vec<u32>; 4]>,
    mlock_pending: Vec<Vec<(u32, MlockOp)>>,
    pub(super) events: [u64; Event::COUNT],
    pub(super) locks: u64,
    pub(super) nr_mlock: i64,
}

fn list_of(flags: u32) -> usize {
    if flags & UNEV != 0 {
        2
    } else if flags & ACTIVE != 0 {
        1
    } else {
        0
    }
}

impl Model {
    pub(super) fn new(modes: Modes) -> Self {
        let n = FRAMES as usize;
        Model {
            modes,
            flags: vec![0; n],
            refs: vec![0; n],
            mlock_count: vec![0; n],
            lists: Default::default(),
            pending: vec![Default::default(); THREADS],
            mlock_pending: vec![Vec::new(); THREADS],
            events: [0; Event::COUNT],
            locks: 0,
            nr_mlock: 0,
        }
    }

    fn has(&self, p: u32, bit: u32) -> bool {
        self.flags[p as usize] & bit != 0
    }
    fn set(&mut self, p: u32, bit: u32) {
        self.flags[p as usize] |= bit;
    }
    fn clear(&mut self, p: u32, bit: u32) {
        self.flags[p as usize] &= !bit;
    }
    fn test_clear(&mut self, p: u32, bit: u32) -> bool {
        let was = self.has(p, bit);
        self.clear(p, bit);
        was
    }
    fn count(&mut self, e: Event) {
        self.events[e as usize] += 1;
    }
    fn del(&mut self, p: u32) {
        let l = &mut self.lists[list_of(self.flags[p as usize])];
        let i = l
            .iter()
            .position(|&x| x == p)
            .expect("model: del of a frame not on its list");
        l.remove(i);
    }
    fn add(&mut self, p: u32) {
        self.lists[list_of(self.flags[p as usize])].push_front(p);
    }
    fn add_tail(&mut self, p: u32) {
        self.lists[list_of(self.flags[p as usize])].push_back(p);
    }

    fn live(&self, p: u32) -> Result<(), LruError> {
        if self.refs[p as usize] == 0 {
            Err(LruError::Free(Pfn(p)))
        } else {
            Ok(())
        }
    }

    /// One frame of `folio_batch_move_lru` (no reference handling).
    fn apply(&mut self, kind: Kind, p: u32) {
        if kind != Kind::Add && !self.test_clear(p, LRU) {
            return;
        }
        match kind {
            Kind::Add => {
                let was_unev = self.test_clear(p, UNEV);
                if !self.has(p, MLOCKED) {
                    if was_unev {
                        self.count(Event::Rescued);
                    }
                } else {
                    self.clear(p, ACTIVE);
                    self.set(p, UNEV);
                    self.mlock_count[p as usize] = 0;
                    if !was_unev {
                        self.count(Event::Culled);
                    }
                }
                self.add(p);
            }
            Kind::Activate => {
                if !self.has(p, ACTIVE) && !self.has(p, UNEV) {
                    self.del(p);
                    self.set(p, ACTIVE);
                    self.add(p);
                    self.count(Event::Activate);
                }
            }
            Kind::Deactivate => {
                if !self.has(p, UNEV) && self.has(p, ACTIVE) {
                    self.del(p);
                    self.clear(p, ACTIVE | REF);
                    self.add(p);
                    self.count(Event::Deactivate);
                }
            }
            Kind::Rotate => {
                if !self.has(p, UNEV) {
                    self.del(p);
                    self.clear(p, ACTIVE);
                    self.add_tail(p);
                    self.count(Event::Rotated);
                }
            }
        }
        self.set(p, LRU);
    }

    fn apply_mlock(&mut self, p: u32, op: MlockOp) {
        match op {
            MlockOp::Mlock => {
                if !self.test_clear(p, LRU) {
                    return;
                }
                if !self.has(p, MLOCKED) {
                    if self.has(p, UNEV) {
                        self.del(p);
                        self.clear(p, UNEV);
                        self.add(p);
                        self.count(Event::Rescued);
                    }
                } else if self.has(p, UNEV) {
                    self.mlock_count[p as usize] += 1;
                } else {
                    self.del(p);
                    self.clear(p, ACTIVE);
                    self.set(p, UNEV);
                    self.mlock_count[p as usize] = 1;
                    self.add(p);
                    self.count(Event::Culled);
                }
                self.set(p, LRU);
            }
            MlockOp::Munlock => {
                let isolated = self.test_clear(p, LRU);
                if isolated && self.has(p, UNEV) {
                    let c = &mut self.mlock_count[p as usize];
                    *c = c.saturating_sub(1);
                    if *c > 0 {
                        self.set(p, LRU);
                        return;
                    }
                }
                if self.test_clear(p, MLOCKED) {
                    self.nr_mlock -= 1;
                    if isolated || !self.has(p, UNEV) {
                        self.count(Event::Munlocked);
                    } else {
                        self.count(Event::Stranded);
                    }
                }
                if isolated && self.has(p, UNEV) && !self.has(p, MLOCKED) {
                    self.del(p);
                    self.clear(p, UNEV);
                    self.add(p);
                    self.count(Event::Rescued);
                }
                if isolated {
                    self.set(p, LRU);
                }
            }
        }
    }

    fn flush(&mut self, t: usize, kind: Kind) {
        let q = std::mem::take(&mut self.pending[t][kind as usize]);
        if q.is_empty() {
            return;
        }
        self.locks += 1;
        for p in q {
            self.apply(kind, p);
            self.refs[p as usize] -= 1;
        }
    }

    fn flush_mlock(&mut self, t: usize) {
        let q = std::mem::take(&mut self.mlock_pending[t]);
        if q.is_empty() {
            return;
        }
        self.locks += 1;
        for (p, op) in q {
            self.apply_mlock(p, op);
            self.refs[p as usize] -= 1;
        }
    }

    fn mode(&self, kind: Kind) -> Mode {
        match kind {
            Kind::Add => self.modes.lru_add,
            Kind::Activate => self.modes.activate,
            Kind::Deactivate => self.modes.deactivate,
            Kind::Rotate => self.modes.rotate,
        }
    }

    /// Queue (with a reference) or apply now (under one lock).
    fn do_move(&mut self, t: usize, kind: Kind, p: u32) {
        match self.mode(kind) {
            Mode::Immediate => {
                self.locks += 1;
                self.apply(kind, p);
            }
            Mode::Batched => {
                if kind != Kind::Add && self.refs[p as usize] == 0 {
                    return;
                }
                self.refs[p as usize] += 1;
                self.pending[t][kind as usize].push(p);
                if self.pending[t][kind as usize].len() == ENGINE_BATCH {
                    self.flush(t, kind);
                }
            }
        }
    }

    fn do_mlock(&mut self, t: usize, p: u32, op: MlockOp) {
        match self.modes.mlock {
            Mode::Immediate => {
                self.locks += 1;
                self.apply_mlock(p, op);
            }
            Mode::Batched => {
                self.refs[p as usize] += 1;
                self.mlock_pending[t].push((p, op));
                if self.mlock_pending[t].len() == ENGINE_BATCH {
                    self.flush_mlock(t);
                }
            }
        }
    }

    fn isolate_tail(&mut self, list: usize, n: usize) -> Vec<u32> {
        let mut out = Vec::new();
        for _ in 0..n {
            let Some(&p) = self.lists[list].back() else {
                break;
            };
            // Sequential: a frame on a list always has its LRU bit.
            self.clear(p, LRU);
            self.refs[p as usize] += 1;
            self.del(p);
            out.push(p);
        }
        out
    }

    fn putback_locked(&mut self, frames: &[u32]) {
        for &p in frames {
            self.apply(Kind::Add, p);
            self.refs[p as usize] -= 1;
        }
    }

    pub(super) fn step(&mut self, s: Step) -> Outcome {
        let t = s.thread();
        match s {
            Step::Add(_, p) => Outcome::Unit((|| {
                if self.refs[p as usize] != 0 {
                    return Err(LruError::InUse {
                        pfn: Pfn(p),
                        refcount: self.refs[p as usize],
                    });
                }
                self.refs[p as usize] = 1;
                self.flags[p as usize] = 0;
                self.do_move(t, Kind::Add, p);
                Ok(())
            })()),
            Step::Mark(_, p) => Outcome::Unit(self.live(p).map(|()| {
                if !self.has(p, REF) {
                    self.set(p, REF);
                } else if self.has(p, UNEV) {
                } else if !self.has(p, ACTIVE) {
                    if self.has(p, LRU) {
                        self.activate_frame(t, p);
                    } else if self.pending[t][Kind::Add as usize].contains(&p) {
                        self.set(p, ACTIVE);
                    }
                    self.clear(p, REF);
                }
            })),
            Step::Activate(_, p) => Outcome::Unit(self.live(p).map(|()| self.activate_frame(t, p))),
            Step::Deactivate(_, p) => Outcome::Unit(self.live(p).map(|()| {
                if self.has(p, LRU) && self.has(p, ACTIVE) && !self.has(p, UNEV) {
                    self.do_move(t, Kind::Deactivate, p);
                }
            })),
            Step::Rotate(_, p) => Outcome::Unit(self.live(p).map(|()| {
                if self.has(p, LRU) && !self.has(p, UNEV) {
                    self.do_move(t, Kind::Rotate, p);
                }
            })),
            Step::Isolate(_, p) => Outcome::Bool(self.live(p).map(|()| {
                if !self.test_clear(p, LRU) {
                    return false;
                }
                self.refs[p as usize] += 1;
                self.locks += 1;
                self.del(p);
                self.set(p, ISOLATED);
                true
            })),
            Step::Putback(_, p) => Outcome::Unit((|| {
                if !self.test_clear(p, ISOLATED) {
                    return Err(LruError::NotIsolated(Pfn(p)));
                }
                self.do_move(t, Kind::Add, p);
                self.refs[p as usize] -= 1;
                Ok(())
            })()),
            Step::Mlock(_, p) => Outcome::Unit(self.live(p).map(|()| {
                if !self.has(p, MLOCKED) {
                    self.set(p, MLOCKED);
                    self.nr_mlock += 1;
                }
                self.do_mlock(t, p, MlockOp::Mlock);
            })),
            Step::Munlock(_, p) => Outcome::Unit((|| {
                self.live(p)?;
                if !self.has(p, MLOCKED) {
                    return Err(LruError::NotMlocked(Pfn(p)));
                }
                self.do_mlock(t, p, MlockOp::Munlock);
                Ok(())
            })()),
            Step::Drain(_) => {
                self.drain(t);
                Outcome::Unit(Ok(()))
            }
            // Reclaim applies its thread's batches first (`lru_add_drain`
            // in `shrink_inactive_list`).
            Step::Shrink(_, n, evict) => {
                self.drain(t);
                self.shrink(usize::from(n), evict)
            }
        }
    }

    /// Applies thread `t`'s batches (`lru_add_drain`).
    fn drain(&mut self, t: usize) {
        for kind in [Kind::Add, Kind::Rotate, Kind::Deactivate, Kind::Activate] {
            self.flush(t, kind);
        }
        self.flush_mlock(t);
    }

    fn activate_frame(&mut self, t: usize, p: u32) {
        if self.has(p, LRU) && !self.has(p, ACTIVE) && !self.has(p, UNEV) {
            self.do_move(t, Kind::Activate, p);
        }
    }

    fn shrink(&mut self, n: usize, evict_mask: u8) -> Outcome {
        self.locks += 1;
        if self.lists[0].len() < self.lists[1].len() {
            let taken = self.isolate_tail(1, n);
            self.events[Event::Refill as usize] += taken.len() as u64;
            for &p in &taken {
                self.clear(p, ACTIVE);
            }
            self.locks += 1;
            self.events[Event::Deactivate as usize] += taken.len() as u64;
            self.putback_locked(&taken);
        }
        let isolated = self.isolate_tail(0, n);
        self.events[Event::Scan as usize] += isolated.len() as u64;
        let (mut evicted, mut activated) = (0, 0);
        let mut keep = Vec::new();
        for p in isolated.iter().copied() {
            if self.test_clear(p, REF) {
                self.set(p, ACTIVE);
                activated += 1;
            } else if !self.has(p, MLOCKED)
                && self.refs[p as usize] == 2
                && evict_mask & (1 << p) != 0
            {
                self.flags[p as usize] = 0;
                self.refs[p as usize] = 0;
                evicted += 1;
                continue;
            }
            keep.push(p);
        }
        self.locks += 1;
        self.events[Event::Steal as usize] += evicted;
        self.events[Event::Activate as usize] += activated;
        self.putback_locked(&keep);
        Outcome::Shrink(isolated.len() as u64, evicted, activated)
    }

    pub(super) fn pending(&self) -> u64 {
        let lru: usize = self.pending.iter().flatten().map(Vec::len).sum();
        (lru + self.mlock_pending.iter().map(Vec::len).sum::<usize>()) as u64
    }
}
