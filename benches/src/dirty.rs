//! Experiment `dirty`: tracking which pages a restored region's process
//! writes, for incremental snapshots and live migration — a
//! `UffdRegion` built with `track_writes` (userfaultfd write-protect bits,
//! resolved by the kernel: `UFFD_FEATURE_WP_ASYNC`, scanned with
//! `PAGEMAP_SCAN`) against the kernel's soft-dirty bits (`clear_refs` 4
//! and `/proc/self/pagemap` bit 55), on the same writes.
//!
//! A region of [`BYTES`] at scale 1, every page present; [`SHARE`] of its
//! pages, in a fixed random order, written once each (a byte a page).
//! Rows:
//! - `writes/none`: the writes to an untracked anonymous mapping of
//!   4 KiB pages (no fault: the floor);
//! - `writes/uffd-wp`, `writes/soft-dirty`: the same writes, each a first
//!   write since the tracking was reset, both over 4 KiB pages (the
//!   region's are; the soft-dirty mapping is `MADV_NOHUGEPAGE`);
//! - `writes/soft-dirty-thp`: the same over transparent huge pages
//!   (`MADV_HUGEPAGE`), where some THP size takes advice: a huge page
//!   keeps one soft-dirty bit, so a write marks its 512 pages;
//! - `scan/uffd-wp`: `take_written_pages` (report and reset in one walk);
//! - `scan/soft-dirty*`: the pagemap read for the mapping's pages and the
//!   bits cleared again (`clear_refs` 4, which walks the whole process).
//!
//! Counters: pages, pages written; on every row but `none`, pages
//! reported and `exact` (1 when the reported set is the written set).

use std::{fs::File, io::Write as _, os::unix::fs::FileExt, time::Instant};

use mmbatch_faultaround::{UffdRegion, Zeroes};
use mmbatch_mmap::Advice;
use rand::{SeedableRng, rngs::SmallRng, seq::SliceRandom};

use crate::{Config, Experiment, Metric, Progress, Report, Row, Table};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    id: "dirty",
    seed: "issue 44 (dirty tracking after restore), after seed 002",
    title: "write tracking: cost per first write and per scan, userfaultfd write-protect vs soft-dirty",
    run,
    big_scale: 16.0,
    // The tracked region and the soft-dirty mapping, one at a time.
    memory: |cfg| pages(cfg) as u64 * PAGE as u64 * 2,
    seed_refs: &[],
    seed_why: "",
    contention: "",
};

/// Region size at scale 1.
pub const BYTES: f64 = (256u64 << 20) as f64;
/// Share of the pages written.
pub const SHARE: f64 = 0.10;
const PAGE: usize = 4096;
/// Soft-dirty: bit 55 of a pagemap entry.
const SOFT_DIRTY: u64 = 1 << 55;

fn pages(cfg: &Config) -> usize {
    ((BYTES * cfg.scale) as usize / PAGE).max(1024)
}

/// One sample: seconds, and what the scan reported.
struct Sample {
    elapsed_s: f64,
    reported: usize,
    exact: bool,
}

/// Writes a byte to each page of `order` in `base`.
fn write_pages(base: usize, order: &[usize]) {
    for &p in order {
        // SAFETY: `p` is a page of the caller's mapping at `base`, which no
        // reference covers while this runs.
        unsafe { ((base + p * PAGE) as *mut u8).write_volatile(1) };
    }
}

/// `echo 4 > /proc/self/clear_refs`: clears the soft-dirty bits of every
/// page of the process (write-protecting them).
fn clear_soft_dirty() -> std::io::Result<()> {
    File::options()
        .write(true)
        .open("/proc/self/clear_refs")?
        .write_all(b"4")
}

/// The pages of `base..base + n pages` whose soft-dirty bit is set.
fn soft_dirty_pages(pagemap: &File, base: usize, n: usize) -> std::io::Result<Vec<usize>> {
    let mut buf = vec![0u8; n * 8];
    pagemap.read_exact_at(&mut buf, (base / PAGE * 8) as u64)?;
    Ok(buf
        .chunks_exact(8)
        .enumerate()
        .filter(|(_, e)| u64::from_ne_bytes((*e).try_into().unwrap()) & SOFT_DIRTY != 0)
        .map(|(i, _)| i)
        .collect())
}

/// Whether this kernel keeps soft-dirty bits (`CONFIG_MEM_SOFT_DIRTY`):
/// a page written after `clear_refs` 4 shows bit 55.
fn soft_dirty_works() -> bool {
    let Ok(m) = mmbatch_mmap::Mapping::populated(PAGE) else {
        return false;
    };
    let Ok(pagemap) = File::open("/proc/self/pagemap") else {
        return false;
    };
    if clear_soft_dirty().is_err() {
        return false;
    }
    write_pages(m.as_ptr() as usize, &[0]);
    soft_dirty_pages(&pagemap, m.as_ptr() as usize, 1).is_ok_and(|p| p == [0])
}

/// (writes, scan) samples of tracking `order`'s writes in `n` pages by
/// `how`.
fn measure(how: &str, n: usize, order: &[usize]) -> Result<(Sample, Sample), String> {
    let mut want: Vec<usize> = order.to_vec();
    want.sort_unstable();
    let err = |e: &dyn std::fmt::Display| format!("{how}: {e}");
    match how {
        "none" | "soft-dirty" | "soft-dirty-thp" => {
            let m = mmbatch_mmap::Mapping::anonymous(n * PAGE).map_err(|e| err(&e))?;
            let advice = if how == "soft-dirty-thp" {
                Advice::HugePage
            } else {
                Advice::NoHugePage
            };
            m.advise(0..n * PAGE, advice).map_err(|e| err(&e))?;
            let base = m.as_ptr() as usize;
            m.advise(0..n * PAGE, Advice::PopulateWrite)
                .map_err(|e| err(&e))?;
            if how == "none" {
                let start = Instant::now();
                write_pages(base, order);
                let writes = start.elapsed().as_secs_f64();
                let none = |elapsed_s| Sample {
                    elapsed_s,
                    reported: 0,
                    exact: false,
                };
                return Ok((none(writes), none(0.0)));
            }
            let pagemap = File::open("/proc/self/pagemap").map_err(|e| err(&e))?;
            clear_soft_dirty().map_err(|e| err(&e))?;
            let start = Instant::now();
            write_pages(base, order);
            let writes = start.elapsed().as_secs_f64();
            let start = Instant::now();
            let got = soft_dirty_pages(&pagemap, base, n).map_err(|e| err(&e))?;
            clear_soft_dirty().map_err(|e| err(&e))?;
            let scan = start.elapsed().as_secs_f64();
            let exact = got == want;
            Ok((
                Sample {
                    elapsed_s: writes,
                    reported: got.len(),
                    exact,
                },
                Sample {
                    elapsed_s: scan,
                    reported: got.len(),
                    exact,
                },
            ))
        }
        "uffd-wp" => {
            let r = UffdRegion::builder(n * PAGE)
                .order(mmbatch_faultaround::MAX_ORDER)
                .track_writes(true)
                .build(Zeroes((n * PAGE) as u64))
                .map_err(|e| err(&e))?;
            // Every page present, write-protected, nothing written yet.
            let sum: u64 = (0..n).map(|p| u64::from(r.as_slice()[p * PAGE])).sum();
            std::hint::black_box(sum);
            r.take_written_pages().map_err(|e| err(&e))?;
            let base = r.as_ptr() as usize;
            let start = Instant::now();
            write_pages(base, order);
            let writes = start.elapsed().as_secs_f64();
            let start = Instant::now();
            let got = r.take_written_pages().map_err(|e| err(&e))?;
            let scan = start.elapsed().as_secs_f64();
            let got: Vec<usize> = got
                .into_iter()
                .flat_map(|r| r.start as usize..r.end as usize)
                .collect();
            let exact = got == want;
            Ok((
                Sample {
                    elapsed_s: writes,
                    reported: got.len(),
                    exact,
                },
                Sample {
                    elapsed_s: scan,
                    reported: got.len(),
                    exact,
                },
            ))
        }
        other => Err(format!("no tracking {other}")),
    }
}

fn run(cfg: &Config, progress: &mut dyn Progress) -> Report {
    let n = pages(cfg);
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut SmallRng::seed_from_u64(44));
    order.truncate(((n as f64 * SHARE) as usize).max(1));
    let samples = cfg.samples.max(1);
    let soft_dirty = soft_dirty_works();
    let mut ways = vec!["none", "uffd-wp"];
    if soft_dirty {
        ways.push("soft-dirty");
        if crate::thp::Modes::read().on_advice() {
            ways.push("soft-dirty-thp");
        }
    }
    let mut failures = Vec::new();
    let mut writes: Vec<Row> = Vec::new();
    let mut scans: Vec<Row> = Vec::new();
    for (i, how) in ways.iter().enumerate() {
        progress.row(i, ways.len(), how);
        let mut got = Vec::new();
        for _ in 0..samples {
            match measure(how, n, &order) {
                Ok(s) => got.push(s),
                Err(e) => {
                    failures.push(e);
                    break;
                }
            }
        }
        let counters = |s: &[&Sample]| {
            let mut c = vec![("pages", n as f64), ("written", order.len() as f64)];
            if *how != "none" {
                c.push(("reported", crate::mean(s, |s| s.reported as u64)));
                c.push(("exact", crate::mean(s, |s| u64::from(s.exact))));
            }
            c
        };
        let w: Vec<&Sample> = got.iter().map(|(w, _)| w).collect();
        writes.push(Row::timed(
            format!("writes/{how}"),
            w.iter().map(|s| s.elapsed_s).collect(),
            counters(&w),
        ));
        if *how != "none" {
            let sc: Vec<&Sample> = got.iter().map(|(_, s)| s).collect();
            scans.push(Row::timed(
                format!("scan/{how}"),
                sc.iter().map(|s| s.elapsed_s).collect(),
                counters(&sc),
            ));
        }
    }
    let nw = writes.len();
    let rows: Vec<Row> = writes.into_iter().chain(scans).collect();
    let tables = vec![
        Table {
            title: format!("{} first writes in {n} pages", order.len()),
            columns: ways.iter().map(|s| (*s).to_owned()).collect(),
            rows: (0..nw).collect(),
        },
        Table {
            title: format!("report and reset over {n} pages"),
            columns: ways[1..].iter().map(|s| (*s).to_owned()).collect(),
            rows: (nw..rows.len()).collect(),
        },
    ];
    let mut report = EXPERIMENT.report(cfg, Metric::Seconds, rows, tables);
    report.notes = notes(&report, n, order.len(), &failures);
    if !soft_dirty {
        report.notes.push(
            "Soft-dirty rows not run: this kernel keeps no soft-dirty bits \
             (CONFIG_MEM_SOFT_DIRTY off: a page written after clear_refs 4 showed no bit 55). \
             The comparison needs a kernel with both soft-dirty and PAGEMAP_SCAN (6.7+): \
             `cargo xtask vm --backports-kernel --repro dirty` runs it in a guest on Debian's \
             backports kernel, which has both."
                .into(),
        );
    }
    report
}

fn notes(r: &Report, n: usize, k: usize, failures: &[String]) -> Vec<String> {
    let mut notes = vec![format!(
        "{n} pages ({} MiB), {k} written once each in random order{}.",
        (n * PAGE) >> 20,
        if failures.is_empty() {
            String::new()
        } else {
            format!(" — FAILED: {}", failures.join("; "))
        }
    )];
    let med = |name: &str| r.median(name);
    let exact_share = |how: &str| {
        r.row(&format!("scan/{how}"))?
            .counters
            .get("exact")
            .copied()
    };
    notes.push(format!(
        "Target uffd-wp reports exactly the pages written: {}.",
        match exact_share("uffd-wp") {
            Some(1.0) => "met (every sample)".to_owned(),
            Some(x) => format!("MISSED ({:.0}% of samples exact)", x * 100.0),
            None => "not run".to_owned(),
        }
    ));
    if let Some(x) = exact_share("soft-dirty") {
        notes.push(format!(
            "Soft-dirty over the same 4 KiB pages reported exactly the pages written in {:.0}% \
             of samples.",
            x * 100.0
        ));
    }
    if let Some(reported) = r
        .row("scan/soft-dirty-thp")
        .and_then(|row| row.counters.get("reported").copied())
    {
        notes.push(format!(
            "Soft-dirty over transparent huge pages reported {reported:.0} pages for the {k} \
             written ({:.1}x): a huge page keeps one bit for its 512 pages, so a snapshot taken \
             from it copies that much more.",
            reported / k as f64
        ));
    }
    if let Some(none) = med("writes/none") {
        for how in ["uffd-wp", "soft-dirty", "soft-dirty-thp"] {
            if let Some(t) = med(&format!("writes/{how}")) {
                notes.push(format!(
                    "Cost of a first write over an untracked one, {how}: {:.0} ns ({:.2} ms for \
                     {k} writes against {:.2} ms).",
                    (t - none) / k as f64 * 1e9,
                    t * 1e3,
                    none * 1e3
                ));
            }
        }
    }
    for how in ["uffd-wp", "soft-dirty", "soft-dirty-thp"] {
        if let Some(t) = med(&format!("scan/{how}")) {
            notes.push(format!(
                "Report and reset, {how}: {:.2} ms, {:.1} ns a page{}.",
                t * 1e3,
                t / n as f64 * 1e9,
                if how.starts_with("soft-dirty") {
                    " (its clear_refs walks the whole process, not only the region)"
                } else {
                    " (PAGEMAP_SCAN, one walk of the region's page tables)"
                }
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uffd_wp_reports_the_written_pages_and_soft_dirty_where_the_kernel_has_it() {
        let order = [7, 3, 900, 512, 1023];
        let (w, s) = measure("uffd-wp", 1024, &order).unwrap();
        assert!(w.exact && s.exact && s.reported == order.len());
        if soft_dirty_works() {
            let (_, s) = measure("soft-dirty", 1024, &order).unwrap();
            assert!(s.exact, "soft-dirty reported {}", s.reported);
            let (_, s) = measure("soft-dirty-thp", 1024, &order).unwrap();
            assert!(
                s.reported >= order.len(),
                "soft-dirty-thp reported {}",
                s.reported
            );
        }
        assert!(measure("other", 1024, &order).is_err());
    }
}
