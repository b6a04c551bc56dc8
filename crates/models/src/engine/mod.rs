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

use mmbatch_lru::{Config, Engine, EngineStats, Event, LruError, LruList, Modes, Pfn};

pub use crate::workers::THREADS;
use crate::workers::workers;

/// Frames in the engine under test.
pub const FRAMES: u32 = 8;

mod model;

use model::Model;

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
pub(crate) enum Outcome {
    Unit(Result<(), LruError>),
    Bool(Result<bool, LruError>),
    Shrink(u64, u64, u64),
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
        Engine::new(Config::new(FRAMES as usize).modes(modes)).map_err(|e| e.to_string())?,
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
    // Through `event`, as users read them.
    for ev in Event::ALL {
        let (got, want) = (s.event(ev), m.events[ev as usize]);
        if got != want {
            return Err(format!("{ev:?} counted {got}, model {want}"));
        }
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
