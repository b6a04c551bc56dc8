//! `cargo xtask`: the project's automation, one module per subcommand.
//!
//! ```text
//! cargo xtask repro [run|compare|list] [--only ID[,ID]] [--scale S|big] [--threads T] [--samples N] [--json FILE] [--out DIR]
//! cargo xtask ci
//! cargo xtask loom [CRATE]
//! cargo xtask miri
//! cargo xtask fuzz [--seconds N] [TARGET]
//! cargo xtask vm [--nodes N] [--cpus C] [--mem MIB] [--memory-only-node] [--kernel PATH] [TESTS...]
//! ```

mod ci;
mod fuzz;
mod loom;
mod miri;
mod repro;
mod util;
mod vm;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  repro [run] [--only ID[,ID]] [--scale S|big] [--threads T] [--samples N] [--json FILE] [--out DIR]
  repro compare A.json B.json     mmtests-style compare of two --json runs
  repro list                      the experiments (repro --help says everything)
                         run the experiments and print their tables (the main job)
  ci                     everything CI checks: fmt, clippy, tests, docs, package, loom, Miri,
                         fuzz targets build, repro smoke run
  loom [CRATE]           the loom models (all crates, or one)
  miri                   Miri over the crates with unsafe code (nightly)
  fuzz [--seconds N] [TARGET]
                         each cargo-fuzz target for N seconds (default 30; nightly)
  vm [--nodes N] [--cpus C] [--mem MIB] [--memory-only-node] [--kernel PATH]
     [--accel auto|kvm|tcg] [--timeout SECS] [--no-repro] [TESTS...] [-- TEST-ARGS]
                         the host tests and the NUMA rows in a QEMU guest with N NUMA
                         nodes on Debian's 6.1 kernel (KVM if it works, else TCG)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match cmd.as_str() {
        "repro" => repro::run(rest),
        "ci" => ci::run(rest),
        "loom" => loom::run(rest),
        "miri" => miri::run(rest),
        "fuzz" => fuzz::run(rest),
        "vm" => vm::run(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {cmd}: {e}");
            ExitCode::FAILURE
        }
    }
}
