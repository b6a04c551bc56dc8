//! Experiment `restore`: how long until a restored image's working set is
//! in memory — what a VMM restoring a snapshot, a serverless cold start
//! or a lazily loaded file waits for — by the ways a user can restore it.
//!
//! The image is a file of [`BYTES`] at scale 1 (1 GiB); page `i` holds a
//! pattern of `i`, so every row checks what it restored. The working set
//! is about [`WS_SHARE`] of its pages, in clustered random runs of 1 to
//! [`MAX_RUN`] pages, touched (one read a page) in a fixed random order
//! of the runs by 1 and 2 threads (runs dealt out in turn). A sample is
//! timed from before the memory is set up until every thread has read
//! its share: the time until the working set is resident.
//!
//! Rows `CACHE/STRATEGY/threads-T`, CACHE `warm` (the image in the page
//! cache), `cold` (dropped before each sample: only as root) or `dense`
//! (warm, over the dense working set below: only as root), STRATEGY:
//! - `lazy-order-0`: a `UffdRegion` over the file, one page per fault —
//!   what the VMMs' example handlers do;
//! - `lazy-order-4`: the same, a 16-page window per fault;
//! - `replay`: a region replaying the record of a first run (recorded
//!   once, untimed) from its working-set file (the recorded pages written
//!   contiguously, read in one sequential pass) — REAP's prefetch — its
//!   misses one page per fault;
//! - `replay-order-4`: replay, misses by 16-page windows;
//! - `replay-image`: replay reading each run from its place in the image
//!   (no working-set file);
//! - `eager` (warm only: cold, it read the whole image from disk, 13 s of
//!   a default run that said only the disk's speed): the whole image read
//!   into anonymous memory first;
//! - `file-mapping`: a private mapping of the image, the kernel's page
//!   cache with its fault-around (and readahead when cold);
//! - `replay-shmem` (warm only): the image held in shmem (a memfd, as a
//!   VMM keeping guest memory in shared memory would), the region a
//!   shared mapping of it registered for minor faults, and the replay
//!   mapping the recorded runs in place (`UFFDIO_CONTINUE`): a restore
//!   that copies nothing;
//! - `foreign-order-0`, `foreign-order-4` (warm only): the lazy rows with
//!   the memory another process's — a VMM child (`repro` re-executed)
//!   maps it, registers its own userfaultfd and hands it over a Unix
//!   socket; a `UffdHandler` here serves it, as a Firecracker page-fault
//!   handler does; timed in the child from before its `mmap`;
//! - `huge-lazy`, `huge-replay` (warm, where the 2 MiB pool can be grown:
//!   root): `lazy-order-0` and `replay` in a region of 2 MiB hugetlb
//!   pages, a whole huge page a fault or a replayed page, recorded by a
//!   first run of its own; `huge-replay-shmem`: that record replayed in
//!   place over the image in a hugetlbfs memfd (`UFFDIO_CONTINUE` of
//!   whole huge pages, no copy);
//! - at 2 threads also `lazy-order-0-handlers-2`: two handler threads;
//! - under `dense` (as root, where the pool can be grown): `lazy-order-0`,
//!   `huge-lazy`, `replay` and `huge-replay` over a working set of the
//!   same share of the image made of whole 2 MiB pages
//!   ([`working_set_dense`]), where a huge-page restore copies no more
//!   bytes than a 4 KiB one: the scattered working set lies in nearly
//!   every huge page of the image, so there huge pages copy ~9x the
//!   bytes and compare the page sizes no longer;
//! - `lazy-order-0-no-busy-poll` (warm only): `lazy-order-0` with the
//!   handler sleeping in `poll` between faults (`busy_poll(ZERO)`), the
//!   way the VMMs' example handlers wait; the lazy and foreign rows also
//!   time each page's first read, for the fault latency's p50 and p99;
//! - `file-mapping-cow`: the private file mapping written to (each page's
//!   byte read and written back): every page is copied out of the page
//!   cache on its write fault, as a guest writing its memory makes the
//!   kernel do — the cost of a restore that copies, by the kernel.
//!
//! - `copy-floor`: no restore at all, a bound on one — the working set
//!   read from the image straight into anonymous memory made resident
//!   before the clock starts (one copy a byte, no fault, no page
//!   allocation), by as many threads as touch it: no restore that copies
//!   can be faster; cold, the same read from the disk;
//! - `copy-floor-fresh` (warm only): the same into fresh memory, each run
//!   allocated in one call (`MADV_POPULATE_WRITE`) inside the clock: the
//!   floor of a restore into fresh anonymous memory, which every
//!   userfaultfd restore into anonymous memory is.
//!
//! Counters: faults, pages copied, bytes read from the source (the page
//! source counts them), pages the replay installed.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use mmbatch_faultaround::{HugePageSize, Record, UffdRegion};
use mmbatch_mmap::PoolGrowth;
use rand::{RngExt, SeedableRng, rngs::SmallRng, seq::SliceRandom};

mod baselines;
mod foreign;
mod image;
mod notes;

pub use foreign::child;
pub use image::Image;

use image::{Counted, image_byte};

use notes::notes;

use crate::{Config, Experiment, Metric, Progress, Report, Row, SeedRef, Stat, Table};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    id: "restore",
    seed: "REAP (Ustiugov et al., ASPLOS 2021), after seed 002",
    title: "snapshot restore: time until the working set is resident, lazy vs record-and-replay",
    run,
    big_scale: 1.0,
    // The image in the page cache, the region, an eager copy, and the
    // working-set files (the huge one nearly the image).
    memory: |cfg| 5 * image_pages(cfg) * PAGE as u64,
    seed_refs: SEED_REFS,
    seed_why: "REAP's 3.7x is a whole cold start (a VM's snapshot from disk, the function's own work included); here only the working set's arrival is timed, so the fault round trips replay removes are all of the time when the image is cached, and the disk's speed bounds both when it is not.",
    contention: "the rows at 2 threads",
};

/// Samples of a warm row at most, whatever `--samples` asks (the
/// default's five): several judged warm ratios sit near their bars, and a
/// row's samples can differ threefold here (ARCHITECTURE section 4).
pub const MAX_SAMPLES: usize = 5;

/// Samples of a cold row at most: its judged ratios are far from their
/// bars, and a cold sample re-reads the image from disk.
pub const MAX_COLD_SAMPLES: usize = 3;

/// REAP's headline: cold start with record-and-prefetch vs lazy paging.
const SEED_REFS: &[SeedRef] = &[
    SeedRef {
        what: "REAP: cold start, prefetch of the recorded working set vs lazy paging (cold)",
        base: "cold/lazy-order-0/threads-1",
        tech: "cold/replay/threads-1",
        seed: 3.7,
        stat: Stat::Median,
    },
    SeedRef {
        what: "REAP: the same with the image in the page cache (warm)",
        base: "warm/lazy-order-0/threads-1",
        tech: "warm/replay/threads-1",
        seed: 3.7,
        stat: Stat::Median,
    },
];

/// Image size at scale 1.
pub const BYTES: f64 = (1u64 << 30) as f64;
/// Share of the image's pages in the working set.
pub const WS_SHARE: f64 = 0.10;
/// The longest run of the working set, in pages.
pub const MAX_RUN: u64 = 64;
const PAGE: usize = 4096;

/// Whole huge pages, so the huge rows map the same image.
fn image_pages(cfg: &Config) -> u64 {
    let per_huge = (HUGE / PAGE) as u64;
    ((BYTES * cfg.scale) as u64 / PAGE as u64).max(1024) / per_huge * per_huge
}

/// The huge rows' page: 2 MiB.
const HUGE: usize = 2 << 20;

/// The strategies, in table order.
const STRATEGIES: [&str; 18] = [
    "lazy-order-0",
    "lazy-order-0-no-busy-poll",
    "lazy-order-4",
    "foreign-order-0",
    "foreign-order-4",
    "replay",
    "replay-order-4",
    "replay-image",
    "eager",
    "file-mapping",
    "lazy-order-0-handlers-2",
    "file-mapping-cow",
    "replay-shmem",
    "copy-floor",
    "copy-floor-fresh",
    "huge-lazy",
    "huge-replay",
    "huge-replay-shmem",
];

/// The strategies of the dense working set's rows, in table order.
const DENSE_STRATEGIES: [&str; 4] = ["lazy-order-0", "huge-lazy", "replay", "huge-replay"];

/// The working set: runs of 1 to `MAX_RUN` pages covering about
/// `WS_SHARE` of `pages`, in the fixed random order they are touched.
pub fn working_set(pages: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let want = ((pages as f64 * WS_SHARE) as u64).max(1);
    let mut taken = vec![false; pages as usize];
    let (mut runs, mut got) = (Vec::new(), 0);
    while got < want {
        let len = rng.random_range(1..=MAX_RUN).min(want - got);
        let start = rng.random_range(0..pages - len + 1);
        if (start..start + len).any(|p| taken[p as usize]) {
            continue;
        }
        (start..start + len).for_each(|p| taken[p as usize] = true);
        runs.push((start, len));
        got += len;
    }
    runs.shuffle(&mut rng);
    runs
}

/// A working set of whole 2 MiB pages: `WS_SHARE` of the image's huge
/// pages (at least one), each touched as runs of `MAX_RUN` pages, the
/// runs of all of them in one fixed random order.
pub fn working_set_dense(pages: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let per = (HUGE / PAGE) as u64;
    let mut blocks: Vec<u64> = (0..pages / per).collect();
    blocks.shuffle(&mut rng);
    blocks.truncate((((pages / per) as f64 * WS_SHARE).round() as usize).max(1));
    let mut runs: Vec<(u64, u64)> = blocks
        .iter()
        .flat_map(|b| (0..per / MAX_RUN).map(move |i| (b * per + i * MAX_RUN, MAX_RUN)))
        .collect();
    runs.shuffle(&mut rng);
    runs
}

/// Thread `t` of `threads`'s pages, in touch order.
fn share(runs: &[(u64, u64)], t: usize, threads: usize) -> Vec<u64> {
    runs.iter()
        .skip(t)
        .step_by(threads)
        .flat_map(|&(s, n)| s..s + n)
        .collect()
}

/// One sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Seconds from set-up until the working set was read.
    pub elapsed_s: f64,
    /// Faults the handlers took (0 for eager and the file mapping).
    pub faults: u64,
    /// Pages copied into the region.
    pub pages_copied: u64,
    /// Bytes read from the image file by the page source (eager: the
    /// whole image).
    pub bytes_read: u64,
    /// Pages the replay installed.
    pub prefetched: u64,
    /// Nanoseconds of the median page read (the lazy and foreign rows
    /// time each read; 0 in the others).
    pub read_p50_ns: u64,
    /// Nanoseconds of the 99th percentile page read (0 where untimed).
    pub read_p99_ns: u64,
}

/// Memory to check: `ptr` holds the image's pages at their offsets.
/// Every working-set page is compared whole.
fn check(ptr: *const u8, runs: &[(u64, u64)]) -> Result<(), String> {
    let mut want = vec![0u8; PAGE];
    for &(s, n) in runs {
        for p in s..s + n {
            let at = p * PAGE as u64;
            for (i, b) in want.iter_mut().enumerate() {
                *b = image_byte(at + i as u64);
            }
            // SAFETY: the page lies in the caller's readable mapping of
            // the image, resident now.
            let got = unsafe { std::slice::from_raw_parts(ptr.wrapping_add(at as usize), PAGE) };
            if got != want.as_slice() {
                return Err(format!("page {p} does not hold the image's data"));
            }
        }
    }
    Ok(())
}

/// Reads one byte of each page of each thread's share, on `threads`
/// threads, from memory at `base` (an address, to cross threads).
fn touch(base: usize, runs: &[(u64, u64)], threads: usize) {
    touch_timed(base, runs, threads, false);
}

/// [`touch`], and with `timed` the nanoseconds of every read (each a
/// first touch: with a lazy region of one page a fault, each a fault's
/// round trip), sorted; empty without.
fn touch_timed(base: usize, runs: &[(u64, u64)], threads: usize, timed: bool) -> Vec<u64> {
    let mut all = std::thread::scope(|s| {
        let hands: Vec<_> = (0..threads)
            .map(|t| {
                let pages = share(runs, t, threads);
                s.spawn(move || {
                    let mut sum = 0u64;
                    let mut took = Vec::with_capacity(if timed { pages.len() } else { 0 });
                    for p in pages {
                        let at = timed.then(Instant::now);
                        // SAFETY: inside the caller's mapping of the image.
                        sum += u64::from(unsafe {
                            std::ptr::read_volatile((base + p as usize * PAGE) as *const u8)
                        });
                        if let Some(at) = at {
                            took.push(at.elapsed().as_nanos() as u64);
                        }
                    }
                    std::hint::black_box(sum);
                    took
                })
            })
            .collect();
        hands
            .into_iter()
            .flat_map(|h| h.join().expect("a touching thread panicked"))
            .collect::<Vec<u64>>()
    });
    all.sort_unstable();
    all
}

/// The `q` quantile of sorted `v` (0 for none).
fn quantile(v: &[u64], q: f64) -> u64 {
    v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0)
}

/// Which copy of the image a strategy's restore reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The image file (its page cache).
    File,
    /// The image in shmem.
    Shm,
    /// The image in a hugetlbfs memfd.
    HugeShm,
    /// The working-set file.
    WorkingSet,
}

impl Source {
    /// What `strategy` reads.
    pub fn of(strategy: &str) -> Self {
        match strategy {
            "replay" | "replay-order-4" | "huge-replay" => Source::WorkingSet,
            "replay-shmem" => Source::Shm,
            "huge-replay-shmem" => Source::HugeShm,
            _ => Source::File,
        }
    }
}

/// A first run's record and its working-set file.
#[derive(Debug)]
pub struct Recorded {
    /// The pages the first run touched.
    pub record: Record,
    /// The working-set file (`Record::write_pages`), unlinked on drop.
    pub pages: Image,
    /// The same for a region of 2 MiB pages, where the huge rows run (one
    /// for every thread count: a 1 GiB working-set file each would cost
    /// the run seconds of writing).
    pub huge: Option<std::sync::Arc<Recorded>>,
}

/// Restores `image` by `strategy` and reads the working set on `threads`
/// threads; checks the memory afterwards.
pub fn measure(
    image: &Image,
    strategy: &str,
    runs: &[(u64, u64)],
    rec: &Recorded,
    threads: usize,
) -> Result<Sample, String> {
    match strategy {
        "eager" => return baselines::eager(image, runs, threads),
        "copy-floor" => return baselines::copy_floor(image, runs, threads, false),
        "copy-floor-fresh" => return baselines::copy_floor(image, runs, threads, true),
        "file-mapping" => return baselines::file_mapping(image, runs, threads, false),
        "file-mapping-cow" => return baselines::file_mapping(image, runs, threads, true),
        "foreign-order-0" => return foreign::foreign(image, runs, threads, 0),
        "foreign-order-4" => return foreign::foreign(image, runs, threads, 4),
        _ => {}
    }
    let record = &rec.record;
    let ws = || {
        rec.pages
            .file
            .try_clone()
            .expect("dup the working-set file")
    };
    static BYTES_READ: AtomicU64 = AtomicU64::new(0);
    BYTES_READ.store(0, Ordering::Relaxed);
    let source = || Counted {
        file: image.file.try_clone().expect("dup the image"),
        bytes: &BYTES_READ,
    };
    let len = image.len();
    let shm = match strategy {
        "replay-shmem" => Some(image.shm()),
        "huge-replay-shmem" => Some(image.huge_shm()),
        _ => None,
    };
    let start = Instant::now();
    let b = UffdRegion::builder(len).image_id("restore-image");
    let huge = || b.clone().huge_pages(HugePageSize::Size2M);
    let b = match strategy {
        "huge-lazy" => huge(),
        "huge-replay" => {
            let h = rec.huge.as_ref().ok_or("no huge-page record (no pool)")?;
            let ws = h.pages.file.try_clone().expect("dup the working-set file");
            huge().replay(h.record.clone()).replay_pages(ws)
        }
        "lazy-order-0" => b,
        "lazy-order-0-no-busy-poll" => b.busy_poll(Duration::ZERO),
        "lazy-order-4" => b.order(4),
        "replay" => b.replay(record.clone()).replay_pages(ws()),
        "replay-order-4" => b.order(4).replay(record.clone()).replay_pages(ws()),
        "replay-image" => b.replay(record.clone()),
        "lazy-order-0-handlers-2" => b.handlers(2),
        "replay-shmem" | "huge-replay-shmem" => b,
        other => return Err(format!("no strategy {other}")),
    };
    let replayed = match strategy {
        "huge-replay-shmem" => {
            &rec.huge
                .as_ref()
                .ok_or("no huge-page record (no pool)")?
                .record
        }
        _ => record,
    };
    let region = match shm {
        // SAFETY: the memfd is this experiment's own; nothing writes
        // or truncates it while the region lives.
        Some(shm) => unsafe { b.replay(replayed.clone()).build_over_page_cache(shm) },
        None => b.build(source()),
    }
    .map_err(|e| e.to_string())?;
    let reads = touch_timed(
        region.as_ptr() as usize,
        runs,
        threads,
        strategy.starts_with("lazy-order-"),
    );
    let elapsed_s = start.elapsed().as_secs_f64();
    // Untimed: let the replay finish, so its counters are whole.
    if !region.wait_replayed(Duration::from_secs(60)) {
        return Err("the replay had not ended a minute after the run".into());
    }
    let st = region.stats();
    if let Some(e) = region.failure() {
        return Err(e.to_string());
    }
    let sample = Sample {
        elapsed_s,
        faults: st.faults,
        pages_copied: st.pages_copied,
        prefetched: st.pages_prefetched,
        bytes_read: BYTES_READ.load(Ordering::Relaxed)
            + if strategy == "replay" || strategy == "replay-order-4" {
                rec.pages.len() as u64
            } else if strategy == "huge-replay" {
                rec.huge.as_ref().map_or(0, |h| h.pages.len() as u64)
            } else {
                0
            },
        read_p50_ns: quantile(&reads, 0.5),
        read_p99_ns: quantile(&reads, 0.99),
    };
    check(region.as_ptr(), runs)?;
    Ok(sample)
}

/// The record of a first run (a lazy region, recording, read as the
/// working set is read) and its working-set file (named for `set`, so
/// that two working sets' files stay apart); with `huge`, also of a
/// region of 2 MiB pages.
pub fn record_first_run(
    image: &Image,
    runs: &[(u64, u64)],
    threads: usize,
    huge: bool,
    set: &str,
) -> Recorded {
    let record = |b: mmbatch_faultaround::UffdRegionBuilder, tag: &str| {
        let region = b
            .image_id("restore-image")
            .record(true)
            .build(image.file.try_clone().expect("dup the image"))
            .expect("userfaultfd region");
        touch(region.as_ptr() as usize, runs, threads);
        let record = region.record().expect("recording");
        let mut bytes = Vec::new();
        record
            .write_pages(&image.file, &mut bytes)
            .expect("writing the working-set file");
        let pages = Image::from_bytes(&format!("ws-{set}{tag}{threads}"), &bytes)
            .expect("the working-set file");
        Recorded {
            record,
            pages,
            huge: None,
        }
    };
    let mut rec = record(UffdRegion::builder(image.len()), "");
    if huge {
        let b = UffdRegion::builder(image.len()).huge_pages(HugePageSize::Size2M);
        rec.huge = Some(std::sync::Arc::new(record(b, "huge-")));
    }
    rec
}

/// [`record_first_run`] at each thread count of `threads`; with `huge`,
/// the first also records a region of 2 MiB pages, which every count
/// shares (one huge region at a time).
fn record_each(
    image: &Image,
    runs: &[(u64, u64)],
    threads: &[usize],
    huge: bool,
    set: &str,
) -> Vec<Recorded> {
    let mut records: Vec<Recorded> = threads
        .iter()
        .enumerate()
        .map(|(i, &t)| record_first_run(image, runs, t, huge && i == 0, set))
        .collect();
    let shared = records[0].huge.clone();
    for r in &mut records[1..] {
        r.huge.clone_from(&shared);
    }
    records
}

/// Pages added to the 2 MiB pool for the huge rows (none where it had
/// them free), given back on drop; `None` where the pool cannot grow to
/// `pages` free pages (not root, or no memory for them).
struct HugePool {
    _growth: Option<PoolGrowth>,
}

impl HugePool {
    fn grow(pages: usize) -> Option<Self> {
        let size = HugePageSize::Size2M;
        let lock = size.lock_pool();
        let free = size.available_pages();
        if free >= pages {
            return Some(HugePool { _growth: None });
        }
        let growth = lock.grow(pages - free).ok()?;
        // Short of them, the growth is given back as it drops.
        (size.available_pages() >= pages).then_some(HugePool {
            _growth: Some(growth),
        })
    }
}

fn run(cfg: &Config, progress: &mut dyn Progress) -> Report {
    let pages = image_pages(cfg);
    let image = Image::create(pages).expect("writing the image file");
    let runs = working_set(pages, 18);
    let root = rustix::process::geteuid().is_root();
    let caches: &[&str] = if root { &["warm", "cold"] } else { &["warm"] };
    let threads = [1usize, 2];
    image.warm();
    // One huge region at a time, and the image in a hugetlbfs memfd.
    let pool = HugePool::grow(2 * image.len() / HUGE);
    let records = record_each(&image, &runs, &threads, pool.is_some(), "");
    let huge = records[0].huge.clone();
    // The dense working set's records, where huge pages can be had.
    let dense_runs = working_set_dense(pages, 18);
    let dense: Vec<Recorded> = if huge.is_some() {
        record_each(&image, &dense_runs, &threads, true, "dense-")
    } else {
        Vec::new()
    };
    let mut groups: Vec<&str> = caches.to_vec();
    if !dense.is_empty() {
        groups.push("dense");
    }
    type Planned<'a> = (&'a str, &'a str, usize, &'a Recorded, &'a [(u64, u64)]);
    let plan: Vec<Planned<'_>> = groups
        .iter()
        .flat_map(|&c| {
            let (recs, ws, strategies): (&[Recorded], &[(u64, u64)], &[&str]) = if c == "dense" {
                (&dense, &dense_runs, &DENSE_STRATEGIES)
            } else {
                (&records, &runs, &STRATEGIES)
            };
            threads.iter().zip(recs).flat_map(move |(&t, rec)| {
                strategies
                    .iter()
                    .filter(move |s| t > 1 || !s.ends_with("handlers-2"))
                    .filter(move |s| {
                        c != "cold"
                            || !matches!(
                                **s,
                                "replay-shmem"
                                    | "copy-floor-fresh"
                                    | "eager"
                                    | "lazy-order-0-no-busy-poll"
                            ) && !s.starts_with("foreign")
                                && !s.starts_with("huge")
                    })
                    .filter(move |s| rec.huge.is_some() || !s.starts_with("huge"))
                    .map(move |&s| (c, s, t, rec, ws))
            })
        })
        .collect();
    // Samples taken in turn (sample 1 of every row, then sample 2, ...,
    // warm rows, then cold), so rows compared pair by pair saw the same
    // moments of a noisy host.
    let rounds = |cache: &str| match cache {
        "cold" => cfg.samples.clamp(1, MAX_COLD_SAMPLES),
        _ => cfg.samples.clamp(1, MAX_SAMPLES),
    };
    let total: usize = plan.iter().map(|row| rounds(row.0)).sum();
    // The warm rows' copies of the image made now, so that each warm
    // sample, the first included, reads the same sources first.
    image.shm();
    if huge.is_some() {
        image.huge_shm();
    }
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); plan.len()];
    let mut failed = vec![false; plan.len()];
    let mut failures = Vec::new();
    let name =
        |&(cache, strategy, t, _, _): &Planned<'_>| format!("{cache}/{strategy}/threads-{t}");
    // Within one page-cache state at a time: a cold row drops the image,
    // which the next warm row would read back whole.
    let mut done = 0;
    for &c in &groups {
        let group: Vec<usize> = (0..plan.len()).filter(|&i| plan[i].0 == c).collect();
        for _ in 0..rounds(c) {
            for &i in &group {
                let row = &plan[i];
                let &(cache, strategy, t, rec, runs) = row;
                if failed[i] {
                    continue;
                }
                progress.row(done, total, &name(row));
                done += 1;
                let ws = match strategy {
                    s if s.starts_with("huge") => rec.huge.as_ref().map(|h| &h.pages),
                    _ => Some(&rec.pages),
                };
                for f in std::iter::once(&image).chain(ws) {
                    if cache == "cold" {
                        f.drop_cache();
                    } else {
                        f.warm();
                    }
                }
                if cache != "cold" {
                    image.read_sources(runs, ws, Source::of(strategy));
                }
                match measure(&image, strategy, runs, rec, t) {
                    Ok(s) => samples[i].push(s),
                    Err(e) => {
                        failures.push(format!("{}: {e}", name(row)));
                        failed[i] = true;
                    }
                }
            }
        }
    }
    let rows: Vec<Row> = plan
        .iter()
        .zip(&samples)
        .map(|(row, samples)| {
            let mean = |f: fn(&Sample) -> u64| crate::mean(samples, f);
            Row::timed(
                name(row),
                samples.iter().map(|s| s.elapsed_s).collect(),
                [
                    ("faults", mean(|s| s.faults)),
                    ("pages_copied", mean(|s| s.pages_copied)),
                    ("bytes_read", mean(|s| s.bytes_read)),
                    ("prefetched", mean(|s| s.prefetched)),
                    ("read_p50_ns", mean(|s| s.read_p50_ns)),
                    ("read_p99_ns", mean(|s| s.read_p99_ns)),
                ],
            )
        })
        .collect();
    let mut tables = Vec::new();
    for &c in &groups {
        for &t in &threads {
            let idx: Vec<usize> = rows
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    r.name.starts_with(&format!("{c}/"))
                        && r.name.ends_with(&format!("/threads-{t}"))
                })
                .map(|(i, _)| i)
                .collect();
            tables.push(Table {
                title: if c == "dense" {
                    format!(
                        "a working set of whole 2 MiB pages, warm page cache, {t} thread(s) \
                         touching it"
                    )
                } else {
                    format!("{c} page cache, {t} thread(s) touching the working set")
                },
                columns: idx
                    .iter()
                    .map(|&i| rows[i].name.split('/').nth(1).unwrap_or("").to_owned())
                    .collect(),
                rows: idx,
            });
        }
    }
    // The samples taken, not those asked for.
    let taken = Config {
        samples: cfg.samples.clamp(1, MAX_SAMPLES),
        ..cfg.clone()
    };
    let mut report = EXPERIMENT.report(&taken, Metric::Seconds, rows, tables);
    report.notes = notes(&report, pages, &runs, &dense_runs, root, &failures);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cold sample drops the whole host's page cache only where the
    /// image's own advice left pages of it cached: the count it decides
    /// by sees pages read in, and none after the advice.
    #[test]
    fn an_image_read_is_cached_and_its_advice_drops_it() {
        let img = Image::create(64).unwrap();
        img.read_all();
        let len = img.len();
        assert!(img.resident());
        let _ = rustix::fs::fadvise(&img.file, 0, None, rustix::fs::Advice::DontNeed);
        // On tmpfs (a /tmp in memory) the advice drops nothing: the pages
        // are the file. The count then says so, and drop_caches would run.
        let tmpfs = rustix::fs::fstatfs(&img.file).unwrap().f_type as u64 == 0x0102_1994;
        let left = image::cached_pages(&img.file, len);
        if tmpfs {
            assert_eq!(left, Some(len.div_ceil(rustix::param::page_size())));
        } else {
            assert_eq!(left, Some(0));
        }
        assert_eq!(img.resident(), tmpfs);
        img.read_all();
        assert!(img.resident());
    }

    #[test]
    fn working_set_is_a_tenth_in_disjoint_runs() {
        let runs = working_set(10_000, 1);
        let total: u64 = runs.iter().map(|r| r.1).sum();
        assert_eq!(total, 1000);
        let mut seen = std::collections::HashSet::new();
        for &(s, n) in &runs {
            assert!((1..=MAX_RUN).contains(&n) && s + n <= 10_000);
            assert!((s..s + n).all(|p| seen.insert(p)), "overlap");
        }
        let shares: usize = (0..2).map(|t| share(&runs, t, 2).len()).sum();
        assert_eq!(shares, 1000);
    }

    #[test]
    fn the_dense_working_set_is_a_tenth_in_whole_huge_pages() {
        let per = (HUGE / PAGE) as u64;
        let runs = working_set_dense(100 * per, 3);
        let mut seen = std::collections::HashSet::new();
        for &(s, n) in &runs {
            assert_eq!(n, MAX_RUN);
            assert!((s..s + n).all(|p| seen.insert(p)), "overlap");
        }
        assert_eq!(seen.len() as u64, 10 * per);
        // Whole huge pages: every huge page touched is touched entirely.
        let blocks: std::collections::HashSet<u64> = seen.iter().map(|p| p / per).collect();
        assert_eq!(blocks.len(), 10);
        // The smallest image still gets one.
        assert_eq!(working_set_dense(2 * per, 3).len() as u64, per / MAX_RUN);
    }

    #[test]
    fn every_strategy_restores_the_image() {
        let image = Image::create(1024).unwrap();
        let runs = working_set(1024, 2);
        let rec = record_first_run(&image, &runs, 1, false, "");
        let ws: u64 = runs.iter().map(|r| r.1).sum();
        assert_eq!(rec.record.pages().len() as u64, ws);
        // The foreign rows re-execute `repro` as the VMM: run by `repro`
        // itself (and served the same way in faultaround's tests/vmm.rs);
        // the huge rows need the pool grown (faultaround's tests/huge.rs).
        for s in STRATEGIES
            .iter()
            .filter(|s| !s.starts_with("foreign") && !s.starts_with("huge"))
        {
            let sample = measure(&image, s, &runs, &rec, 2).unwrap_or_else(|e| panic!("{s}: {e}"));
            // Every working-set page was installed, by the replay or by a
            // fault (which of them wins a page is a race: with 16-page
            // windows the faults can install a small working set first).
            if s.starts_with("replay") || s.starts_with("lazy") {
                assert!(sample.pages_copied >= ws, "{s}: {sample:?}");
            }
            if s.starts_with("lazy") {
                assert!(
                    sample.faults > 0 && sample.bytes_read > 0,
                    "{s}: {sample:?}"
                );
            }
        }
        // A wrong image is caught.
        assert!(check(vec![0u8; 1024 * PAGE].as_ptr(), &runs).is_err());
    }
}
