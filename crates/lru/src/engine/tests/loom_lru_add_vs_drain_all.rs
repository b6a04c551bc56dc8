//! lru_add batches racing lru_add_drain_all: a frame added before the
//! drain began is on its list when the drain returns.

use loom::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
};

use super::{list_of, model};
use crate::{Config, Engine, LruList, Pfn};

#[test]
fn lru_add_vs_drain_all() {
    model(|| {
        let e = Arc::new(Engine::new(Config::new(2)).unwrap());
        let added = Arc::new(AtomicBool::new(false));
        let (e1, a1) = (e.clone(), added.clone());
        let adder = thread::spawn(move || {
            e1.lru_add(Pfn(0)).unwrap();
            a1.store(true, Ordering::Release);
        });
        let before = added.load(Ordering::Acquire);
        e.lru_add_drain_all();
        if before {
            assert_eq!(
                list_of(&e, Pfn(0)),
                Some(LruList::Inactive),
                "lru_add left waiting"
            );
        }
        adder.join().unwrap();
        e.check_invariants().unwrap();
    });
}
