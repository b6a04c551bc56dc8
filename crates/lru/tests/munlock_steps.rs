//! Seed 000's steps change cost, never meaning: on the same input, every
//! step of `munlock_range` leaves exactly the final state of step 0 —
//! lists in order, flags, references, mlock counts, events and NR_MLOCK.

use mmbatch_lru::{
    Config, Engine, Event, LruList, MunlockStats, MunlockStep, NodeLayout, PageTables, Pfn,
};
use proptest::prelude::*;

/// How one frame starts.
#[derive(Clone, Copy, Debug)]
struct FrameSetup {
    mapped: bool,
    mlocked: bool,
    active: bool,
    /// Held off the LRU by someone else during the munlock.
    isolated: bool,
}

#[derive(Clone, Debug)]
struct Input {
    frames: Vec<FrameSetup>,
    nodes: usize,
    layout: NodeLayout,
    /// Virtual page i maps frame perm[i] (if that frame is mapped).
    perm: Vec<usize>,
    range: (u64, u64),
}

fn input() -> impl Strategy<Value = Input> {
    (1usize..120)
        .prop_flat_map(|n| {
            let setup = (
                any::<bool>(),
                prop::bool::weighted(0.8),
                any::<bool>(),
                prop::bool::weighted(0.1),
            )
                .prop_map(|(mapped, mlocked, active, isolated)| FrameSetup {
                    mapped: mapped || mlocked,
                    mlocked,
                    active,
                    isolated,
                });
            (
                prop::collection::vec(setup, n),
                1usize..3,
                prop_oneof![Just(NodeLayout::Contiguous), Just(NodeLayout::Interleave)],
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
                (0..=n as u64, 0..=n as u64),
            )
        })
        .prop_map(|(frames, nodes, layout, perm, (a, b))| Input {
            frames,
            nodes,
            layout,
            perm,
            range: (a.min(b), a.max(b)),
        })
}

/// The observable state: per node lists, per frame state, counters.
#[derive(Debug, PartialEq)]
struct State {
    lists: Vec<Vec<Pfn>>,
    frames: Vec<(u32, u32, u32)>,
    events: Vec<(Event, u64)>,
    nr_mlock: i64,
}

fn run(input: &Input, step: MunlockStep) -> (State, MunlockStats) {
    let n = input.frames.len();
    let e = Engine::new(Config::new(n).nodes(input.nodes).layout(input.layout)).unwrap();
    let pt = PageTables::new(n as u64);
    for (vpn, &i) in input.perm.iter().enumerate() {
        if input.frames[i].mapped {
            pt.map(vpn as u64, Pfn(i as u32)).unwrap();
        }
    }
    for (i, f) in input.frames.iter().enumerate() {
        let p = Pfn(i as u32);
        e.lru_add(p).unwrap();
        if f.active {
            e.mark_accessed(p).unwrap();
            e.mark_accessed(p).unwrap();
        }
    }
    e.lru_add_drain();
    for (i, f) in input.frames.iter().enumerate() {
        if f.mlocked {
            e.mlock(Pfn(i as u32)).unwrap();
        }
    }
    e.lru_add_drain();
    for (i, f) in input.frames.iter().enumerate() {
        if f.isolated {
            assert!(e.isolate(Pfn(i as u32)).unwrap());
        }
    }
    let st = e
        .munlock_range(&pt, input.range.0..input.range.1, step)
        .unwrap();
    e.lru_add_drain();
    for (i, f) in input.frames.iter().enumerate() {
        if f.isolated {
            e.putback(Pfn(i as u32)).unwrap();
        }
    }
    e.lru_add_drain();
    e.check_invariants().unwrap();
    let lists = (0..input.nodes)
        .flat_map(|node| LruList::ALL.map(|l| e.list(node, l).unwrap()))
        .collect();
    let frames = (0..n)
        .map(|i| {
            let s = e.frame_state(Pfn(i as u32)).unwrap();
            (s.flags.bits(), s.refcount, s.mlock_count)
        })
        .collect();
    let stats = e.stats();
    let events = Event::ALL.iter().map(|&ev| (ev, stats.event(ev))).collect();
    (
        State {
            lists,
            frames,
            events,
            nr_mlock: stats.nr_mlock,
        },
        st,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn every_step_means_the_same_as_step_0(input in input()) {
        let (base, base_stats) = run(&input, MunlockStep::BASELINE);
        for step in MunlockStep::all().skip(1) {
            let (state, stats) = run(&input, step);
            prop_assert_eq!(&state, &base, "step {}", step.get());
            prop_assert_eq!(stats.munlocked, base_stats.munlocked, "step {}", step.get());
        }
    }
}

#[test]
fn costs_fall_step_by_step_on_one_node() {
    let n = 31 * 40;
    let input = Input {
        frames: vec![
            FrameSetup {
                mapped: true,
                mlocked: true,
                active: false,
                isolated: false,
            };
            n
        ],
        nodes: 1,
        layout: NodeLayout::Contiguous,
        perm: (0..n).collect(),
        range: (0, n as u64),
    };
    let stats: Vec<MunlockStats> = MunlockStep::all().map(|s| run(&input, s).1).collect();
    let n = n as u64;
    assert!(stats.iter().all(|s| s.munlocked == n));
    assert_eq!((stats[0].drains, stats[2].drains), (n, 0));
    // Step 6 drops one get and one put per page.
    assert_eq!(stats[5].refcount_ops - stats[6].refcount_ops, 2 * n);
    assert_eq!(stats[6].pte_locks, n);
    // Step 7 fills each batch from one walk of one table; walks stop at
    // the 512-entry table boundary, so 1240 pages make 17 + 17 + 7 batches.
    assert_eq!(stats[7].batches, 17 + 17 + 7);
    assert_eq!(stats[7].pte_locks, stats[7].batches);
}

#[test]
fn bad_steps_and_ranges() {
    assert!(
        MunlockStep::new(8)
            .unwrap_err()
            .to_string()
            .contains("steps 0 (baseline) to 7")
    );
    let e = Engine::new(Config::new(4)).unwrap();
    let pt = PageTables::new(4);
    let err = e.munlock_range(&pt, 0..5, MunlockStep::ALL).unwrap_err();
    assert!(err.to_string().contains("PageTables::new(5)"), "{err}");
}
