//! `cargo xtask miri`: Miri over the crates with unsafe code, with strict
//! provenance (crossbeam's `ci/miri.sh`). Needs a nightly toolchain; adds
//! the miri component when it is missing.

use crate::util::{cargo_nightly, exec, has_nightly, succeeds};

/// Crates with unsafe code Miri can run. (mmbatch-mlock's unsafe code is
/// system calls — mmap, mlock, sigaction — which Miri does not emulate;
/// its host tests check those against the kernel's accounting instead.)
pub(crate) const CRATES: &[&str] = &["mmbatch-pagevec"];

/// Why Miri cannot run here, if it cannot.
pub(crate) fn unavailable() -> Option<String> {
    if !has_nightly() {
        return Some(
            "no nightly toolchain; install it with `rustup toolchain install nightly --component miri`"
                .to_owned(),
        );
    }
    None
}

pub(crate) fn run() -> Result<(), String> {
    if let Some(why) = unavailable() {
        return Err(why);
    }
    if !succeeds(cargo_nightly().args(["miri", "--version"])) {
        eprintln!("adding the miri component to the nightly toolchain");
        exec(std::process::Command::new("rustup").args([
            "component",
            "add",
            "--toolchain",
            "nightly",
            "miri",
            "rust-src",
        ]))?;
    }
    for krate in CRATES {
        exec(
            cargo_nightly()
                .args(["miri", "test", "-p", krate])
                .env("MIRIFLAGS", "-Zmiri-strict-provenance"),
        )?;
    }
    Ok(())
}
