//! `cargo xtask loom [CRATE]`: the loom models of every crate that has
//! them, in release with debug assertions (sharded-slab's `bin/loom.sh`),
//! in their own target directory so `--cfg loom` does not invalidate the
//! normal build.

use crate::util::{cargo, root};

/// The flags the models are built with (also by the mutants' loom pass).
pub(crate) const RUSTFLAGS: &str = "--cfg loom -C debug-assertions=on";

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
    // one fails and the error names the failed ones. Their features are
    // unified, which a user's build of one crate would not do; that each
    // crate builds alone is checked without loom by `package`, and one
    // cargo per crate built pagevec, lru and cache three times over
    // (rustix's features differ): 182 s of CI's 277 s, against 128 s.
    let mut cmd = cargo();
    cmd.args(["test", "--release", "--lib", "--no-fail-fast"])
        .env("RUSTFLAGS", RUSTFLAGS)
        .env("LOOM_MAX_PREEMPTIONS", &preemptions)
        .env("CARGO_TARGET_DIR", root().join("target/loom"));
    for krate in crates {
        cmd.args(["-p", krate]);
    }
    crate::util::exec_tests(&mut cmd)
}
