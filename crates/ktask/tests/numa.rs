//! NUMA placement decided from hwloc synthetic topologies (any machine),
//! and run_numa on the real host.

use std::sync::atomic::{AtomicUsize, Ordering};

use mmbatch_ktask::numa::hwlocality::Topology;
use mmbatch_ktask::numa::{
    NodeCpus, NodeRange, NumaError, NumaJob, NumaJobError, bind_memory, node_cpus, run_numa,
    run_numa_with_undo,
};

fn synthetic(desc: &str) -> Topology {
    Topology::builder()
        .from_synthetic(desc)
        .unwrap()
        .build()
        .unwrap()
}

const MIB: usize = 1 << 20;

#[test]
fn two_packages_get_their_own_cpus() {
    let nodes = node_cpus(&synthetic("pack:2 [numa] core:2 pu:2"));
    assert_eq!(nodes.len(), 2);
    let ranges = [
        NodeRange {
            node: 0,
            range: 0..64 * MIB,
        },
        NodeRange {
            node: 1,
            range: 64 * MIB..128 * MIB,
        },
    ];
    let p = NumaJob::new(&ranges)
        .align(4096)
        .min_chunk(2 * MIB)
        .max_threads_per_node(64)
        .place(&nodes)
        .unwrap();
    assert_eq!(p[0].cpus, [0, 1, 2, 3]);
    assert_eq!(p[1].cpus, [4, 5, 6, 7]);
    // 32 chunks of work per node, 4 CPUs each: one thread per CPU.
    assert_eq!((p[0].threads, p[1].threads), (4, 4));
    // A small range gets fewer threads, as the split says.
    let p = NumaJob::new(&[NodeRange {
        node: 1,
        range: 0..4 * MIB,
    }])
    .align(4096)
    .min_chunk(2 * MIB)
    .max_threads_per_node(64)
    .place(&nodes)
    .unwrap();
    assert_eq!(p[0].threads, 2);
}

#[test]
fn four_packages_and_a_thread_cap() {
    let nodes = node_cpus(&synthetic("pack:4 [numa] core:2 pu:1"));
    assert_eq!(
        nodes.iter().map(|n| n.cpus.len()).collect::<Vec<_>>(),
        [2, 2, 2, 2]
    );
    let ranges: Vec<NodeRange> = (0..4)
        .map(|n| NodeRange {
            node: n,
            range: n * 64 * MIB..(n + 1) * 64 * MIB,
        })
        .collect();
    let p = NumaJob::new(ranges.as_slice())
        .align(4096)
        .min_chunk(2 * MIB)
        .max_threads_per_node(1)
        .place(&nodes)
        .unwrap();
    assert!(p.iter().all(|p| p.threads == 1));
    let disjoint: std::collections::BTreeSet<usize> =
        p.iter().flat_map(|p| p.cpus.iter().copied()).collect();
    assert_eq!(disjoint.len(), 8);
}

#[test]
fn uneven_nodes_get_threads_by_their_cpus() {
    // Two 1-CPU nodes, and a machine-level node spanning both CPUs.
    let nodes = node_cpus(&synthetic("[numa] pack:2 [numa] core:1 pu:1"));
    let counts: Vec<(usize, usize)> = nodes.iter().map(|n| (n.node, n.cpus.len())).collect();
    assert!(
        counts.contains(&(2, 2)) && counts.contains(&(0, 1)),
        "{counts:?}"
    );
    let ranges: Vec<NodeRange> = [0, 1, 2]
        .iter()
        .map(|&n| NodeRange {
            node: n,
            range: n * 64 * MIB..(n + 1) * 64 * MIB,
        })
        .collect();
    let p = NumaJob::new(ranges.as_slice())
        .align(4096)
        .min_chunk(2 * MIB)
        .max_threads_per_node(64)
        .place(&nodes)
        .unwrap();
    assert_eq!(p.iter().map(|p| p.threads).collect::<Vec<_>>(), [1, 1, 2]);
}

/// A range that ends before it starts, or two that share units, are
/// refused with the ranges named; they were run (the first as nothing,
/// the shared units twice) and `Ok`.
#[test]
fn reversed_and_overlapping_ranges_are_refused() {
    let nodes = [
        NodeCpus {
            node: 0,
            cpus: vec![0],
        },
        NodeCpus {
            node: 1,
            cpus: vec![1],
        },
    ];
    let r = |node, range| NodeRange { node, range };
    // From arithmetic gone wrong, as a caller's would.
    let (start, end) = (10, 5);
    let reversed = NumaJob::new([r(0, start..end)]).place(&nodes).unwrap_err();
    assert_eq!(reversed, NumaError::Reversed(r(0, start..end)));
    assert!(
        reversed.to_string().contains("ends before it starts"),
        "{reversed}"
    );
    let overlap = NumaJob::new([r(1, 50..60), r(0, 0..100), r(1, 200..300)])
        .place(&nodes)
        .unwrap_err();
    assert_eq!(overlap, NumaError::Overlap(r(0, 0..100), r(1, 50..60)));
    assert!(overlap.to_string().contains("worked twice"), "{overlap}");
    // Touching ranges, and an empty one inside another, are fine.
    NumaJob::new([r(0, 0..100), r(1, 100..200), r(1, 50..50)])
        .place(&nodes)
        .unwrap();
}

#[test]
fn a_node_without_cpus_runs_on_all_of_them() {
    let nodes = [
        NodeCpus {
            node: 0,
            cpus: vec![0, 1],
        },
        NodeCpus {
            node: 1,
            cpus: vec![2, 3],
        },
        NodeCpus {
            node: 7,
            cpus: vec![],
        }, // memory only (CXL, HBM)
    ];
    let p = NumaJob::new(&[NodeRange {
        node: 7,
        range: 0..64 * MIB,
    }])
    .align(4096)
    .min_chunk(2 * MIB)
    .max_threads_per_node(64)
    .place(&nodes)
    .unwrap();
    assert_eq!(p[0].cpus, [0, 1, 2, 3]);
    assert_eq!(p[0].threads, 4);
    let e = NumaJob::new(&[NodeRange {
        node: 3,
        range: 0..MIB,
    }])
    .max_threads_per_node(1)
    .place(&nodes)
    .unwrap_err();
    assert_eq!(
        e,
        NumaError::NoSuchNode {
            node: 3,
            nodes: vec![0, 1, 7]
        }
    );
    assert!(e.to_string().contains("has nodes [0, 1, 7]"));
}

#[test]
fn run_numa_on_this_host_does_all_the_work_without_binding_errors() {
    let topology = Topology::new().unwrap();
    let node = node_cpus(&topology)[0].node;
    let sum = AtomicUsize::new(0);
    let ranges = [
        NodeRange {
            node,
            range: 0..1 << 20,
        },
        NodeRange {
            node,
            range: 1 << 20..2 << 20,
        },
    ];
    run_numa::<()>(
        &topology,
        &NumaJob::new(&ranges)
            .min_chunk(1 << 14)
            .max_threads_per_node(8),
        |r| {
            sum.fetch_add(r.sum::<usize>(), Ordering::Relaxed);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(sum.into_inner(), (0..2usize << 20).sum::<usize>());
}

/// A job naming a node the host lacks runs nothing, and its error says
/// so: no chunk failed, and there was nothing to undo.
#[test]
fn an_unplaceable_job_is_refused_before_any_chunk_runs() {
    let topology = Topology::new().unwrap();
    let ran = AtomicUsize::new(0);
    let undone = AtomicUsize::new(0);
    let ranges = [NodeRange {
        node: 4096,
        range: 0..1 << 20,
    }];
    let e = run_numa_with_undo::<&str>(
        &topology,
        &NumaJob::new(&ranges),
        |_| {
            ran.fetch_add(1, Ordering::Relaxed);
            Ok(())
        },
        |_| {
            undone.fetch_add(1, Ordering::Relaxed);
        },
    )
    .unwrap_err();
    assert_eq!((ran.into_inner(), undone.into_inner()), (0, 0));
    assert!(
        matches!(
            &e,
            NumaJobError::Place(NumaError::NoSuchNode { node: 4096, .. })
        ),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(
        message.contains("NUMA node 4096 does not exist"),
        "{message}"
    );
    assert!(!message.contains("chunk"), "{message}");
}

#[test]
fn memory_binds_to_this_hosts_node() {
    let topology = Topology::new().unwrap();
    let node = node_cpus(&topology)[0].node;
    let mut m = mmbatch_ktask::Mapping::anonymous(4 << 20).unwrap();
    bind_memory(&topology, m.as_mut_slice().expect("read-write"), node).unwrap();
    mmbatch_ktask::clear(m.as_mut_slice().expect("read-write"), 2);
    assert!(
        m.as_mut_slice()
            .expect("read-write")
            .iter()
            .all(|b| *b == 0)
    );
}

/// One node fails while the other has finished: the old code returned the
/// error with the other node's work left done (and the failing node's
/// siblings kept starting chunks). Now every node stops and every chunk
/// that finished, on any node, is undone.
#[test]
fn a_failing_node_stops_and_undoes_every_node() {
    use std::{
        collections::BTreeSet,
        sync::{Mutex, atomic::AtomicBool},
        time::{Duration, Instant},
    };
    let (topology, ranges) = two_ranges_on_one_node();
    let done = Mutex::new(BTreeSet::new());
    let undone = Mutex::new(BTreeSet::new());
    let first_ran = AtomicBool::new(false);
    let r = run_numa_with_undo(
        &topology,
        &NumaJob::new(&ranges).min_chunk(8).max_threads_per_node(2),
        |r| {
            if r.start >= 64 {
                // The second node fails once the first has finished a
                // chunk (waited for, not slept on: a loaded host started
                // node 0's thread after a 50 ms sleep had run out), for
                // 10 s at most.
                let until = Instant::now() + Duration::from_secs(10);
                while !first_ran.load(Ordering::Acquire) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if r.start == 64 {
                    return Err("injected");
                }
            }
            done.lock().unwrap().insert(r.start);
            if r.start < 64 {
                first_ran.store(true, Ordering::Release);
            }
            Ok(())
        },
        |r| {
            undone.lock().unwrap().insert(r.start);
        },
    );
    assert!(matches!(r, Err(NumaJobError::Chunk("injected"))), "{r:?}");
    let (done, undone) = (done.into_inner().unwrap(), undone.into_inner().unwrap());
    assert!(done.iter().any(|&s| s < 64), "node 0 ran");
    assert_eq!(done, undone, "every finished chunk undone, nothing else");
}

/// One node panics at its first chunk while the other has slow chunks to
/// do: the panic stops the other node too, and reaches the caller.
/// Before, the other node did all its chunks first (seen failing on the
/// old code: "the other node ran all 8 chunks"). The other node starts
/// once the panic has begun, and each of its 8 chunks (4 rounds on 2
/// threads) takes 400 ms: the stop comes only after the panic hook, which
/// prints (and may symbolise a backtrace).
#[test]
fn a_panicking_node_stops_every_node() {
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    let (topology, ranges) = two_ranges_on_one_node();
    let other = AtomicUsize::new(0);
    let panicking = AtomicBool::new(false);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_numa::<()>(
            &topology,
            &NumaJob::new(&ranges).min_chunk(8).max_threads_per_node(2),
            |r| {
                if r.start < 64 {
                    panicking.store(true, Ordering::Release);
                    panic!("a chunk panicked");
                }
                while !panicking.load(Ordering::Acquire) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                std::thread::sleep(std::time::Duration::from_millis(400));
                other.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
        )
    }));
    assert!(r.is_err(), "the panic reaches the caller");
    let ran = other.into_inner();
    assert!(ran < 8, "the other node ran all {ran} chunks");
}

/// This host's topology and two "nodes" of 64 items each, both on its first
/// node (a one-node host runs them as two).
fn two_ranges_on_one_node() -> (Topology, [NodeRange; 2]) {
    let topology = Topology::new().unwrap();
    let node = node_cpus(&topology)[0].node;
    let ranges = [
        NodeRange { node, range: 0..64 },
        NodeRange {
            node,
            range: 64..128,
        },
    ];
    (topology, ranges)
}

/// A panic undoes every finished chunk, on every node, as an error does:
/// the node that finished before it (its result `Ok`), and the panicking
/// node's own finished chunks. Before, the panic was resumed while the
/// nodes were joined, before the loop that undoes finished nodes, and a
/// node's own panic skipped its undo (seen on that code: "finished but
/// not undone: [0..8, 8..16, ...]"); the docs promised the undo.
#[test]
fn a_panic_undoes_every_finished_chunk_on_every_node() {
    use std::sync::Mutex;
    let (topology, ranges) = two_ranges_on_one_node();
    let a_items = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let undone = Mutex::new(Vec::new());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_numa_with_undo::<()>(
            &topology,
            &NumaJob::new(&ranges).min_chunk(8).max_threads_per_node(2),
            |r| {
                if r.start == 64 {
                    // Node B's first chunk panics once node A has done
                    // all its 64 items (however they were chunked: one
                    // thread a node, as in the 2-node guest, chunks them
                    // otherwise), or after 20 s.
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                    while a_items.load(Ordering::Acquire) < 64
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    panic!("a chunk panicked");
                }
                done.lock().unwrap().push(r.clone());
                if r.start < 64 {
                    a_items.fetch_add(r.len(), Ordering::Release);
                }
                Ok(())
            },
            |r| undone.lock().unwrap().push(r),
        )
    }));
    assert!(r.is_err(), "the panic reaches the caller");
    let (mut done, mut undone) = (done.into_inner().unwrap(), undone.into_inner().unwrap());
    done.sort_by_key(|r| r.start);
    undone.sort_by_key(|r| r.start);
    let missed: Vec<_> = done.iter().filter(|r| !undone.contains(r)).collect();
    assert!(missed.is_empty(), "finished but not undone: {missed:?}");
    assert_eq!(done, undone, "undone without finishing");
    assert_eq!(
        done.iter()
            .filter(|r| r.start < 64)
            .map(|r| r.len())
            .sum::<usize>(),
        64,
        "node A finished first"
    );
}

/// A node the host does not have is an error that names the host's nodes:
/// `usize::MAX` panicked inside hwlocality's bitmap (its indices stop at
/// 2^31 - 1), though `bind_memory` returns a `Result`.
#[test]
fn binding_memory_to_a_node_the_host_lacks_is_an_error() {
    let topology = mmbatch_ktask::numa::hwlocality::Topology::new().unwrap();
    let buf = vec![0u8; 1 << 16];
    for node in [usize::MAX, 1 << 31, 4096] {
        let e = mmbatch_ktask::numa::bind_memory(&topology, &buf, node).unwrap_err();
        assert!(
            matches!(&e, NumaError::NoSuchNode { node: n, nodes } if *n == node && !nodes.is_empty()),
            "{e}"
        );
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}

/// A NUMA job's error names what stopped it (the placement, before any
/// chunk, or a chunk) and prints the cause after.
#[test]
fn numa_job_errors_print_their_cause() {
    let place: NumaJobError<String> = NumaJobError::Place(NumaError::NoSuchNode {
        node: 7,
        nodes: vec![0, 1],
    });
    let inner = NumaError::NoSuchNode {
        node: 7,
        nodes: vec![0, 1],
    };
    assert_eq!(
        place.to_string(),
        format!("the NUMA job was not started: {inner}")
    );
    let chunk: NumaJobError<String> = NumaJobError::Chunk("disk on fire".into());
    assert!(chunk.to_string().starts_with("a chunk failed"), "{chunk}");
    assert!(chunk.to_string().ends_with(": disk on fire"), "{chunk}");
    // The placement's refusal is the source an error chain shows.
    use std::error::Error as _;
    assert_eq!(
        place.source().map(ToString::to_string),
        Some(inner.to_string())
    );
    assert!(chunk.source().is_none());
}

#[test]
fn a_numa_job_runs_a_thread_per_cpu_and_refuses_none() {
    let nodes = [NodeCpus {
        node: 0,
        cpus: vec![0, 1],
    }];
    let job = NumaJob::new([NodeRange {
        node: 0,
        range: 0..1 << 20,
    }]);
    assert_eq!(job.ranges().len(), 1);
    // By default a thread per CPU of the node.
    assert_eq!(job.place(&nodes).unwrap()[0].threads, 2);
    // No thread at all is refused, as a `Job` refuses it (it ran on one).
    let e = job.max_threads_per_node(0).place(&nodes).unwrap_err();
    assert_eq!(e, NumaError::Job(mmbatch_ktask::JobError::ZeroThreads));
}
