//! Experiment `clear`: seed 001, clearing large memory with ktask.
//!
//! - `clear/threads-T/size-G`: [`mmbatch_ktask::clear`] of a prefaulted
//!   buffer of G GiB on T threads (powers of two up to the CPUs present);
//! - `memset/threads-1/size-G`: a plain single-threaded memset of the same
//!   buffer, the reference;
//! - `populate/map-populate`: `mmap(MAP_POPULATE)` of the largest size, the
//!   kernel zeroing on one thread; `populate/madv-threads-T`: the same
//!   memory populated with `MADV_POPULATE_WRITE` per chunk on T threads.
//!
//! - `hugetlb-2m/threads-T`, `hugetlb-1g/threads-T`: clearing a hugetlb
//!   region of the largest size (reserved for the run and given back),
//!   in 2 MiB chunks (a 1 GiB page split) — when the pool can be grown (root)
//!   and, for 1 GiB pages, when the size is at least 1 GiB.
//!
//! Times with GB/s beside them.

use std::time::Instant;

use hwlocality::Topology;
use mmbatch_ktask::{
    HugePageSize, HugeRegion, Mapping, clear,
    numa::{NodeRange, NumaJob, node_cpus, prefer_memory, run_numa},
    populate,
};
use mmbatch_mmap::{MapFlags, ProtFlags};

use crate::{Config, Experiment, Host, Metric, Progress, Report, Row, SeedRef, Stat, Table};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    id: "clear",
    seed: "001 (ktask clear_gigantic_page)",
    title: "clearing and populating large memory on 1..CPUs threads",
    run,
    big_scale: 200.0,
    memory: |cfg| (4.0 * cfg.scale * (1u64 << 30) as f64) as u64,
    seed_refs: &[
        SeedRef {
            what: "x86 100 GiB, 2 threads vs 1 (our 4 GiB)",
            base: "clear/threads-1/size-4G",
            tech: "clear/threads-2/size-4G",
            seed: 41.13 / 20.26,
            stat: Stat::Min,
        },
        SeedRef {
            what: "SPARC 50 GiB, 2 threads vs 1 (our 1 GiB)",
            base: "clear/threads-1/size-1G",
            tech: "clear/threads-2/size-1G",
            seed: 7.77 / 3.95,
            stat: Stat::Min,
        },
    ],
    seed_why: "Clearing stops scaling where memory bandwidth runs out (the seed's x86 host kept one thread's bandwidth per thread up to 8 threads and lost 44% of it at 16); a host whose CPUs share one set of memory channels (a small VM) runs out at 2 threads, where the seed's 288- and 1024-CPU machines still had bandwidth to spare, so its rows past that are not comparable with the seed's.",
    contention: "the rows at 2 threads",
};

/// Sizes in GiB at scale 1.0.
pub const SIZES_GIB: [f64; 3] = [1.0, 2.0, 4.0];

/// Thread counts: powers of two up to the CPUs present, then the CPU count
/// itself, as the seed's table does; up to `given` (`--threads`) instead
/// when given. Clearing is bandwidth-bound, so more threads than CPUs
/// only time-slice: they are measured only on request.
pub fn threads(cpus: usize, given: Option<usize>) -> Vec<usize> {
    crate::powers_of_two_to(given.unwrap_or(cpus))
}

fn secs(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

/// Seconds to clear the first `bytes` of `buf` on `threads` threads (0 =
/// plain single-threaded memset).
pub fn measure_clear(buf: &mut [u8], threads: usize) -> f64 {
    if threads == 0 {
        let p = buf.as_mut_ptr();
        let n = buf.len();
        // SAFETY: `buf` is ours, n bytes long.
        secs(|| unsafe { std::ptr::write_bytes(std::hint::black_box(p), 0, n) })
    } else {
        secs(|| clear(buf, threads))
    }
}

/// Seconds to populate `bytes` fresh bytes: `MAP_POPULATE` (threads 0) or
/// `MADV_POPULATE_WRITE` on `threads` threads.
pub fn measure_populate(bytes: usize, threads: usize) -> f64 {
    if threads == 0 {
        let mut m = None;
        let s = secs(|| {
            m = Some(
                Mapping::new(
                    bytes,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::PRIVATE | MapFlags::POPULATE,
                )
                .expect("mmap"),
            );
        });
        drop(m);
        s
    } else {
        let m = Mapping::anonymous(bytes).expect("mmap");
        let p = m.as_ptr();
        // SAFETY: our own fresh mapping of `bytes`.
        secs(|| unsafe { populate(p, bytes, threads) }.expect("MADV_POPULATE_WRITE"))
    }
}

/// NUMA-local clearing on a host with two or more nodes: `bytes` split
/// evenly over the nodes, each share preferring its node
/// (`prefer_memory`: a node short of memory passes pages on rather than
/// have the run reclaim or meet the OOM killer, as `bind_memory` would)
/// and prefaulted, then cleared `samples` times by threads bound to its
/// node's CPUs (`run_numa`, the seed's per-node ktask threads) and by the
/// same number of unbound threads (`clear`), alternating. Returns the two
/// sample lists and the node count, or why it did not run.
pub fn measure_numa_clear(
    bytes: usize,
    samples: usize,
    threads: usize,
) -> Result<(Vec<f64>, Vec<f64>, usize), String> {
    let topology = Topology::new().map_err(|e| format!("hwloc: {e}"))?;
    let nodes: Vec<usize> = node_cpus(&topology).into_iter().map(|n| n.node).collect();
    if nodes.len() < 2 {
        return Err(format!(
            "this host has {} NUMA node(s) (cargo xtask vm boots a guest with more)",
            nodes.len()
        ));
    }
    let page = 4096;
    let share = (bytes / nodes.len() / page).max(1) * page;
    let mut m = Mapping::anonymous(share * nodes.len()).map_err(|e| format!("mmap: {e}"))?;
    let ranges: Vec<NodeRange> = nodes
        .iter()
        .enumerate()
        .map(|(i, &node)| NodeRange {
            node,
            range: i * share..(i + 1) * share,
        })
        .collect();
    for r in &ranges {
        prefer_memory(
            &topology,
            &m.as_mut_slice().expect("read-write")[r.range.clone()],
            r.node,
        )
        .map_err(|e| e.to_string())?;
    }
    clear(m.as_mut_slice().expect("read-write"), threads); // first touch: each page on its node
    let base = m.as_ptr() as usize;
    let per_node = (threads / nodes.len()).max(1);
    let job = NumaJob::new(ranges)
        .align(page)
        .min_chunk(mmbatch_ktask::MIN_CHUNK)
        .max_threads_per_node(per_node);
    let (mut local, mut unbound) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        local.push(secs(|| {
            run_numa::<()>(&topology, &job, |r| {
                // SAFETY: `r` lies inside the mapping; chunks are
                // disjoint.
                unsafe { std::ptr::write_bytes((base + r.start) as *mut u8, 0, r.len()) };
                Ok(())
            })
            .expect("clearing cannot fail")
        }));
        unbound.push(secs(|| {
            clear(
                m.as_mut_slice().expect("read-write"),
                per_node * nodes.len(),
            )
        }));
    }
    Ok((local, unbound, nodes.len()))
}

fn run(cfg: &Config, progress: &mut dyn Progress) -> Report {
    let host = Host::detect();
    let ts = threads(host.cpus, cfg.threads);
    let page = 4096;
    let sizes: Vec<usize> = SIZES_GIB
        .iter()
        .map(|g| (((g * cfg.scale * (1u64 << 30) as f64) as usize).max(1 << 20) / page) * page)
        .collect();
    let largest = *sizes.iter().max().expect("sizes");
    let samples = cfg.samples.max(1);
    let mut buf = Mapping::populated(largest).expect("mmap the buffer");
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    let name_size = |b: usize| {
        let g = gib(b);
        if g >= 1.0 && g.fract() == 0.0 {
            format!("{g}G")
        } else {
            format!("{}M", b >> 20)
        }
    };
    // Columns per size: memset, then clear at each thread count.
    let kinds: Vec<usize> = std::iter::once(0).chain(ts.iter().copied()).collect();
    let pop_kinds: Vec<usize> = std::iter::once(0).chain(ts.iter().copied()).collect();
    let total = (sizes.len() * kinds.len() + pop_kinds.len()) * samples;
    let mut done = 0;
    let mut clear_s = vec![vec![Vec::new(); kinds.len()]; sizes.len()];
    let mut pop_s = vec![Vec::new(); pop_kinds.len()];
    for round in 0..samples {
        for (si, &size) in sizes.iter().enumerate() {
            // Rotate the order each round, so no column always runs first.
            for j in 0..kinds.len() {
                let ki = (j + round) % kinds.len();
                let t = kinds[ki];
                progress.row(
                    done,
                    total,
                    &format!("clear size {} threads {t}", name_size(size)),
                );
                done += 1;
                clear_s[si][ki].push(measure_clear(
                    &mut buf.as_mut_slice().expect("read-write")[..size],
                    t,
                ));
            }
        }
        for (ki, &t) in pop_kinds.iter().enumerate() {
            progress.row(done, total, &format!("populate threads {t}"));
            done += 1;
            pop_s[ki].push(measure_populate(largest, t));
        }
    }
    drop(buf);
    // hugetlb: one region per page size for the run, prefaulted untimed.
    let mut huge_s: Vec<(HugePageSize, usize, Vec<Vec<f64>>)> = Vec::new();
    let mut notes = Vec::new();
    for size in [HugePageSize::Size2M, HugePageSize::Size1G] {
        let bytes = largest / size.bytes() * size.bytes();
        if bytes == 0 {
            notes.push(format!(
                "hugetlb {} rows not run: the size is below one page",
                name_size(size.bytes())
            ));
            continue;
        }
        match HugeRegion::new_growing_pool(size, bytes) {
            Ok(mut r) => {
                r.clear(1); // first touch: fault every huge page in
                let mut per_t = vec![Vec::new(); ts.len()];
                for _ in 0..samples {
                    for (i, &t) in ts.iter().enumerate() {
                        progress.row(
                            done.min(total - 1),
                            total,
                            &format!("hugetlb {} threads {t}", name_size(size.bytes())),
                        );
                        per_t[i].push(secs(|| r.clear(t)));
                    }
                }
                huge_s.push((size, bytes, per_t));
            }
            Err(e) => notes.push(format!(
                "hugetlb {} rows not run: {e}",
                name_size(size.bytes())
            )),
        }
    }
    let row = |name: String, ss: &[f64], bytes: usize| {
        let med = crate::Summary::of(ss).median;
        Row::timed(
            name,
            ss.to_vec(),
            [
                ("gb_per_s_median", bytes as f64 / med / 1e9),
                ("gib", gib(bytes)),
            ],
        )
    };
    let mut rows = Vec::new();
    let mut tables = Vec::new();
    for (si, &size) in sizes.iter().enumerate() {
        let first = rows.len();
        for (ki, &t) in kinds.iter().enumerate() {
            let name = if t == 0 {
                format!("memset/threads-1/size-{}", name_size(size))
            } else {
                format!("clear/threads-{t}/size-{}", name_size(size))
            };
            rows.push(row(name, &clear_s[si][ki], size));
        }
        tables.push(Table {
            title: format!("clear {} (prefaulted)", name_size(size)),
            rows: (first..rows.len()).collect(),
            columns: kinds
                .iter()
                .map(|&t| {
                    if t == 0 {
                        "memset".to_owned()
                    } else {
                        format!("ktask-{t}")
                    }
                })
                .collect(),
        });
    }
    for (size, bytes, per_t) in &huge_s {
        let first = rows.len();
        let tag = if *size == HugePageSize::Size2M {
            "2m"
        } else {
            "1g"
        };
        for (i, &t) in ts.iter().enumerate() {
            rows.push(row(format!("hugetlb-{tag}/threads-{t}"), &per_t[i], *bytes));
        }
        tables.push(Table {
            title: format!(
                "clear hugetlb {} pages, {}",
                name_size(size.bytes()),
                name_size(*bytes)
            ),
            rows: (first..rows.len()).collect(),
            columns: ts.iter().map(|t| format!("ktask-{t}")).collect(),
        });
    }
    let first = rows.len();
    for (ki, &t) in pop_kinds.iter().enumerate() {
        let name = if t == 0 {
            "populate/map-populate".to_owned()
        } else {
            format!("populate/madv-threads-{t}")
        };
        rows.push(row(name, &pop_s[ki], largest));
    }
    tables.push(Table {
        title: format!("populate {} (the kernel's zeroing)", name_size(largest)),
        rows: (first..rows.len()).collect(),
        columns: pop_kinds
            .iter()
            .map(|&t| {
                if t == 0 {
                    "map-populate".to_owned()
                } else {
                    format!("madv-{t}")
                }
            })
            .collect(),
    });
    let max_t = ts.iter().copied().max().unwrap_or(1);
    match measure_numa_clear(largest, samples, max_t) {
        Ok((local, unbound, nodes)) => {
            let first = rows.len();
            rows.push(row(
                format!("numa/per-node-threads-{max_t}"),
                &local,
                largest,
            ));
            rows.push(row(
                format!("numa/unbound-threads-{max_t}"),
                &unbound,
                largest,
            ));
            tables.push(Table {
                title: format!(
                    "clear {} over {nodes} nodes, each share bound to its node (prefaulted)",
                    name_size(largest)
                ),
                rows: (first..rows.len()).collect(),
                columns: vec!["per-node".to_owned(), "unbound".to_owned()],
            });
        }
        Err(why) => notes.push(format!("numa rows not run: {why}")),
    }
    let mut report = EXPERIMENT.report(cfg, Metric::Seconds, rows, tables);
    let big = name_size(largest);
    // The seed reports min times; medians are printed beside them.
    let min = |n: &str| report.row(n).map(|r| crate::Summary::of(&r.samples_s).min);
    let med = |n: &str| report.median(n);
    if let (Some(m), Some(c1)) = (
        min(&format!("memset/threads-1/size-{big}")),
        min(&format!("clear/threads-1/size-{big}")),
    ) {
        let d = (c1 - m) / m * 100.0;
        let dm = med(&format!("clear/threads-1/size-{big}"))
            .zip(med(&format!("memset/threads-1/size-{big}")))
            .map_or(0.0, |(c, m)| (c - m) / m * 100.0);
        notes.push(format!(
            "target: clear at 1 thread {:.1} ms vs memset {:.1} ms, min times ({d:+.1}%; medians {dm:+.1}%; \
             within 3%): {}",
            c1 * 1e3,
            m * 1e3,
            if d <= 3.0 { "met" } else { "MISSED" }
        ));
    }
    // Bandwidth per thread count at the largest size: where it stops
    // growing is where memory bandwidth caps the curve.
    let curve: Vec<String> = ts
        .iter()
        .filter_map(|t| {
            min(&format!("clear/threads-{t}/size-{big}"))
                .map(|s| format!("{t}: {:.1} GB/s", largest as f64 / s / 1e9))
        })
        .collect();
    notes.push(format!(
        "clear bandwidth by threads (min times, {big}): {}{}",
        curve.join(", "),
        if ts.len() < 3 {
            " — too few thread counts (CPUs, or --threads) to show where bandwidth caps it"
        } else {
            ""
        }
    ));
    if let (Some(c1), Some(c2)) = (
        min(&format!("clear/threads-1/size-{big}")),
        min(&format!("clear/threads-2/size-{big}")),
    ) {
        let x = c1 / c2;
        notes.push(format!(
            "target: clear at 2 threads is {x:.2}x 1 thread (at least 1.7x, bandwidth permitting): {}; \
             {:.1} GB/s at 1 thread, {:.1} GB/s at 2",
            if x >= 1.7 { "met" } else { "MISSED" },
            largest as f64 / c1 / 1e9,
            largest as f64 / c2 / 1e9
        ));
    }
    if let (Some(p0), Some(p2)) = (min("populate/map-populate"), min("populate/madv-threads-2")) {
        let x = p0 / p2;
        notes.push(format!(
            "target: populate on 2 threads is {x:.2}x MAP_POPULATE (at least 1.7x): {}",
            if x >= 1.7 { "met" } else { "MISSED" }
        ));
    }
    report.notes = notes;
    report
}

#[cfg(test)]
mod tests {
    use super::threads;

    #[test]
    fn thread_counts_follow_cpus_unless_asked() {
        assert_eq!(threads(1, None), [1]);
        assert_eq!(threads(2, None), [1, 2]);
        assert_eq!(threads(6, None), [1, 2, 4, 6]);
        // --threads caps the rows, below the CPUs or above them.
        assert_eq!(threads(4, Some(2)), [1, 2]);
        assert_eq!(threads(256, None).len(), 9);
        assert_eq!(threads(6, Some(3)), [1, 2, 3]);
        assert_eq!(threads(2, Some(16)), [1, 2, 4, 8, 16]);
    }
}
