//! `cargo xtask ci`: every check CI runs, in order, then one summary of
//! each step: pass, fail or skipped, and seconds. Every step runs even
//! after a failure, so one run shows everything that is wrong.

use std::time::Instant;

use crate::util::{BUILD, FUZZ, cargo, ensure_packages, exec, root};

/// The library crates, as packaged and as built at the MSRV.
const LIBRARIES: [&str; 7] = [
    "mmbatch-mmap",
    "mmbatch-pagevec",
    "mmbatch-cache",
    "mmbatch-lru",
    "mmbatch-mlock",
    "mmbatch-faultaround",
    "mmbatch-ktask",
];

/// Builds the library crates with the toolchain of the workspace's
/// declared `rust-version` (installed through rustup if missing), in a
/// target directory of its own.
fn msrv() -> Result<(), String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).map_err(|e| e.to_string())?;
    let version = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .ok_or("no rust-version in the workspace Cargo.toml")?;
    if !crate::util::has_toolchain(version) {
        exec(std::process::Command::new("rustup").args([
            "toolchain",
            "install",
            version,
            "--profile",
            "minimal",
        ]))?;
    }
    let mut cmd = crate::util::cargo_toolchain(version);
    cmd.args(["build", "--lib"])
        .env("CARGO_TARGET_DIR", root().join("target/msrv"));
    for c in LIBRARIES {
        cmd.args(["-p", c]);
    }
    exec(&mut cmd)
}

/// Crates a project on any platform may depend on: each builds for
/// [`FOREIGN_TARGETS`] (and [`ANDROID`]).
const PORTABLE: [&str; 4] = [
    "mmbatch-cache",
    "mmbatch-pagevec",
    "mmbatch-lru",
    "mmbatch-ktask",
];
/// Crates for Linux only: on a foreign target each must fail with an
/// "is Linux only" error and no other (no type errors of calls the target
/// lacks after it). The two that depend on mmbatch-mmap stop at its guard (cargo
/// compiles nothing past a failed dependency), which names them; their
/// own guards are reached only if that dependency goes. The last entry
/// is ktask's Linux-only feature, as `crate:feature`.
const LINUX_ONLY: [&str; 4] = [
    "mmbatch-mmap",
    "mmbatch-mlock",
    "mmbatch-faultaround",
    "mmbatch-ktask:numa",
];
const FOREIGN_TARGETS: [&str; 2] = ["x86_64-apple-darwin", "x86_64-pc-windows-msvc"];
/// Android runs Linux's kernel: every crate builds for it, the Linux-only
/// ones included (rustix and libc leave some of Linux's flags unnamed
/// there).
const ANDROID: &str = "x86_64-linux-android";
/// The cache's default tree holds none of the experiment crates (a user
/// of the cache builds nothing of the LRU engine).
const NOT_IN_CACHE: [&str; 2] = ["mmbatch-pagevec", "mmbatch-lru"];
/// Crates that need a system library (libhwloc, libclang for bindgen) or
/// are test-only: no library crate's default features may pull them in,
/// as normal or build dependencies.
const NEED_SYSTEM_LIBRARIES: [&str; 6] = [
    "hwlocality",
    "hwlocality-sys",
    "userfaultfd-sys",
    "bindgen",
    "clang-sys",
    "fail",
];

/// The names in `cargo tree -p krate -e edges` (default features).
fn tree(krate: &str, edges: &str) -> Result<Vec<String>, String> {
    let out = cargo()
        .args(["tree", "-p", krate, "-e", edges, "--prefix", "none"])
        .output()
        .map_err(|e| format!("running cargo tree: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo tree -p {krate} failed"));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(' ').next().map(str::to_owned))
        .collect())
}

/// Every library crate's default features need no system library
/// ([`NEED_SYSTEM_LIBRARIES`]); each portable crate `cargo check`s for
/// each foreign target (adding the target through rustup where missing),
/// and each [`LINUX_ONLY`] crate fails there naming itself Linux only
/// (and builds for [`ANDROID`], as the portable ones do);
/// the cache holds none of [`NOT_IN_CACHE`].
fn portable() -> Result<(), String> {
    for c in LIBRARIES {
        let names = tree(c, "normal,build")?;
        let found: Vec<&str> = NEED_SYSTEM_LIBRARIES
            .into_iter()
            .filter(|d| names.iter().any(|n| n == d))
            .collect();
        if !found.is_empty() {
            return Err(format!(
                "{c}'s default features pull in {}: a user would need its system library \
                 (or build a test-only crate)",
                found.join(", ")
            ));
        }
    }
    let names = tree("mmbatch-cache", "normal")?;
    if let Some(d) = NOT_IN_CACHE
        .into_iter()
        .find(|d| names.iter().any(|n| n == d))
    {
        return Err(format!(
            "mmbatch-cache depends on {d}, an experiment crate its users should not build"
        ));
    }
    for target in FOREIGN_TARGETS {
        exec(std::process::Command::new("rustup").args(["target", "add", target]))?;
        for c in PORTABLE {
            exec(cargo().args(["check", "-p", c, "--lib", "--target", target]))?;
        }
    }
    exec(std::process::Command::new("rustup").args(["target", "add", ANDROID]))?;
    let mut android = cargo();
    android.args(["check", "--lib", "--target", ANDROID]);
    for c in PORTABLE.iter().chain(&LINUX_ONLY[..3]) {
        android.args(["-p", c]);
    }
    exec(&mut android)?;
    let target = FOREIGN_TARGETS[0];
    for c in LINUX_ONLY {
        let (c, features) = c.split_once(':').unwrap_or((c, ""));
        let out = cargo()
            .args([
                "check",
                "-p",
                c,
                "--lib",
                "--features",
                features,
                "--color",
                "never",
                "--target",
                target,
            ])
            .output()
            .map_err(|e| format!("running cargo check: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().find(|l| l.starts_with("error"));
        // Only that error: type errors from the missing Linux calls after
        // it bury it.
        let errors = stderr
            .lines()
            .filter(|l| l.starts_with("error") && !l.starts_with("error: could not compile"))
            .count();
        if errors > 1 {
            return Err(format!(
                "{c} on {target}: {errors} errors, where its Linux-only error \
                 should be the only one:\n{stderr}"
            ));
        }
        if out.status.success() || !first.is_some_and(|l| l.contains("is Linux only")) {
            return Err(format!(
                "{c} on {target}: expected its first error to say it is Linux only, got {}",
                first.unwrap_or(if out.status.success() {
                    "a build"
                } else {
                    "no error line"
                })
            ));
        }
    }
    Ok(())
}

/// A 32-bit target, where `usize` is 32 bits: every library and its tests
/// built for i686 Linux (a size past 2^32 in a constant fails there),
/// and the portable crates' tests run, in a target directory of their
/// own. Test-only sizes past a 32-bit address space are left to 64-bit
/// targets by `cfg(target_pointer_width)`.
fn i686() -> Result<(), String> {
    const TARGET: &str = "i686-unknown-linux-gnu";
    crate::util::ensure_packages(crate::util::I686)?;
    exec(std::process::Command::new("rustup").args(["target", "add", TARGET]))?;
    let dir = root().join("target/i686");
    // Checked, the libraries whose tests are not run here (the others'
    // are built by the `test` below, which checks them as well).
    let mut check = cargo();
    check
        .env("CARGO_TARGET_DIR", &dir)
        .args(["check", "--lib", "--tests", "--target", TARGET]);
    for c in LIBRARIES.iter().filter(|c| !PORTABLE.contains(c)) {
        check.args(["-p", c]);
    }
    exec(&mut check)?;
    let mut test = cargo();
    test.env("CARGO_TARGET_DIR", &dir)
        .args(["test", "--no-fail-fast", "--target", TARGET]);
    for c in PORTABLE {
        test.args(["-p", c]);
    }
    crate::util::exec_tests(&mut test)
}

/// The library crates in a user's loom build: `RUSTFLAGS="--cfg loom"`
/// reaches every dependency, in release as loom advises, so a crate that
/// keyed its own models on `cfg(loom)` would turn into its model build
/// (or refuse to compile) inside the user's. The crates key theirs on
/// `cfg(mmbatch_loom)` (crossbeam's `crossbeam_loom`); this builds them
/// under the user's flag, in a target directory of its own.
fn user_loom() -> Result<(), String> {
    let mut cmd = cargo();
    cmd.env("RUSTFLAGS", "--cfg loom")
        .env("CARGO_TARGET_DIR", root().join("target/user-loom"))
        .args(["check", "--release", "--lib"]);
    for c in LIBRARIES {
        cmd.args(["-p", c]);
    }
    exec(&mut cmd)
}

/// The library crates as a user gets them: each `.crate` of
/// `target/package-verify/package` unpacked into a workspace of its own (each depending
/// on the others' packages through `[patch.crates-io]`, as crates.io
/// would serve them), built with default features, and its doctests (the
/// README's included) run. Integration and unit tests stay in the
/// repository: some use the unpublished test crates, which packaging
/// drops.
fn from_packages() -> Result<(), String> {
    let packages = root().join("target/package-verify/package");
    let ws = packages.join("unpacked");
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(&ws).map_err(|e| format!("creating {}: {e}", ws.display()))?;
    let mut members = Vec::new();
    let files: Vec<String> = std::fs::read_dir(&packages)
        .map_err(|e| format!("reading {}: {e}", packages.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    for c in LIBRARIES {
        // `{c}-{version}.crate`, the version starting with a digit (so
        // that mmbatch-lru does not take mmbatch-lru-foo's package).
        let dir = files
            .iter()
            .filter_map(|f| f.strip_suffix(".crate"))
            .find(|f| {
                f.strip_prefix(c)
                    .and_then(|v| v.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|ch: char| ch.is_ascii_digit()))
            })
            .ok_or_else(|| format!("no package of {c} in {}", packages.display()))?;
        let file = packages.join(format!("{dir}.crate"));
        exec(
            std::process::Command::new("tar")
                .arg("xzf")
                .arg(&file)
                .arg("-C")
                .arg(&ws),
        )?;
        members.push((c, dir.to_owned()));
    }
    let mut manifest = String::from("[workspace]\nresolver = \"2\"\nmembers = [");
    manifest += &members
        .iter()
        .map(|(_, d)| format!("{d:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    // The workspace's dev profile (line tables only, the root Cargo.toml's
    // `[profile.dev]`: change both together), as in its builds.
    manifest += "]\n\n[profile.dev]\ndebug = \"line-tables-only\"\n\n[patch.crates-io]\n";
    for (c, d) in &members {
        manifest += &format!("{c} = {{ path = {d:?} }}\n");
    }
    std::fs::write(ws.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    let target = root().join("target/package-verify/unpacked-target");
    // Each crate on its own (a crate that builds only with features
    // another one turns on fails here, as `cargo package`'s verification
    // would, which this replaces), then every doctest.
    let builds = LIBRARIES.iter().map(|c| vec!["build", "-p", c]);
    for args in builds.chain([vec!["test", "--workspace", "--doc"]]) {
        exec(
            cargo()
                .current_dir(&ws)
                .env("CARGO_TARGET_DIR", &target)
                .args(&args),
        )?;
    }
    Ok(())
}

/// A named step of the run.
type Step = (&'static str, fn() -> Outcome);

enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

/// Runs every step, or those whose names start with one of `only`.
pub(crate) fn run(only: &[String]) -> Result<(), String> {
    let steps: Vec<Step> = vec![
        ("system packages", || {
            done(ensure_packages(BUILD).and(ensure_packages(FUZZ)))
        }),
        ("fmt", || {
            done(exec(cargo().args(["fmt", "--all", "--check"])))
        }),
        ("clippy", || {
            // Every feature, and the default ones users build (code behind
            // a feature's `cfg` can warn only without it).
            done(
                exec(cargo().args([
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--all-features",
                    "--",
                    "-D",
                    "warnings",
                ]))
                .and_then(|()| {
                    exec(cargo().args([
                        "clippy",
                        "--workspace",
                        "--all-targets",
                        "--",
                        "-D",
                        "warnings",
                    ]))
                })
                // The libraries alone: in the workspace the benches turn
                // on features (mlock's `fault-locked`) a user's build of
                // the library does not.
                .and_then(|()| {
                    let mut cmd = cargo();
                    cmd.arg("clippy");
                    for c in LIBRARIES {
                        cmd.args(["-p", c]);
                    }
                    exec(cmd.args(["--all-targets", "--", "-D", "warnings"]))
                }),
            )
        }),
        ("test", || {
            // Every test binary runs even after one fails, and the summary
            // names the failed tests.
            // Every feature: the fail points and NUMA placement are tested
            // too (the default features are built by `package` and
            // `portable`).
            done(crate::util::exec_tests(cargo().args([
                "test",
                "--workspace",
                "--all-features",
                "--no-fail-fast",
            ])))
        }),
        ("doc", || {
            done(exec(
                cargo()
                    .args([
                        "doc",
                        "--workspace",
                        "--all-features",
                        "--no-deps",
                        "--document-private-items",
                    ])
                    .env("RUSTDOCFLAGS", "-D warnings"),
            ))
        }),
        ("docs.rs", || {
            if crate::util::has_nightly() {
                done(docs_rs())
            } else {
                Outcome::Skip("no nightly toolchain to build the docs as docs.rs does".to_owned())
            }
        }),
        ("package", || {
            // Each library crate packaged, then built from its package
            // alone (a README or file the package lacks fails here, not on
            // publish). Afresh, in a target directory of its own: no
            // package or build of an earlier run is reused.
            let verify = root().join("target/package-verify");
            let _ = std::fs::remove_dir_all(root().join("target/package"));
            let _ = std::fs::remove_dir_all(&verify);
            // Not verified by cargo: `from_packages` builds each package
            // from its sources, as the verification did, without building
            // every dependency a second time (and, depending on the others
            // by path, never meets a stale copy cargo's verification once
            // left in `$CARGO_HOME/registry/src`).
            let mut cmd = cargo();
            cmd.env("CARGO_TARGET_DIR", &verify)
                .args(["package", "--allow-dirty", "--no-verify"]);
            for c in LIBRARIES {
                cmd.args(["-p", c]);
            }
            done(exec(&mut cmd).and_then(|()| from_packages()))
        }),
        ("msrv", || done(msrv())),
        (
            "portable crates (macOS, Windows, Android, no system libraries)",
            || done(portable()),
        ),
        ("32-bit (i686 Linux)", || {
            // gcc-multilib and i686 binaries: an x86-64 Linux host's.
            if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
                done(i686())
            } else {
                Outcome::Skip("i686 test binaries run only on an x86-64 Linux host".to_owned())
            }
        }),
        ("a user's loom build (--cfg loom)", || done(user_loom())),
        ("loom", || done(crate::loom::run(None))),
        ("miri", || match crate::miri::unavailable() {
            Some(why) => Outcome::Skip(why),
            None => done(crate::miri::run()),
        }),
        ("mutants (a quarter of mmap's, in turn)", || {
            // The smallest library crate, a round-robin quarter of its
            // mutants in turn by the commit count (about 40 of 160, 150 s;
            // all of them took 400 s, a fifth of CI): any survivor fails,
            // and four successive commits test about all of them. The other crates' runs
            // take 9 minutes (pagevec) to hours (cache): `cargo xtask
            // mutants CRATE`, scores in ARCHITECTURE.
            done(crate::mutants::rotation("mmap", 4))
        }),
        ("mutants (the last commit's changed lines)", || {
            // The mutants in the lines `git diff HEAD~1 HEAD` changes, in
            // every library crate (about 5 minutes at most: a shard of
            // them where they are many); a survivor fails, as a gap the
            // commit left in its own tests.
            done(crate::mutants::last_commit())
        }),
        ("fuzz targets build", || {
            // Stable `cargo check` of the cargo-fuzz crate: the targets
            // compile against the current API (running them is `xtask fuzz`).
            done(exec(
                cargo()
                    .args(["check", "--bins", "--manifest-path"])
                    .arg(root().join("fuzz/Cargo.toml")),
            ))
        }),
        ("vm (2 NUMA nodes, Linux 6.1)", || {
            // The NUMA placement tests and the host suites on a kernel
            // with two nodes, and the NUMA rows as a smoke. Skipped only
            // where QEMU cannot run at all.
            if let Some(why) = crate::vm::unavailable() {
                return Outcome::Skip(why);
            }
            done(crate::vm::run(&crate::vm::Args::ci()))
        }),
        ("repro smoke", || {
            let out = root().join("target/repro/smoke");
            done(
                crate::repro::run_built_with(
                    crate::util::CI_PROFILE,
                    &[
                        "--scale".into(),
                        "0.001".into(),
                        "--samples".into(),
                        "1".into(),
                        "--threads".into(),
                        "4".into(),
                        "--json".into(),
                        out.join("smoke.json").display().to_string(),
                        "--out".into(),
                        out.display().to_string(),
                    ],
                )
                .and_then(|()| {
                    // The JSON deserialises into the report schema (a
                    // missing field is an error) and compares with itself.
                    let json = out.join("smoke.json").display().to_string();
                    crate::repro::run_built_with(
                        crate::util::CI_PROFILE,
                        &["compare".into(), json.clone(), json],
                    )
                }),
            )
        }),
    ];
    // The JSON file's directory must exist before repro writes it.
    let _ = std::fs::create_dir_all(root().join("target/repro/smoke"));
    let names: Vec<&str> = steps.iter().map(|s| s.0).collect();
    if let Some(o) = only
        .iter()
        .find(|o| !names.iter().any(|n| n.starts_with(o.as_str())))
    {
        return Err(format!(
            "no CI step named {o:?}: the steps are {}",
            names.join(", ")
        ));
    }
    let mut results = Vec::new();
    for (name, step) in steps {
        if !only.is_empty() && !only.iter().any(|o| name.starts_with(o.as_str())) {
            continue;
        }
        eprintln!("\n==== ci: {name}");
        let start = Instant::now();
        let outcome = step();
        results.push((name, outcome, start.elapsed().as_secs_f64()));
    }
    println!("\n==== ci summary");
    println!("  {:<22} {:<8} {:>8}", "step", "result", "seconds");
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, outcome, secs) in &results {
        let (word, why) = match outcome {
            Outcome::Pass => {
                passed += 1;
                ("pass", String::new())
            }
            Outcome::Fail(e) => {
                failed += 1;
                ("FAIL", format!("  {e}"))
            }
            Outcome::Skip(e) => {
                skipped += 1;
                ("skipped", format!("  {e}"))
            }
        };
        println!("  {name:<22} {word:<8} {secs:>8.1}{why}");
    }
    let total: f64 = results.iter().map(|r| r.2).sum();
    println!("  total {total:.0} s");
    println!("ci: {passed} passed, {failed} failed, {skipped} skipped");
    if failed == 0 {
        Ok(())
    } else {
        Err(format!("{failed} step(s) failed"))
    }
}

fn done(r: Result<(), String>) -> Outcome {
    match r {
        Ok(()) => Outcome::Pass,
        Err(e) => Outcome::Fail(e),
    }
}

/// The library crates' docs as docs.rs builds them: nightly rustdoc with
/// `--cfg docsrs`, each crate with the features its
/// `[package.metadata.docs.rs]` names (its defaults otherwise, as read
/// by `cargo metadata`), so each feature-gated item carries its
/// feature's badge (`doc_cfg`); no warning. In a target directory of its
/// own: the stable `doc` step's pages are left as they are.
fn docs_rs() -> Result<(), String> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata: {e}"))?;
    for c in LIBRARIES {
        let features = docs_rs_features(&meta, c)?;
        let mut cmd = crate::util::cargo_nightly();
        cmd.args(["doc", "--no-deps", "-p", c])
            .env("CARGO_TARGET_DIR", root().join("target/docsrs"))
            .env("RUSTDOCFLAGS", "--cfg docsrs -D warnings");
        if !features.is_empty() {
            cmd.args(["--features", &features.join(",")]);
        }
        exec(&mut cmd)?;
    }
    Ok(())
}

/// Package `name`'s `[package.metadata.docs.rs]` features in `cargo
/// metadata`'s output (none when it names none).
fn docs_rs_features(meta: &serde_json::Value, name: &str) -> Result<Vec<String>, String> {
    let package = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .ok_or_else(|| format!("cargo metadata lists no package {name}"))?;
    let features = &package["metadata"]["docs"]["rs"]["features"];
    Ok(features
        .as_array()
        .map(|fs| {
            fs.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::docs_rs_features;

    #[test]
    fn docs_rs_features_are_read_from_the_packages_metadata() {
        let meta = serde_json::json!({"packages": [
            {"name": "a", "metadata": {"docs": {"rs": {"features": ["engine", "numa"]}}}},
            {"name": "b", "metadata": {"docs": {"rs": {"all-features": true}}}},
            {"name": "c", "metadata": null},
        ]});
        assert_eq!(docs_rs_features(&meta, "a").unwrap(), ["engine", "numa"]);
        assert!(docs_rs_features(&meta, "b").unwrap().is_empty());
        assert!(docs_rs_features(&meta, "c").unwrap().is_empty());
        assert!(
            docs_rs_features(&meta, "d")
                .unwrap_err()
                .contains("no package d")
        );
    }
}
