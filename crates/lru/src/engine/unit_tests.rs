//! `check_invariants` notices each kind of damage: every property test
//! that ends in it rests on that. The damage is done the way a bug in a
//! list operation would do it, through the crate's own internals. And the
//! page lock's record of its holder, which only the internals show.

use super::{Config, Engine};
use crate::frame::{Flags, Pfn, this_thread};
use crate::sync::Ordering;

/// Four frames on the inactive list, checked whole.
fn engine() -> Engine {
    let e = Engine::new(Config::new(4)).unwrap();
    for i in 0..4 {
        e.lru_add(Pfn(i)).unwrap();
    }
    e.lru_add_drain();
    e.check_invariants().unwrap();
    e
}

fn damage(e: &Engine) -> String {
    e.check_invariants().expect_err("the damage went unnoticed")
}

#[test]
fn a_listed_frame_without_its_lru_bit() {
    let e = engine();
    e.shared.frames.get(Pfn(1)).clear(Flags::LRU);
    let msg = damage(&e);
    assert!(msg.starts_with("pfn 1 on node 0 Inactive"), "{msg}");
}

#[test]
fn a_frame_whose_flags_name_another_list() {
    let e = engine();
    e.shared.frames.get(Pfn(2)).set(Flags::ACTIVE);
    let msg = damage(&e);
    assert!(msg.starts_with("pfn 2 on node 0 Inactive"), "{msg}");
}

#[test]
fn a_frame_marked_lru_on_no_list() {
    let e = engine();
    e.shared.lock(0).del(Pfn(3));
    assert_eq!(damage(&e), "pfn 3 has LRU set but is on no list");
}

/// The page lock's holder is recorded while `trylock_frame`'s caller
/// holds it and forgotten at `unlock_frame`, from whichever thread:
/// a stale record would have `munlock_range` refuse the frame later,
/// while the engine's own code holds its lock.
#[test]
fn a_page_lock_records_its_holder_until_unlocked() {
    let e = Engine::new(Config::new(2)).unwrap();
    e.lru_add(Pfn(1)).unwrap();
    e.lru_add_drain();
    let f = e.shared.frames.get(Pfn(1));
    let me = this_thread();
    assert_ne!(me, 0);
    assert_eq!(this_thread(), me, "a thread keeps its number");
    assert!(!f.locked_by_caller());
    assert_eq!(e.trylock_frame(Pfn(1)), Ok(true));
    assert_eq!(f.locker.load(Ordering::Relaxed), me);
    assert!(f.locked_by_caller());
    std::thread::scope(|s| {
        s.spawn(|| {
            let other = this_thread();
            assert!(other != 0 && other != me, "{other} beside {me}");
            assert!(!f.locked_by_caller(), "held by another thread");
            e.unlock_frame(Pfn(1)).unwrap();
        });
    });
    assert_eq!(f.locker.load(Ordering::Relaxed), 0, "unlocked elsewhere");
    assert!(!f.locked_by_caller());
    // Freed while locked (isolated, then freed: `unlock_frame` refuses a
    // free frame), the record goes with the frame's flags.
    assert_eq!(e.trylock_frame(Pfn(1)), Ok(true));
    assert_eq!(e.isolate(Pfn(1)), Ok(true));
    e.free_isolated(Pfn(1)).unwrap();
    assert_eq!(f.locker.load(Ordering::Relaxed), 0, "freed");
    e.lru_add(Pfn(1)).unwrap();
    e.lru_add_drain();
    // Locked as the engine's own code locks it: no holder recorded.
    f.set(Flags::LOCKED);
    assert!(!f.locked_by_caller());
}
