//! `cargo xtask loom [CRATE]`: the loom models of every crate that has
//! them, optimized (the `loom` profile) with debug assertions
//! (sharded-slab's `bin/loom.sh` runs them in release),
//! in their own target directory so `--cfg mmbatch_loom` does not invalidate the
//! normal build.

use crate::util::{cargo, root};

/// The flags the models are built with (also by the mutants' loom pass).
pub(crate) const RUSTFLAGS: &str = "--cfg mmbatch_loom -C debug-assertions=on";

/// The cargo profile the models are built with: release for the crates
/// and loom, unoptimized for the test harness's other dependencies
/// (the workspace's `Cargo.toml`).
pub(crate) const PROFILE: &str = "loom";

/// Crates with loom models (`src/**/tests/loom_*.rs`).
pub(crate) const CRATES: &[&str] = &[
    "mmbatch-pagevec",
    "mmbatch-lru",
    "mmbatch-cache",
    "mmbatch-ktask",
    "mmbatch-faultaround",
];

pub(crate) fn run(krate: Option<&str>) -> Result<(), String> {
    let crates: Vec<&str> = match krate {
        None => CRATES.to_vec(),
        Some(one) => {
            let name = CRATES
                .iter()
                .find(|c| **c == one || c.strip_prefix("mmbatch-") == Some(one))
                .ok_or_else(|| {
                    format!(
                        "no loom models in {one:?}; crates with models: {}",
                        CRATES.join(", ")
                    )
                })?;
            vec![*name]
        }
    };
    crate::util::ensure_packages(crate::util::BUILD)?;
    let preemptions = std::env::var("LOOM_MAX_PREEMPTIONS").unwrap_or_else(|_| "3".to_owned());
    // One cargo for every crate, `--no-fail-fast`: every model runs after
    // one fails and the error names the failed ones; but a crate whose
    // loom build fails stops them all (`cargo test` has no keep-going):
    // `cargo xtask loom CRATE` builds one alone. Their features are
    // unified, which a user's build of one crate would not do; each crate
    // is built alone, without loom, by CI's package step. One cargo per
    // crate built pagevec, lru and cache three times over (rustix's
    // features differ): on this host the step built for 182 s of its
    // 277 s; with one cargo, the step took 223.6 s in all.
    let mut cmd = cargo();
    cmd.args(["test", "--profile", PROFILE, "--lib", "--no-fail-fast"])
        .env("RUSTFLAGS", RUSTFLAGS)
        .env("LOOM_MAX_PREEMPTIONS", &preemptions)
        .env("CARGO_TARGET_DIR", root().join("target/loom"));
    for krate in crates {
        cmd.args(["-p", krate]);
    }
    crate::util::exec_tests(&mut cmd)
}
