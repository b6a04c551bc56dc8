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
    time::Instant,
};

use clap::Parser;
use mmbatch_benches::{
    Config, Progress, Report,
    cli::{Cli, Command, RunArgs},
    experiments, round_trip,
};

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
    let mut reports: Vec<Report> = Vec::new();
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let host = mmbatch_benches::Host::detect();
    let mut refused = Vec::new();
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
        let mut report = (e.run)(&cfg, &mut progress);
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
    }
    eprintln!(
        "repro: {} experiment(s) in {:.1} minutes",
        reports.len(),
        started.elapsed().as_secs_f64() / 60.0
    );
    if let Err(e) = write_outputs(&args, &reports, started.elapsed().as_secs_f64()) {
        eprintln!("repro: {e}");
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

fn write_outputs(args: &Args, reports: &[Report], elapsed_s: f64) -> Result<(), String> {
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(reports).map_err(|e| e.to_string())?;
        std::fs::write(path, json + "\n")
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
    std::fs::write(&path, md).map_err(|e| format!("writing {}: {e}", path.display()))?;
    eprintln!("report: {}", path.display());
    Ok(())
}
