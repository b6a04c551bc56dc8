//! Bad input gets a clear error naming the cause and the fix, and changes
//! nothing.

use mmbatch_lru::{Config, Engine, LruError, LruList, Pfn};

fn engine(frames: usize) -> Engine {
    Engine::new(Config::new(frames)).unwrap()
}

#[test]
fn zero_sized_tables_are_refused() {
    assert_eq!(
        Engine::new(Config::new(0)).unwrap_err(),
        LruError::ZeroFrames
    );
    let no_nodes = Config::new(4).nodes(0);
    assert_eq!(Engine::new(no_nodes).unwrap_err(), LruError::ZeroNodes);
    assert!(
        LruError::ZeroFrames
            .to_string()
            .contains("Config::frames > 0")
    );
}

#[test]
fn frame_ids_out_of_range() {
    let e = engine(4);
    let err = e.lru_add(Pfn(4)).unwrap_err();
    assert_eq!(
        err,
        LruError::OutOfRange {
            pfn: Pfn(4),
            frames: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "pfn 4 is out of range: the table has frames 0..4"
    );
    for r in [
        e.mark_accessed(Pfn(9)),
        e.activate(Pfn(9)),
        e.putback(Pfn(9)),
        e.mlock(Pfn(9)),
        e.munlock(Pfn(9)),
    ] {
        assert!(matches!(r, Err(LruError::OutOfRange { .. })), "{r:?}");
    }
    assert!(matches!(
        e.isolate(Pfn(u32::MAX)),
        Err(LruError::OutOfRange { .. })
    ));
    assert!(matches!(
        e.shrink(3, 1, |_| true),
        Err(LruError::NoSuchNode { node: 3, nodes: 1 })
    ));
}

#[test]
fn double_putback_is_an_error_and_changes_nothing() {
    let e = engine(4);
    e.lru_add(Pfn(1)).unwrap();
    e.lru_add_drain();
    assert!(e.isolate(Pfn(1)).unwrap());
    e.putback(Pfn(1)).unwrap();
    let before = e.frame_state(Pfn(1)).unwrap();
    let err = e.putback(Pfn(1)).unwrap_err();
    assert_eq!(err, LruError::NotIsolated(Pfn(1)));
    assert!(
        err.to_string()
            .contains("allows one putback or free_isolated"),
        "{err}"
    );
    assert_eq!(e.frame_state(Pfn(1)).unwrap(), before);
    e.lru_add_drain();
    assert_eq!(e.list(0, LruList::Inactive).unwrap(), [Pfn(1)]);
    e.check_invariants().unwrap();
    // putback_batch checks every frame before touching any.
    assert!(e.isolate(Pfn(1)).unwrap());
    assert_eq!(
        e.putback_batch(&[Pfn(1), Pfn(2)]),
        Err(LruError::NotIsolated(Pfn(2)))
    );
    e.putback_batch(&[Pfn(1)]).unwrap();
    e.check_invariants().unwrap();
    // A frame named twice is not isolated the second time: an error, and
    // still nothing put back (it was, under the first claim).
    e.lru_add_drain();
    assert!(e.isolate(Pfn(1)).unwrap());
    let before = e.frame_state(Pfn(1)).unwrap();
    assert_eq!(
        e.putback_batch(&[Pfn(1), Pfn(1)]),
        Err(LruError::NotIsolated(Pfn(1)))
    );
    e.lru_add_drain();
    assert_eq!(e.frame_state(Pfn(1)).unwrap(), before);
    assert_eq!(e.list(0, LruList::Inactive).unwrap(), []);
    e.putback_batch(&[Pfn(1)]).unwrap();
    e.lru_add_drain();
    assert_eq!(e.list(0, LruList::Inactive).unwrap(), [Pfn(1)]);
    e.check_invariants().unwrap();
}

#[test]
fn munlock_of_a_frame_never_mlocked() {
    let e = engine(2);
    e.lru_add(Pfn(0)).unwrap();
    assert_eq!(e.munlock(Pfn(0)), Err(LruError::NotMlocked(Pfn(0))));
    e.mlock(Pfn(0)).unwrap();
    e.munlock(Pfn(0)).unwrap();
    e.lru_add_drain();
    assert_eq!(e.munlock(Pfn(0)), Err(LruError::NotMlocked(Pfn(0))));
    assert_eq!(e.stats().nr_mlock, 0);
    e.check_invariants().unwrap();
}

#[test]
fn in_use_and_free_frames() {
    let e = engine(2);
    e.lru_add(Pfn(0)).unwrap();
    let err = e.lru_add(Pfn(0)).unwrap_err();
    assert!(
        matches!(err, LruError::InUse { pfn: Pfn(0), .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("use putback"));
    assert_eq!(e.mark_accessed(Pfn(1)), Err(LruError::Free(Pfn(1))));
    assert_eq!(e.isolate(Pfn(1)), Err(LruError::Free(Pfn(1))));
}

#[test]
fn free_isolated_waits_for_queued_references() {
    let e = engine(2);
    e.lru_add(Pfn(0)).unwrap();
    e.lru_add_drain();
    e.mark_accessed(Pfn(0)).unwrap();
    e.mark_accessed(Pfn(0)).unwrap(); // queues an activation (a reference)
    assert!(e.isolate(Pfn(0)).unwrap());
    let err = e.free_isolated(Pfn(0)).unwrap_err();
    assert_eq!(
        err,
        LruError::Busy {
            pfn: Pfn(0),
            refcount: 3
        }
    );
    assert!(err.to_string().contains("lru_add_drain_all"));
    e.lru_add_drain_all(); // the activation is skipped: the frame is isolated
    e.free_isolated(Pfn(0)).unwrap();
    e.lru_add(Pfn(0)).unwrap();
    e.lru_add_drain();
    e.check_invariants().unwrap();
}

/// A page table refusal for the last virtual page prints: its message
/// added one to the page and panicked.
#[test]
fn out_of_range_pages_print_at_the_end_of_u64() {
    let pt = mmbatch_lru::PageTables::new(4);
    let e = pt.map(u64::MAX, Pfn(0)).unwrap_err();
    assert!(e.to_string().contains("outside the page tables"), "{e}");
}

/// `free_isolated` of a frame not isolated: its error named `putback`.
#[test]
fn a_second_free_isolated_names_no_other_call() {
    let e = engine(4);
    e.lru_add(Pfn(2)).unwrap();
    e.lru_add_drain();
    e.isolate(Pfn(2)).unwrap();
    e.free_isolated(Pfn(2)).unwrap();
    let err = e.free_isolated(Pfn(2)).unwrap_err();
    assert_eq!(err, LruError::NotIsolated(Pfn(2)));
    assert!(
        err.to_string().contains("putback or free_isolated"),
        "{err}"
    );
}

/// `Pfn(u32::MAX)` marks an unmapped page in the tables: mapping it
/// returned `Ok` and unmapped the page unseen. Now a panic naming it.
#[test]
#[should_panic(expected = "no frame has number u32::MAX")]
fn mapping_the_unmapped_marker_panics() {
    let pt = mmbatch_lru::PageTables::new(4);
    pt.map(1, Pfn(0)).unwrap();
    let _ = pt.map(1, Pfn(u32::MAX));
}

/// The same marker returned by `fill`'s function: it stored it, and the
/// page read as unmapped with `fill` counting it as set. Now the same
/// panic as `map`'s.
#[test]
#[should_panic(expected = "no frame has that number")]
fn filling_with_the_unmapped_marker_panics() {
    let pt = mmbatch_lru::PageTables::new(4);
    let _ = pt.fill(0, 4, |_, _| Some(Pfn(u32::MAX)));
}

/// `lru_cache_enable` without a `lru_cache_disable`: the panic is the
/// engine's, not its batchers'.
#[test]
#[should_panic(expected = "Engine::lru_cache_enable called more times")]
fn an_unmatched_enable_names_the_engine() {
    engine(4).lru_cache_enable();
}

/// A frame table the allocator refuses: `u32::MAX - 1` frames (the most
/// a `Pfn` names, 96 GiB of table) aborted the process ("memory
/// allocation of 103079215056 bytes failed"). Now an error. In a child
/// whose address space is capped at 4 GiB, so that the allocation fails
/// whatever the host's overcommit setting (under `vm.overcommit_memory=1`
/// it would succeed, and the table's writes fill the machine).
#[cfg(target_os = "linux")]
#[test]
fn a_frame_table_the_allocator_refuses_is_an_error() {
    use std::time::Duration;
    let name = "a_frame_table_the_allocator_refuses_is_an_error";
    if let Some(run) = mmbatch_testkit::child::parent(name, Duration::from_secs(20)) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    mmbatch_testkit::child::lower_rlimit(mmbatch_testkit::child::Rlimit::AddressSpace, 4 << 30);
    let frames = u32::MAX as usize - 1;
    let err = Engine::new(Config::new(frames)).unwrap_err();
    assert_eq!(err, LruError::FrameTableTooLarge { frames });
    assert!(
        err.to_string().contains("set Config::frames to fewer"),
        "{err}"
    );
    // One that fits is built as before.
    assert_eq!(engine(1 << 20).frames(), 1 << 20);
}
