//! `check_invariants` notices each kind of damage: every property test
//! that ends in it rests on that. The damage is done the way a bug in a
//! list operation would do it, through the crate's own internals.

use super::{Config, Engine};
use crate::frame::{Flags, Pfn};

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
