//! `cargo xtask`: the project's automation, one module per subcommand.
//! The command line is declared once, here (clap); `cargo xtask --help`
//! and `cargo xtask <command> --help` print it, and a test checks the
//! README's command table against it.

mod ci;
mod fuzz;
mod loom;
mod miri;
mod mutants;
mod repro;
mod util;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mmbatch's automation: the experiments, CI, loom, Miri, fuzzing and the
/// NUMA guest.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the experiments and print their tables (the main job): builds `repro` in release and passes every argument to it (`cargo xtask repro --help` shows them).
    #[command(disable_help_flag = true)]
    Repro {
        /// `repro`'s arguments: `[run] [--only ID[,ID]] [--scale S|big] [--threads T] [--samples N] [--json FILE] [--out DIR]`, `compare A.json B.json`, `list`, `--help`.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "REPRO-ARGS"
        )]
        args: Vec<String>,
    },
    /// Everything CI checks: fmt, clippy, tests, docs, package, MSRV, loom, Miri, fuzz targets build, the NUMA guest, a repro smoke run.
    Ci {
        /// Only the steps whose names start with this (repeatable): `--only
        /// package --only loom` re-runs two steps after a fix.
        #[arg(long, value_name = "STEP")]
        only: Vec<String>,
    },
    /// The loom models, optimized (the `loom` profile) with debug assertions (all crates, or one).
    Loom {
        /// A crate with loom models (pagevec, lru, ktask; with or without `mmbatch-`).
        #[arg(value_name = "CRATE")]
        krate: Option<String>,
    },
    /// Miri over the crates Miri can run (nightly).
    Miri,
    /// Each cargo-fuzz target for some seconds (nightly; installs cargo-fuzz if missing).
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
        seconds: u64,
        /// One target (default: every target in fuzz/Cargo.toml).
        #[arg(value_name = "TARGET")]
        target: Option<String>,
    },
    /// cargo-mutants over the library crates (all, or those named), with `.cargo/mutants.toml`; installs cargo-mutants if missing; fails when a mutant survives.
    Mutants {
        /// Library crates (mmap, pagevec, ktask, lru, mlock, faultaround, cache; with or without `mmbatch-`).
        #[arg(value_name = "CRATE")]
        crates: Vec<String>,
        /// Only shard K of N (`K/N`, as cargo-mutants' `--shard`).
        #[arg(long, value_name = "K/N")]
        shard: Option<String>,
        /// Only the mutants in the lines this diff changes (`git diff > FILE`).
        #[arg(long, value_name = "FILE")]
        in_diff: Option<std::path::PathBuf>,
        /// CI's step: the mutants in the lines the last commit changed (`git diff HEAD~1 HEAD`), a shard of them past about 10, in every library crate.
        #[arg(long, conflicts_with_all = ["crates", "shard", "in_diff"])]
        last_commit: bool,
    },
    /// The host tests and the NUMA rows in a QEMU guest with N NUMA nodes on Debian's 6.1 kernel (KVM if it works, else TCG).
    Vm(vm::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (name, result) = match &cli.command {
        Command::Repro { args } => ("repro", repro::run(args)),
        Command::Ci { only } => ("ci", ci::run(only)),
        Command::Loom { krate } => ("loom", loom::run(krate.as_deref())),
        Command::Miri => ("miri", miri::run()),
        Command::Fuzz { seconds, target } => ("fuzz", fuzz::run(*seconds, target.as_deref())),
        Command::Mutants {
            last_commit: true, ..
        } => ("mutants", mutants::last_commit()),
        Command::Mutants {
            crates,
            shard,
            in_diff,
            ..
        } => (
            "mutants",
            mutants::run(crates, shard.as_deref(), in_diff.as_deref()),
        ),
        Command::Vm(a) => ("vm", vm::run(a)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_cli_is_well_formed_and_passes_repro_arguments_through() {
        Cli::command().debug_assert();
        let c = Cli::try_parse_from(["cargo xtask", "repro", "--only", "cache", "--scale", "0.1"])
            .unwrap();
        assert!(
            matches!(c.command, Command::Repro { ref args } if args == &["--only", "cache", "--scale", "0.1"])
        );
        let c = Cli::try_parse_from(["cargo xtask", "repro", "--help"]).unwrap();
        assert!(matches!(c.command, Command::Repro { ref args } if args == &["--help"]));
        assert!(Cli::try_parse_from(["cargo xtask", "fuzz", "--seconds", "0"]).is_err());
    }

    /// Every `cargo xtask` row of the README's command table names a
    /// subcommand, and every flag it shows (beyond `repro`'s own, checked
    /// in mmbatch-benches) is one that subcommand declares.
    #[test]
    fn the_readme_command_table_matches_help() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("the workspace README");
        let cli = Cli::command();
        let rows: Vec<&str> = readme
            .lines()
            .filter(|l| l.starts_with("| `cargo xtask "))
            .map(|l| l.split(" | ").next().unwrap_or(l))
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for row in &rows {
            let words: Vec<&str> = row
                .trim_start_matches("| `cargo xtask ")
                .split_whitespace()
                .collect();
            let name = words[0].trim_end_matches('`');
            let sub = cli.find_subcommand(name).unwrap_or_else(|| {
                panic!("the README names `cargo xtask {name}`, which --help does not know")
            });
            seen.insert(name.to_owned());
            if name == "repro" {
                continue;
            }
            let longs: Vec<String> = sub
                .get_arguments()
                .filter_map(|a| a.get_long())
                .map(|l| format!("--{l}"))
                .collect();
            for w in words
                .iter()
                .flat_map(|w| w.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')))
            {
                if w.starts_with("--") && w.len() > 2 {
                    assert!(
                        longs.iter().any(|l| l == w),
                        "the README's `{name}` row names {w}, which `cargo xtask {name} --help` does not know"
                    );
                }
            }
            for l in &longs {
                assert!(
                    row.contains(l.as_str()),
                    "`cargo xtask {name}` has {l}, the README's row does not: {row}"
                );
            }
        }
        for sub in cli.get_subcommands().map(|s| s.get_name()) {
            assert!(
                sub == "help" || seen.contains(sub),
                "the README's command table has no `cargo xtask {sub}` row"
            );
        }
    }
}
