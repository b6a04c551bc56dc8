//! NUMA placement checked through the kernel, not through our own
//! bookkeeping: after `run_numa` (with and without `bind_memory`), each
//! node's pages are on that node as `move_pages(2)` reports it, and each
//! node's chunks ran on that node's CPUs as `sched_getcpu(3)` reports it.
//!
//! They need a kernel with two or more nodes: `cargo xtask vm` boots one
//! (it passes the topology it gave QEMU as `MMBATCH_VM_TOPOLOGY`, and a
//! guest that does not show it fails here). On a one-node host each test
//! says it was skipped and why.

use std::{collections::BTreeMap, fs, ops::Range, sync::Mutex};

use mmbatch_ktask::numa::hwlocality::Topology;
use mmbatch_ktask::{
    Mapping,
    numa::{NodeRange, NumaJob, bind_memory, node_cpus, prefer_memory, run_numa},
};

const PAGE: usize = 4096;
/// Pages per node: a few chunks' worth, small enough for TCG.
const PAGES: usize = 512;

/// The kernel's nodes and their CPUs, from sysfs.
fn sysfs_nodes() -> BTreeMap<usize, Vec<usize>> {
    let mut nodes = BTreeMap::new();
    let Ok(dir) = fs::read_dir("/sys/devices/system/node") else {
        return nodes;
    };
    for e in dir.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(n) = name.strip_prefix("node").and_then(|n| n.parse().ok()) else {
            continue;
        };
        let list = fs::read_to_string(e.path().join("cpulist")).unwrap_or_default();
        nodes.insert(n, parse_cpulist(list.trim()));
    }
    nodes
}

/// `0-3,8,10-11` → `[0, 1, 2, 3, 8, 10, 11]`.
fn parse_cpulist(s: &str) -> Vec<usize> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .flat_map(|p| match p.split_once('-') {
            Some((a, b)) => a.parse().unwrap()..b.parse::<usize>().unwrap() + 1,
            None => {
                let a: usize = p.parse().unwrap();
                a..a + 1
            }
        })
        .collect()
}

/// The topology `cargo xtask vm` gave QEMU (`node:cpu,cpu;...`), when we
/// run in its guest.
fn vm_topology() -> Option<BTreeMap<usize, Vec<usize>>> {
    let s = std::env::var("MMBATCH_VM_TOPOLOGY").ok()?;
    Some(
        s.split(';')
            .map(|n| {
                let (node, cpus) = n.split_once(':').expect("node:cpus");
                (
                    node.parse().unwrap(),
                    cpus.split(',')
                        .filter(|c| !c.is_empty())
                        .map(|c| c.parse().unwrap())
                        .collect(),
                )
            })
            .collect(),
    )
}

/// The nodes, or `None` (and a line saying why) on a one-node host.
fn nodes_or_skip(test: &str) -> Option<BTreeMap<usize, Vec<usize>>> {
    let nodes = sysfs_nodes();
    if nodes.len() < 2 {
        assert!(
            vm_topology().is_none(),
            "the guest was booted with nodes {:?} but the kernel shows {nodes:?}",
            vm_topology()
        );
        eprintln!(
            "{test}: skipped: this kernel has {} NUMA node(s); run `cargo xtask vm` for a guest with two or more",
            nodes.len()
        );
        return None;
    }
    Some(nodes)
}

/// The node each page of `range` of `m` is on (`move_pages` with no
/// target nodes: a query).
fn page_nodes(m: &mut Mapping, range: Range<usize>) -> Vec<i32> {
    let base = m.as_ptr();
    let pages: Vec<*mut libc::c_void> = range
        .clone()
        .step_by(PAGE)
        // SAFETY: offsets inside the mapping (the range is within it).
        .map(|off| unsafe { base.add(off) }.cast())
        .collect();
    let mut status = vec![i32::MIN; pages.len()];
    // SAFETY: `pages` and `status` have `pages.len()` entries; a null
    // node list asks only where each page is.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages.len(),
            pages.as_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    assert_eq!(r, 0, "move_pages: {}", std::io::Error::last_os_error());
    status
}

fn current_cpu() -> usize {
    // SAFETY: no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    assert!(c >= 0, "sched_getcpu: {}", std::io::Error::last_os_error());
    c as usize
}

#[test]
fn hwloc_sees_the_kernels_nodes() {
    let Some(nodes) = nodes_or_skip("hwloc_sees_the_kernels_nodes") else {
        return;
    };
    let topology = Topology::new().unwrap();
    let hwloc: BTreeMap<usize, Vec<usize>> = node_cpus(&topology)
        .into_iter()
        .map(|n| (n.node, n.cpus))
        .collect();
    assert_eq!(
        hwloc, nodes,
        "hwloc's nodes and CPUs vs the kernel's (sysfs)"
    );
    if let Some(vm) = vm_topology() {
        assert_eq!(
            nodes, vm,
            "the kernel's nodes vs the topology given to QEMU"
        );
    }
    eprintln!("nodes and their CPUs (kernel, hwloc agree): {nodes:?}");
}

/// The mapping, each node's range of it, and the CPUs each node's chunks
/// ran on.
type Touched = (
    Mapping,
    Vec<(usize, Range<usize>)>,
    BTreeMap<usize, Vec<usize>>,
);

/// Runs one range per node over a fresh mapping, touching every page, and
/// returns the mapping and the CPUs each node's chunks ran on.
fn touch_per_node(nodes: &BTreeMap<usize, Vec<usize>>, bind: bool) -> Touched {
    let topology = Topology::new().unwrap();
    let len = nodes.len() * PAGES * PAGE;
    let mut m = Mapping::anonymous(len).unwrap();
    // Base pages: with THP on (a guest's default is `always`) the first
    // touch of a huge page that straddles two nodes' ranges places all of
    // it, so ranges would have to be 2 MiB-aligned (run_numa's `align`).
    // SAFETY: advice on our own mapping.
    let r = unsafe { libc::madvise(m.as_ptr().cast(), len, libc::MADV_NOHUGEPAGE) };
    assert_eq!(r, 0, "madvise: {}", std::io::Error::last_os_error());
    let ranges: Vec<(usize, Range<usize>)> = nodes
        .keys()
        .enumerate()
        .map(|(i, &n)| (n, i * PAGES * PAGE..(i + 1) * PAGES * PAGE))
        .collect();
    if !bind {
        // Placed by the first touch, as by default, but under a policy of
        // the mapping's own (`MPOL_LOCAL`), which NUMA balancing never
        // scans: its scan makes page table entries `PROT_NONE` for hinting
        // faults, which `move_pages` reads as "not present" (-ENOENT) on
        // some kernels (every page of the repro's interleaved region
        // once, in CI's 6.1 guest). A bound range's policy is skipped the
        // same way.
        const MPOL_LOCAL: libc::c_long = 4;
        // SAFETY: a policy for our own mapping; no node mask is read.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                m.as_ptr(),
                len,
                MPOL_LOCAL,
                std::ptr::null::<u64>(),
                0,
                0,
            )
        };
        assert_eq!(
            r,
            0,
            "mbind(MPOL_LOCAL): {}",
            std::io::Error::last_os_error()
        );
    } else {
        for (n, r) in &ranges {
            bind_memory(
                &topology,
                &m.as_mut_slice().expect("read-write")[r.clone()],
                *n,
            )
            .unwrap();
        }
    }
    let base = m.as_ptr() as usize;
    let ran_on = Mutex::new(BTreeMap::<usize, Vec<usize>>::new());
    let node_of = |off: usize| ranges.iter().find(|(_, r)| r.contains(&off)).unwrap().0;
    let jobs: Vec<NodeRange> = ranges
        .iter()
        .map(|(n, r)| NodeRange {
            node: *n,
            range: r.clone(),
        })
        .collect();
    run_numa::<()>(
        &topology,
        &NumaJob::new(jobs)
            .align(PAGE)
            .min_chunk(16 * PAGE)
            .max_threads_per_node(4),
        |r| {
            let cpu = current_cpu();
            for off in r.clone().step_by(PAGE) {
                // SAFETY: `off` is inside the mapping; chunks are disjoint.
                unsafe { ((base + off) as *mut u8).write_volatile(1) };
            }
            ran_on
                .lock()
                .unwrap()
                .entry(node_of(r.start))
                .or_default()
                .push(cpu);
            Ok(())
        },
    )
    .unwrap();
    (m, ranges, ran_on.into_inner().unwrap())
}

/// Threads bound to a node's CPUs allocate from that node on first touch
/// (the default policy is local): pages and CPUs both say whether the
/// CPU binding took effect.
#[test]
fn run_numa_runs_each_range_on_its_nodes_cpus_and_memory() {
    let Some(nodes) = nodes_or_skip("run_numa_runs_each_range_on_its_nodes_cpus_and_memory") else {
        return;
    };
    let with_cpus: BTreeMap<usize, Vec<usize>> =
        nodes.into_iter().filter(|(_, c)| !c.is_empty()).collect();
    if with_cpus.len() < 2 {
        eprintln!("skipped: fewer than two nodes have CPUs");
        return;
    }
    let (mut m, ranges, ran_on) = touch_per_node(&with_cpus, false);
    for (node, r) in &ranges {
        let on = page_nodes(&mut m, r.clone());
        let elsewhere = on.iter().filter(|&&p| p != *node as i32).count();
        assert_eq!(
            elsewhere,
            0,
            "node {node}: {elsewhere} of {} pages elsewhere ({:?}...); chunks ran on CPUs {ran_on:?}",
            on.len(),
            &on[..on.len().min(8)]
        );
        let cpus = &ran_on[node];
        assert!(
            cpus.iter().all(|c| with_cpus[node].contains(c)),
            "node {node}'s chunks ran on CPUs {cpus:?}, its CPUs are {:?}",
            with_cpus[node]
        );
        eprintln!(
            "node {node}: {} pages on node {node} (move_pages), chunks ran on CPUs {cpus:?}",
            on.len()
        );
    }
}

/// With `bind_memory`, every node's range lands on it, a node without
/// CPUs included (its chunks run on any CPU).
#[test]
fn bound_ranges_land_on_their_nodes() {
    let Some(nodes) = nodes_or_skip("bound_ranges_land_on_their_nodes") else {
        return;
    };
    let (mut m, ranges, _) = touch_per_node(&nodes, true);
    for (node, r) in &ranges {
        let on = page_nodes(&mut m, r.clone());
        assert!(
            on.iter().all(|&p| p == *node as i32),
            "node {node}: pages on {:?}",
            on.iter().fold(BTreeMap::<i32, usize>::new(), |mut a, &p| {
                *a.entry(p).or_default() += 1;
                a
            })
        );
        eprintln!(
            "node {node} (CPUs {:?}): {} bound pages on node {node} (move_pages)",
            nodes[node],
            on.len()
        );
    }
}

#[test]
fn cpulists_parse() {
    assert_eq!(parse_cpulist("0-3,8,10-11"), [0, 1, 2, 3, 8, 10, 11]);
    assert_eq!(parse_cpulist(""), Vec::<usize>::new());
}

/// The policy the kernel holds for the page at `addr`
/// (`get_mempolicy(MPOL_F_ADDR)`), its mode flags masked off.
fn policy_at(addr: *const u8) -> i32 {
    const MPOL_F_ADDR: libc::c_ulong = 1 << 1;
    let mut mode: i32 = -1;
    // SAFETY: `mode` is written; no node mask is asked for (null, 0);
    // the address is the caller's mapped page.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut i32,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr,
            MPOL_F_ADDR,
        )
    };
    assert_eq!(r, 0, "get_mempolicy: {}", std::io::Error::last_os_error());
    mode & 0xff
}

/// `bind_memory` gives the range the kernel's `MPOL_BIND` policy, as its
/// docs say, and `prefer_memory` a preferred one (one node is enough to
/// ask). Without hwloc's strict flag, `bind_memory` gave
/// `MPOL_PREFERRED_MANY` (5): pages fell back to other nodes unsaid.
#[test]
fn bound_memory_has_the_bind_policy() {
    const MPOL_PREFERRED: i32 = 1;
    const MPOL_BIND: i32 = 2;
    const MPOL_PREFERRED_MANY: i32 = 5;
    let topology = Topology::new().unwrap();
    let node = node_cpus(&topology)[0].node;
    let m = Mapping::anonymous(16 * PAGE).unwrap();
    let (bound, preferred) = m.as_slice().unwrap().split_at(8 * PAGE);
    bind_memory(&topology, bound, node).unwrap();
    prefer_memory(&topology, preferred, node).unwrap();
    assert_eq!(
        policy_at(bound.as_ptr()),
        MPOL_BIND,
        "bound (1: preferred, 5: preferred-many)"
    );
    assert!(
        [MPOL_PREFERRED, MPOL_PREFERRED_MANY].contains(&policy_at(preferred.as_ptr())),
        "preferred: {}",
        policy_at(preferred.as_ptr())
    );
}
