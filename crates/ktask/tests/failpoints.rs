//! Refusals injected with the `fail` crate's fail points (on in tests
//! only): a refused helper thread, a panicking start hook, a pool that
//! cannot grow, an mmap that fails. One `FailScenario` at a time.

use std::sync::atomic::{AtomicUsize, Ordering};

use fail::FailScenario;
use mmbatch_ktask::numa::hwlocality::{
    Topology,
    cpu::{binding::CpuBindingFlags, cpuset::CpuSet},
};
use mmbatch_ktask::{
    HugeError, HugePageSize, HugePagesUnavailable, HugeRegion, Job,
    numa::{NodeRange, NumaJob, NumaJobError, node_cpus, run_numa, run_numa_with_undo},
    run,
};

fn job(max_threads: usize) -> Job {
    Job::new(0, 1 << 12)
        .align(1)
        .min_chunk(1)
        .max_threads(max_threads)
}

fn sum_of(job: &Job) -> usize {
    let sum = AtomicUsize::new(0);
    run::<()>(job, |r| {
        sum.fetch_add(r.sum(), Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    sum.into_inner()
}

/// The message of the panic [`sum_of`] must end in.
fn panic_of_sum(job: &Job) -> String {
    let e = std::panic::catch_unwind(|| sum_of(job)).unwrap_err();
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap()
}

/// Runs test `name` in a child with a bounded wait and returns `true` in
/// the test runner; returns `false` in the child, which runs the body.
/// Every test here that runs a multi-threaded job does this: a start gate
/// that never opens (seen with the gate's `open` mutated away) hangs every
/// such job, and one in-process hang would hang the whole binary instead
/// of failing the tests that catch it.
fn in_child(name: &str) -> bool {
    match mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(10)) {
        Some(run) => {
            run.expect_success();
            true
        }
        None => false,
    }
}

#[test]
fn refused_helpers_leave_the_job_to_those_that_started() {
    if in_child("refused_helpers_leave_the_job_to_those_that_started") {
        return;
    }
    let scenario = FailScenario::setup();
    let want = (0..1usize << 12).sum::<usize>();
    for refuse in ["return", "1*off->return", "2*off->return"] {
        fail::cfg("ktask::spawn", refuse).unwrap();
        assert_eq!(sum_of(&job(4)), want, "{refuse}");
    }
    drop(scenario);
}

/// The caller panics while spawning helpers (here the second spawn; a
/// panic there is otherwise hard to cause): the helper already started
/// waited at the start gate forever, and the scope waited for it. The
/// gate now opens however the spawning ends. In a child process with a
/// bounded wait; seen hanging on the code before ("did not finish in
/// 30s").
#[test]
fn a_panic_while_spawning_helpers_releases_those_started() {
    if in_child("a_panic_while_spawning_helpers_releases_those_started") {
        return;
    }
    let scenario = FailScenario::setup();
    fail::cfg("ktask::spawn", "1*off->1*panic(injected spawn panic)->off").unwrap();
    let msg = panic_of_sum(&job(4));
    assert!(msg.contains("injected spawn panic"), "{msg}");
    assert_eq!(sum_of(&job(4)), (0..1usize << 12).sum::<usize>());
    drop(scenario);
}

/// No chunk runs before the caller has spawned every helper (ktask's start
/// gate: helpers running ahead convoyed on the mmap lock while the caller
/// was still spawning the rest). The fail point counts each spawn and
/// holds the caller there for 50 ms, time for a helper that did not wait
/// to run chunks; every chunk must see all three spawns. In a child: a
/// gate that never opens hangs.
#[test]
fn no_chunk_runs_before_every_helper_is_spawned() {
    static SPAWNS: AtomicUsize = AtomicUsize::new(0);
    if in_child("no_chunk_runs_before_every_helper_is_spawned") {
        return;
    }
    let scenario = FailScenario::setup();
    fail::cfg_callback("ktask::spawn", || {
        SPAWNS.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(50));
    })
    .unwrap();
    let fewest_seen = AtomicUsize::new(usize::MAX);
    run::<()>(&job(4), |_| {
        fewest_seen.fetch_min(SPAWNS.load(Ordering::SeqCst), Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    assert_eq!(
        fewest_seen.into_inner(),
        3,
        "a chunk ran before the last spawn"
    );
    drop(scenario);
}

#[test]
fn a_panicking_start_hook_reaches_the_caller_not_a_deadlock() {
    if in_child("a_panicking_start_hook_reaches_the_caller_not_a_deadlock") {
        return;
    }
    let scenario = FailScenario::setup();
    fail::cfg("ktask::start", "1*panic(injected start hook panic)->off").unwrap();
    let msg = panic_of_sum(&job(4));
    assert!(msg.contains("injected start hook panic"), "{msg}");
    // And the next job is unaffected.
    assert_eq!(sum_of(&job(4)), (0..1usize << 12).sum::<usize>());
    drop(scenario);
}

#[test]
fn a_node_thread_refused_runs_on_the_caller() {
    if in_child("a_node_thread_refused_runs_on_the_caller") {
        return;
    }
    let scenario = FailScenario::setup();
    let topology = Topology::new().unwrap();
    let node = node_cpus(&topology)[0].node;
    fail::cfg("ktask::spawn_node", "1*off->return").unwrap();
    let sum = AtomicUsize::new(0);
    let ranges = [
        NodeRange {
            node,
            range: 0..4096,
        },
        NodeRange {
            node,
            range: 4096..8192,
        },
    ];
    run_numa::<()>(
        &topology,
        &NumaJob::new(&ranges).min_chunk(64).max_threads_per_node(2),
        |r| {
            sum.fetch_add(r.sum(), Ordering::Relaxed);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(sum.into_inner(), (0..8192usize).sum::<usize>());
    drop(scenario);
}

/// A node run on the caller (its thread refused) that panics: the panic
/// unwound straight out of the scope, and the node that had finished on
/// its own thread was never undone. Now it is kept until every finished
/// chunk is undone, as a panic on a node's own thread is.
#[test]
fn a_panic_on_a_node_run_by_the_caller_undoes_the_finished_nodes() {
    if in_child("a_panic_on_a_node_run_by_the_caller_undoes_the_finished_nodes") {
        return;
    }
    let scenario = FailScenario::setup();
    let topology = Topology::new().unwrap();
    let node = node_cpus(&topology)[0].node;
    // Node 0 gets its thread; node 1 is refused one and runs on the
    // caller, after node 0 has finished (the caller joins it first).
    fail::cfg("ktask::spawn_node", "1*off->return").unwrap();
    let ranges = [
        NodeRange {
            node,
            range: 0..4096,
        },
        NodeRange {
            node,
            range: 4096..8192,
        },
    ];
    let done = AtomicUsize::new(0);
    let undone = AtomicUsize::new(0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_numa_with_undo::<()>(
            &topology,
            &NumaJob::new(&ranges).min_chunk(64).max_threads_per_node(2),
            |r| {
                assert!(r.start < 4096, "injected panic on node 1");
                done.fetch_add(r.sum(), Ordering::Relaxed);
                Ok(())
            },
            |r| {
                undone.fetch_add(r.sum(), Ordering::Relaxed);
            },
        )
    }));
    fail::remove("ktask::spawn_node");
    let e = r.expect_err("node 1's panic reaches the caller");
    let msg = mmbatch_testkit::panic_message(&*e);
    assert!(msg.contains("injected panic on node 1"), "{msg}");
    assert_eq!(done.into_inner(), (0..4096usize).sum::<usize>());
    assert_eq!(
        undone.into_inner(),
        (0..4096usize).sum::<usize>(),
        "node 0 finished and was not undone"
    );
    drop(scenario);
}

/// The node the OS refused a thread for runs on the caller, bound to the
/// node's CPUs: the caller's own binding is put back after (it stayed on
/// the node's CPUs, and so did every thread it started later).
#[test]
fn the_caller_gets_its_own_binding_back() {
    if in_child("the_caller_gets_its_own_binding_back") {
        return;
    }
    let topology = Topology::new().unwrap();
    let cpus = node_cpus(&topology);
    let all: Vec<usize> = cpus.iter().flat_map(|n| n.cpus.iter().copied()).collect();
    if all.len() < 2 {
        println!("skipped: one CPU, no binding to tell apart");
        return;
    }
    // A thread of its own, so the binding changes no other test's.
    std::thread::spawn(move || {
        let scenario = FailScenario::setup();
        let mut one = CpuSet::new();
        one.set(all[0]);
        if topology.bind_cpu(&one, CpuBindingFlags::THREAD).is_err() {
            println!("skipped: this host refuses CPU binding");
            return;
        }
        fail::cfg("ktask::spawn_node", "return").unwrap();
        let ranges = [NodeRange {
            node: cpus[0].node,
            range: 0..4096,
        }];
        run_numa::<()>(
            &topology,
            &NumaJob::new(&ranges).min_chunk(64).max_threads_per_node(1),
            |_| Ok(()),
        )
        .unwrap();
        fail::remove("ktask::spawn_node");
        let now = topology.cpu_binding(CpuBindingFlags::THREAD).unwrap();
        assert_eq!(now, one, "the caller's binding is its own again");
        drop(scenario);
    })
    .join()
    .unwrap();
}

fn pool() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
        .map_or(0, |s| s.trim().parse().unwrap_or(0))
}

#[test]
fn huge_pages_not_reservable_is_a_clear_error_and_reserves_nothing() {
    let scenario = FailScenario::setup();
    let before = pool();
    fail::cfg("ktask::hugepool", "return").unwrap();
    // More than any test host has free.
    let e = HugeRegion::new_growing_pool(HugePageSize::Size2M, 64 << 20).unwrap_err();
    assert!(
        matches!(
            e,
            HugeError::NotReservable(HugePagesUnavailable { needed: 32, .. })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("nr_hugepages"), "{e}");
    assert_eq!(pool(), before);
    // The pool grows but the mapping is refused: the pages go back.
    fail::remove("ktask::hugepool");
    fail::cfg("ktask::mmap", "return").unwrap();
    match HugeRegion::new_growing_pool(HugePageSize::Size2M, 4 << 20) {
        Err(HugeError::Map(_)) => {}
        Err(HugeError::NotReservable(_)) => {} // not root
        other => panic!("{other:?}"),
    }
    assert_eq!(pool(), before, "the pages added for the refused mapping");
    drop(scenario);
}

/// A pool that cannot grow leaves `new_growing_pool` to the mapping's
/// own reservation, as `new` is: with overcommit (here 2 pages, the pool
/// empty) the region is made from surplus pages. Before, a growth that
/// fell short was refused as `NotReservable` where `new` succeeded.
/// Root only (sets the overcommit, and puts it back).
#[test]
fn a_pool_that_cannot_grow_still_maps_overcommitted_pages() {
    let scenario = FailScenario::setup();
    if !is_root() || pool() != 0 {
        eprintln!("not root, or the pool holds pages: not exercised");
        return;
    }
    let over = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_overcommit_hugepages";
    let found = std::fs::read_to_string(over).unwrap();
    std::fs::write(over, "2").unwrap();
    fail::cfg("ktask::hugepool", "return").unwrap();
    let made = HugeRegion::new_growing_pool(HugePageSize::Size2M, 2 << 20).map(drop);
    std::fs::write(over, found.trim()).unwrap();
    made.unwrap();
    assert_eq!(pool(), 0, "the surplus page left with the region");
    drop(scenario);
}

/// `HugeRegion::new` never changes the system's pool, root or not: a pool
/// with too few free pages is an error naming the command that reserves
/// them. Before, the constructor grew the pool whenever it ran as root
/// (the fail point's panic: "the pool was grown").
#[test]
fn new_takes_free_pages_and_never_grows_the_pool() {
    let scenario = FailScenario::setup();
    fail::cfg("ktask::hugepool", "panic(the pool was grown)").unwrap();
    let free = HugePageSize::Size2M.available_pages();
    let len = (free + 32) * (2 << 20);
    let e = HugeRegion::new(HugePageSize::Size2M, len).unwrap_err();
    let HugeError::NotReservable(u) = &e else {
        panic!("{e}")
    };
    assert_eq!((u.needed, u.size), (free + 32, HugePageSize::Size2M));
    assert!(e.to_string().contains("nr_hugepages"), "{e}");
    drop(scenario);
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The bounds are inclusive: `new` takes exactly the free pages, and
/// `new_growing_pool` grows the pool when what it lacks is exactly the
/// memory available (the fail point reports it), refusing one byte less
/// and memory it cannot read. Sets the pool as root, and puts it back.
#[test]
fn regions_that_fit_exactly_are_not_refused() {
    let scenario = FailScenario::setup();
    if !is_root() {
        eprintln!("not root: the huge page pool cannot be set here; not exercised");
        return;
    }
    let (size, page) = (HugePageSize::Size2M, 2 << 20);
    let path = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    let found = pool();
    std::fs::write(path, (found + 2).to_string()).unwrap();
    let free = size.available_pages();
    let result = std::panic::catch_unwind(|| {
        assert!(free >= 1, "the pool did not grow: {free} free");
        fail::cfg("ktask::hugepool", "panic(the pool was grown)").unwrap();
        drop(HugeRegion::new(size, free * page).expect("exactly the free pages"));
        fail::remove("ktask::hugepool");
        let lacking = |bytes: usize| {
            fail::cfg("ktask::mem_available", &format!("return({bytes})")).unwrap();
            HugeRegion::new_growing_pool(size, (free + 2) * page)
        };
        drop(lacking(2 * page).expect("lacking exactly what is available"));
        let e = lacking(2 * page - 1).unwrap_err();
        assert!(matches!(e, HugeError::NotReservable(_)), "{e}");
        fail::cfg("ktask::mem_available", "return").unwrap();
        let e = HugeRegion::new_growing_pool(size, (free + 2) * page).unwrap_err();
        assert!(matches!(e, HugeError::NotReservable(_)), "{e}");
    });
    std::fs::write(path, found.to_string()).unwrap();
    result.unwrap();
    assert_eq!(pool(), found, "the host's pool put back");
    drop(scenario);
}

/// Two processes growing the pool at once (the fail point holds each
/// between its read of the pool and its write, 300 ms): each counted the
/// pages the other added as its own, and their drops took both out, so
/// the pool ended two pages below where they found it, the pages of its
/// other holder (this test's region) turned surplus (on an empty pool:
/// "left: (2, 2) right: (2, 0)", all 2 pages surplus). The pool lock (`flock` on
/// `nr_hugepages`) serialises them. Root only: sets the pool, and puts it
/// back.
#[test]
fn processes_growing_the_pool_at_once_leave_it_as_they_found_it() {
    const NAME: &str = "processes_growing_the_pool_at_once_leave_it_as_they_found_it";
    let size = HugePageSize::Size2M;
    if std::env::var_os("MMBATCH_POOL_RACE").is_some() {
        // A child: grows the pool by the 2 pages it lacks, holds them, and
        // drops them.
        let scenario = FailScenario::setup();
        let region = HugeRegion::new_growing_pool(size, 2 * (2 << 20))
            .expect("each child grows the pool for its region");
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(region);
        drop(scenario);
        return;
    }
    let scenario = FailScenario::setup();
    if !is_root() {
        eprintln!("not root: the huge page pool cannot be set here; not exercised");
        return;
    }
    let path = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    let surplus = || {
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/surplus_hugepages")
            .map_or(0, |s| s.trim().parse().unwrap_or(0))
    };
    let found = pool();
    std::fs::write(path, (found + 2).to_string()).unwrap();
    let result = std::panic::catch_unwind(|| {
        // Every free page held here, so that each child must grow the pool.
        let free = size.available_pages();
        assert!(free >= 2, "the pool did not grow: {free} free");
        let held = HugeRegion::new(size, free * (2 << 20)).unwrap();
        let children: Vec<_> = [0u64, 100]
            .map(|delay| {
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(delay));
                    mmbatch_testkit::child::run(
                        NAME,
                        std::time::Duration::from_secs(60),
                        &[
                            ("MMBATCH_POOL_RACE", "1"),
                            ("FAILPOINTS", "mmap::pool_write=sleep(300)"),
                        ],
                    )
                })
            })
            .into_iter()
            .collect();
        for child in children {
            child.join().unwrap().expect_success();
        }
        let after = (pool(), surplus());
        drop(held);
        assert_eq!(after, (found + 2, 0), "(the pool, its surplus) after both");
    });
    std::fs::write(path, found.to_string()).unwrap();
    result.unwrap();
    drop(scenario);
}

/// A region larger than the memory available is refused without growing
/// the pool: before, as root, the pool grew by all the huge pages the
/// kernel could find (nearly all free memory, taken from every other
/// process) and then shrank back. The fail point panics if the pool is
/// grown (seen failing on the old code: "the pool was grown").
#[test]
fn a_region_larger_than_memory_is_refused_without_growing_the_pool() {
    let scenario = FailScenario::setup();
    fail::cfg("ktask::hugepool", "panic(the pool was grown)").unwrap();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_kib: usize = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let len = (2 * total_kib * 1024).next_multiple_of(2 << 20);
    let e = HugeRegion::new_growing_pool(HugePageSize::Size2M, len).unwrap_err();
    assert!(matches!(e, HugeError::NotReservable(_)), "{e}");
    drop(scenario);
}

/// A node's failure reaches the caller however its sibling threads race
/// it. The failing thread sets the stop for every node and only then
/// records its error; a sibling on the same node that claimed its next
/// chunk in between saw the stop and recorded "stopped" first, the node
/// reported no failure of its own, and `run_numa` returned `Ok` with the
/// other node's work left done (1 run in about 150 of the `numa` test's;
/// fail point `ktask::node_failed` holds the failing thread in that
/// window).
#[test]
fn a_failure_is_returned_when_a_sibling_sees_the_stop_first() {
    if in_child("a_failure_is_returned_when_a_sibling_sees_the_stop_first") {
        return;
    }
    use std::sync::Mutex;
    let scenario = FailScenario::setup();
    fail::cfg("ktask::node_failed", "sleep(300)").unwrap();
    let topology = Topology::new().unwrap();
    let node = node_cpus(&topology)[0].node;
    if node_cpus(&topology)[0].cpus.len() < 2 {
        // One thread a node: no sibling to race (the `xtask vm` guest).
        eprintln!("node {node} has one CPU: the sibling race is not exercised here");
    }
    let ranges = [
        NodeRange { node, range: 0..64 },
        NodeRange {
            node,
            range: 64..128,
        },
    ];
    let done = Mutex::new(Vec::new());
    let undone = Mutex::new(Vec::new());
    let r = run_numa_with_undo(
        &topology,
        &NumaJob::new(&ranges).min_chunk(8).max_threads_per_node(2),
        |r| {
            if r.start == 64 {
                return Err("injected");
            }
            if r.start > 64 {
                // The sibling is busy while chunk 64 fails, then claims
                // its next chunk while the failing thread is held.
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            done.lock().unwrap().push(r.start);
            Ok(())
        },
        |r| undone.lock().unwrap().push(r.start),
    );
    fail::remove("ktask::node_failed");
    let e = r.expect_err("chunk 64's error reaches the caller");
    assert!(matches!(e, NumaJobError::Chunk("injected")), "{e:?}");
    assert_eq!(
        e.to_string(),
        "a chunk failed (every node stopped, and the chunks that had finished went to the \
         undo, if one was given): injected"
    );
    let (mut done, mut undone) = (done.into_inner().unwrap(), undone.into_inner().unwrap());
    done.sort_unstable();
    undone.sort_unstable();
    // Node 0 may not have started before the stop (it then runs nothing):
    // whatever it finished is undone.
    assert_eq!(done, undone, "every finished chunk undone, nothing else");
    drop(scenario);
}
