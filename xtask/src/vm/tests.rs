//! `cargo xtask vm`'s arguments, topology, cpio packing, and the binaries
//! read from cargo's JSON.

use super::*;

fn parse(args: &[&str]) -> Result<Args, String> {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        vm: Args,
    }
    let cli =
        <Cli as clap::Parser>::try_parse_from(std::iter::once("vm").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
    cli.vm.check()?;
    Ok(cli.vm)
}

#[test]
fn topology_splits_cpus_and_memory() {
    let a = parse(&["--nodes", "4", "--cpus", "2"]).unwrap();
    let t = topology(&a);
    assert_eq!(t.len(), 4);
    assert_eq!(t.iter().map(|n| n.1).sum::<usize>(), 2048);
    assert_eq!(topology_env(&t), "0:;1:0;2:;3:1");
    let b = parse(&["--memory-only-node"]).unwrap();
    assert_eq!(topology_env(&topology(&b)), "0:0;1:1;2:");
    assert!(parse(&["--nodes", "16"]).is_err());
    let c = parse(&["ktask:numa", "--", "--nocapture"]).unwrap();
    assert_eq!(
        (c.tests, c.test_args),
        (
            vec!["ktask:numa".to_owned()],
            vec!["--nocapture".to_owned()]
        )
    );
}

#[test]
fn cpio_is_newc_with_a_trailer() {
    let mut c = Cpio::default();
    c.dir("bin");
    c.file("init", b"#!/bin/sh\n", 0o755);
    let out = c.finish();
    assert!(out.starts_with(b"070701"));
    assert_eq!(out.len() % 4, 0);
    assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
}

#[test]
fn the_status_line_is_found_whatever_the_kernel_prints_around_it() {
    // As CI saw it: printk's power-off message on the same console line.
    assert_eq!(
        status("mmbatch-vm: done, 0 failed[   29.041878] sysrq: Power Off"),
        Some(0)
    );
    assert_eq!(status("mmbatch-vm: done, 0 failed"), Some(0));
    assert_eq!(status("mmbatch-vm: done, 12 failed"), Some(12));
    assert_eq!(
        status("[    3.1] random: crng init donemmbatch-vm: done, 3 failed"),
        Some(3)
    );
    // A message inside the line leaves this copy unreadable (the guest
    // prints a second one after the console drained).
    assert_eq!(
        status("mmbatch-vm: done, 0 fai[ 29.0] sysrq: Power Off"),
        None
    );
    assert_eq!(status("mmbatch-vm: done, [ 29.0] reboot0 failed"), None);
    assert_eq!(status("mmbatch-vm: done, x failed"), None);
    assert_eq!(status("mmbatch-vm: running cache"), None);
    // A garbled first copy and a good second one on the same line.
    assert_eq!(
        status("mmbatch-vm: done, 1[ 2.0] xmmbatch-vm: done, 1 failed"),
        Some(1)
    );
}

#[test]
fn a_failed_binary_and_its_tests_are_named_in_the_error() {
    let mut f = Console::default();
    for line in [
        "mmbatch-vm: running faultaround:uffd",
        "test flaky_elsewhere ... FAILED",
        "mmbatch-vm: passed faultaround:uffd in 7 s",
        "mmbatch-vm: running faultaround:vmm",
        "test a_page ... ok",
        "test a_reader_waits ... FAILED",
        "failures:",
        "",
        "---- a_reader_waits stdout ----",
        // A child's run (`mmbatch_testkit::child`): its wrapper's panic,
        // then the child's stdout (its own FAILED line and result),
        // then its stderr with its panic.
        "thread 'a_reader_waits' (812) panicked at crates/testkit/src/child.rs:49:40:",
        "a_reader_waits failed (exit status: 101):",
        "running 1 test",
        "test a_reader_waits ... FAILED",
        "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 40 filtered out",
        "thread 'a_reader_waits' (815) panicked at crates/faultaround/tests/vmm.rs:12:5:",
        "the reader did not finish in 20s (hang)",
        "",
        "failures:",
        "    a_reader_waits",
        "",
        "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        "[   29.1] random: crng init donemmbatch-vm: FAILED faultaround:vmm (exit status 101 after 12 s)",
        "mmbatch-vm: running faultaround:faults",
        "mmbatch-vm: FAILED faultaround:faults: killed at its 180 s limit (a hang)",
    ] {
        f.read(line);
    }
    assert_eq!(
        f.describe(),
        "faultaround:vmm (exit status 101 after 12 s); failed tests: \
         a_reader_waits (the reader did not finish in 20s (hang)) | \
         faultaround:faults: killed at its 180 s limit (a hang)"
    );
    assert_eq!(
        Console::default().describe(),
        "see the guest's output above"
    );
}

/// `repro` names no test: its failure is told by its experiment's panic
/// and its own last line.
#[test]
fn a_failed_repro_says_which_experiment_and_why() {
    let mut f = Console::default();
    for line in [
        "mmbatch-vm: running repro",
        // The oldest of four goes.
        "repro: could not raise the open-files limit to its hard limit (EPERM)",
        "[timedmunlock 1/4, 0s] scale 0.01",
        "thread 'main' (91) panicked at benches/src/clear.rs:80:9:",
        "2 huge pages of 2048 KiB could not be reserved",
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        "[clear] failed (its panic above); going on with the others",
        "repro: 1 experiment(s) in 0.1 minutes",
        "repro: experiment(s) failed: clear",
        "mmbatch-vm: FAILED repro (exit status 1 after 5 s)",
    ] {
        f.read(line);
    }
    assert_eq!(
        f.describe(),
        "repro (exit status 1 after 5 s): 2 huge pages of 2048 KiB could not be reserved; \
         repro: 1 experiment(s) in 0.1 minutes; repro: experiment(s) failed: clear"
    );
    // A test binary a hang guard aborted, no test of it named FAILED.
    for line in [
        "mmbatch-vm: running faultaround:vmm[   31.2] random: crng init done",
        // A passing test's expected panic, printed: not the cause.
        "thread 'a_page' (40) panicked at crates/faultaround/tests/vmm.rs:9:5:",
        "an expected panic",
        "test a_page ... ok",
        "a_reader_waits did not finish in 450s (hang): aborting[   32.0] sysrq",
        "mmbatch-vm: FAILED faultaround:vmm (exit status 134 after 451 s)",
    ] {
        f.read(line);
    }
    assert!(
        f.describe().ends_with(
            " | faultaround:vmm (exit status 134 after 451 s): \
             a_reader_waits did not finish in 450s (hang): aborting[   32.0] sysrq"
        ),
        "{}",
        f.describe()
    );
}

#[test]
fn the_guest_drains_its_console_before_powering_off() {
    let script = initramfs::init_script(&[], None, &[], 180);
    let done = script.find("mmbatch-vm: done").expect("a status line");
    let off = script.find("sysrq-trigger").expect("a power-off");
    let line_start = script[..off].rfind('\n').expect("a line before");
    let between = &script[done..line_start];
    assert_eq!(between.matches("mmbatch-vm: done").count(), 2, "{script}");
    assert!(between.trim_end().ends_with("sleep 1"), "{script}");
}

#[test]
fn a_binary_that_hangs_is_killed_named_and_the_next_still_runs() {
    let script = initramfs::init_script(&[], None, &[], 1);
    let start = script.find("run() {").expect("the run function");
    let end = start + script[start..].find("\n}\n").expect("its end") + 3;
    let body = format!(
        "{}failed=0\nrun hangs sleep 30\nrun fails false\nrun passes true\necho \"failed=$failed\"\n",
        &script[start..end]
    );
    let t = Instant::now();
    // The host's sh and timeout(1) stand in for busybox's: the script
    // uses only what both have.
    let out = Command::new("sh").args(["-c", &body]).output().expect("sh");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "the limit did not hold"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("mmbatch-vm: FAILED hangs: killed at its 1 s limit"),
        "{text}"
    );
    assert!(
        text.contains("mmbatch-vm: FAILED fails (exit status 1"),
        "{text}"
    );
    assert!(text.contains("mmbatch-vm: passed passes in"), "{text}");
    assert!(text.contains("failed=2"), "{text}");
}

#[test]
fn the_guest_runs_the_repro_experiments_asked_for() {
    let a = parse(&[
        "--repro",
        "dirty,restore",
        "--repro-scale",
        "0.25",
        "--repro-samples",
        "3",
    ])
    .unwrap();
    let script = initramfs::init_script(&[], Some((&a.repro_args(), 600)), &[], 180);
    assert!(
        script.contains(
            "limit=600\nrun repro /repro --only dirty,restore --scale 0.25 --samples 3 --out /tmp/repro\n"
        ),
        "{script}"
    );
    // The default: the NUMA rows, at a size a small guest holds.
    let a = parse(&[]).unwrap();
    assert_eq!(
        a.repro_args(),
        "--only timedmunlock,clear --scale 0.01 --samples 1"
    );
    assert!(!initramfs::init_script(&[], None, &[], 180).contains("/repro"));
}

#[test]
fn repro_options_that_the_guest_shell_would_misread_are_refused() {
    for bad in [
        &["--repro", "dirty;reboot"][..],
        &["--repro", "dirty restore"],
        &["--repro", "dirty,"],
        &["--repro", ""],
        &["--repro-scale", "0"],
        &["--repro-scale", "inf"],
        &["--repro-scale", "-1"],
        &["--repro-samples", "0"],
        &["--backports-kernel", "--kernel", "/boot/vmlinuz"],
        &["--no-repro", "--repro", "dirty"],
    ] {
        assert!(parse(bad).is_err(), "{bad:?} was accepted");
    }
    assert!(
        parse(&["--backports-kernel", "--repro", "dirty"])
            .unwrap()
            .backports_kernel
    );
    assert!(
        parse(&["--no-repro"]).is_ok(),
        "the defaults do not conflict"
    );
}

#[test]
fn the_build_profile_is_release_unless_ci_is_asked_for() {
    assert_eq!(parse(&[]).unwrap().profile, "release");
    assert_eq!(parse(&["--profile", "ci"]).unwrap().profile, "ci");
    assert!(
        parse(&["--profile", "dev"]).is_err(),
        "a dev build under TCG"
    );
    assert_eq!(Args::ci().profile, "ci");
}

/// One line of cargo's JSON for an artifact (as cargo 1.9x writes it,
/// fields left out that the parsing does not read).
fn artifact(pkg: &str, kind: &str, name: &str, test: bool, exe: Option<&str>) -> String {
    let exe = exe.map_or("null".to_owned(), |e| format!("\"{e}\""));
    format!(
        r#"{{"reason":"compiler-artifact","package_id":"{pkg}","target":{{"kind":["{kind}"],"crate_types":["bin"],"name":"{name}","test":{test}}},"profile":{{"opt_level":"1","test":{test}}},"features":["failpoints"],"executable":{exe},"fresh":false}}"#
    )
}

const LRU: &str = "path+file:///w/crates/lru#mmbatch-lru@0.1.0";
const MLOCK: &str = "path+file:///w/crates/mlock#mmbatch-mlock@0.1.0";
const BENCHES: &str = "path+file:///w/benches#mmbatch-benches@0.0.0";
const LIBC: &str = "registry+https://github.com/rust-lang/crates.io-index#libc@0.2.191";

#[test]
fn test_binaries_are_named_by_crate_and_target_and_examples_left_out() {
    let json = [
        artifact(LIBC, "custom-build", "build-script-build", false, None),
        artifact(LIBC, "lib", "libc", false, None),
        artifact(
            LRU,
            "lib",
            "mmbatch_lru",
            true,
            Some("/t/deps/mmbatch_lru-1"),
        ),
        artifact(
            LRU,
            "test",
            "pagetables",
            true,
            Some("/t/deps/pagetables-2"),
        ),
        artifact(
            LRU,
            "example",
            "buffer_pool",
            false,
            Some("/t/examples/buffer_pool"),
        ),
        artifact(MLOCK, "test", "host", true, Some("/t/deps/host-3")),
        artifact(
            BENCHES,
            "test",
            "readme_cli",
            true,
            Some("/t/deps/readme_cli-4"),
        ),
        r#"{"reason":"build-finished","success":true}"#.to_owned(),
    ]
    .join("\n");
    let names = |wanted: &[&str]| -> Vec<(String, String)> {
        let wanted: Vec<String> = wanted.iter().map(|w| (*w).to_owned()).collect();
        test_binaries(&json, &wanted)
            .into_iter()
            .map(|(n, p)| (n, p.display().to_string()))
            .collect()
    };
    let pair = |n: &str, p: &str| (n.to_owned(), p.to_owned());
    assert_eq!(
        names(&[]),
        [
            pair("lru:mmbatch_lru", "/t/deps/mmbatch_lru-1"),
            pair("lru:pagetables", "/t/deps/pagetables-2"),
            pair("mlock:host", "/t/deps/host-3"),
        ]
    );
    assert_eq!(names(&["mlock"]), [pair("mlock:host", "/t/deps/host-3")]);
    assert_eq!(
        names(&["lru:pagetables"]),
        [pair("lru:pagetables", "/t/deps/pagetables-2")]
    );
    assert!(names(&["lru:buffer_pool"]).is_empty(), "an example");
    assert!(
        names(&["benches"]).is_empty(),
        "not a crate the guest tests"
    );
}

#[test]
fn the_repro_executable_is_the_bin_targets() {
    let json = [
        artifact(LIBC, "custom-build", "build-script-build", false, None),
        artifact(BENCHES, "lib", "mmbatch_benches", false, None),
        // Not what `cargo build --bin repro` writes; read past if it did.
        artifact(
            BENCHES,
            "test",
            "readme_cli",
            true,
            Some("/t/ci/deps/readme_cli-4"),
        ),
        artifact(BENCHES, "bin", "repro", false, Some("/t/ci/repro")),
    ]
    .join("\n");
    assert_eq!(bin_executable(&json), Some(PathBuf::from("/t/ci/repro")));
    let without_bin = json.lines().take(3).collect::<Vec<_>>().join("\n");
    assert_eq!(bin_executable(&without_bin), None);
}

/// The binary running, for a guest killed at its timeout: named by its
/// `running` line (without printk text run into it) until its `passed`
/// or `FAILED` line; the status line's worst count kept across binaries.
#[test]
fn the_console_tracks_the_binary_running_and_the_status() {
    let mut c = Console::default();
    let running = |c: &Console| c.running.as_ref().map(|(name, _)| name.clone());
    c.read("mmbatch-vm: running ktask:numa[   12.5] random: crng init done");
    assert_eq!(running(&c).as_deref(), Some("ktask:numa"));
    c.read("mmbatch-vm: passed ktask:numa in 1 s");
    assert_eq!(running(&c), None);
    // A name lost to printk text is no name (no line is its own).
    c.read("mmbatch-vm: running [   13.0] sysrq");
    assert_eq!(running(&c), None);
    // A status line seen before a binary's start is kept.
    c.read("mmbatch-vm: done, 2 failed");
    c.read("mmbatch-vm: running repro");
    c.read("repro: experiment(s) failed: clear");
    assert_eq!(running(&c).as_deref(), Some("repro"));
    assert_eq!(c.said(), ": repro: experiment(s) failed: clear");
    c.read("mmbatch-vm: FAILED repro (exit status 1 after 5 s)");
    assert_eq!(running(&c), None);
    c.read("mmbatch-vm: done, 1 failed");
    c.read("[   40.1] mmbatch-vm: done, 0 failed");
    assert_eq!(c.done, Some(2));
}
