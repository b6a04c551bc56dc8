//! What the engine's accessors promise a user: the page lock and how
//! reclaim treats it, the modes it was built with, and what it prints.

use mmbatch_lru::{Config, Engine, Event, LruError, LruList, Mode, Modes, Pfn, Stat};

fn engine_with(frames: u32) -> Engine {
    let e = Engine::new(Config::new(frames as usize)).unwrap();
    for i in 0..frames {
        e.lru_add(Pfn(i)).unwrap();
    }
    e.lru_add_drain();
    e
}

/// `folio_trylock` is exclusive, reclaim keeps a locked frame, and once
/// unlocked the frame can be reclaimed.
#[test]
fn the_page_lock_is_exclusive_and_reclaim_keeps_a_locked_frame() {
    let e = engine_with(4);
    assert_eq!(e.is_locked(Pfn(1)), Ok(false));
    assert_eq!(e.trylock_frame(Pfn(1)), Ok(true), "a free lock is taken");
    assert_eq!(e.is_locked(Pfn(1)), Ok(true));
    assert_eq!(e.trylock_frame(Pfn(1)), Ok(false), "a held lock is refused");
    let mut evicted = Vec::new();
    let s = e
        .shrink(0, 4, |p| {
            evicted.push(p);
            true
        })
        .unwrap();
    assert_eq!(evicted, [Pfn(0), Pfn(2), Pfn(3)], "the locked frame kept");
    assert_eq!((s.evicted, s.kept), (3, 1));
    e.unlock_frame(Pfn(1)).unwrap();
    assert_eq!(e.is_locked(Pfn(1)), Ok(false));
    assert_eq!(e.shrink(0, 4, |_| true).unwrap().evicted, 1);
    // Free now: there is no lock to take, ask about or release.
    assert_eq!(e.trylock_frame(Pfn(1)), Err(LruError::Free(Pfn(1))));
    assert_eq!(e.is_locked(Pfn(1)), Err(LruError::Free(Pfn(1))));
    assert_eq!(e.unlock_frame(Pfn(1)), Err(LruError::Free(Pfn(1))));
    e.check_invariants().unwrap();
}

#[test]
fn an_engine_reports_the_modes_it_was_built_with() {
    let mixed = Modes {
        activate: Mode::Immediate,
        mlock: Mode::Immediate,
        ..Modes::BATCHED
    };
    for modes in [Modes::BATCHED, Modes::IMMEDIATE, mixed] {
        let e = Engine::new(Config::new(8).modes(modes)).unwrap();
        assert_eq!(e.modes(), modes);
    }
}

#[test]
fn debug_names_the_engines_size_and_modes() {
    let e = Engine::new(Config::new(8).nodes(2).modes(Modes::IMMEDIATE)).unwrap();
    let d = format!("{e:?}");
    for part in ["Engine", "frames: 8", "nodes: 2", "Immediate"] {
        assert!(d.contains(part), "{part} not in {d}");
    }
}

/// Each event and statistic is named as the kernel names it in
/// `/proc/vmstat` (`pgscan` and `pgsteal` sum its per-reclaimer
/// counters), but `Promoted`, which the kernel does not have.
#[test]
fn counters_have_the_kernels_names() {
    let names: Vec<&str> = Event::ALL
        .iter()
        .map(|e| e.name())
        .chain(Stat::ALL.iter().map(|s| s.name()))
        .collect();
    let mut distinct = names.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    assert_eq!(Event::Promoted.name(), "promoted");
    let Ok(vmstat) = std::fs::read_to_string("/proc/vmstat") else {
        eprintln!("no /proc/vmstat here: the names not checked against the kernel's");
        return;
    };
    let kernel: Vec<&str> = vmstat.lines().filter_map(|l| l.split(' ').next()).collect();
    for name in names.iter().filter(|n| **n != "promoted") {
        assert!(
            kernel
                .iter()
                .any(|k| k == name || k.strip_prefix(name).is_some_and(|r| r.starts_with('_'))),
            "{name} is not a /proc/vmstat counter"
        );
    }
}

/// While the cache is disabled (`lru_cache_disable`, as page migration
/// does) every operation is applied at once and what waited is applied;
/// enabled again, operations wait in their batches.
#[test]
fn a_disabled_cache_applies_every_operation_at_once() {
    let e = Engine::new(Config::new(8)).unwrap();
    e.lru_add(Pfn(0)).unwrap();
    assert_eq!(e.list_sizes(0).unwrap(), [0, 0, 0], "batched: waiting");
    e.lru_cache_disable();
    assert_eq!(e.list_sizes(0).unwrap(), [1, 0, 0], "what waited, applied");
    e.lru_add(Pfn(1)).unwrap();
    e.activate(Pfn(1)).unwrap();
    assert_eq!(e.list_sizes(0).unwrap(), [1, 1, 0]);
    e.lru_cache_enable();
    e.lru_add(Pfn(2)).unwrap();
    assert_eq!(e.list_sizes(0).unwrap(), [1, 1, 0], "batched again");
    e.lru_add_drain();
    assert_eq!(e.list_sizes(0).unwrap(), [2, 1, 0]);
}

/// `promote` moves a frame to the head of its list (exact LRU), batched
/// as activation is; an mlocked frame or one off the LRU stays put.
#[test]
fn promote_moves_a_frame_to_the_head_of_its_list() {
    for modes in [Modes::BATCHED, Modes::IMMEDIATE] {
        let e = Engine::new(Config::new(5).modes(modes)).unwrap();
        for i in 0..5 {
            e.lru_add(Pfn(i)).unwrap();
        }
        e.mlock(Pfn(4)).unwrap();
        e.lru_add_drain();
        let inactive = |e: &Engine| e.list(0, LruList::Inactive).unwrap();
        assert_eq!(inactive(&e), [Pfn(3), Pfn(2), Pfn(1), Pfn(0)]);
        e.promote(Pfn(0)).unwrap();
        e.lru_add_drain();
        assert_eq!(inactive(&e), [Pfn(0), Pfn(3), Pfn(2), Pfn(1)], "{modes:?}");
        // Neither an mlocked frame nor one off the LRU is even queued.
        assert!(e.isolate(Pfn(2)).unwrap());
        let ops = |e: &Engine| (e.stats().batches.ops, e.stats().batches.immediate);
        let before = ops(&e);
        e.promote(Pfn(4)).unwrap();
        e.promote(Pfn(2)).unwrap();
        assert_eq!(ops(&e), before, "{modes:?}");
        e.lru_add_drain();
        assert_eq!(inactive(&e), [Pfn(0), Pfn(3), Pfn(1)]);
        assert_eq!(e.list(0, LruList::Unevictable).unwrap(), [Pfn(4)]);
        assert_eq!(e.stats().event(Event::Promoted), 1);
        e.putback(Pfn(2)).unwrap();
        e.lru_add_drain();
        e.check_invariants().unwrap();
    }
}

/// `putback_batch` returns isolated frames at once, under one lock, and
/// refuses (putting back none) a list with a frame that is not isolated.
#[test]
fn putback_batch_returns_isolated_frames_or_none() {
    let e = engine_with(4);
    for i in 0..3 {
        assert!(e.isolate(Pfn(i)).unwrap());
    }
    assert_eq!(e.list_sizes(0).unwrap(), [1, 0, 0]);
    assert_eq!(
        e.putback_batch(&[Pfn(0), Pfn(3)]),
        Err(LruError::NotIsolated(Pfn(3)))
    );
    assert_eq!(e.list_sizes(0).unwrap(), [1, 0, 0], "none put back");
    e.putback_batch(&[Pfn(0), Pfn(1), Pfn(2)]).unwrap();
    assert_eq!(e.list_sizes(0).unwrap(), [4, 0, 0], "back without a drain");
    e.check_invariants().unwrap();
}

/// What `shrink` reports: frames the callback refused and mlocked ones
/// are kept, referenced ones activated (not kept); `shrink_active`
/// reports how many frames it moved.
#[test]
fn reclaim_reports_what_it_kept_and_moved() {
    let e = engine_with(6);
    e.mark_accessed(Pfn(0)).unwrap(); // referenced: a second chance
    let s = e.shrink(0, 6, |p| p == Pfn(5)).unwrap();
    assert_eq!((s.scanned, s.evicted, s.activated, s.kept), (6, 1, 1, 4));
    assert_eq!(e.list_sizes(0).unwrap(), [4, 1, 0]);
    for i in 1..4 {
        e.activate(Pfn(i)).unwrap();
    }
    e.lru_add_drain();
    assert_eq!(e.list_sizes(0).unwrap(), [1, 4, 0]);
    assert_eq!(e.shrink_active(0, 3).unwrap(), 3);
    assert_eq!(e.list_sizes(0).unwrap(), [4, 1, 0]);
    assert_eq!(e.shrink_active(0, 9).unwrap(), 1);
    e.check_invariants().unwrap();
}

/// `deactivate` moves an active frame to the inactive list and does
/// nothing to an inactive one (`lru_deactivate`).
#[test]
fn deactivate_moves_only_active_frames() {
    let e = engine_with(3);
    e.activate(Pfn(0)).unwrap();
    e.lru_add_drain();
    assert_eq!(e.list(0, LruList::Inactive).unwrap(), [Pfn(2), Pfn(1)]);
    e.deactivate(Pfn(1)).unwrap();
    e.deactivate(Pfn(0)).unwrap();
    e.lru_add_drain();
    assert_eq!(
        e.list(0, LruList::Inactive).unwrap(),
        [Pfn(0), Pfn(2), Pfn(1)],
        "the inactive frame kept its place"
    );
    assert_eq!(e.stats().event(Event::Deactivate), 1);
    // Queued while active (by another thread: reclaim applies its own
    // thread's batches first), applied after reclaim aged the frame to
    // the inactive list: nothing more happens to it.
    e.activate(Pfn(1)).unwrap();
    e.lru_add_drain();
    std::thread::scope(|s| {
        s.spawn(|| e.deactivate(Pfn(1)).unwrap());
    });
    assert_eq!(e.shrink_active(0, 1).unwrap(), 1);
    let aged = e.list(0, LruList::Inactive).unwrap();
    e.lru_add_drain_all();
    assert_eq!(e.list(0, LruList::Inactive).unwrap(), aged);
    assert_eq!(
        e.stats().event(Event::Deactivate),
        2,
        "one by shrink_active"
    );
}

/// A frame being evicted is not free yet: `lru_add` of it from the
/// eviction callback (a buffer pool reusing its victim at once) is
/// refused as `Reclaiming`, whether the callback then evicts it or keeps
/// it, and the lists stay whole; once `shrink` returns, an evicted frame
/// can be added. Before, the freeze was to 0 and the add succeeded: an
/// evicted frame was left linked with its flags cleared
/// (`check_invariants`: "pfn 0 on node 0 Inactive has Flags(0x0)"), and
/// a kept one was linked twice ("cycle in Inactive").
#[test]
fn a_frame_being_evicted_cannot_be_added_again() {
    for modes in [Modes::BATCHED, Modes::IMMEDIATE] {
        for evict in [true, false] {
            let e = Engine::new(Config::new(4).modes(modes)).unwrap();
            for i in 0..4 {
                e.lru_add(Pfn(i)).unwrap();
            }
            e.lru_add_drain();
            let mut refused = Vec::new();
            e.shrink(0, 1, |p| {
                refused.push(e.lru_add(p));
                e.lru_add_drain();
                evict
            })
            .unwrap();
            assert_eq!(
                refused,
                [Err(LruError::Reclaiming(Pfn(0)))],
                "{modes:?}, evict {evict}"
            );
            e.check_invariants().unwrap();
            if evict {
                e.lru_add(Pfn(0)).unwrap();
                e.lru_add_drain();
                e.check_invariants().unwrap();
            }
            let msg = LruError::Reclaiming(Pfn(0)).to_string();
            assert!(msg.contains("after shrink returns"), "{msg}");
        }
    }
}

/// Reclaim first applies the calling thread's batches, as the kernel's
/// `shrink_inactive_list` calls `lru_add_drain`: frames this thread added
/// and has not drained are on the lists when it shrinks. They were not
/// (still in the thread's batch), and a reclaim loop over them found
/// nothing to evict.
#[test]
fn shrink_applies_this_threads_batches_first() {
    let e = Engine::new(Config::new(8)).unwrap();
    for i in 0..8 {
        e.lru_add(Pfn(i)).unwrap();
    }
    let s = e.shrink(0, 8, |_| true).unwrap();
    assert_eq!(s.evicted, 8, "{s:?}");
    e.check_invariants().unwrap();
    for i in 0..4 {
        e.lru_add(Pfn(i)).unwrap();
    }
    assert_eq!(e.shrink_active(0, 8).unwrap(), 0);
    assert_eq!(e.list_sizes(0).unwrap()[LruList::Inactive as usize], 4);
}
