//! `repro`'s command line, declared once (clap): its `--help` is the
//! reference, and a test checks the README's command table against it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::{BIG, Config, experiment, experiments};

/// Runs the seeds' experiments and prints mmtests-style tables.
#[derive(Debug, Parser)]
#[command(
    name = "repro",
    about = "Runs mmbatch's experiments: each seed's table reproduced, with the seed's figures beside ours",
    long_about = "Runs mmbatch's experiments: each kernel patch series' table (munlock batching, \
ktask clearing, fault-around, lock-on-fault, batched activate_page) reproduced on this host, and the \
cache experiments, printing an mmtests-style compare table per experiment (min / mean / stddev / max / \
range, each column's gain against the first) with the counters that explain it and the seed's \
published figures beside ours. Writes target/repro/report.md (command, wall time, host, summary, \
tables, SVG plots, seed comparison), and JSON with --json. Run through `cargo xtask repro`, which \
builds it in release mode.",
    args_conflicts_with_subcommands = true,
    after_help = "`repro [OPTIONS]` with no subcommand is `repro run [OPTIONS]`."
)]
pub struct Cli {
    /// What to do (default: run).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// `run`'s options, when no subcommand is named.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `repro`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the experiments (all, or those named with --only) and print their tables.
    Run(RunArgs),
    /// mmtests compare of two --json runs (two kernels, two hosts, before and after a change): every shared row's median, min and max, B's gain over A.
    Compare {
        /// The baseline run's JSON (from `--json`).
        a: PathBuf,
        /// The run compared with it.
        b: PathBuf,
    },
    /// List the experiments: id, seed, what each measures.
    List,
}

/// Options of `repro run`.
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Only these experiments (ids from `repro list`, comma-separated).
    #[arg(long, value_name = "ID[,ID]", value_delimiter = ',', value_parser = known_experiment)]
    pub only: Vec<String>,
    /// Size relative to the default (1); `big` sizes each experiment as its seed did, refusing, with what it needs and a scale that fits, where the host lacks the memory.
    #[arg(long, value_name = "S|big", default_value = "1", value_parser = scale)]
    pub scale: Scale,
    /// Largest thread count (default: twice the CPUs, so that contention
    /// shows; `clear`, which only time-slices past them: the CPUs).
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u64).range(1..))]
    pub threads: Option<u64>,
    /// Samples per row.
    #[arg(long, value_name = "N", default_value_t = Config::default().samples as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub samples: u64,
    /// Also write every report as JSON (for `repro compare`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Where report.md and the plots go (default: target/repro).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `--scale`: a factor, or the seeds' own sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    /// A factor of the default sizes.
    Factor(f64),
    /// Each experiment at its seed's sizes.
    Big,
}

fn scale(v: &str) -> Result<Scale, String> {
    if v == BIG {
        return Ok(Scale::Big);
    }
    v.parse()
        .ok()
        .filter(|s: &f64| *s > 0.0 && s.is_finite())
        .map(Scale::Factor)
        .ok_or_else(|| {
            format!("want a positive number (1 = default size) or `{BIG}` (the seeds' sizes)")
        })
}

fn known_experiment(id: &str) -> Result<String, String> {
    if experiment(id).is_some() {
        Ok(id.to_owned())
    } else {
        let known: Vec<&str> = experiments().iter().map(|e| e.id).collect();
        Err(format!("no experiment {id:?}; known: {}", known.join(", ")))
    }
}

impl RunArgs {
    /// The experiments' configuration these options give.
    pub fn config(&self) -> Config {
        Config {
            scale: match self.scale {
                Scale::Factor(f) => f,
                Scale::Big => 1.0,
            },
            threads: self.threads.map(|t| t as usize),
            samples: self.samples as usize,
        }
    }

    /// Whether each experiment runs at its seed's sizes.
    pub fn big(&self) -> bool {
        self.scale == Scale::Big
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_without_a_subcommand_run() {
        let c = Cli::try_parse_from(["repro", "--only", "cache,clear", "--scale", "0.5"]).unwrap();
        assert!(c.command.is_none());
        assert_eq!(c.run.only, ["cache", "clear"]);
        assert_eq!(c.run.config().scale, 0.5);
        let c = Cli::try_parse_from(["repro", "compare", "a.json", "b.json"]).unwrap();
        assert!(matches!(c.command, Some(Command::Compare { .. })));
        assert!(Cli::try_parse_from(["repro", "--only", "nope"]).is_err());
        assert!(Cli::try_parse_from(["repro", "--scale", "-1"]).is_err());
        assert!(Cli::try_parse_from(["repro", "run", "--scale", "big"]).is_ok());
    }
}
