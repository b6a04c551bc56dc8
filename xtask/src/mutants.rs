//! `cargo xtask mutants [CRATE...] [--shard K/N] [--in-diff FILE]`:
//! cargo-mutants over the library crates (installed if missing), with the
//! configuration and its reasoned exclusions in `.cargo/mutants.toml`,
//! one output directory per crate under `target/mutants/`, and a table of
//! each crate's score. Fails when a mutant survives (missed, or a test
//! that timed out instead of failing).

use std::{fs, path::Path};

use crate::loom::{PROFILE as LOOM_PROFILE, RUSTFLAGS as LOOM_RUSTFLAGS};
use crate::util::{cargo, exec, root, succeeds};

/// The library crates, smallest first.
pub(crate) const CRATES: [&str; 7] = [
    "mmap",
    "pagevec",
    "ktask",
    "lru",
    "mlock",
    "faultaround",
    "cache",
];

/// What cargo-mutants found in one crate.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Score {
    pub(crate) krate: String,
    /// The mutants some test caught.
    pub(crate) caught: Vec<String>,
    /// Mutants that do not build.
    pub(crate) unviable: Vec<String>,
    /// Mutants no test noticed, then those whose tests timed out.
    pub(crate) survivors: Vec<String>,
    pub(crate) timeouts: usize,
}

impl Score {
    /// Caught over viable, in percent (100 with nothing viable).
    pub(crate) fn percent(&self) -> f64 {
        let viable = self.caught.len() + self.survivors.len();
        if viable == 0 {
            100.0
        } else {
            100.0 * self.caught.len() as f64 / viable as f64
        }
    }
}

/// `mmap` or `mmbatch-mmap` to `mmap`, refusing a crate that is not one
/// of [`CRATES`].
fn short(name: &str) -> Result<&'static str, String> {
    let n = name.strip_prefix("mmbatch-").unwrap_or(name);
    CRATES.iter().copied().find(|c| *c == n).ok_or_else(|| {
        format!(
            "no library crate {name:?}; the crates are {}",
            CRATES.join(", ")
        )
    })
}

pub(crate) fn run(
    crates: &[String],
    shard: Option<&str>,
    in_diff: Option<&Path>,
) -> Result<(), String> {
    let crates: Vec<&str> = if crates.is_empty() {
        CRATES.to_vec()
    } else {
        crates.iter().map(|c| short(c)).collect::<Result<_, _>>()?
    };
    // `--all-features` builds ktask's `numa`, which links libhwloc.
    crate::util::ensure_packages(crate::util::BUILD)?;
    ensure_installed()?;
    let jobs: Vec<(&str, Option<String>)> = crates
        .into_iter()
        .map(|c| (c, shard.map(str::to_owned)))
        .collect();
    run_jobs(&jobs, in_diff)
}

/// Runs each crate with its shard (`K/N`, or all of it), then prints the
/// table of scores; fails when a mutant survives.
fn run_jobs(jobs: &[(&str, Option<String>)], in_diff: Option<&Path>) -> Result<(), String> {
    let mut scores = Vec::new();
    for (krate, shard) in jobs {
        // Mutated pool code (a region's give-back, the growth arithmetic)
        // leaves huge pages reserved when it runs as root: the pools are
        // put back as they were, whatever the run did.
        let pools = HugePools::read();
        let score = run_crate(krate, shard.as_deref(), in_diff);
        pools.restore();
        scores.push(score?);
    }
    println!("\n==== mutants (cargo-mutants; .cargo/mutants.toml)");
    println!(
        "  {:<12} {:>7} {:>7} {:>8} {:>9} {:>8}",
        "crate", "caught", "missed", "timeout", "unviable", "caught%"
    );
    for s in &scores {
        println!(
            "  {:<12} {:>7} {:>7} {:>8} {:>9} {:>7.1}%",
            s.krate,
            s.caught.len(),
            s.survivors.len() - s.timeouts,
            s.timeouts,
            s.unviable.len(),
            s.percent()
        );
    }
    let survivors: Vec<&String> = scores.iter().flat_map(|s| &s.survivors).collect();
    if survivors.is_empty() {
        return Ok(());
    }
    for m in &survivors {
        println!("  survived: {m}");
    }
    Err(format!(
        "{} mutant(s) survived: kill each with a test of the behaviour it breaks, or, if it \
         cannot change behaviour, exclude it in .cargo/mutants.toml with the reason",
        survivors.len()
    ))
}

/// The most mutants [`last_commit`] tests: about 5 minutes at
/// faultaround's 25-30 s a mutant (cache's take about 12 s).
const LAST_COMMIT_BUDGET: usize = 10;

/// CI's step over the last commit (`git diff HEAD~1 HEAD`): the mutants
/// in the lines it changed, in every library crate it touched. Where they
/// are more than
/// [`LAST_COMMIT_BUDGET`], each crate runs one round-robin shard of
/// them, picked by the commit's hash, so that successive commits sample
/// different ones. Fails when a mutant survives.
pub(crate) fn last_commit() -> Result<(), String> {
    refuse_shallow(
        "the last commit's parent may be missing: `git fetch --deepen=1` (or clone without --depth)",
    )?;
    let parent = git(&["rev-parse", "--verify", "-q", "HEAD~1"])?;
    if !parent.status.success() {
        println!("mutants: HEAD has no parent commit; nothing to compare");
        return Ok(());
    }
    let dirty = git_text(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "crates",
    ])?;
    if !dirty.trim().is_empty() {
        return Err(format!(
            "crates/ has uncommitted changes, which the last commit's diff does not \
             describe: commit or stash them first\n{}",
            dirty.trim_end()
        ));
    }
    let diff = git_text(&["diff", "HEAD~1", "HEAD"])?;
    let touched = touched_crates(&diff);
    if touched.is_empty() {
        println!("mutants: the last commit changes no library crate's source");
        return Ok(());
    }
    let out = root().join("target/mutants");
    fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let file = out.join("last-commit.diff");
    fs::write(&file, &diff).map_err(|e| format!("writing {}: {e}", file.display()))?;
    crate::util::ensure_packages(crate::util::BUILD)?;
    ensure_installed()?;
    let seed = head_seed()?;
    let mut counts = Vec::new();
    for krate in touched {
        let mut cmd = cargo_mutants(krate);
        cmd.args(["--list", "--all-features", "--in-diff"])
            .arg(&file);
        let listed = cmd
            .output()
            .map_err(|e| format!("could not start cargo mutants: {e}"))?;
        if !listed.status.success() {
            return Err(format!(
                "cargo mutants --list -p mmbatch-{krate} failed: {}",
                String::from_utf8_lossy(&listed.stderr).trim()
            ));
        }
        let n = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count();
        counts.push((krate, n));
    }
    counts.retain(|&(krate, n)| {
        if n == 0 {
            println!("mutants: none in mmbatch-{krate}'s changed lines");
        }
        n > 0
    });
    let jobs = shards_within(&counts, LAST_COMMIT_BUDGET, seed);
    for ((krate, n), (_, shard)) in counts.iter().zip(&jobs) {
        println!(
            "mutants: {n} in mmbatch-{krate}'s changed lines{}",
            shard
                .as_ref()
                .map_or(String::new(), |s| format!(", testing shard {s}"))
        );
    }
    if jobs.is_empty() {
        return Ok(());
    }
    run_jobs(&jobs, Some(&file))
}

/// One round-robin shard of `parts` of a crate's mutants, in turn: the
/// number of commits up to HEAD modulo `parts`, so `parts` successive
/// commits of a linear history test about every mutant (exactly, while
/// the crate's list of mutants stays the same), each shard a sample of
/// every file, for a fraction of a whole run's time. Fails when a mutant
/// survives. A shallow clone's count stays put: it is refused.
pub(crate) fn rotation(krate: &'static str, parts: u64) -> Result<(), String> {
    refuse_shallow(
        "its commit count would test one shard for good: `git fetch --unshallow` (or clone without --depth)",
    )?;
    crate::util::ensure_packages(crate::util::BUILD)?;
    ensure_installed()?;
    let text = git_text(&["rev-list", "--count", "HEAD"])?;
    let commits: u64 = text.trim().parse().map_err(|_| {
        format!(
            "git rev-list --count HEAD gave {:?}: is this a git clone?",
            text.trim()
        )
    })?;
    let shard = format!("{}/{parts}", commits % parts);
    println!("mutants: mmbatch-{krate}, shard {shard} (commit {commits} of HEAD's history)");
    run_jobs(&[(krate, Some(shard))], None)
}

/// The first 12 hex digits of HEAD's hash, as a number: the seed that
/// picks the last commit's shards.
fn head_seed() -> Result<u64, String> {
    let hex = git_text(&["rev-parse", "HEAD"])?;
    u64::from_str_radix(hex.get(..12).unwrap_or_default(), 16)
        .map_err(|e| format!("HEAD's hash {:?} is not hex: {e}", hex.trim()))
}

/// `git ARGS` run in the workspace's root.
fn git(args: &[&str]) -> Result<std::process::Output, String> {
    std::process::Command::new("git")
        .current_dir(root())
        .args(args)
        .output()
        .map_err(|e| format!("could not run git: {e}"))
}

/// What `git ARGS` printed, or an error with what it said when it failed.
fn git_text(args: &[&str]) -> Result<String, String> {
    let out = git(args)?;
    if !out.status.success() {
        return Err(format!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Refuses a shallow clone, saying `why` it matters to the caller.
fn refuse_shallow(why: &str) -> Result<(), String> {
    if git_text(&["rev-parse", "--is-shallow-repository"])?.trim() == "true" {
        return Err(format!("the clone is shallow, so {why}"));
    }
    Ok(())
}

/// The library crates whose `src/` a unified diff changes, in
/// [`CRATES`]' order.
fn touched_crates(diff: &str) -> Vec<&'static str> {
    CRATES
        .iter()
        .copied()
        .filter(|c| {
            let src = format!("crates/{c}/src/");
            diff.lines().any(|l| {
                (l.starts_with("+++ b/") || l.starts_with("--- a/")) && l[6..].starts_with(&src)
            })
        })
        .collect()
}

/// Each crate with its shard (`K/N`) so that about `budget` mutants run
/// in all, shared evenly among the crates that have any (at least one
/// each); `None` runs a crate's mutants whole. `seed` picks `K`.
fn shards_within<'a>(
    counts: &[(&'a str, usize)],
    budget: usize,
    seed: u64,
) -> Vec<(&'a str, Option<String>)> {
    let with = counts.iter().filter(|(_, n)| *n > 0).count().max(1);
    let share = (budget / with).max(1);
    counts
        .iter()
        .map(|&(krate, n)| {
            let shards = n.div_ceil(share);
            let shard = (shards > 1).then(|| format!("{}/{shards}", seed % shards as u64));
            (krate, shard)
        })
        .collect()
}

/// Installs cargo-mutants unless `cargo mutants` runs.
fn ensure_installed() -> Result<(), String> {
    if !succeeds(cargo().args(["mutants", "--version"])) {
        eprintln!("installing cargo-mutants");
        exec(cargo().args(["install", "cargo-mutants", "--locked"]))?;
    }
    Ok(())
}

fn run_crate(krate: &str, shard: Option<&str>, in_diff: Option<&Path>) -> Result<Score, String> {
    let out = root().join("target/mutants").join(krate);
    fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    // A run that finds no mutant (all excluded, or none in the diff)
    // writes no lists: an earlier run's must not be read as its score.
    let _ = fs::remove_dir_all(out.join("mutants.out"));
    let mut cmd = cargo_mutants(krate);
    // The tests CI's test step runs: with the fail points (whose tests
    // are the only ones that reach the error paths of system calls the
    // kernel rarely refuses) and the optional parts on.
    cmd.arg("--all-features").arg("--output").arg(&out);
    if let Some(s) = shard {
        // Mutant i to shard i % n: each shard samples every file, so one
        // shard estimates the whole crate's score.
        cmd.args(["--shard", s, "--sharding", "round-robin"]);
    }
    if let Some(d) = in_diff {
        cmd.arg("--in-diff").arg(d);
    }
    eprintln!(
        "$ cargo mutants -p mmbatch-{krate} (output in {})",
        out.display()
    );
    run_mutants(cmd, &format!("cargo mutants -p mmbatch-{krate}"), &out)?;
    let mut score = read_score(krate, &out.join("mutants.out"))?;
    let has_models = crate::loom::CRATES.contains(&format!("mmbatch-{krate}").as_str());
    if has_models && !score.survivors.is_empty() {
        // A failed pass leaves the first pass's score standing.
        match loom_pass(krate, &score.survivors, &out) {
            Ok(second) => {
                // Counted from the merge: the pass also tests mutants
                // its `--re` list does not name (cargo-mutants 27.1 filters
                // no struct-field deletion by name: its issue #632), and
                // those count for nothing here.
                let (before, caught, unviable) = (
                    score.survivors.len(),
                    score.caught.len(),
                    score.unviable.len(),
                );
                score.merge(&second);
                eprintln!(
                    "mutants: the loom models caught {} of {before} survivors of \
                     mmbatch-{krate} ({} more do not build under loom)",
                    score.caught.len() - caught,
                    score.unviable.len() - unviable,
                );
            }
            Err(e) => eprintln!("mutants: {e}; the first pass's score stands"),
        }
    }
    Ok(score)
}

impl Score {
    /// Takes a second pass over the survivors into account: what it
    /// caught counts as caught, and a missed mutant that does not build
    /// there as unviable (code compiled only under loom "survives" the
    /// first pass unbuilt; one that timed out was built, and stays).
    fn merge(&mut self, second: &Score) {
        let missed = self.survivors.len() - self.timeouts;
        let timed_out = self.survivors.split_off(missed);
        self.timeouts = 0;
        for m in std::mem::take(&mut self.survivors) {
            if second.caught.contains(&m) {
                self.caught.push(m);
            } else if second.unviable.contains(&m) {
                self.unviable.push(m);
            } else {
                self.survivors.push(m);
            }
        }
        for m in timed_out {
            if second.caught.contains(&m) {
                self.caught.push(m);
            } else {
                self.survivors.push(m);
                self.timeouts += 1;
            }
        }
    }
}

/// Tests `survivors` again with the crate's loom models as the tests
/// (`--cfg mmbatch_loom`, the loom profile with debug assertions, the library alone with
/// its own features, as `cargo xtask loom CRATE` runs them, at 2
/// preemptions by default where that runs 3: each mutant runs every model): code compiled only under loom
/// is reachable from no other test. Returns that pass's score.
fn loom_pass(krate: &str, survivors: &[String], out: &Path) -> Result<Score, String> {
    let out = out.join("loom");
    fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let mut cmd = cargo_mutants(krate);
    // `--lib` for the build too: under loom a crate may leave out
    // what its integration tests and examples use.
    cmd.args(["--profile", LOOM_PROFILE, "--cargo-arg=--lib"])
        .arg("--output")
        .arg(&out)
        // Cargo prefers the encoded form to RUSTFLAGS.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("RUSTFLAGS", LOOM_RUSTFLAGS)
        .env(
            "LOOM_MAX_PREEMPTIONS",
            std::env::var("LOOM_MAX_PREEMPTIONS").unwrap_or_else(|_| "2".to_owned()),
        );
    for m in survivors {
        cmd.arg("--re").arg(format!("^{}$", regex_escape(m)));
    }
    eprintln!(
        "$ RUSTFLAGS='{LOOM_RUSTFLAGS}' cargo mutants -p mmbatch-{krate} --profile {LOOM_PROFILE} \
         --cargo-arg=--lib --re <its {} survivors> (output in {})",
        survivors.len(),
        out.display()
    );
    run_mutants(cmd, &format!("the loom pass over mmbatch-{krate}"), &out)?;
    read_score(krate, &out.join("mutants.out"))
}

/// The size of each huge page pool and its overcommit (`nr_hugepages`
/// and `nr_overcommit_hugepages` of every size: tests set both, and a
/// mutant killed at its timeout does not put them back).
struct HugePools(Vec<(std::path::PathBuf, String)>);

impl HugePools {
    fn read() -> Self {
        let dirs = fs::read_dir("/sys/kernel/mm/hugepages")
            .into_iter()
            .flatten();
        Self(
            dirs.flatten()
                .flat_map(|d| ["nr_hugepages", "nr_overcommit_hugepages"].map(|f| d.path().join(f)))
                .filter_map(|f| Some((f.clone(), fs::read_to_string(&f).ok()?)))
                .collect(),
        )
    }

    /// Writes back every pool that changed, saying so.
    fn restore(&self) {
        for (file, was) in &self.0 {
            let now = fs::read_to_string(file).unwrap_or_default();
            if now != *was {
                let put = fs::write(file, was.trim());
                eprintln!(
                    "mutants: {} is {} after the run, {} before: {}",
                    file.display(),
                    now.trim(),
                    was.trim(),
                    match put {
                        Ok(()) => "put back".to_owned(),
                        Err(e) => format!("could not put it back ({e}); write it by hand"),
                    }
                );
            }
        }
    }
}

/// `cargo mutants -p mmbatch-KRATE` from the workspace root.
fn cargo_mutants(krate: &str) -> std::process::Command {
    let mut cmd = cargo();
    cmd.current_dir(root())
        .args(["mutants", "--no-shuffle", "-p"])
        .arg(format!("mmbatch-{krate}"))
        // A mutant needs one failing case, not the smallest: proptest's
        // shrinking of a failure outlasted the test timeout (3 of lru's
        // mutants "timed out" so).
        .env("PROPTEST_MAX_SHRINK_ITERS", "0");
    cmd
}

/// `text` as a regex (Rust's `regex` syntax, which cargo-mutants uses)
/// matching it literally: its meta characters escaped, as
/// `regex_syntax::escape` does (`<` and `>` stay bare: escaped, they are
/// word boundaries).
fn regex_escape(text: &str) -> String {
    let mut r = String::with_capacity(2 * text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            r.push('\\');
        }
        r.push(c);
    }
    r
}

/// Runs a cargo-mutants command whose output goes to `out`. It exits 2
/// for missed mutants and 3 for timeouts (the lists say which): only a
/// failing baseline or a usage error is an error here.
fn run_mutants(mut cmd: std::process::Command, what: &str, out: &Path) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("could not start cargo mutants: {e}"))?;
    if matches!(status.code(), Some(0 | 2 | 3)) {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({status}): see {}/mutants.out/debug.log (a baseline whose tests fail \
         unmutated stops it)",
        out.display()
    ))
}

/// The score from cargo-mutants' lists in `dir` (`caught.txt`, ...); a
/// list it did not write (no mutant in the diff) is empty.
pub(crate) fn read_score(krate: &str, dir: &Path) -> Result<Score, String> {
    let lines = |name: &str| -> Vec<String> {
        fs::read_to_string(dir.join(name))
            .map(|t| {
                t.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let missed = lines("missed.txt");
    let timeout = lines("timeout.txt");
    Ok(Score {
        krate: krate.to_owned(),
        caught: lines("caught.txt"),
        unviable: lines("unviable.txt"),
        timeouts: timeout.len(),
        survivors: missed.into_iter().chain(timeout).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_touches_the_crates_whose_sources_it_changes() {
        let diff = "diff --git a/crates/ktask/src/numa.rs b/crates/ktask/src/numa.rs\n\
                    --- a/crates/ktask/src/numa.rs\n+++ b/crates/ktask/src/numa.rs\n\
                    @@ -1 +1 @@\n-x\n+y\n\
                    --- a/crates/cache/tests/t.rs\n+++ b/crates/cache/tests/t.rs\n\
                    --- /dev/null\n+++ b/crates/mmap/src/new.rs\n\
                    --- a/crates/lru/src/gone.rs\n+++ /dev/null\n\
                    +++ b/crates/faultaround/src/x.rs mentioned in a line\n";
        assert_eq!(
            touched_crates(diff),
            ["mmap", "ktask", "lru", "faultaround"],
            "tests/ is not a crate's source"
        );
        assert!(touched_crates("--- a/README.md\n+++ b/README.md\n").is_empty());
    }

    #[test]
    fn the_budget_is_shared_and_a_crate_over_its_share_runs_one_shard() {
        let jobs = shards_within(&[("ktask", 3), ("faultaround", 23), ("cache", 0)], 10, 7);
        // 10 among the two crates with mutants: 5 each.
        assert_eq!(
            jobs,
            [
                ("ktask", None),
                ("faultaround", Some("2/5".to_owned())),
                ("cache", None),
            ]
        );
        assert_eq!(
            shards_within(&[("lru", 40)], 10, 12)[0].1.as_deref(),
            Some("0/4")
        );
        assert_eq!(shards_within(&[("lru", 10)], 10, 12)[0].1, None);
        assert_eq!(
            shards_within(&[("lru", 3)], 0, 1)[0].1.as_deref(),
            Some("1/3")
        );
    }

    #[test]
    fn crate_names_take_the_prefix_or_not_and_refuse_others() {
        assert_eq!(short("mmap"), Ok("mmap"));
        assert_eq!(short("mmbatch-cache"), Ok("cache"));
        let e = short("testkit").unwrap_err();
        assert!(e.contains("mmap, pagevec"), "{e}");
    }

    #[test]
    fn a_score_counts_each_list_and_survivors_are_missed_then_timed_out() {
        let dir = std::env::temp_dir().join(format!("xtask-mutants-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("caught.txt"), "a\nb\nc\n").unwrap();
        fs::write(dir.join("missed.txt"), "m\n").unwrap();
        fs::write(dir.join("timeout.txt"), "t\n").unwrap();
        let s = read_score("mmap", &dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(s.caught, ["a", "b", "c"]);
        assert!(s.unviable.is_empty());
        assert_eq!(s.survivors, ["m", "t"]);
        assert_eq!(s.timeouts, 1);
        assert!((s.percent() - 60.0).abs() < 1e-9);
        assert_eq!(Score::default().percent(), 100.0);
    }

    #[test]
    fn escaped_names_keep_every_character_and_quote_the_special_ones() {
        let name = "crates/a/src/b.rs:12:5: replace <impl Drop for X<'_>>::drop with () | (a+b)*[c]{1}^$.?#&-~";
        let e = regex_escape(name);
        // Unescaped, each character is the name's.
        assert_eq!(e.replace('\\', ""), name);
        for special in [
            '.', '(', ')', '|', '+', '*', '[', ']', '{', '}', '^', '$', '?', '#', '&', '-', '~',
        ] {
            assert!(
                e.match_indices(special)
                    .all(|(i, _)| e[..i].ends_with('\\')),
                "{special} unescaped in {e}"
            );
        }
        assert!(
            e.starts_with("crates/a/src/b\\.rs:12:5: replace <impl"),
            "{e}"
        );
    }

    #[test]
    fn a_second_pass_moves_what_it_caught_or_what_it_cannot_build_unbuilt() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let mut s = Score {
            krate: "pagevec".into(),
            caught: names(&["c"]),
            unviable: names(&["u"]),
            survivors: names(&["m1", "m2", "m3", "t1", "t2", "t3"]),
            timeouts: 3,
        };
        s.merge(&Score {
            caught: names(&["m2", "t1", "other"]),
            unviable: names(&["m3", "t3"]),
            ..Score::default()
        });
        assert_eq!(s.survivors, ["m1", "t2", "t3"], "a timeout was built");
        assert_eq!(s.caught, ["c", "m2", "t1"]);
        assert_eq!(s.unviable, ["u", "m3"]);
        assert_eq!(s.timeouts, 2);
    }
}
