//! Experiment `timedmunlock`: seed 000 on the host, as mmtests runs it —
//! mmap an area `MAP_LOCKED | MAP_POPULATE` (the THP and interleave rows
//! lock theirs after mapping, and so do the others where THP is "always":
//! below), time `munlock` of all of it.
//!
//! Rows:
//! - `raw/nothp`: direct system calls, no crate: `mmap(MAP_LOCKED |
//!   MAP_POPULATE)`, `munlock` (under THP "always", where that populates
//!   huge pages: `mmap`, `madvise(MADV_NOHUGEPAGE)`, `mlock`);
//! - `region/nothp`: the same through [`LockedRegion`] (`map_locked`;
//!   under THP "always", its default build: the same three calls);
//! - `raw/thp`: `mmap`, `madvise(MADV_HUGEPAGE)`, `mlock`, then `munlock`;
//! - `region/thp`: the same through [`LockedRegion`] with
//!   [`Pages::Transparent`];
//! - `region/chunked-64M`: [`LockedRegion::unlock_chunked`] in 64 MiB
//!   calls, so no call holds the mmap lock for long (mapped as
//!   `region/nothp`);
//! - `region/interleave`: base pages interleaved over every node
//!   (`set_mempolicy(MPOL_INTERLEAVE)`, locked by `mlock` after the
//!   mapping), only on hosts with two or more.
//!
//! Only the munlock is timed; populating and unmapping are not. Every
//! row but the two THP rows is checked to hold no PMD-sized huge page
//! before it is timed (`AnonHugePages` in `/proc/self/smaps`; smaller
//! multi-size THP folios are not counted there, and a size set to
//! "always" also makes the rows lock after their advice).

use std::{ffi::c_void, time::Instant};

use mmbatch_mlock::{LockedRegion, Pages};

use crate::{Config, Experiment, Host, Metric, Progress, Report, Row, Table};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    id: "timedmunlock",
    seed: "000 (munlock batching, host)",
    title: "munlock of a MAP_LOCKED|MAP_POPULATE area on the host kernel",
    run,
    big_scale: 56e9 / BYTES,
    memory: |cfg| (BYTES * cfg.scale) as u64,
    seed_refs: &[],
    seed_why: "The seed's gains are the munlock series itself, which every kernel since 3.12 carries; here the host kernel's munlock is measured through raw system calls and through the crate, so there is no seed figure to set beside.",
    contention: "",
};

/// Samples at most, whatever `--samples` asks: populating 4 GiB takes most
/// of a sample's 2-3 s, and the base-page munlock rows varied by 0.2-1.4%
/// between samples.
pub const MAX_SAMPLES: usize = 3;

/// Bytes at scale 1.0: 4 GiB (the seed used 56 GB: `--scale 14`).
pub const BYTES: f64 = (4u64 << 30) as f64;

/// The seed's munlock of 56 GB without THP on one node, before and after
/// the series, in seconds.
pub const SEED_SECONDS: (f64, f64) = (3.38, 1.91);

/// How a row maps, locks and unlocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Direct calls, base pages.
    RawNoThp,
    /// LockedRegion, base pages.
    RegionNoThp,
    /// Direct calls, transparent huge pages.
    RawThp,
    /// LockedRegion, transparent huge pages.
    RegionThp,
    /// LockedRegion, unlocked 64 MiB per call.
    RegionChunked,
    /// LockedRegion, pages interleaved over all nodes.
    RegionInterleave,
}

impl Kind {
    /// The row name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::RawNoThp => "raw/nothp",
            Kind::RegionNoThp => "region/nothp",
            Kind::RawThp => "raw/thp",
            Kind::RegionThp => "region/thp",
            Kind::RegionChunked => "region/chunked-64M",
            Kind::RegionInterleave => "region/interleave",
        }
    }
}

/// Maps and populates `bytes` locked the `kind` way, then times only its
/// munlock; returns seconds.
pub fn measure(kind: Kind, bytes: usize) -> f64 {
    match kind {
        Kind::RawNoThp | Kind::RawThp => raw(kind == Kind::RawThp, bytes),
        _ => {
            let interleave = kind == Kind::RegionInterleave;
            if interleave {
                set_interleave(true);
            }
            let builder = LockedRegion::builder(bytes);
            let region = match kind {
                Kind::RegionThp => builder.pages(Pages::Transparent).build(),
                // Base pages locked after their advice, as the raw row.
                _ if thp_always() => builder.build(),
                // Locked after its `MADV_NOHUGEPAGE`, not populated by
                // the mapping: base pages under any THP mode. Huge pages
                // (THP "always" populates MAP_LOCKED memory huge) are
                // interleaved whole, and a node short of free 2 MiB
                // blocks passes its share to another (CI's guest once put
                // none of 4096 pages on node 0).
                Kind::RegionInterleave => builder.build(),
                _ => builder.map_locked(true).build(),
            };
            if interleave {
                set_interleave(false);
            }
            let region = region.unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
            if kind != Kind::RegionThp {
                // The region unmaps itself as the panic unwinds.
                base_pages_only(kind, region.as_ptr()).unwrap_or_else(|e| panic!("{e}"));
            }
            if interleave {
                check_interleaved(region.as_ptr(), region.len());
            }
            let start = Instant::now();
            let unlocked = if kind == Kind::RegionChunked {
                region.unlock_chunked(64 << 20)
            } else {
                region.unlock()
            };
            let secs = start.elapsed().as_secs_f64();
            unlocked.unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
            assert_eq!(
                region.locked_bytes().expect("smaps"),
                0,
                "munlock left pages locked"
            );
            secs
        }
    }
}

/// Whether THP is "always" here, for any size (see
/// [`Modes::always`](crate::thp::Modes::always)): `MAP_LOCKED |
/// MAP_POPULATE` then faults huge pages before any advice can refuse
/// them, so the base-page rows map, advise `MADV_NOHUGEPAGE` (which
/// refuses every size) and lock with `mlock` instead.
fn thp_always() -> bool {
    crate::thp::Modes::read().always()
}

/// Bytes of transparent huge pages in the mapping holding `p`: its
/// `AnonHugePages` in `/proc/self/smaps`.
fn huge_bytes(p: *const u8) -> std::io::Result<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(anon_huge_bytes(&smaps, p as u64))
}

/// The `AnonHugePages` of the mapping holding `addr` in `smaps` (the text
/// of `/proc/PID/smaps`), in bytes; 0 if no mapping holds it.
fn anon_huge_bytes(smaps: &str, addr: u64) -> u64 {
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_once(' ').and_then(|(r, _)| r.split_once('-'));
        if let Some((Ok(a), Ok(b))) =
            range.map(|(a, b)| (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)))
        {
            inside = (a..b).contains(&addr);
        } else if let Some(kb) = line.strip_prefix("AnonHugePages:").filter(|_| inside) {
            return kb
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
                * 1024;
        }
    }
    0
}

/// Whether the mapping at `p`, locked for row `kind`, holds base pages
/// only (the row times what its name says); the cause if not.
fn base_pages_only(kind: Kind, p: *const u8) -> Result<(), String> {
    match huge_bytes(p) {
        Ok(0) => Ok(()),
        Ok(huge) => Err(format!(
            "{}: {} MiB of the area is transparent huge pages, which the row would time \
             (THP \"always\" populating MAP_LOCKED memory?)",
            kind.name(),
            huge >> 20
        )),
        Err(e) => Err(format!(
            "{}: reading /proc/self/smaps to check for huge pages: {e}",
            kind.name()
        )),
    }
}

/// mmtests' timedmunlock with direct system calls.
fn raw(thp: bool, bytes: usize) -> f64 {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // Locked by the mapping as mmtests does, but where that would give
    // huge pages to the base-page row.
    let lock_on_map = !thp && !thp_always();
    let flags = if lock_on_map {
        flags | libc::MAP_LOCKED | libc::MAP_POPULATE
    } else {
        flags
    };
    // SAFETY: a fresh anonymous mapping chosen by the kernel.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    if !lock_on_map {
        let advice = if thp {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: [p, p + bytes) is the mapping just made.
        let r = unsafe { libc::madvise(p, bytes, advice) };
        assert_eq!(r, 0, "madvise: {}", std::io::Error::last_os_error());
        // SAFETY: as above.
        let r = unsafe { libc::mlock(p, bytes) };
        assert_eq!(r, 0, "mlock: {}", std::io::Error::last_os_error());
    }
    if !thp {
        if let Err(e) = base_pages_only(Kind::RawNoThp, p.cast()) {
            // SAFETY: as above; nothing refers to the mapping.
            unsafe { libc::munmap(p, bytes) };
            panic!("{e}");
        }
    }
    let start = Instant::now();
    // SAFETY: as above.
    let r = unsafe { libc::munlock(p, bytes) };
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(r, 0, "munlock: {}", std::io::Error::last_os_error());
    // SAFETY: as above; nothing refers to the mapping any more.
    unsafe { libc::munmap(p, bytes) };
    secs
}

/// The NUMA nodes (OS indices), from hwloc as `run_numa` sees them; `[0]`
/// where hwloc cannot tell.
pub fn memory_nodes() -> Vec<usize> {
    let nodes: Vec<usize> = hwlocality::Topology::new()
        .map(|t| {
            mmbatch_ktask::numa::node_cpus(&t)
                .into_iter()
                .map(|n| n.node)
                .collect()
        })
        .unwrap_or_default();
    if nodes.is_empty() { vec![0] } else { nodes }
}

/// Interleaves this thread's future allocations over every node with
/// memory (`set_mempolicy(MPOL_INTERLEAVE)`, node ids as the kernel
/// numbers them, gaps included), or restores the default.
fn set_interleave(on: bool) {
    const MPOL_DEFAULT: libc::c_long = 0;
    const MPOL_INTERLEAVE: libc::c_long = 3;
    let mut mask = [0u64; 16];
    for n in memory_nodes().into_iter().filter(|&n| n < 1024) {
        mask[n / 64] |= 1 << (n % 64);
    }
    let (mode, maskp, maxnode): (libc::c_long, *const c_void, libc::c_ulong) = if on {
        (MPOL_INTERLEAVE, mask.as_ptr().cast(), 1024)
    } else {
        (MPOL_DEFAULT, std::ptr::null(), 0)
    };
    // SAFETY: set_mempolicy reads `maxnode` bits from `maskp` (16 u64s
    // here) and touches no other memory.
    let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, maskp, maxnode) };
    assert_eq!(r, 0, "set_mempolicy: {}", std::io::Error::last_os_error());
}

/// Checks through the kernel (`/proc/self/numa_maps`: the pages of each
/// node in the area's mapping) that the interleaved area's pages are
/// spread over every node with memory, each holding at least half its
/// even share: the row measures what it says. Not `move_pages`, which
/// once said "not present" (-ENOENT) of all 4096 pages it was asked
/// about in CI's guest (Linux 6.1, 2 nodes, 1 run in 8), most likely of
/// entries NUMA balancing had made `PROT_NONE` for its hinting faults,
/// which some kernels' `follow_page` does not follow; numa_maps counts
/// every present page.
fn check_interleaved(p: *mut u8, len: usize) {
    let nodes = memory_nodes();
    if nodes.len() < 2 {
        return;
    }
    let maps = std::fs::read_to_string("/proc/self/numa_maps").expect("/proc/self/numa_maps");
    let (line, on) = node_pages(&maps, p as usize)
        .unwrap_or_else(|| panic!("region/interleave: no mapping at {p:p} in numa_maps"));
    let total: usize = on.values().sum();
    let pages = len / mmbatch_mlock::accounting::page_size();
    // At least half the area's pages and no more: the mapping found is
    // the area's alone, populated (a page being migrated is not counted).
    assert!(
        total * 2 >= pages && total <= pages,
        "region/interleave: {total} pages counted in the mapping of {pages} at {p:p} \
         (numa_maps: {line})"
    );
    for n in &nodes {
        let here = on.get(n).copied().unwrap_or(0);
        assert!(
            here * nodes.len() * 2 >= total,
            "region/interleave: only {here} of {total} pages on node {n} of {nodes:?}: not \
             interleaved (numa_maps: {line}; free memory now, MiB: {:?})",
            nodes
                .iter()
                .map(|&n| node_free(n).map(|b| b >> 20))
                .collect::<Vec<_>>()
        );
    }
}

/// The line of `numa_maps` (the text of `/proc/self/numa_maps`) of the
/// mapping that holds `addr` (the last that starts at or below it), and
/// its pages on each node (its `N<node>=<pages>` fields).
fn node_pages(
    numa_maps: &str,
    addr: usize,
) -> Option<(&str, std::collections::BTreeMap<usize, usize>)> {
    let line = numa_maps
        .lines()
        .filter_map(|l| {
            let start = usize::from_str_radix(l.split_whitespace().next()?, 16).ok()?;
            (start <= addr).then_some((start, l))
        })
        .max_by_key(|&(start, _)| start)?
        .1;
    let on = line
        .split_whitespace()
        .filter_map(|f| {
            let (node, pages) = f.strip_prefix('N')?.split_once('=')?;
            Some((node.parse().ok()?, pages.parse().ok()?))
        })
        .collect();
    Some((line, on))
}

/// Node `n`'s free memory in bytes, as the kernel counts it
/// (`MemFree` in `/sys/devices/system/node/nodeN/meminfo`), or `None`
/// where that cannot be read.
fn node_free(n: usize) -> Option<usize> {
    let s = std::fs::read_to_string(format!("/sys/devices/system/node/node{n}/meminfo")).ok()?;
    let kib: usize = s
        .lines()
        .find(|l| l.contains("MemFree:"))?
        .split_whitespace()
        .rev()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib << 10)
}

/// Headroom [`interleave_refusal`] wants on each node beyond its share:
/// the kernel's watermarks (a few MiB a GiB) with room to spare.
const NODE_HEADROOM: usize = 32 << 20;

/// Why the interleaved row of `bytes` cannot measure interleaving here,
/// if it cannot: a node with memory whose free memory is under twice its
/// share plus [`NODE_HEADROOM`]. Interleaving passes a short node's pages
/// to the next node, so the row would time one node's pages (CI's guest
/// once put none of 4096 sampled pages on node 0).
/// `free` gives a node's free memory ([`node_free`]).
fn interleave_refusal(
    bytes: usize,
    nodes: &[usize],
    free: impl Fn(usize) -> Option<usize>,
) -> Option<String> {
    let need = 2 * bytes / nodes.len().max(1) + NODE_HEADROOM;
    nodes.iter().find_map(|&n| {
        let free = free(n)?;
        (free < need).then(|| {
            format!(
                "region/interleave not run: node {n} has {} MiB free, under the {} MiB a node the row needs \
                 (twice its share of the {} MiB area, and {} MiB for the kernel's watermarks)",
                free >> 20,
                need >> 20,
                bytes >> 20,
                NODE_HEADROOM >> 20
            )
        })
    })
}

fn run(cfg: &Config, progress: &mut dyn Progress) -> Report {
    let page = mmbatch_mlock::accounting::page_size();
    let bytes = (((BYTES * cfg.scale) as usize).max(2 << 20) / (2 << 20)) * (2 << 20);
    let host = Host::detect();
    let mut kinds = vec![
        Kind::RawNoThp,
        Kind::RegionNoThp,
        Kind::RawThp,
        Kind::RegionThp,
        Kind::RegionChunked,
    ];
    let refusal = (host.nodes >= 2)
        .then(|| interleave_refusal(bytes, &memory_nodes(), node_free))
        .flatten();
    if host.nodes >= 2 && refusal.is_none() {
        kinds.push(Kind::RegionInterleave);
    }
    let samples = cfg.samples.clamp(1, MAX_SAMPLES);
    let mut measured = vec![Vec::new(); kinds.len()];
    let total = kinds.len() * samples;
    for s in 0..samples {
        for (i, &k) in kinds.iter().enumerate() {
            progress.row(s * kinds.len() + i, total, k.name());
            measured[i].push(measure(k, bytes));
        }
    }
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let rows: Vec<Row> = kinds
        .iter()
        .zip(&measured)
        .map(|(k, s)| {
            let median = crate::Summary::of(s).median;
            Row::timed(
                k.name().to_owned(),
                s.clone(),
                [
                    ("gib", gib),
                    ("ms_per_gib_median", median * 1e3 / gib),
                    ("pages", (bytes / page) as f64),
                ],
            )
        })
        .collect();
    let tables = vec![Table {
        title: format!("timedmunlock, {} MiB", bytes >> 20),
        rows: (0..rows.len()).collect(),
        columns: kinds.iter().map(|k| k.name().to_owned()).collect(),
    }];
    // The samples taken, not those asked for.
    let taken = Config {
        samples: cfg.samples.clamp(1, MAX_SAMPLES),
        ..cfg.clone()
    };
    let mut report = EXPERIMENT.report(&taken, Metric::Seconds, rows, tables);
    let mut notes = Vec::new();
    for (region, raw) in [("region/nothp", "raw/nothp"), ("region/thp", "raw/thp")] {
        // Judged on min times, the seed's "Elapsed min"; medians beside.
        let min = |n: &str| report.row(n).map(|r| crate::Summary::of(&r.samples_s).min);
        if let (Some(a), Some(b)) = (min(region), min(raw)) {
            let d = (a - b) / b * 100.0;
            let dm = report
                .median(region)
                .zip(report.median(raw))
                .map_or(0.0, |(a, b)| (a - b) / b * 100.0);
            // The target bounds the crate's overhead; a region faster than
            // the same system calls made raw is noise (THP munlock of the
            // default area takes under a millisecond).
            notes.push(format!(
                "target: {region} min {:.2} ms vs {raw} {:.2} ms ({d:+.1}%; medians {dm:+.1}%; overhead at most 5%): {}",
                a * 1e3,
                b * 1e3,
                if d <= 5.0 { "met" } else { "MISSED" }
            ));
        }
    }
    let seed_gib = 56.0;
    if let Some(m) = report.median("raw/nothp") {
        notes.push(format!(
            "raw/nothp munlock costs {:.1} ms per GiB here; the seed's 56 GB (read as GiB) took {:.1} ms/GiB \
             before the series (3.38 s) and {:.1} ms/GiB after it (1.91 s)",
            m * 1e3 / gib,
            SEED_SECONDS.0 * 1e3 / seed_gib,
            SEED_SECONDS.1 * 1e3 / seed_gib
        ));
    }
    if host.nodes < 2 {
        notes.push("region/interleave not run: this host has one NUMA node".to_owned());
    }
    notes.extend(refusal);
    if thp_always() {
        notes.push(
            "THP is \"always\" here: the base-page rows map, advise MADV_NOHUGEPAGE and mlock, \
             as MAP_LOCKED|MAP_POPULATE would populate huge pages"
                .to_owned(),
        );
    }
    report.notes = notes;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_unlocks_everything() {
        for k in [
            Kind::RawNoThp,
            Kind::RegionNoThp,
            Kind::RawThp,
            Kind::RegionThp,
            Kind::RegionChunked,
        ] {
            assert!(measure(k, 4 << 20) > 0.0, "{k:?}");
        }
    }

    /// The smaps reader finds the mapping holding the address, not its
    /// neighbours, and reads its `AnonHugePages`.
    #[test]
    fn huge_pages_are_read_from_the_mapping_holding_the_address() {
        let smaps = "\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0 
Size:               4096 kB
AnonHugePages:      2048 kB
VmFlags: rd wr mr mw me lo ac hg 
7f0000400000-7f0000800000 rw-p 00000000 00:00 0 
Size:               4096 kB
AnonHugePages:         0 kB
VmFlags: rd wr mr mw me lo ac nh 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
AnonHugePages:      4096 kB
";
        assert_eq!(anon_huge_bytes(smaps, 0x7f00_0000_0000), 2 << 20);
        assert_eq!(anon_huge_bytes(smaps, 0x7f00_003f_ffff), 2 << 20);
        assert_eq!(anon_huge_bytes(smaps, 0x7f00_0040_0000), 0);
        assert_eq!(anon_huge_bytes(smaps, 0x7ffd_0000_0010), 4 << 20);
        assert_eq!(anon_huge_bytes(smaps, 0x1000), 0, "no mapping");
    }

    /// A mapping's pages per node, from the `numa_maps` line of the
    /// mapping that holds the address, whatever its policy and the
    /// fields around them.
    #[test]
    fn numa_maps_give_each_nodes_pages_of_the_mapping_at_an_address() {
        let maps = "55d0c0a00000 default file=/usr/bin/repro mapped=10 N0=10 kernelpagesize_kB=4\n\
                    7f1200000000 default anon=4096 dirty=4096 active=0 N0=2048 N1=2048 kernelpagesize_kB=4\n\
                    7f1201000000 interleave:0-1 anon=3 dirty=3 N1=3 kernelpagesize_kB=4\n\
                    7ffd00000000 default stack anon=5 dirty=5 N0=5 kernelpagesize_kB=4\n";
        let (line, on) = node_pages(maps, 0x7f12_0000_0000 + 4096 * 7).unwrap();
        assert!(line.starts_with("7f1200000000 "), "{line}");
        assert_eq!(on, [(0, 2048), (1, 2048)].into());
        let (_, on) = node_pages(maps, 0x7f12_0100_0000).unwrap();
        assert_eq!(on, [(1, 3)].into());
        assert!(node_pages(maps, 0x1000).is_none(), "below every mapping");
    }

    /// The interleaved row is refused, naming the node, where a node has
    /// too little free memory for its share, and runs where it has room.
    #[test]
    fn the_interleaved_row_is_refused_on_a_node_short_of_memory() {
        // Node 1 has 100 MiB free, node 0 a GiB; a 40 MiB area wants 20
        // MiB a node, twice that and 32 MiB: 72.
        let free = |n| Some(if n == 1 { 100 << 20 } else { 1 << 30 });
        assert_eq!(interleave_refusal(40 << 20, &[0, 1], free), None);
        let why = interleave_refusal(80 << 20, &[0, 1], free).expect("node 1 is short");
        assert!(
            why.contains("node 1 has 100 MiB free") && why.contains("112 MiB"),
            "{why}"
        );
        // A node whose memory cannot be read is not judged.
        assert_eq!(interleave_refusal(80 << 20, &[0, 1], |_| None), None);
        // This host's reading parses, where there is one.
        if let Some(free) = node_free(0) {
            assert!(free > 0);
        }
    }
}
