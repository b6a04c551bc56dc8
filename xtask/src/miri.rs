//! `cargo xtask miri`: Miri over the crates with unsafe code, with strict
//! provenance (crossbeam's `ci/miri.sh`). Needs a nightly toolchain; adds
//! the miri component when it is missing.

use crate::util::{cargo_nightly, exec, has_nightly, succeeds};

/// Crates with unsafe code Miri can run, each with the tests that reach
/// it (`None`: all of them). mmbatch-cache's unsafe code Miri can run is
/// the shard lock (`cache::lock`); mmbatch-ktask's, `run_slice`'s chunks
/// (`slice`: its other unsafe code is madvise and mmap). (mmbatch-faultaround's and
/// mmbatch-mlock's unsafe code is system calls — userfaultfd ioctls, mmap,
/// mlock, sigaction — which Miri does not emulate; their host tests check
/// those against the kernel instead. faultaround's zeroed bitmap, which
/// Miri ran, is a mapping now, safe code on the heap under Miri.)
pub(crate) const CRATES: &[(&str, Option<&str>)] = &[
    ("mmbatch-pagevec", None),
    ("mmbatch-cache", Some("cache::lock")),
    ("mmbatch-ktask", Some("slice")),
];

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
    for (krate, filter) in CRATES {
        let mut cmd = cargo_nightly();
        cmd.args(["miri", "test", "-p", krate]);
        if let Some(filter) = filter {
            cmd.args(["--lib", filter]);
        }
        exec(cmd.env("MIRIFLAGS", "-Zmiri-strict-provenance"))?;
    }
    Ok(())
}
