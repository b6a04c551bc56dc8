//! Loom models of the engine's lock protocols, one per race, with batches
//! of 2 (`BATCH_LEN` under loom). Run with `cargo xtask loom lru`.

mod loom_activate_vs_isolate;
mod loom_add_vs_evict;
mod loom_disable_vs_queue;
mod loom_lru_add_vs_drain_all;
mod loom_mlock_vs_munlock;
mod loom_munlock_vs_mlock;
mod loom_putback_vs_shrink;

use crate::{Config, Engine, LruList, Pfn};

fn model(f: impl Fn() + Sync + Send + 'static) {
    // Six batch kinds per drain: more branches than loom's default.
    mmbatch_testkit::loom_model::check(2, 10_000, f);
}

/// An engine of `n` frames, all on the inactive list.
fn engine(n: u32) -> Engine {
    let e = Engine::new(Config::new(n as usize)).unwrap();
    for i in 0..n {
        e.lru_add(Pfn(i)).unwrap();
    }
    e.lru_add_drain();
    e
}

/// Which list `pfn` is on, if any.
fn list_of(e: &Engine, pfn: Pfn) -> Option<LruList> {
    LruList::ALL
        .into_iter()
        .find(|&l| e.list(0, l).unwrap().contains(&pfn))
}
