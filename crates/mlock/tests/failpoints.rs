//! What the kernel refuses, injected with the `fail` crate's fail points
//! (on in tests only): mmap and mlock failing with ENOMEM, EAGAIN or EPERM
//! give an error that names cause and fix, and leave nothing mapped or
//! locked. One `FailScenario` at a time (fail points are process-wide).

use fail::FailScenario;
use mmbatch_mlock::{Error, FaultLockedRegion, LockPolicy, LockedRegion, accounting};

const MIB: usize = 1 << 20;

/// (mappings of exactly 1 MiB — the regions these tests make; thread
/// stacks come and go with other tests — and locked bytes) of this process.
fn footprint() -> (usize, u64) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mib_maps = maps
        .lines()
        .filter(|l| {
            let (a, b) = l.split_once(' ').unwrap().0.split_once('-').unwrap();
            usize::from_str_radix(b, 16).unwrap() - usize::from_str_radix(a, 16).unwrap() == MIB
        })
        .count();
    (mib_maps, accounting::process_locked_bytes().unwrap())
}

#[test]
fn refused_mmap_leaves_nothing() {
    let scenario = FailScenario::setup();
    let before = footprint();
    fail::cfg("mlock::mmap", "return(ENOMEM)").unwrap();
    let e = LockedRegion::builder(MIB).build().unwrap_err();
    println!("{e}");
    assert!(matches!(e, Error::OutOfMemory { op: "mmap", .. }), "{e:?}");
    // MAP_LOCKED: the refusal is classified as a lock's.
    fail::cfg("mlock::mmap", "return(EPERM)").unwrap();
    let e = LockedRegion::builder(MIB)
        .map_locked(true)
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::NotPermitted { .. }), "{e:?}");
    assert!(e.to_string().contains("CAP_IPC_LOCK"), "{e}");
    assert_eq!(footprint(), before, "a mapping or a lock leaked");
    drop(scenario);
}

#[test]
fn refused_mlock_unmaps_the_region() {
    let scenario = FailScenario::setup();
    let before = footprint();
    for (errno, check) in [
        ("ENOMEM", "out of memory" as &str),
        ("EAGAIN", "out of memory"),
        ("EPERM", "CAP_IPC_LOCK"),
    ] {
        fail::cfg("mlock::mlock", &format!("return({errno})")).unwrap();
        for policy in [LockPolicy::Populate, LockPolicy::OnFault] {
            let e = LockedRegion::builder(MIB)
                .policy(policy)
                .build()
                .unwrap_err();
            println!("{errno} {policy:?}: {e}");
            let text = e.to_string().to_lowercase();
            assert!(
                text.contains(&check.to_lowercase()) || matches!(e, Error::MemlockLimit { .. }),
                "{errno}: {e}"
            );
            assert_eq!(footprint(), before, "{errno}: a mapping or a lock leaked");
        }
    }
    drop(scenario);
}

#[test]
fn refused_mmap_for_a_fault_region() {
    let scenario = FailScenario::setup();
    let before = footprint();
    fail::cfg("mlock::mmap", "return(ENOMEM)").unwrap();
    let e = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
    fail::remove("mlock::mmap");
    // And the next one works (no slot or handler state left behind).
    let r = FaultLockedRegion::new(LockedRegion::builder(MIB), 4).unwrap();
    r.read(0).unwrap();
    drop(r);
    assert_eq!(footprint(), before);
    drop(scenario);
}

#[test]
fn lengths_past_the_address_space_are_refused() {
    let scenario = FailScenario::setup();
    let page = accounting::page_size();
    for len in [
        usize::MAX & !(page - 1),
        (isize::MAX as usize + 1) & !(page - 1),
    ] {
        let e = LockedRegion::builder(len)
            .policy(LockPolicy::Unlocked)
            .build()
            .unwrap_err();
        assert!(matches!(e, Error::TooLarge { .. }), "{len}: {e:?}");
    }
    drop(scenario);
}
