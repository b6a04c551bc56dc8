//! `cargo xtask fuzz [--seconds N] [TARGET]`: every cargo-fuzz target (or
//! one) for a bounded time each. Needs nightly; installs cargo-fuzz and the
//! C++ compiler libFuzzer needs when they are missing.

use crate::util::{FUZZ, cargo, cargo_nightly, ensure_packages, exec, has_nightly, root, succeeds};

/// The targets in `fuzz/Cargo.toml`.
pub(crate) const TARGETS: &[&str] = &["pagevec_ops", "batcher_ops", "lru_ops", "cache_ops"];

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut seconds = 30u64;
    let mut only = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                let v = it.next().ok_or("--seconds needs a number")?;
                seconds = v
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or(format!("--seconds {v}: want a positive integer"))?;
            }
            t if TARGETS.contains(&t) => only = Some(t),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; targets: {}",
                    TARGETS.join(", ")
                ));
            }
        }
    }
    if !has_nightly() {
        return Err("cargo-fuzz needs nightly: rustup toolchain install nightly".to_owned());
    }
    ensure_packages(FUZZ)?;
    if !succeeds(cargo().args(["fuzz", "--version"])) {
        eprintln!("installing cargo-fuzz");
        exec(cargo().args(["install", "cargo-fuzz", "--locked"]))?;
    }
    for target in TARGETS.iter().filter(|t| only.is_none_or(|o| o == **t)) {
        exec(
            cargo_nightly()
                .current_dir(root().join("fuzz"))
                .args(["fuzz", "run", target, "--"])
                .arg(format!("-max_total_time={seconds}")),
        )?;
    }
    Ok(())
}
