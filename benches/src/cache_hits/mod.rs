//! Experiment `cache-hits`: the hit ratio of [`LruCache`](mmbatch_cache::LruCache) under each policy
//! of [`policies`](crate::cache::policies) against quick_cache, moka and the `lru` crate, with
//! Belady's OPT as the ceiling and an exact-LRU simulation as the floor a
//! policy should beat, on the two ARC paper traces, the five LIRS paper
//! traces and six synthetic shapes, and seven cases reported but not
//! judged. Single thread, read-through: each request is `get(k)` and, on a
//! miss, `insert(k, v)`.
//!
//! Traces (`benches/traces/`, see its README for the citation and format):
//! `OLTP` at 1000, 2000, 5000, 10000 and 15000 pages and `P3` at 32768 and
//! 131072 pages, every request counted (as the paper's figures are made).
//! A line `START COUNT IGNORED REQUEST_ID` is `COUNT` requests, for pages
//! `START..START + COUNT`, each page a key. At scale `S` < 1 a prefix of
//! `S` × the trace's pages is replayed (at least [`MIN_TRACE`]); at 1 the
//! whole trace, and only then are the paper's figures comparable.
//!
//! Synthetic shapes: [`SYNTH_KEYS`] (100 Ki) keys, a cache of
//! [`SYNTH_CAPACITY`] (10 Ki, 10%), [`SYNTH_OPS`] × scale requests (at
//! least [`MIN_SYNTH`]), hits counted only in the second half (the first
//! is warm-up):
//! - `zipf0.9`: Zipf s = 0.9 over the keys;
//! - `zipf0.9-scan`: the same with one-off scans: one run of
//!   [`SCAN_RUN`](crate::cache::SCAN_RUN) requests in four is a
//!   sequential run of keys never requested before (25% of requests);
//! - `loop1.25x`: keys `0..1.25 × capacity` in a loop (LRU's worst case:
//!   every request misses);
//! - `loop1.25x-noise`: the same loop with 1% of requests to random keys
//!   outside it, as a periodic job's requests are mixed with others (a
//!   policy that keeps a pure loop resident by freezing can lose it all to
//!   a little noise);
//! - `shifting`: Zipf 0.9 whose whole key set is replaced by a disjoint
//!   one at each quarter of the run (measured: the switch at half-time and
//!   the one at three quarters);
//! - `hot-cold` (our fifth choice, frequency against recency): 25% of
//!   requests uniform over a hot set of capacity / 2 keys, 75% uniform over
//!   the other keys. A hot key comes back every 2 × capacity requests on
//!   average, after about 1.6 × capacity distinct keys, so exact LRU loses
//!   most of the hot set while a policy that counts references keeps it.
//!
//! Reported, not judged (where the policies are known to lose; see
//! [`Shape::EXTRA`]): `loop2x-noise`, a loop over 2 × capacity with 1% of
//! requests to random other keys; `loop3x`, a loop over 3 × capacity; `loop2x-after-other`,
//! a quarter of other requests (half to capacity / 2 hot keys), then a loop
//! over 2 × capacity with 1% noise; `sliding`, a power law whose keys
//! slide (each grows hotter, then is never requested again) and
//! `lru-stack`, the LRU stack model, where recency pays;
//! `loop1.5x-zipf`, bursts of a loop over 1.5 × capacity and of Zipf 0.9
//! in turn, two programs interleaved; and `P3-second-half`, P3's second
//! half replayed on its own at 32768 pages (a cache started
//! mid-workload). `sliding`, `lru-stack` and `loop1.5x-zipf` came after
//! the policy's first tuning, as families it had not seen (the first
//! two then chose `Policy::Adaptive`'s margin for LRU: docs/cache.md).
//!
//! Columns: `opt` (Belady's MIN, allowed not to admit: on a miss it evicts
//! the key of the resident set plus the incoming one whose next use is
//! farthest — a BinaryHeap of next-use positions with lazy deletion),
//! `exact-lru` (a list-and-map LRU simulation), `arc` (ARC simulated as
//! the paper's Fig. 4 gives it, on `lru` crate lists; it reproduces the
//! paper's OLTP column, a test checks), `mmbatch-POLICY` (each
//! policy, the builder's defaults otherwise: batching on, default shard
//! count), `quick_cache` (`sync::Cache`), `moka` (`sync::Cache`, with
//! `run_pending_tasks()` after every insert so its evictions and admission
//! decisions are applied before the next request, as a single-threaded
//! simulator must; without it moka briefly holds more than its capacity)
//! and `lru-crate` (`lru::LruCache`, exact LRU, a check on `exact-lru`).
//!
//! Rows `CONTENDER/TRACE/pages-N`: one replay for each simulation (its
//! hit ratio is deterministic); for each cache, whose hasher (moka's
//! sketch too) is seeded at random per cache, three with `--samples 3` or
//! more, each a new cache, or up to 15 on a short trace (the LIRS paper's
//! at any scale, every trace at small scales: `seeded_replays`), and the
//! median is the row's `hit_ratio_pct` (`hit_ratio_min_pct` and
//! `hit_ratio_max_pct` beside it): one replay moved moka by up to 0.6
//! points between runs on the ARC traces, and spans up to 8.3 points over
//! seeds on the LIRS paper's. In Mops/s of
//! single-thread replay — for orientation only; the figure that matters
//! is the `hit_ratio_pct` counter. OLTP rows carry the paper's LRU
//! (`exact-lru`) and ARC (`arc`, `mmbatch-*`) figures as `paper_*_pct`
//! counters. The notes gather every hit ratio into one matrix and judge the
//! targets for each policy: at least quick_cache's hit ratio on every trace
//! and size; within a point of moka's where moka leads; on OLTP at least
//! the paper's ARC figures. Beside them, not a target: how each policy
//! does against the simulated ARC on every trace and shape.

pub mod families;
mod judge;
mod lab;
mod replay;
mod shapes;
mod traces;
mod warm;
pub mod weighted;

use std::time::Instant;

use crate::{Config, Experiment, Metric, Progress, Report, Row, Table};

use judge::judge;
use replay::{MOST_REPLAYS, REPLAY_BUDGET, SEEDED_REPLAYS, median_and_range, seeded_replays};

pub use lab::{lab_policies, lab_print, lab_row, timeline, wanted};
pub use replay::{Contender, arc_hits, exact_lru_hits, hits, next_uses, opt_hits};
pub use shapes::Shape;
pub use traces::{MIXES, interleave, read_trace, traces_dir};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    id: "cache-hits",
    seed: "ARC (FAST 03) traces, as a cache library",
    title: "hit ratio of LruCache's policies vs quick_cache, moka, lru; OPT and exact LRU",
    run,
    big_scale: 1.0,
    memory: |cfg| {
        // P3's keys, next uses, OPT's heap and maps: ~100 bytes a request.
        let requests = ((P3_PAGES as f64 * cfg.scale) as u64).clamp(MIN_TRACE as u64, P3_PAGES);
        (64 << 20) + requests * 128
    },
    seed_refs: &[],
    seed_why: "No seed: the ARC paper's OLTP figures are the reference, beside the rows in the notes.",
    contention: "",
};

/// Pages (requests) in the whole P3 trace.
pub const P3_PAGES: u64 = 3_912_296;

/// The fewest trace requests replayed at small scales.
pub const MIN_TRACE: usize = 100_000;

/// OLTP cache sizes (pages), as in the ARC paper's table.
pub const OLTP_SIZES: [usize; 5] = [1000, 2000, 5000, 10000, 15000];

/// The ARC paper's LRU hit ratios (%) on OLTP at [`OLTP_SIZES`].
pub const PAPER_OLTP_LRU: [f64; 5] = [32.83, 42.47, 53.65, 60.70, 64.63];

/// The ARC paper's ARC hit ratios (%) on OLTP at [`OLTP_SIZES`].
pub const PAPER_OLTP_ARC: [f64; 5] = [38.93, 46.08, 55.25, 61.87, 65.40];

/// P3 cache sizes (pages).
pub const P3_SIZES: [usize; 2] = [32768, 131072];

/// The LIRS paper's traces (`benches/traces/lirs-*.lis.zst`) and the cache
/// sizes the studies replay them at.
pub const LIRS_TRACES: [(&str, [usize; 3]); 5] = [
    ("multi1", [250, 500, 1000]),
    ("gli", [250, 500, 1000]),
    ("ps", [200, 500, 1000]),
    ("sprite", [100, 500, 1000]),
    ("cs", [100, 300, 500]),
];

/// Keys of the synthetic shapes.
pub const SYNTH_KEYS: u64 = 100 << 10;

/// Cache size for the synthetic shapes (10% of the keys).
pub const SYNTH_CAPACITY: usize = 10 << 10;

/// Requests of a synthetic trace at scale 1.0.
pub const SYNTH_OPS: f64 = (2u64 << 20) as f64;

/// The fewest synthetic requests at small scales.
pub const MIN_SYNTH: usize = 200_000;

/// One trace at one or more sizes.
struct Case {
    /// Row-name part: `OLTP`, `P3`, a shape's name.
    name: String,
    /// For the table title.
    what: String,
    trace: Vec<u64>,
    sizes: Vec<usize>,
    /// Hits are counted from here on.
    count_from: usize,
    /// The whole trace (paper figures comparable).
    whole: bool,
    /// `(LRU, ARC)` figures of the paper at each size.
    paper: Option<(&'static [f64], &'static [f64])>,
    /// Whether the targets are judged on it (the rest are
    /// reported: where the policies are known to lose).
    judged: bool,
}

/// The row name of `c` on trace `trace` at `pages`.
pub fn row_name(c: Contender, trace: &str, pages: usize) -> String {
    format!("{}/{trace}/pages-{pages}", c.name())
}

/// The sizes a run uses below scale 1: the smallest trace prefix, the
/// LIRS traces' longest, and the synthetic shapes' keys, cache size and
/// fewest requests.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    min_trace: usize,
    lirs_most: usize,
    synth_keys: u64,
    synth_capacity: usize,
    min_synth: usize,
}

/// The experiment's sizes.
const SIZES: Sizes = Sizes {
    min_trace: MIN_TRACE,
    // Whole at every scale (the longest is 134 K requests).
    lirs_most: usize::MAX,
    synth_keys: SYNTH_KEYS,
    synth_capacity: SYNTH_CAPACITY,
    min_synth: MIN_SYNTH,
};

fn run(cfg: &Config, progress: &mut dyn Progress) -> Report {
    run_sized(cfg, progress, SIZES)
}

fn run_sized(cfg: &Config, progress: &mut dyn Progress, sz: Sizes) -> Report {
    let mut notes = Vec::new();
    let mut cases = Vec::new();
    let mut extra = Vec::new();
    for (name, full, sizes, paper) in [
        (
            "OLTP",
            914_145u64,
            &OLTP_SIZES[..],
            Some((&PAPER_OLTP_LRU[..], &PAPER_OLTP_ARC[..])),
        ),
        ("P3", P3_PAGES, &P3_SIZES[..], None),
    ] {
        let want = if cfg.scale >= 1.0 {
            usize::MAX
        } else {
            ((full as f64 * cfg.scale) as usize).max(sz.min_trace)
        };
        let path = traces_dir().join(format!("{name}.lis.zst"));
        match read_trace(&path, want) {
            Ok(trace) => {
                let whole = (trace.len() as u64) >= full;
                if name == "P3" {
                    // A cache started in the middle of a workload: the
                    // second half of the trace on its own.
                    let half = trace[trace.len() / 2..].to_vec();
                    extra.push(Case {
                        what: format!(
                            "P3's second half on its own (a cache started mid-way), {} requests, all counted",
                            half.len()
                        ),
                        name: "P3-second-half".to_owned(),
                        trace: half,
                        sizes: vec![P3_SIZES[0]],
                        count_from: 0,
                        whole: false,
                        paper: None,
                        judged: false,
                    });
                }
                cases.push(Case {
                    what: format!(
                        "{name} (ARC paper), {} of {full} requests{}, all counted",
                        trace.len(),
                        if whole { " (whole trace)" } else { " (prefix)" }
                    ),
                    name: name.to_owned(),
                    trace,
                    sizes: sizes.to_vec(),
                    count_from: 0,
                    whole,
                    paper,
                    judged: true,
                });
            }
            Err(e) => notes.push(format!(
                "{name}: trace not read ({e}); its rows are missing"
            )),
        }
    }
    // The LIRS traces, whole but in the debug build's test.
    for (name, sizes) in LIRS_TRACES {
        let path = traces_dir().join(format!("lirs-{name}.lis.zst"));
        match read_trace(&path, sz.lirs_most) {
            Ok(trace) => cases.push(Case {
                what: format!(
                    "lirs-{name} (LIRS paper), {} requests ({}), all counted",
                    trace.len(),
                    if trace.len() < sz.lirs_most {
                        "whole trace"
                    } else {
                        "prefix"
                    }
                ),
                name: format!("lirs-{name}"),
                whole: trace.len() < sz.lirs_most,
                trace,
                sizes: sizes.to_vec(),
                count_from: 0,
                paper: None,
                judged: false,
            }),
            Err(e) => notes.push(format!(
                "lirs-{name}: trace not read ({e}); its rows are missing"
            )),
        }
    }
    let n = ((SYNTH_OPS * cfg.scale) as usize).max(sz.min_synth);
    let shapes = Shape::ALL.into_iter().map(|s| (s, true));
    let extra_shapes = Shape::EXTRA.into_iter().map(|s| (s, false));
    for (i, (shape, judged)) in shapes.chain(extra_shapes).enumerate() {
        cases.push(Case {
            name: shape.name().to_owned(),
            what: format!(
                "{}, {} keys, {n} requests, hits counted in the second half",
                shape.describe(),
                sz.synth_keys
            ),
            trace: shape.trace(sz.synth_keys, sz.synth_capacity, n, 11 + i as u64),
            sizes: vec![sz.synth_capacity],
            count_from: n / 2,
            whole: true,
            paper: None,
            judged,
        });
    }
    cases.extend(extra);

    let contenders = Contender::all();
    let total: usize = cases.iter().map(|c| c.sizes.len()).sum::<usize>() * contenders.len();
    let mut done = 0;
    let mut rows = Vec::new();
    let mut tables = Vec::new();
    for case in &cases {
        let next = next_uses(&case.trace);
        let counted = (case.trace.len() - case.count_from).max(1) as f64;
        for (si, &pages) in case.sizes.iter().enumerate() {
            let first = rows.len();
            for &c in &contenders {
                let name = row_name(c, &case.name, pages);
                progress.row(done, total, &name);
                done += 1;
                // A contender whose hit ratio moves with its hasher's (or
                // sketch's) random seed replays the trace several times,
                // each with a seed of its own, and is judged on the median.
                let replays = if c.seeded() {
                    seeded_replays(cfg.samples, case.trace.len())
                } else {
                    1
                };
                let mut elapsed = Vec::with_capacity(replays);
                let mut pcts = Vec::with_capacity(replays);
                for _ in 0..replays {
                    let start = Instant::now();
                    let h = hits(c, pages, &case.trace, &next, case.count_from);
                    elapsed.push(start.elapsed().as_secs_f64());
                    pcts.push(h as f64 * 100.0 / counted);
                }
                let (median, low, high) = median_and_range(&mut pcts);
                let mut counters = vec![("hit_ratio_pct", round3(median))];
                if replays > 1 {
                    counters.push(("hit_ratio_min_pct", round3(low)));
                    counters.push(("hit_ratio_max_pct", round3(high)));
                }
                if let Some((lru, arc)) = case.paper {
                    match c {
                        Contender::ExactLru => counters.push(("paper_lru_pct", lru[si])),
                        Contender::Mmbatch(..) | Contender::Arc => {
                            counters.push(("paper_arc_pct", arc[si]));
                        }
                        _ => {}
                    }
                }
                let mut row = Row::timed(name, elapsed, counters);
                row.ops_per_sample = Some(case.trace.len() as f64);
                rows.push(row);
            }
            tables.push(Table {
                title: format!("{}, cache of {pages} pages", case.what),
                rows: (first..rows.len()).collect(),
                columns: contenders.iter().map(|c| c.name()).collect(),
            });
        }
    }
    // Warm restarts, on the ARC and LIRS traces and the Zipf shapes.
    let mut warm_notes = Vec::new();
    for case in cases.iter().filter(|c| {
        // The LIRS traces are judged elsewhere, but warm restarts are
        // measured on them too.
        let judged =
            c.judged && (c.paper.is_some() || c.name == "P3" || c.name.starts_with("zipf"));
        judged || c.name.starts_with("lirs-")
    }) {
        for &pages in &case.sizes {
            let first = rows.len();
            rows.extend(warm::rows(&case.trace, &case.name, pages));
            let pct = |i: usize| {
                rows[first + i]
                    .counters
                    .get("hit_ratio_pct")
                    .copied()
                    .unwrap_or(0.0)
            };
            warm_notes.push(format!(
                "Warm restart, {} at {pages} pages: over the tenth of the trace after the saved \
                 half, a cold cache hits {:.2}%, one warmed from `save` {:.2}% ({:.2}% from its \
                 keys alone), one filled by inserting the saved keys in order {:.2}%, the saved \
                 cache going on {:.2}%.",
                case.name,
                pct(0),
                pct(1),
                pct(2),
                pct(3),
                pct(4)
            ));
            tables.push(Table {
                title: format!(
                    "warm restart: {}, cache of {pages} pages, the tenth after the saved half",
                    case.name
                ),
                rows: (first..rows.len()).collect(),
                columns: warm::STARTS.iter().map(|s| (*s).to_owned()).collect(),
            });
        }
    }
    // Weighted caches, entries of 1-16 KiB by key, on the LIRS paper's
    // traces: not judged (issue 46's targets are the unweighted rows).
    let mut weighted_gaps = Vec::new();
    for case in cases.iter().filter(|c| c.name.starts_with("lirs-")) {
        for &pages in &case.sizes {
            let first = rows.len();
            rows.extend(weighted::rows(&case.trace, &case.name, pages));
            let pct = |i: usize| rows[first + i].counters["hit_ratio_pct"];
            weighted_gaps.push((
                pct(0) - pct(2).max(pct(3)),
                pct(1) - pct(0),
                &case.name,
                pages,
                pct(4) - pct(2).max(pct(3)),
            ));
            tables.push(Table {
                title: format!(
                    "weighted (1-16 KiB by key): {}, cache of {pages} entries' mean weight",
                    case.name
                ),
                rows: (first..rows.len()).collect(),
                columns: weighted::COLUMNS.iter().map(|c| (*c).to_owned()).collect(),
            });
        }
    }
    if let (Some(peers), Some(shards), Some(told)) = (
        weighted_gaps.iter().min_by(|a, b| a.0.total_cmp(&b.0)),
        weighted_gaps.iter().min_by(|a, b| a.1.total_cmp(&b.1)),
        weighted_gaps.iter().min_by(|a, b| a.4.total_cmp(&b.4)),
    ) {
        notes.push(format!(
            "Weighted caches (entries of 1-16 KiB by key, the LIRS paper's traces, one replay \
             each, not judged): the default against the better of quick_cache and moka \
             weighted alike is at worst {:+.2} points ({} at {} entries); in 8 shards (a host \
             of 8 CPUs or more, not told its entries) against its default shards at worst \
             {:+.2} ({} at {}); told its entries (`estimated_entries`, one shard at these \
             sizes on any host) against the better peer at worst {:+.2} ({} at {}).",
            peers.0, peers.2, peers.3, shards.1, shards.2, shards.3, told.4, told.2, told.3
        ));
    }
    let mut report = EXPERIMENT.report(cfg, Metric::MopsPerSec, rows, tables);
    let replays = cfg.samples.clamp(1, SEEDED_REPLAYS);
    notes.push(if replays > 1 {
        format!(
            "Each cache's hit ratio (LruCache's policies, quick_cache, moka) is the median of \
             {replays} replays, each a new cache with its own random hasher seed, or of up to \
             {MOST_REPLAYS} on a trace short enough that they total at most {REPLAY_BUDGET} \
             requests (at scale 1 the LIRS paper's traces, where one seed moves moka by points \
             and its median of three moved by 1.7 between runs; at smaller scales every \
             trace); the least and greatest are the rows' \
             `hit_ratio_min_pct` and `hit_ratio_max_pct`; the simulations replay once."
        )
    } else {
        "Each cache replayed once (`--samples 1`): its hit ratio moves with its random hasher \
         seed, by up to 0.6 points on the ARC traces and by points on the LIRS paper's; \
         `--samples 3` judges the median of three, or of up to 15 on short traces."
            .to_owned()
    });
    notes.extend(judge(&report, &cases, &contenders));
    notes.extend(warm_notes);
    report.notes = notes;
    report
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_lru_reproduces_the_arc_papers_oltp_lru_column() {
        let trace = read_trace(&traces_dir().join("OLTP.lis.zst"), usize::MAX).unwrap();
        assert_eq!(trace.len(), 914_145);
        for (&pages, &paper) in OLTP_SIZES.iter().zip(&PAPER_OLTP_LRU) {
            let h = exact_lru_hits(&trace, pages, 0) as f64 * 100.0 / trace.len() as f64;
            assert!(
                (h - paper).abs() < 0.005,
                "OLTP at {pages} pages: exact LRU {h:.4}%, the paper {paper}%"
            );
        }
    }

    /// The ARC paper's P3 trace, its first 500,000 requests through 32,768
    /// entries in 4 shards with fixed hash seeds: under the kernel's
    /// refault test alone (activate within the active list's size) the
    /// `Workingset` policy hit 7.73% and 7.74%; with ARC's rule while not
    /// thrashing (activate within the shard's size), 9.59% and 9.60%, the
    /// same with the later thrashing rules; over the whole trace at this
    /// size, 14.6% became 17.4% (ARC: 17.11%).
    #[test]
    fn workingset_takes_arcs_rule_on_p3() {
        let t = read_trace(&traces_dir().join("P3.lis.zst"), 500_000).unwrap();
        let mut pct = Vec::new();
        for seed in [1, 2] {
            let c: mmbatch_cache::LruCache<u64, u64, _> = mmbatch_cache::LruCache::builder(32768)
                .shards(4)
                .hasher(foldhash::fast::FixedState::with_seed(seed))
                .build()
                .unwrap();
            let mut hits = 0u32;
            for &k in &t {
                if c.get(&k).is_some() {
                    hits += 1;
                } else {
                    c.insert(k, k);
                }
            }
            pct.push(f64::from(hits) * 100.0 / t.len() as f64);
        }
        assert!(pct.iter().all(|&p| p > 8.6), "{pct:?}% hits");
    }

    /// The ARC simulation against the paper's ARC column for OLTP: within
    /// 0.03 points at 1000 pages (38.95 for 38.93), to two decimals at the
    /// other sizes.
    #[test]
    fn the_arc_simulation_reproduces_the_papers_oltp_arc_column() {
        let trace = read_trace(&traces_dir().join("OLTP.lis.zst"), usize::MAX).unwrap();
        for (&pages, &paper) in OLTP_SIZES.iter().zip(&PAPER_OLTP_ARC) {
            let h = arc_hits(&trace, pages, 0) as f64 * 100.0 / trace.len() as f64;
            assert!(
                (h - paper).abs() < 0.03,
                "OLTP at {pages} pages: ARC {h:.4}%, the paper {paper}%"
            );
        }
        // ARC's known weakness: a loop one larger than the cache never hits.
        let lp: Vec<u64> = (0..1000).map(|i| i % 5).collect();
        assert_eq!(arc_hits(&lp, 4, 0), 0);
    }

    #[test]
    fn p3_requests_cover_count_pages() {
        // `230027 8 0 0` is pages 230027..230035.
        let t = read_trace(&traces_dir().join("P3.lis.zst"), 10).unwrap();
        assert_eq!(&t[..8], &(230_027..230_035).collect::<Vec<u64>>()[..]);
        assert_eq!(t[8], 1_842_745);
    }

    #[test]
    fn opt_is_beladys_min() {
        // The textbook string, 3 frames: MIN takes 9 faults of 20 with
        // demand paging; not admitting never does worse.
        let s = [
            7u64, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1,
        ];
        let h = opt_hits(&s, &next_uses(&s), 3, 0);
        assert!(h >= 11, "{h}");
        // A loop one larger than the cache: LRU never hits, OPT keeps all
        // but one key.
        let lp: Vec<u64> = (0..1000).map(|i| i % 5).collect();
        assert_eq!(exact_lru_hits(&lp, 4, 0), 0);
        let o = opt_hits(&lp, &next_uses(&lp), 4, 0);
        assert!(o >= 700, "{o}");
    }

    #[test]
    fn simulations_agree_with_the_lru_crate_and_bound_every_cache() {
        let trace = Shape::HotCold.trace(4000, 400, 40_000, 5);
        let next = next_uses(&trace);
        let opt = opt_hits(&trace, &next, 400, 20_000);
        let lru = exact_lru_hits(&trace, 400, 20_000);
        assert_eq!(lru, hits(Contender::LruCrate, 400, &trace, &next, 20_000));
        for c in Contender::all() {
            let h = hits(c, 400, &trace, &next, 20_000);
            assert!(h <= opt, "{c:?}: {h} > OPT {opt}");
        }
        assert!(opt > lru);
    }

    #[test]
    fn shapes_are_what_they_say() {
        let n = 40_000;
        let shifting = Shape::Shifting.trace(1000, 100, n, 1);
        let q = |i: usize| -> std::collections::HashSet<u64> {
            shifting[i * n / 4..(i + 1) * n / 4]
                .iter()
                .copied()
                .collect()
        };
        assert!(q(0).is_disjoint(&q(1)) && q(2).is_disjoint(&q(3)));
        let l = Shape::Loop.trace(1000, 100, 300, 1);
        assert_eq!((l[124], l[125]), (124, 0));
        let ln = Shape::LoopNoise.trace(1000, 100, 100_000, 1);
        let noise = ln
            .iter()
            .enumerate()
            .filter(|&(i, &k)| k != i as u64 % 125)
            .count();
        assert!(
            (700..1300).contains(&noise),
            "{noise} of 100000 off the loop"
        );
        assert!(ln.iter().filter(|&&k| k >= 125).all(|&k| k < 1125));
    }

    #[test]
    fn smallest_run_produces_every_row_and_judges_the_targets() {
        let cfg = Config {
            scale: 0.001,
            threads: None,
            samples: 1,
        };
        // Smaller than the smoke run's sizes: this is a debug build.
        let tiny = Sizes {
            min_trace: 10_000,
            lirs_most: 5_000,
            synth_keys: 10_000,
            synth_capacity: 1000,
            min_synth: 10_000,
        };
        let r = run_sized(&cfg, &mut crate::Quiet, tiny);
        // The P3 second half is one more table.
        let sizes = OLTP_SIZES.len()
            + P3_SIZES.len()
            + LIRS_TRACES.len() * 3
            + Shape::ALL.len()
            + Shape::EXTRA.len()
            + 1;
        // Warm restarts: the ARC and LIRS traces at every size, the two
        // Zipf shapes.
        let warm = OLTP_SIZES.len() + P3_SIZES.len() + LIRS_TRACES.len() * 3 + 2;
        // Weighted caches: the LIRS traces at every size.
        let weighed = LIRS_TRACES.len() * 3;
        assert_eq!(r.tables.len(), sizes + warm + weighed);
        assert_eq!(
            r.rows.len(),
            sizes * Contender::all().len()
                + warm * warm::STARTS.len()
                + weighed * weighted::COLUMNS.len()
        );
        assert!(
            r.row("weighted/mmbatch-adaptive-8-shards/lirs-cs/pages-100")
                .is_some()
        );
        assert!(
            r.row("weighted/mmbatch-adaptive-told/lirs-cs/pages-100")
                .is_some()
        );
        assert!(
            r.notes.iter().any(|n| n.starts_with("Weighted caches")
                && n.contains("told its entries (`estimated_entries`")),
            "{:?}",
            r.notes
        );
        assert!(r.row("warm-restart/warmed/OLTP/pages-1000").is_some());
        assert!(r.row("warm-restart/keys-only/lirs-ps/pages-200").is_some());
        assert!(r.row("warm-restart/continued/P3/pages-32768").is_some());
        assert!(r.row("opt/lirs-gli/pages-250").is_some());
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("exact LRU - 0.5 points on every trace")),
            "{:?}",
            r.notes
        );
        assert!(
            r.notes.iter().any(|n| n.starts_with("Warm restart, P3")),
            "{:?}",
            r.notes
        );
        assert!(r.row("opt/OLTP/pages-1000").is_some());
        assert!(r.row("mmbatch-lru/hot-cold/pages-1000").is_some());
        assert!(
            r.notes.iter().any(|n| n.contains("within 1 point of moka")),
            "{:?}",
            r.notes
        );
        // Every hit ratio is at most OPT's where every request counts
        // (the traces). Not on the shapes, which count their second half:
        // OPT is best over a whole trace, and a policy keeping other keys
        // can beat it within a window (the loop over 3x the cache: moka
        // 33.13% against OPT's 30% in the second half of a run of
        // 20,000 requests).
        for row in r
            .rows
            .iter()
            .filter(|r| r.name.contains("/OLTP/") || r.name.contains("/P3"))
            .filter(|r| !r.name.starts_with("warm-restart/"))
        {
            let (c, rest) = row.name.split_once('/').unwrap();
            let opt = r.row(&format!("opt/{rest}")).unwrap().counters["hit_ratio_pct"];
            assert!(
                row.counters["hit_ratio_pct"] <= opt + 1e-9,
                "{c} on {rest} beats OPT: {} vs {opt}",
                row.counters["hit_ratio_pct"]
            );
        }
    }
}
