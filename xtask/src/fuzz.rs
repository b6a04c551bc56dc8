//! `cargo xtask fuzz [--seconds N] [TARGET]`: every cargo-fuzz target (or
//! one) for a bounded time each. Needs nightly; installs cargo-fuzz and the
//! C++ compiler libFuzzer needs when they are missing.

use crate::util::{FUZZ, cargo, cargo_nightly, ensure_packages, exec, has_nightly, root, succeeds};

/// The targets: the `[[bin]]` names of `fuzz/Cargo.toml`, in its order.
fn targets() -> Result<Vec<String>, String> {
    let path = root().join("fuzz/Cargo.toml");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok(bin_names(&text))
}

/// The `name` of every `[[bin]]` table in a Cargo manifest.
fn bin_names(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if let Some(v) = line.strip_prefix("name").map(str::trim_start)
            && in_bin
            && let Some(v) = v.strip_prefix('=')
        {
            names.push(v.trim().trim_matches('"').to_owned());
        }
    }
    names
}

pub(crate) fn run(seconds: u64, only: Option<&str>) -> Result<(), String> {
    let targets = targets()?;
    if let Some(t) = only {
        if !targets.iter().any(|n| n == t) {
            return Err(format!(
                "no fuzz target {t:?}; targets: {}",
                targets.join(", ")
            ));
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
    for target in targets.iter().filter(|t| only.is_none_or(|o| o == *t)) {
        exec(
            cargo_nightly()
                .current_dir(root().join("fuzz"))
                .env(
                    "LSAN_OPTIONS",
                    format!("suppressions={}", root().join("fuzz/lsan.supp").display()),
                )
                .args(["fuzz", "run", target, "--"])
                .arg(format!("-max_total_time={seconds}")),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn bin_names_reads_every_target() {
        let manifest = "[package]\nname = \"mmbatch-fuzz\"\n\n[[bin]]\nname = \"a_ops\"\npath = \"x\"\n\n[dependencies]\nname = \"no\"\n[[bin]]\nname = \"b\"\n";
        assert_eq!(super::bin_names(manifest), ["a_ops", "b"]);
    }
}
