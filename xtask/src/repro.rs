//! `cargo xtask repro`: builds the experiment runner in release and runs
//! it; arguments pass through (`repro --help` lists them: `[run]` with
//! `--only`, `--scale`, `--threads`, `--samples`, `--json`, `--out`;
//! `compare A.json B.json`; `list`).
//! Tables go to stdout, the Markdown report and plots to `target/repro/`.

use crate::util::{BUILD, cargo, ensure_packages, exec, target_dir};

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    run_built_with("release", args)
}

/// `run`, with `repro` built with cargo's `profile` (CI's smoke run takes
/// `ci`, the guest's build: its timings are not judged).
pub(crate) fn run_built_with(profile: &str, args: &[String]) -> Result<(), String> {
    ensure_packages(BUILD)?;
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--profile",
        profile,
        "--quiet",
        "-p",
        "mmbatch-benches",
        "--bin",
        "repro",
        "--",
    ]);
    // `--out` belongs to `run` (named or implied); `compare`, `list` and
    // `help` take none.
    let runs = !matches!(
        args.first().map(String::as_str),
        Some("compare" | "list" | "help" | "-h" | "--help")
    );
    if runs && !args.iter().any(|a| a == "--out") {
        cmd.arg("--out").arg(target_dir().join("repro"));
    }
    cmd.args(args);
    exec(&mut cmd)
}
