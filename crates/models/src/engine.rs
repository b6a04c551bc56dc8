//! A sequential reference model of the LRU engine, written from the
//! kernel's rules without any of the engine's code: lists are `VecDeque`s
//! (front = head), each simulated CPU has one pending queue per batch kind,
//! and a queue is applied when it fills or its thread drains.
//!
//! [`run`] drives the engine on real worker threads (one per simulated CPU,
//! so each has its own batches), one step at a time, and after every step
//! compares results, lists (order included), flags, references, mlock
//! counts, events, lock acquisitions, `NR_MLOCK` and pending ops with the
//! model, and checks the engine's invariants: a frame is on exactly one
//! list iff its LRU bit is set, list sizes equal the counters, no frame is
//! lost. Shared by the proptest (`tests/engine_model.rs`) and the fuzz
//! target (`fuzz/`).
#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;

use mmbatch_lru::{
    BATCH, Config, Engine, EngineStats, Event, Flags, LruError, LruList, Mode, Modes, Pfn,
};

pub use crate::workers::THREADS;
use crate::workers::workers;

/// Frames in the engine under test.
pub const FRAMES: u32 = 8;

const LRU: u32 = Flags::LRU.bits();
const ACTIVE: u32 = Flags::ACTIVE.bits();
const REF: u32 = Flags::REFERENCED.bits();
const UNEV: u32 = Flags::UNEVICTABLE.bits();
const MLOCKED: u32 = Flags::MLOCKED.bits();
const ISOLATED: u32 = Flags::ISOLATED.bits();

/// One step; the `usize` is the simulated CPU (worker thread).
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// `lru_add` of frame `.1`.
    Add(usize, u32),
    /// `mark_accessed` of frame `.1`.
    Mark(usize, u32),
    /// `activate` of frame `.1`.
    Activate(usize, u32),
    /// `deactivate` of frame `.1`.
    Deactivate(usize, u32),
    /// `rotate` of frame `.1`.
    Rotate(usize, u32),
    /// `isolate` of frame `.1`.
    Isolate(usize, u32),
    /// `putback` of frame `.1`.
    Putback(usize, u32),
    /// `mlock` of frame `.1`.
    Mlock(usize, u32),
    /// `munlock` of frame `.1`.
    Munlock(usize, u32),
    /// `lru_add_drain` on the CPU.
    Drain(usize),
    /// Scan up to `.1` frames; evict those whose bit is set in `.2`.
    Shrink(usize, u8, u8),
}

impl Step {
    fn thread(self) -> usize {
        match self {
            Step::Add(t, _)
            | Step::Mark(t, _)
            | Step::Activate(t, _)
            | Step::Deactivate(t, _)
            | Step::Rotate(t, _)
            | Step::Isolate(t, _)
            | Step::Putback(t, _)
            | Step::Mlock(t, _)
            | Step::Munlock(t, _)
            | Step::Drain(t)
            | Step::Shrink(t, ..) => t,
        }
    }
}

/// What a step returned, comparable across engine and model.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Unit(Result<(), LruError>),
    Bool(Result<bool, LruError>),
    Shrink(u64, u64, u64),
}

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

struct Model {
    modes: Modes,
    flags: Vec<u32>,
    refs: Vec<u32>,
    mlock_count: Vec<u32>,
    lists: [VecDeque<u32>; 3],
    /// Per thread: lru_add, rotate, deactivate, activate queues.
    pending: Vec<[Vec<u32>; 4]>,
    mlock_pending: Vec<Vec<(u32, MlockOp)>>,
    events: [u64; Event::COUNT],
    locks: u64,
    nr_mlock: i64,
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
    fn new(modes: Modes) -> Self {
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
                if self.pending[t][kind as usize].len() == BATCH {
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
                if self.mlock_pending[t].len() == BATCH {
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

    fn step(&mut self, s: Step) -> Outcome {
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
                for kind in [Kind::Add, Kind::Rotate, Kind::Deactivate, Kind::Activate] {
                    self.flush(t, kind);
                }
                self.flush_mlock(t);
                Outcome::Unit(Ok(()))
            }
            Step::Shrink(_, n, evict) => self.shrink(usize::from(n), evict),
        }
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

    fn pending(&self) -> u64 {
        let lru: usize = self.pending.iter().flatten().map(Vec::len).sum();
        (lru + self.mlock_pending.iter().map(Vec::len).sum::<usize>()) as u64
    }
}

fn run_on_engine(e: &Engine, s: Step) -> Outcome {
    let pfn = |p: u32| Pfn(p);
    match s {
        Step::Add(_, p) => Outcome::Unit(e.lru_add(pfn(p))),
        Step::Mark(_, p) => Outcome::Unit(e.mark_accessed(pfn(p))),
        Step::Activate(_, p) => Outcome::Unit(e.activate(pfn(p))),
        Step::Deactivate(_, p) => Outcome::Unit(e.deactivate(pfn(p))),
        Step::Rotate(_, p) => Outcome::Unit(e.rotate(pfn(p))),
        Step::Isolate(_, p) => Outcome::Bool(e.isolate(pfn(p))),
        Step::Putback(_, p) => Outcome::Unit(e.putback(pfn(p))),
        Step::Mlock(_, p) => Outcome::Unit(e.mlock(pfn(p))),
        Step::Munlock(_, p) => Outcome::Unit(e.munlock(pfn(p))),
        Step::Drain(_) => {
            e.lru_add_drain();
            Outcome::Unit(Ok(()))
        }
        Step::Shrink(_, n, mask) => {
            let st = e
                .shrink(0, usize::from(n), |p| mask & (1 << p.0) != 0)
                .expect("node 0 exists");
            Outcome::Shrink(st.scanned, st.evicted, st.activated)
        }
    }
}

/// Runs `steps` on an engine with `modes` and on the model, comparing after
/// every step; at the end drains every thread (in order) and compares
/// again.
pub fn run(modes: Modes, steps: &[Step]) -> Result<(), String> {
    let engine = std::sync::Arc::new(
        Engine::new(Config {
            modes,
            ..Config::new(FRAMES as usize)
        })
        .map_err(|e| e.to_string())?,
    );
    let mut model = Model::new(modes);
    let workers = workers();
    let drains = (0..THREADS).map(Step::Drain);
    for s in steps.iter().copied().chain(drains) {
        let want = model.step(s);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let e = engine.clone();
        workers[s.thread()]
            .run(Box::new(move || {
                let _ = tx.send(run_on_engine(&e, s));
            }))
            .map_err(|p| format!("{s:?} panicked: {p}"))?;
        let got = rx.recv().map_err(|e| e.to_string())?;
        if got != want {
            return Err(format!("{s:?} returned {got:?}, model says {want:?}"));
        }
        compare(&engine, &model).map_err(|e| format!("after {s:?}: {e}"))?;
    }
    Ok(())
}

fn compare(e: &Engine, m: &Model) -> Result<(), String> {
    e.check_invariants()?;
    for (list, want) in LruList::ALL.into_iter().zip(&m.lists) {
        let got: Vec<u32> = e
            .list(0, list)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|p| p.0)
            .collect();
        let want: Vec<u32> = want.iter().copied().collect();
        if got != want {
            return Err(format!("{list:?} is {got:?}, model {want:?}"));
        }
    }
    for p in 0..FRAMES {
        let st = e.frame_state(Pfn(p)).map_err(|e| e.to_string())?;
        let i = p as usize;
        // LOCKED is transient inside shrink and never visible here.
        let want = (m.flags[i], m.refs[i], m.mlock_count[i]);
        if (st.flags.bits(), st.refcount, st.mlock_count) != want {
            return Err(format!(
                "pfn {p}: (flags {:#x}, refs {}, mlock_count {}), model {want:?}",
                st.flags.bits(),
                st.refcount,
                st.mlock_count
            ));
        }
    }
    let s: EngineStats = e.stats();
    if s.events != m.events {
        return Err(format!("events {:?}, model {:?}", s.events, m.events));
    }
    if (s.lock_acquisitions, s.nr_mlock, s.batches.pending) != (m.locks, m.nr_mlock, m.pending()) {
        return Err(format!(
            "(locks, nr_mlock, pending) = {:?}, model {:?}",
            (s.lock_acquisitions, s.nr_mlock, s.batches.pending),
            (m.locks, m.nr_mlock, m.pending())
        ));
    }
    Ok(())
}
