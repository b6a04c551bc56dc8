//! `cargo xtask repro`: builds the experiment runner in release and runs
//! it; arguments pass through (`--only`, `--scale`, `--threads`,
//! `--samples`, `--json`, `--out`, `--list`, `--compare A.json B.json`).
//! Tables go to stdout, the Markdown report and plots to `target/repro/`.

use crate::util::{BUILD, cargo, ensure_packages, exec, root};

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    ensure_packages(BUILD)?;
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--release",
        "--quiet",
        "-p",
        "mmbatch-benches",
        "--bin",
        "repro",
        "--",
    ]);
    if !args.iter().any(|a| a == "--out") {
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), Into::into);
        cmd.arg("--out").arg(target.join("repro"));
    }
    cmd.args(args);
    exec(&mut cmd)
}
