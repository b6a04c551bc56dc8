//! Experiments `faultaround` (host, [`UffdRegion`]) and
//! `faultaround-engine`: seed 002's synthetic tests.
//!
//! A mapping of 128 MiB (scale 1) is read three ways, at
//! FAULT_AROUND_ORDER 0 (baseline), 1, 3, 4, 5, 7 and 9, with 1, 2, 4,
//! ... and 2×CPUs threads:
//! - `seq`: every page in order;
//! - `random`: every page in a pseudo-random order;
//! - `sparse`: one page per page table (every 512th page), the case where
//!   fault-around maps pages nobody reads.
//!
//! Engine: every thread maps the whole cached file with its own page
//! tables (one process each, as in the seed), so faults grow with threads.
//! Host: each thread reads its own 1/T share of the file through its own
//! `UffdRegion` (one handler thread each), so the default run fits in a
//! minute or two — a userfaultfd round trip costs tens of µs.
//!
//! Rows `PATTERN/order-K/threads-T`; counters faults and pages mapped
//! (copied, on the host); the tables have one column per order, like the
//! seed's.

use std::sync::Arc;

use mmbatch_faultaround::{
    MAX_ORDER, UffdRegion, Zeroes,
    engine::{FileMapping, PageCache},
};
use mmbatch_lru::{Config as LruConfig, Engine, Pfn};

use crate::{Config, Experiment, Metric, Progress, Report, Row, SeedRef, Stat, Table, timed};

/// The host experiment.
pub const HOST: Experiment = Experiment {
    id: "faultaround",
    seed: "002 (fault-around, host)",
    title: "userfaultfd lazy region: pages copied per fault by window order",
    run: run_host,
    // 16 GiB, as the seed's test file.
    big_scale: 128.0,
    // The region filled, and the cached rows' page caches, kept for the
    // run: one file's worth a thread count (the last, not a power of two,
    // up to twice that: `share` rounds up).
    memory: |cfg| {
        let rows = cfg.thread_rows().len() as u64;
        pages_for(cfg) * PAGE as u64 * (rows + 2)
    },
    seed_refs: SEED_REFS,
    seed_why: "Through userfaultfd each fault is a round trip to a handler thread plus a copy, far more than the seed's minor fault: a window saves whole round trips, while each unread neighbour costs a copy.",
    contention: "the rows at 2 or more threads",
};

/// Seed 002's figures both experiments measure (its own test programs:
/// seq16G, rand1G, touch one page per table).
const SEED_REFS: &[SeedRef] = &[
    SeedRef {
        what: "seq16G, 1 thread, order 4 vs no fault-around",
        base: "seq/order-0/threads-1",
        tech: "seq/order-4/threads-1",
        seed: 7.250461742 / 5.488488147,
        stat: Stat::Median,
    },
    SeedRef {
        what: "rand1G, 1 thread, order 4 vs none",
        base: "random/order-0/threads-1",
        tech: "random/order-4/threads-1",
        seed: 15.351890914 / 15.179220992,
        stat: Stat::Median,
    },
    SeedRef {
        what: "touch one page, 1 thread, order 4 vs none",
        base: "sparse/order-0/threads-1",
        tech: "sparse/order-4/threads-1",
        seed: 0.039892712 / 0.063681685,
        stat: Stat::Median,
    },
];

/// The engine experiment.
pub const ENGINE: Experiment = Experiment {
    id: "faultaround-engine",
    seed: "002 (fault-around)",
    title: "read faults in the engine: map_pages over the fault-around window",
    run: run_engine,
    big_scale: 128.0,
    // Frames, and for each thread its page tables (4 bytes a page) and
    // its order of pages (8): the engine holds no page data.
    memory: |cfg| pages_for(cfg) * (64 + 16 * cfg.max_threads() as u64),
    seed_refs: SEED_REFS,
    seed_why: "The engine maps frames without reading or zeroing page data, so a fault is nearly all fixed cost and the share fault-around saves differs from the seed's host, where each fault also touched page data; sparse access loses, as in the seed, by mapping pages nobody reads.",
    contention: "the rows at 2 or more threads",
};

/// The seed's orders.
pub const ORDERS: [u32; 7] = [0, 1, 3, 4, 5, 7, 9];

/// Bytes at scale 1.0: 128 MiB, where order 0's 32768 faults took
/// 1.7-1.9 s a sample on the development host and order 9's 64 faults
/// 36-89 ms (`results/all.json`; the seed's 16 GiB is `--scale big`).
pub const BYTES: f64 = (128u64 << 20) as f64;

const PAGE: usize = 4096;

/// An access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Every page, in order.
    Seq,
    /// Every page, pseudo-random order.
    Random,
    /// One page per page table.
    Sparse,
}

impl Pattern {
    /// All, seed order.
    pub const ALL: [Pattern; 3] = [Pattern::Seq, Pattern::Random, Pattern::Sparse];

    /// The row-name prefix.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Random => "random",
            Pattern::Sparse => "sparse",
        }
    }

    /// The pages to read, in order, of a mapping of `pages` (a power of
    /// two), for thread `t`.
    pub fn pages(self, pages: u64, t: usize) -> Vec<u64> {
        match self {
            Pattern::Seq => (0..pages).collect(),
            Pattern::Random => {
                let odd = 0x9e37_79b9_7f4a_7c15u64 | 1;
                let off = (t as u64).wrapping_mul(0x85eb_ca6b);
                (0..pages)
                    .map(|i| i.wrapping_mul(odd).wrapping_add(off) & (pages - 1))
                    .collect()
            }
            Pattern::Sparse => (0..pages).step_by(512).collect(),
        }
    }
}

/// One timed run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Seconds for all threads' reads.
    pub elapsed_s: f64,
    /// Faults taken.
    pub faults: u64,
    /// Pages mapped (engine) or copied (host) by faults.
    pub pages: u64,
}

/// Engine: `threads` mappings of a `pages`-page cached file, each read
/// with `pattern` at `order`.
pub fn measure_engine(cache: &PageCache, pattern: Pattern, order: u32, threads: usize) -> Sample {
    let maps: Vec<FileMapping<'_>> = (0..threads)
        .map(|_| FileMapping::new(cache, order).expect("valid order"))
        .collect();
    let orders: Vec<Vec<u64>> = (0..threads)
        .map(|t| pattern.pages(cache.len(), t))
        .collect();
    let elapsed = timed(threads, |t| {
        let m = &maps[t];
        let mut sum = 0u64;
        for &p in &orders[t] {
            sum += u64::from(m.read(p).expect("mapped page").0);
        }
        std::hint::black_box(sum);
    });
    Sample {
        elapsed_s: elapsed.as_secs_f64(),
        faults: maps.iter().map(FileMapping::faults).sum(),
        pages: maps.iter().map(FileMapping::mapped).sum(),
    }
}

/// Pages in each thread's share of a `pages`-page mapping.
pub fn share(pages: u64, threads: usize) -> u64 {
    (pages / threads as u64)
        .max(1)
        .next_power_of_two()
        .min(pages)
}

/// Host: `threads` regions of `share(pages, threads)` pages each, read
/// with `pattern` at `order`. With `caches` (one shmem file per thread,
/// its pages cached) the regions map the cached pages in place
/// (`UFFDIO_CONTINUE`); without, they copy zero pages in (`UFFDIO_COPY`).
pub fn measure_host(
    pages: u64,
    pattern: Pattern,
    order: u32,
    threads: usize,
    caches: Option<&[std::fs::File]>,
) -> Sample {
    let share = share(pages, threads);
    let len = share as usize * PAGE;
    let regions: Vec<UffdRegion> = (0..threads)
        .map(|t| match caches {
            // SAFETY: the memfds are this experiment's own; nothing else
            // writes or truncates them while the regions live.
            Some(files) => unsafe { UffdRegion::over_page_cache(&files[t], len, order, 1) },
            None => UffdRegion::new(len, order, Zeroes(len as u64), 1),
        })
        .collect::<Result<_, _>>()
        .expect("userfaultfd region");
    let orders: Vec<Vec<u64>> = (0..threads).map(|t| pattern.pages(share, t)).collect();
    let elapsed = timed(threads, |t| {
        let mem = regions[t].as_slice();
        let mut sum = 0u64;
        for &p in &orders[t] {
            sum += u64::from(mem[p as usize * PAGE]);
        }
        std::hint::black_box(sum);
    });
    let stats: Vec<_> = regions.iter().map(UffdRegion::stats).collect();
    Sample {
        elapsed_s: elapsed.as_secs_f64(),
        faults: stats.iter().map(|s| s.faults).sum(),
        pages: stats.iter().map(|s| s.pages_copied).sum(),
    }
}

fn pages_for(cfg: &Config) -> u64 {
    (((BYTES * cfg.scale) as u64 / PAGE as u64).max(1024)).next_power_of_two()
}

fn run_engine(cfg: &Config, progress: &mut dyn Progress) -> Report {
    let pages = pages_for(cfg);
    let lru = Arc::new(Engine::new(LruConfig::new(pages as usize)).expect("engine"));
    let cache = PageCache::new(lru.clone(), pages).expect("page cache");
    for i in 0..pages {
        cache.insert(i, Pfn(i as u32), true).expect("free frame");
    }
    lru.lru_add_drain();
    let threads = cfg.thread_rows();
    run(
        cfg,
        progress,
        &ENGINE,
        pages,
        &threads,
        "",
        "pages_mapped",
        |pattern, order, t| measure_engine(&cache, pattern, order, t),
    )
}

fn run_host(cfg: &Config, progress: &mut dyn Progress) -> Report {
    let pages = pages_for(cfg);
    let threads = cfg.thread_rows();
    // A userfaultfd round trip is slow: at most 3 samples by default.
    let cfg = Config {
        samples: cfg.samples.min(3),
        ..cfg.clone()
    };
    // Lazy loading: missing pages copied in.
    let mut report = run(
        &cfg,
        progress,
        &HOST,
        pages,
        &threads,
        "",
        "pages_copied",
        |pattern, order, t| measure_host(pages, pattern, order, t, None),
    );
    // The seed's own case: the file is in the page cache, faults map it.
    let caches: Vec<Vec<std::fs::File>> = threads
        .iter()
        .map(|&t| {
            let len = share(pages, t) as usize * PAGE;
            (0..t)
                .map(|_| {
                    UffdRegion::page_cache_from(&Zeroes(len as u64), len).expect("memfd page cache")
                })
                .collect()
        })
        .collect();
    let cached = run(
        &cfg,
        progress,
        &HOST,
        pages,
        &threads,
        "cache/",
        "pages_mapped",
        |pattern, order, t| {
            let i = threads
                .iter()
                .position(|&x| x == t)
                .expect("a measured thread count");
            measure_host(pages, pattern, order, t, Some(&caches[i]))
        },
    );
    let offset = report.rows.len();
    report.rows.extend(cached.rows);
    report
        .tables
        .extend(cached.tables.into_iter().map(|mut tb| {
            tb.rows.iter_mut().for_each(|r| *r += offset);
            tb
        }));
    report.notes.push(
        "above: copy mode (UFFDIO_COPY, lazy loading); below: page-cache mode (UFFDIO_CONTINUE):"
            .into(),
    );
    report.notes.extend(cached.notes);
    report
}

#[allow(clippy::too_many_arguments)]
fn run(
    cfg: &Config,
    progress: &mut dyn Progress,
    exp: &Experiment,
    pages: u64,
    threads: &[usize],
    prefix: &str,
    pages_counter: &str,
    mut measure: impl FnMut(Pattern, u32, usize) -> Sample,
) -> Report {
    debug_assert!(ORDERS.iter().all(|&o| o <= MAX_ORDER));
    let samples = cfg.samples.max(1);
    let total = Pattern::ALL.len() * threads.len() * ORDERS.len() * samples;
    let mut done = 0;
    let mut rows = Vec::new();
    let mut tables = Vec::new();
    for pattern in Pattern::ALL {
        for &t in threads {
            let mut measured = vec![Vec::new(); ORDERS.len()];
            for _ in 0..samples {
                for (i, &order) in ORDERS.iter().enumerate() {
                    progress.row(
                        done,
                        total,
                        &format!("{}/order-{order}/threads-{t}", pattern.name()),
                    );
                    done += 1;
                    measured[i].push(measure(pattern, order, t));
                }
            }
            let first = rows.len();
            for (&order, ss) in ORDERS.iter().zip(&measured) {
                rows.push(Row::timed(
                    format!("{prefix}{}/order-{order}/threads-{t}", pattern.name()),
                    ss.iter().map(|s| s.elapsed_s).collect(),
                    [
                        ("faults", crate::mean(ss, |s| s.faults)),
                        (pages_counter, crate::mean(ss, |s| s.pages)),
                    ],
                ));
            }
            tables.push(Table {
                title: format!(
                    "{}, {t} thread(s), {} MiB",
                    pattern.name(),
                    (pages * PAGE as u64) >> 20
                ),
                rows: (first..rows.len()).collect(),
                columns: ORDERS
                    .iter()
                    .map(|o| {
                        if *o == 0 {
                            "baseline".into()
                        } else {
                            o.to_string()
                        }
                    })
                    .collect(),
            });
        }
    }
    let mut report = exp.report(cfg, Metric::Seconds, rows, tables);
    report.notes = notes(&report, pages, threads, exp.id == HOST.id, prefix);
    report
}

fn notes(r: &Report, pages: u64, threads: &[usize], host: bool, prefix: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let counter = |name: &str| {
        r.row(&format!("{prefix}{name}"))
            .and_then(|row| row.counters.get("faults").copied())
    };
    // Sequential faults: pages / 2^order exactly (per mapping).
    let mut exact = true;
    for &t in threads {
        for order in ORDERS {
            let per_thread = if host {
                share(pages, t) * t as u64
            } else {
                pages * t as u64
            };
            let want = per_thread >> order;
            if counter(&format!("seq/order-{order}/threads-{t}")) != Some(want as f64) {
                exact = false;
            }
        }
    }
    notes.push(format!(
        "target: sequential faults equal pages / 2^order exactly at every order and thread count: {}",
        if exact { "met" } else { "MISSED" }
    ));
    for &t in threads {
        let med = |p: &str, o: u32| r.median(&format!("{prefix}{p}/order-{o}/threads-{t}"));
        if let (Some(o0), Some(o4)) = (med("seq", 0), med("seq", 4)) {
            let ratio = o4 / o0;
            if host {
                notes.push(format!(
                    "target: {t} thread(s), seq at order 4 takes {ratio:.3} of order 0 (at most 1/8 = 0.125): {}",
                    if ratio <= 0.125 { "met" } else { "MISSED" }
                ));
            } else {
                notes.push(format!(
                    "{t} thread(s), seq at order 4 takes {ratio:.3} of order 0"
                ));
            }
        }
        if let (Some(o0), Some(o4)) = (med("random", 0), med("random", 4)) {
            notes.push(format!(
                "{t} thread(s), random at order 4 takes {:.3} of order 0 ({})",
                o4 / o0,
                if o4 < o0 { "faster" } else { "NOT faster" }
            ));
        }
        if let Some(s0) = med("sparse", 0) {
            let costs: Vec<String> = ORDERS[1..]
                .iter()
                .filter_map(|&o| med("sparse", o).map(|m| format!("order {o} {:.2}x", m / s0)))
                .collect();
            // The seed's trade-off: the smallest order at which sequential
            // reads are within 10% of their best, and what sparse reads pay
            // there; and the first order at which sparse reads are slower.
            let seq: Vec<(u32, f64)> = ORDERS
                .iter()
                .filter_map(|&o| med("seq", o).map(|m| (o, m)))
                .collect();
            let best = seq.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
            let sweet = seq.iter().find(|x| x.1 <= best * 1.1).map(|x| x.0);
            let slower = ORDERS[1..]
                .iter()
                .find(|&&o| med("sparse", o).is_some_and(|m| m > s0));
            let sweet_cost = sweet
                .and_then(|o| med("sparse", o))
                .map_or(String::new(), |m| {
                    format!(", where sparse costs {:.2}x", m / s0)
                });
            notes.push(format!(
                "{t} thread(s), sparse (one page per table) time vs order 0: {}. Sparse is slower than order 0 from {}; \
                 seq is within 10% of its best from order {}{sweet_cost}",
                costs.join(", "),
                slower.map_or("no order".to_owned(), |o| format!("order {o}")),
                sweet.map_or("-".to_owned(), |o| o.to_string())
            ));
        }
    }
    notes
}
