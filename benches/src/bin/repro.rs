//! `repro`: runs the registry's experiments and prints their tables; what
//! `cargo xtask repro` runs (in release mode). The command line is
//! declared in [`mmbatch_benches::cli`]; `repro --help` says everything.
//!
//! ```text
//! repro [run] [--only ID[,ID]] [--scale S|big] [--threads T] [--samples N]
//!             [--json FILE] [--out DIR]
//! repro compare A.json B.json
//! repro list
//! ```
//!
//! `--scale big` runs each experiment at its seed's sizes (56 GB munlock,
//! 5 GB lock-on-fault, 16 GiB fault-around, up to 800 GiB clear); an
//! experiment the host lacks the memory for is refused with what it needs
//! and the scale that would fit, and the run exits with status 3.

use std::{
    io::{IsTerminal, Write},
    path::PathBuf,
    process::ExitCode,
    sync::atomic::{AtomicBool, Ordering},
    time::Instant,
};

use clap::Parser;
use mmbatch_benches::{
    Config, Progress, Report,
    cli::{Cli, Command, RunArgs},
    experiments, round_trip,
};
use mmbatch_mmap::HugePageSize;

struct Args {
    only: Vec<String>,
    config: Config,
    json: Option<PathBuf>,
    out: PathBuf,
    /// `--scale big`: each experiment at its seed's sizes.
    big: bool,
}

impl From<RunArgs> for Args {
    fn from(r: RunArgs) -> Self {
        Args {
            config: r.config(),
            big: r.big(),
            only: r.only,
            json: r.json,
            out: r.out.unwrap_or_else(|| {
                std::env::var_os("CARGO_TARGET_DIR")
                    .map_or_else(|| PathBuf::from("target"), PathBuf::from)
                    .join("repro")
            }),
        }
    }
}

/// Progress on stderr: one updating line on a terminal, else a line per
/// tenth of the work (CI logs).
struct Stderr {
    id: &'static str,
    tty: bool,
    last_tenth: usize,
    start: Instant,
}

impl Progress for Stderr {
    fn row(&mut self, done: usize, total: usize, what: &str) {
        let secs = self.start.elapsed().as_secs_f64();
        if self.tty {
            eprint!(
                "\r\x1b[K[{} {}/{}, {secs:.0}s] {what}",
                self.id,
                done + 1,
                total
            );
            let _ = std::io::stderr().flush();
        } else {
            let tenth = done * 10 / total.max(1);
            if done == 0 || tenth > self.last_tenth {
                self.last_tenth = tenth;
                eprintln!("[{} {}/{}, {secs:.0}s] {what}", self.id, done + 1, total);
            }
        }
    }
}

fn main() -> ExitCode {
    // A child of `cache-memory`, which re-executes this binary to measure
    // one cache in a process of its own.
    if let Some(code) = mmbatch_benches::cache_memory::child() {
        return code;
    }
    // The VMM of a `restore` foreign row, whose memory this binary serves.
    if let Some(code) = mmbatch_benches::restore::child() {
        return code;
    }
    let cli = Cli::parse();
    let args: Args = match cli.command {
        Some(Command::Compare { a, b }) => {
            return match (load(&a), load(&b)) {
                (Ok(a), Ok(b)) => {
                    print!("{}", mmbatch_benches::compare(&a, &b));
                    ExitCode::SUCCESS
                }
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("repro: {e}");
                    ExitCode::from(2)
                }
            };
        }
        Some(Command::List) => {
            for e in experiments() {
                println!("{:<20} seed {:<28} {}", e.id, e.seed, e.title);
            }
            return ExitCode::SUCCESS;
        }
        Some(Command::Run(r)) => r.into(),
        None => cli.run.into(),
    };
    let selected: Vec<_> = experiments()
        .iter()
        .filter(|e| args.only.is_empty() || args.only.iter().any(|id| id == e.id))
        .collect();
    raise_open_files();
    give_pools_back_on_interrupt(args.out.join("report.md"));
    let mut reports: Vec<Report> = Vec::new();
    let mut failed = Vec::new();
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let host = mmbatch_benches::Host::detect();
    let mut refused = Vec::new();
    let count = selected.len();
    for e in selected {
        let cfg = if args.big {
            e.big(&args.config)
        } else {
            args.config.clone()
        };
        if let Some(why) = e.refusal(&cfg, &host) {
            eprintln!("[{}] refused: {why}", e.id);
            refused.push(why);
            continue;
        }
        let mut progress = Stderr {
            id: e.id,
            tty,
            last_tenth: 0,
            start: Instant::now(),
        };
        let before = round_trip::cross_cpu_round_trip();
        // One experiment that fails (a refusal the host gives at a scale
        // no one tried) costs its own table, not the others'.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (e.run)(&cfg, &mut progress)
        }));
        let Ok(mut report) = run else {
            if tty {
                eprintln!();
            }
            eprintln!(
                "[{}] failed (its panic above); going on with the others",
                e.id
            );
            failed.push(e.id);
            continue;
        };
        let after = round_trip::cross_cpu_round_trip();
        report.host.round_trip = [before, after].into_iter().flatten().collect();
        if let Some(note) = round_trip::note(e.contention, &report.host.round_trip) {
            report.notes.push(note);
        }
        if tty {
            eprintln!();
        }
        eprintln!(
            "[{}] done in {:.1}s",
            e.id,
            progress.start.elapsed().as_secs_f64()
        );
        println!("{}", report.to_text());
        reports.push(report);
        // Written as each experiment ends: an interrupted run keeps the
        // tables it finished.
        if reports.len() + failed.len() + refused.len() < count {
            let partial = format!(
                "Partial: {} of {count} experiments finished, {} failed or refused so far (this \
                 report is rewritten as each one ends).",
                reports.len(),
                failed.len() + refused.len()
            );
            if let Err(e) =
                write_outputs(&args, &reports, started.elapsed().as_secs_f64(), &partial)
            {
                eprintln!("repro: {e}");
            }
        }
    }
    eprintln!(
        "repro: {} experiment(s) in {:.1} minutes",
        reports.len(),
        started.elapsed().as_secs_f64() / 60.0
    );
    let ending = if failed.is_empty() {
        String::new()
    } else {
        format!("Failed (see the run's output): {}.", failed.join(", "))
    };
    if let Err(e) = write_outputs(&args, &reports, started.elapsed().as_secs_f64(), &ending) {
        eprintln!("repro: {e}");
        return ExitCode::FAILURE;
    }
    if !failed.is_empty() {
        eprintln!("repro: experiment(s) failed: {}", failed.join(", "));
        return ExitCode::FAILURE;
    }
    if refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("repro: {} experiment(s) refused:", refused.len());
        for why in &refused {
            eprintln!("  {why}");
        }
        ExitCode::from(3)
    }
}

/// After the report's host line, where experiments were probed.
const ROUND_TRIP_SENTENCE: &str = ". Each experiment's section gives a cache line's round trip \
     between the first two CPUs before and after it, and the share of each probe in which both \
     ran";

/// Reports written by `--json`.
fn load(path: &std::path::Path) -> Result<Vec<Report>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not a `repro --json` file ({e}); make one with \
             `cargo xtask repro --json FILE`",
            path.display()
        )
    })
}

/// Raises the soft limit on open files to the hard one: an experiment
/// at many threads holds descriptors for each (fault-around: a
/// userfaultfd and an eventfd a region, 2 x 256 at 256 threads), past the
/// usual soft limit of 1024 on a host of a hundred CPUs or more.
fn raise_open_files() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    if l.current != l.maximum {
        let raised = Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            eprintln!("repro: could not raise the open-files limit to its hard limit ({e})");
        }
    }
}

/// Set once a report has been written by this run: an interrupted run
/// names it only then (a file left by an earlier run is not this one's).
static WROTE_REPORT: AtomicBool = AtomicBool::new(false);

/// Writes the huge page pools' persistent sizes back to what they were at
/// the start if the run is interrupted (Ctrl-C, SIGTERM), then exits with
/// 130: the experiments grow them for their hugetlb rows and give the
/// pages back as their regions drop, which an interrupted process never
/// does (the kernel keeps `nr_hugepages` as written). Each pool is
/// first locked as every growth of it is (`HugePageSize::lock_pool`), so
/// no region of this process is halfway through growing or shrinking it,
/// and none can start again before the exit.
/// Pages still mapped leave the pool as the process exits. A pool another
/// program grew meanwhile is written back too.
fn give_pools_back_on_interrupt(report: PathBuf) {
    let sizes = [HugePageSize::Size2M, HugePageSize::Size1G];
    let before = sizes.map(HugePageSize::persistent_pages);
    let set = ctrlc::set_handler(move || {
        // Held to the exit: dropped, the lock would let a region grow the
        // pool again in the moment before it.
        let mut locks = Vec::new();
        for (size, before) in sizes.iter().zip(before) {
            let file = size.pool_file("nr_hugepages");
            locks.push(size.lock_pool());
            let (Some(before), Some(now)) = (before, size.persistent_pages()) else {
                continue;
            };
            if now > before {
                match std::fs::write(&file, before.to_string()) {
                    Ok(()) => eprintln!(
                        "\nrepro: interrupted: {file} back to {before} persistent pages (was {now})"
                    ),
                    Err(e) => eprintln!(
                        "\nrepro: interrupted, and {file} could not be written back to {before} \
                         ({e}): write it by hand"
                    ),
                }
            }
        }
        // A report being written is finished first, and none starts.
        let _writing = WRITING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if WROTE_REPORT.load(Ordering::SeqCst) {
            eprintln!(
                "repro: interrupted; {} holds the experiments that finished",
                report.display()
            );
        } else {
            eprintln!("repro: interrupted before any experiment finished");
        }
        std::process::exit(130);
    });
    if let Err(e) = set {
        eprintln!(
            "repro: no handler for Ctrl-C ({e}): an interrupted run leaves grown huge page pools grown"
        );
    }
}

/// Held by [`write_whole`] from its write to its rename, and by the
/// interrupt to the exit: an interrupt waits for a write under way, so
/// it leaves no temporary file behind.
static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Writes `text` to `path` whole or not at all (a temporary file renamed
/// over it): a crash in the middle of a write leaves the last report, not
/// half of this one.
fn write_whole(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let _writing = WRITING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Writes the report (and `--json`), with `status` (a line saying the
/// run is partial or what failed; empty when all went well) after its
/// opening.
fn write_outputs(
    args: &Args,
    reports: &[Report],
    elapsed_s: f64,
    status: &str,
) -> Result<(), String> {
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(reports).map_err(|e| e.to_string())?;
        write_whole(path, &(json + "\n"))
            .map_err(|e| format!("writing --json {}: {e}", path.display()))?;
        eprintln!("JSON: {}", path.display());
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("creating {}: {e}", args.out.display()))?;
    let mut md = String::from("# mmbatch reproduction report\n\n");
    // The command as the user typed it (xtask adds `--out`).
    let typed: Vec<String> = std::env::args()
        .skip(1)
        .scan(false, |skip, a| {
            let keep = !*skip && a != "--out";
            *skip = a == "--out";
            Some(keep.then_some(a))
        })
        .flatten()
        .collect();
    md.push_str(&format!(
        "Made by `cargo xtask repro{}{}` in {:.1} minutes. Each table compares \
         configurations measured side by side in one run; gains are against the \
         first row.\n\n",
        if typed.is_empty() { "" } else { " " },
        typed.join(" "),
        elapsed_s / 60.0,
    ));
    if !status.is_empty() {
        md.push_str(&format!("**{status}**\n\n"));
    }
    let mut host = reports
        .first()
        .map_or_else(mmbatch_benches::Host::detect, |r| r.host.clone());
    // The round trips are each experiment's, in its own section.
    let probed = !std::mem::take(&mut host.round_trip).is_empty();
    md.push_str(&format!(
        "## Host\n\n{}{}\n\n",
        host.describe(),
        if probed { ROUND_TRIP_SENTENCE } else { "" }
    ));
    md.push_str("## Summary\n\n");
    for r in reports {
        md.push_str(&format!(
            "**`{}`** (seed {}): {}.\n\n",
            r.experiment, r.seed, r.title
        ));
        for note in &r.notes {
            md.push_str(&format!("- {note}\n"));
        }
        if !r.versus_seed_summary.is_empty() {
            md.push_str(&format!("- Against the seed: {}\n", r.versus_seed_summary));
        }
        md.push('\n');
    }
    for r in reports {
        md.push_str(
            &r.to_markdown(&args.out)
                .map_err(|e| format!("writing plots into {}: {e}", args.out.display()))?,
        );
    }
    let path = args.out.join("report.md");
    write_whole(&path, &md).map_err(|e| format!("writing {}: {e}", path.display()))?;
    WROTE_REPORT.store(true, Ordering::SeqCst);
    eprintln!("report: {}", path.display());
    Ok(())
}
