//! The seed experiments of mmbatch, each one function that both its
//! criterion bench (`cargo bench`) and `cargo xtask repro` call, so there is
//! one implementation of each.
//!
//! [`experiments`] is the registry; [`Experiment::run`] measures at a
//! [`Config`]'s scale and returns a [`Report`], which prints as the seeds'
//! mmtests compare tables ([`Report::to_text`]), serialises to JSON, and
//! renders as Markdown with SVG plots ([`Report::to_markdown`]).

pub mod activate;
pub mod batch;
pub mod cache;
pub mod cache_hits;
pub mod cache_memory;
pub mod clear;
pub mod cli;
pub mod dirty;
pub mod faultaround;
pub mod lockonfault;
pub mod munlock;
pub mod percpu;
mod report;
pub mod restore;
mod thp;
pub mod timedmunlock;

use std::{
    sync::{Condvar, Mutex},
    thread,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

pub use report::{
    Host, Metric, Report, Row, SeedFigure, SeedRef, Stat, Summary, Table, compare, round_trip,
    versus_seed,
};

/// How big and how long to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Config {
    /// Work per sample relative to the default, which fits a 2-core,
    /// 24 GiB machine in minutes (1.0). The CI smoke run uses 0.001.
    pub scale: f64,
    /// Largest thread count to measure, when given (`--threads`); see
    /// [`Config::max_threads`] for the default.
    pub threads: Option<usize>,
    /// Samples per row.
    pub samples: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            scale: 1.0,
            threads: None,
            samples: 5,
        }
    }
}

impl Config {
    /// Largest thread count to measure: `threads`, or 2 × CPUs, so that
    /// lock contention shows with more threads than CPUs.
    pub fn max_threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| 2 * std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The thread counts an experiment's rows measure: the powers of two
    /// below [`max_threads`](Self::max_threads), then it
    /// ([`powers_of_two_to`]).
    pub fn thread_rows(&self) -> Vec<usize> {
        powers_of_two_to(self.max_threads())
    }
}

/// Thread counts for a run up to `max`: the powers of two below it, then
/// `max` itself, so that a many-CPU host shows where a curve bends.
pub fn powers_of_two_to(max: usize) -> Vec<usize> {
    let max = max.max(1);
    let mut ts: Vec<usize> = (0..usize::BITS)
        .map(|i| 1usize << i)
        .take_while(|&t| t < max)
        .collect();
    ts.push(max);
    ts
}

/// Where an experiment reports what it is doing.
pub trait Progress {
    /// Row `done + 1` of `total`, named `what`, is starting.
    fn row(&mut self, done: usize, total: usize, what: &str);
}

/// Progress that goes nowhere (criterion, tests).
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn row(&mut self, _: usize, _: usize, _: &str) {}
}

/// One experiment of the registry.
#[derive(Clone, Copy, Debug)]
pub struct Experiment {
    /// Its id, as `--only` takes it.
    pub id: &'static str,
    /// The seed it reproduces.
    pub seed: &'static str,
    /// One line.
    pub title: &'static str,
    /// Measures it.
    pub run: fn(&Config, &mut dyn Progress) -> Report,
    /// The scale at which its sizes are the seed's (`--scale big`): 1 where
    /// the seed gives no size to match.
    pub big_scale: f64,
    /// Host memory a run at `cfg` needs, in bytes, checked against
    /// `MemAvailable` before it starts.
    pub memory: fn(&Config) -> u64,
    /// The seed's published figures this experiment measures too.
    pub seed_refs: &'static [SeedRef],
    /// Why ours differ from the seed's where they do: the one sentence the
    /// report adds after listing what agrees and what differs.
    pub seed_why: &'static str,
    /// Which rows depend on two CPUs running at once (threads contending
    /// for a lock or a cache line, or splitting work), as the report's
    /// note names them when the host's round trip shows they did not;
    /// empty where none do.
    pub contention: &'static str,
}

/// The scale `--scale big` names: this experiment at its seed's sizes.
pub const BIG: &str = "big";

impl Experiment {
    /// `cfg` at the seed's sizes (`--scale big`).
    pub fn big(&self, cfg: &Config) -> Config {
        Config {
            scale: self.big_scale,
            ..cfg.clone()
        }
    }

    /// Why this host cannot run the experiment at `cfg`, if it cannot:
    /// the memory it needs against what the host has available.
    pub fn refusal(&self, cfg: &Config, host: &Host) -> Option<String> {
        let need = (self.memory)(cfg);
        let have = host.available_bytes;
        if have == 0 || need <= have {
            return None;
        }
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        // The scale that would fit, with a tenth of the memory spare.
        let fits = cfg.scale * (have as f64 * 0.9) / need as f64;
        Some(format!(
            "{} at scale {:.2} needs {:.1} GiB of memory; this host has {:.1} GiB available \
             (MemAvailable). Run it on a host with more memory, or with --scale {:.2} or less",
            self.id,
            cfg.scale,
            gib(need),
            gib(have),
            fits
        ))
    }

    /// A report of this experiment measured on this host with `cfg`, notes
    /// to be added.
    pub fn report(
        &self,
        cfg: &Config,
        metric: Metric,
        rows: Vec<Row>,
        tables: Vec<Table>,
    ) -> Report {
        let (versus_seed, versus_seed_summary) =
            versus_seed(&rows, metric, self.seed_refs, self.seed_why);
        Report {
            versus_seed,
            versus_seed_summary,
            experiment: self.id.to_owned(),
            title: self.title.to_owned(),
            seed: self.seed.to_owned(),
            host: Host::detect(),
            config: cfg.clone(),
            metric,
            rows,
            tables,
            notes: Vec::new(),
        }
    }
}

/// Every experiment, in seed order.
pub fn experiments() -> &'static [Experiment] {
    &[
        batch::EXPERIMENT,
        munlock::EXPERIMENT,
        timedmunlock::EXPERIMENT,
        clear::EXPERIMENT,
        faultaround::ENGINE,
        faultaround::HOST,
        lockonfault::EXPERIMENT,
        activate::EXPERIMENT,
        cache::EXPERIMENT,
        cache_hits::EXPERIMENT,
        cache_memory::EXPERIMENT,
        restore::EXPERIMENT,
        dirty::EXPERIMENT,
    ]
}

/// The experiment with id `id`.
pub fn experiment(id: &str) -> Option<&'static Experiment> {
    experiments().iter().find(|e| e.id == id)
}

/// The mean of one counter over a row's samples.
pub fn mean<S>(samples: &[S], counter: impl Fn(&S) -> u64) -> f64 {
    samples.iter().map(counter).sum::<u64>() as f64 / samples.len().max(1) as f64
}

/// Criterion's `iter_custom` total for `iters` runs of an experiment's
/// measure function, which times its own measured part in seconds (setup
/// stays outside the figure, as in `cargo xtask repro`).
pub fn total(iters: u64, mut measure_s: impl FnMut() -> f64) -> Duration {
    (0..iters)
        .map(|_| Duration::from_secs_f64(measure_s()))
        .sum()
}

/// Runs `work(thread)` on `threads` threads released together; returns the
/// time from the first thread starting to the last finishing. Each worker
/// reads the clock itself: a main thread reading it after the release may
/// not be scheduled until the workers are done (2 cores, 3 threads). The
/// last worker to arrive releases them all, as a `Barrier` would; a
/// thread the OS refuses (`RLIMIT_NPROC`, a cgroup's `pids.max`) sends the
/// ones already waiting home and panics naming it, where a `Barrier`'s
/// waiters would wait for it forever.
pub fn timed(threads: usize, work: impl Fn(usize) + Sync) -> Duration {
    // Workers arrived, and whether the start was called off.
    let gate = (Mutex::new((0usize, false)), Condvar::new());
    let mut refused = None;
    let spans: Vec<(Instant, Instant)> = thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads);
        for t in 0..threads {
            let (gate, work) = (&gate, &work);
            let refuse = t == refused_worker();
            let spawned = if refuse {
                Err(std::io::Error::other("refused by the test"))
            } else {
                thread::Builder::new().spawn_scoped(s, move || {
                    let (lock, cv) = gate;
                    let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
                    g.0 += 1;
                    if g.0 == threads {
                        cv.notify_all();
                    }
                    while g.0 < threads && !g.1 {
                        g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
                    }
                    if g.1 {
                        return None;
                    }
                    drop(g);
                    let start = Instant::now();
                    work(t);
                    Some((start, Instant::now()))
                })
            };
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    refused = Some(format!("worker {t} of {threads}: {e}"));
                    let (lock, cv) = &gate;
                    lock.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
                    cv.notify_all();
                    break;
                }
            }
        }
        handles
            .into_iter()
            .filter_map(|h| h.join().expect("worker panicked"))
            .collect()
    });
    if let Some(why) = refused {
        panic!("the OS refused a thread ({why}): lower --threads");
    }
    let first = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let last = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("at least one thread");
    last - first
}

/// The worker [`timed`] is refused, as by the OS: none outside tests.
#[cfg(not(test))]
fn refused_worker() -> usize {
    usize::MAX
}

/// The worker [`timed`] is refused, as by the OS: the one a test sets.
#[cfg(test)]
fn refused_worker() -> usize {
    tests::REFUSED_WORKER.load(std::sync::atomic::Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker `timed` is refused; `usize::MAX` for none.
    pub(super) static REFUSED_WORKER: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(usize::MAX);

    /// A worker thread the OS refuses ends `timed` with a panic naming it:
    /// with a `Barrier` the workers already started waited for it forever,
    /// and the run hung (seen with RLIMIT_NPROC, which binds only a
    /// non-root user's tasks system-wide: here the refusal is played). In
    /// a child process with a bounded wait.
    #[test]
    fn a_refused_worker_is_a_panic_not_a_hang() {
        let name = "tests::a_refused_worker_is_a_panic_not_a_hang";
        if let Some(run) = mmbatch_testkit::child::parent(name, Duration::from_secs(30)) {
            run.expect_success();
            return;
        }
        REFUSED_WORKER.store(2, std::sync::atomic::Ordering::SeqCst);
        let r = std::panic::catch_unwind(|| timed(4, |_| {}));
        let e = r.expect_err("the third worker is refused");
        let msg = e
            .downcast_ref::<String>()
            .map_or("(not a string)", String::as_str);
        assert!(msg.contains("refused a thread (worker 2 of 4"), "{msg}");
        REFUSED_WORKER.store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
        assert!(timed(4, |_| {}) < Duration::from_secs(10));
    }

    #[test]
    fn refusal_names_need_and_a_scale_that_fits() {
        let host = Host {
            available_bytes: 10 << 30,
            ..Host::default()
        };
        let clear = experiment("clear").unwrap();
        let big = clear.big(&Config::default());
        assert_eq!(big.scale, 200.0);
        let why = clear
            .refusal(&big, &host)
            .expect("800 GiB does not fit in 10");
        assert!(
            why.contains("needs 800.0 GiB") && why.contains("10.0 GiB available"),
            "{why}"
        );
        assert!(why.contains("--scale 2.25 or less"), "{why}");
        assert!(clear.refusal(&Config::default(), &host).is_none());
        // Unknown memory (no /proc/meminfo): never refuse.
        assert!(clear.refusal(&big, &Host::default()).is_none());
    }
}

/// The workspace README's examples (the cache's and mmbatch-pagevec's),
/// compiled and run as doctests: this crate depends on both.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadmeDoctests;
