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
    // One cargo per crate, each built with its own features as a user's
    // build would (one cargo for all unifies their features, and a crate
    // missing one would pass here and fail alone); every crate runs even
    // after one fails, and the error names the failed models.
    let failed: Vec<String> = crates
        .into_iter()
        .filter_map(|krate| {
            crate::util::exec_tests(
                cargo()
                    .args(["test", "--release", "--lib", "-p", krate])
                    .env("RUSTFLAGS", RUSTFLAGS)
                    .env("LOOM_MAX_PREEMPTIONS", &preemptions)
                    .env("CARGO_TARGET_DIR", root().join("target/loom")),
            )
            .err()
        })
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}
