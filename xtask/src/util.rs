//! Running commands, finding the workspace, and the system packages the
//! build needs (installed with apt-get as root, else named with the exact
//! command to install them).

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

/// The workspace root (the parent of `xtask/`).
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

/// `cargo`, as the one running us (respects `CARGO`).
pub(crate) fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c
}

/// `cargo +nightly`, through rustup (the `CARGO` of a stable run would
/// ignore the toolchain override).
pub(crate) fn cargo_nightly() -> Command {
    cargo_toolchain("nightly")
}

/// `cargo +TOOLCHAIN`, through rustup (the `CARGO` of a stable run would
/// ignore the toolchain override).
pub(crate) fn cargo_toolchain(toolchain: &str) -> Command {
    let mut c = Command::new("cargo");
    c.arg(format!("+{toolchain}")).current_dir(root());
    // This toolchain's variables would leak into the other's build.
    for var in ["CARGO", "RUSTC", "RUSTDOC", "RUSTUP_TOOLCHAIN"] {
        c.env_remove(var);
    }
    c
}

/// Runs `cmd`, echoing it; an error names the command and its status.
pub(crate) fn exec(cmd: &mut Command) -> Result<(), String> {
    eprintln!("$ {}", show(cmd));
    let status = cmd
        .status()
        .map_err(|e| format!("could not start `{}`: {e}", show(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", show(cmd)))
    }
}

/// Runs a `cargo test` command like [`exec`], passing its output through,
/// and on failure names the failed tests and the first line of each one's
/// panic in the error. The summary is often all a CI log keeps: a bare
/// "exit status: 101" leaves a flaky test unnamed.
pub(crate) fn exec_tests(cmd: &mut Command) -> Result<(), String> {
    use std::io::{BufRead, BufReader, Write};
    eprintln!("$ {}", show(cmd));
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start `{}`: {e}", show(cmd)))?;
    let mut failures = Failures::default();
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        // A closed terminal must not stop the tests; keep reading.
        let _ = writeln!(out, "{line}");
        failures.read(&line);
    }
    drop(out);
    let status = child.wait().map_err(|e| format!("`{}`: {e}", show(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed ({status}){}",
            show(cmd),
            failures.summary()
        ))
    }
}

/// The failed tests a libtest run printed, each with its panic's first
/// line: the test's own, not the line of a wrapper that ran it in a
/// child process (`mmbatch_testkit::child`), whose output, the child's
/// panic among it, follows.
#[derive(Default)]
pub(crate) struct Failures {
    tests: Vec<(String, Option<String>)>,
    /// The test whose captured output is being read, and whether its
    /// panic line was seen (the message is the line after).
    reading: Option<(usize, bool)>,
}

impl Failures {
    /// Takes in one line of libtest's output.
    pub(crate) fn read(&mut self, line: &str) {
        if let Some(name) = line
            .strip_prefix("test ")
            .and_then(|l| l.strip_suffix(" ... FAILED"))
        {
            // Once: a child's copy of the line, inside the parent's
            // captured output, names the same test.
            if !self.tests.iter().any(|(t, _)| t == name) {
                self.tests.push((name.to_string(), None));
            }
        } else if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|l| l.strip_suffix(" stdout ----"))
        {
            self.reading = self
                .tests
                .iter()
                .position(|(t, _)| t == name)
                .map(|i| (i, false));
        } else if line.starts_with("test result: ")
            && !self.reading.is_some_and(|(i, _)| self.wrapped(i))
        {
            // The run's end, unless a child's (its stdout, its stderr
            // with its panic after).
            self.reading = None;
        } else if let Some((i, seen_panic)) = self.reading {
            let wrapper = self.wrapped(i);
            let why = &mut self.tests[i].1;
            if why.is_some() && !wrapper {
                return;
            }
            if seen_panic {
                *why = Some(line.chars().take(300).collect());
                self.reading = Some((i, false));
            } else if line.contains("panicked at") {
                self.reading = Some((i, true));
            }
        }
    }

    /// Whether test `i`'s message so far is a child's wrapper
    /// (`NAME failed (exit status: 101):`), which gives way to the
    /// child's own panic further on; a hang's (`NAME did not finish in
    /// 10s (hang):`) is the news, and stays.
    fn wrapped(&self, i: usize) -> bool {
        let (name, why) = &self.tests[i];
        why.as_deref()
            .is_some_and(|w| w.starts_with(&format!("{name} failed (")))
    }

    /// `; failed tests: NAME (PANIC); ...`, or empty when none failed.
    pub(crate) fn summary(&self) -> String {
        if self.tests.is_empty() {
            return String::new();
        }
        let each: Vec<String> = self
            .tests
            .iter()
            .map(|(name, why)| match why {
                Some(why) => format!("{name} ({why})"),
                None => name.clone(),
            })
            .collect();
        format!("; failed tests: {}", each.join("; "))
    }
}

/// Whether `cmd` runs and succeeds, quietly.
pub(crate) fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn show(cmd: &Command) -> String {
    let envs: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, v?.to_str()?)))
        .collect();
    let mut parts = envs;
    parts.push(cmd.get_program().to_string_lossy().into_owned());
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Whether an executable named `name` is on PATH.
pub(crate) fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let p = dir.join(name);
            p.is_file()
                && std::fs::metadata(&p).is_ok_and(|m| {
                    use std::os::unix::fs::PermissionsExt;
                    m.permissions().mode() & 0o111 != 0
                })
        })
    })
}

/// Whether a rustup `nightly` toolchain is installed.
pub(crate) fn has_nightly() -> bool {
    static NIGHTLY: OnceLock<bool> = OnceLock::new();
    *NIGHTLY.get_or_init(|| has_toolchain("nightly"))
}

/// Whether rustup lists a toolchain named `name` (`nightly`, `1.85`, ...).
pub(crate) fn has_toolchain(name: &str) -> bool {
    Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).lines().any(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['-', '.']))
            })
        })
}

/// The target directory (`CARGO_TARGET_DIR`, else the workspace's).
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), Into::into)
}

/// A Debian package the build or a command needs, and how to tell it is
/// there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SystemPackage {
    /// The Debian package name.
    pub(crate) apt: &'static str,
    /// What it provides: an executable on PATH, or (starting with `/`) a
    /// file path, whose last component may end in `*` (a prefix match).
    pub(crate) provides: &'static str,
    /// What needs it, for the error message.
    pub(crate) needed_by: &'static str,
}

impl SystemPackage {
    fn present(&self) -> bool {
        if !self.provides.starts_with('/') {
            return on_path(self.provides);
        }
        let Some(prefix) = self.provides.strip_suffix('*') else {
            return Path::new(self.provides).exists();
        };
        let path = Path::new(prefix);
        let (Some(dir), Some(stem)) = (path.parent(), path.file_name()) else {
            return false;
        };
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&*stem.to_string_lossy())
            })
        })
    }
}

/// The cargo profile of CI's guest and repro smoke run (the root
/// Cargo.toml's `[profile.ci]`: release at opt-level 1).
pub(crate) const CI_PROFILE: &str = "ci";

/// Needed to build the workspace.
pub(crate) const BUILD: &[SystemPackage] = &[
    SystemPackage {
        apt: "gcc",
        provides: "cc",
        needed_by: "linking (rustc calls cc)",
    },
    SystemPackage {
        apt: "pkg-config",
        provides: "pkg-config",
        needed_by: "finding libhwloc (hwlocality-sys, mmbatch-ktask)",
    },
    SystemPackage {
        apt: "libhwloc-dev",
        provides: "/usr/include/hwloc.h",
        needed_by: "hwlocality (mmbatch-ktask's NUMA placement)",
    },
    SystemPackage {
        apt: "libudev-dev",
        provides: "/usr/include/libudev.h",
        needed_by: "linking libhwloc (its pkg-config flags name -ludev)",
    },
];

/// Needed by CI's 32-bit step: linking i686 test binaries. Its mark is
/// a file of gcc-multilib's own (a link to the 64-bit `asm` headers):
/// `/usr/lib32/crt1.o` is `libc6-dev-i386`'s, there without gcc's 32-bit
/// runtime (`crtbegin.o`, `libgcc`) that linking needs too.
pub(crate) const I686: &[SystemPackage] = &[SystemPackage {
    apt: "gcc-multilib",
    provides: "/usr/include/asm",
    needed_by: "linking 32-bit (i686) test binaries",
}];

/// Needed by `cargo xtask fuzz` and CI's fuzz build: libfuzzer-sys compiles
/// libFuzzer's C++ sources.
pub(crate) const FUZZ: &[SystemPackage] = &[SystemPackage {
    apt: "g++",
    provides: "c++",
    needed_by: "building libFuzzer (libfuzzer-sys)",
}];

/// Makes sure every package in `pkgs` is present: as root, installs the
/// missing ones with apt-get; otherwise fails naming the exact command.
pub(crate) fn ensure_packages(pkgs: &[SystemPackage]) -> Result<(), String> {
    let missing: Vec<&SystemPackage> = pkgs.iter().filter(|p| !p.present()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|p| p.apt).collect();
    let why: Vec<String> = missing
        .iter()
        .map(|p| format!("{} ({} for {})", p.apt, p.provides, p.needed_by))
        .collect();
    match install_plan(is_root(), on_path("apt-get"), &names) {
        Plan::Install(cmds) => {
            eprintln!("installing missing system packages: {}", why.join(", "));
            for mut cmd in cmds {
                exec(&mut cmd)?;
            }
            let still: Vec<&str> = missing
                .iter()
                .filter(|p| !p.present())
                .map(|p| p.apt)
                .collect();
            if still.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "apt-get ran but {} still missing",
                    still.join(", ")
                ))
            }
        }
        Plan::Tell(msg) => Err(format!(
            "missing system packages: {}\n{msg}",
            why.join(", ")
        )),
    }
}

enum Plan {
    Install(Vec<Command>),
    Tell(String),
}

fn install_plan(root: bool, apt: bool, names: &[&str]) -> Plan {
    let list = names.join(" ");
    if root && apt {
        let mut update = Command::new("apt-get");
        update
            .args(["update", "-qq"])
            .env("DEBIAN_FRONTEND", "noninteractive");
        let mut install = Command::new("apt-get");
        install
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(names)
            .env("DEBIAN_FRONTEND", "noninteractive");
        Plan::Install(vec![update, install])
    } else if apt {
        Plan::Tell(format!(
            "install them with:\n    sudo apt-get update && sudo apt-get install -y {list}\n\
             (or run this command as root, and it installs them itself)"
        ))
    } else {
        Plan::Tell(format!(
            "this is not a Debian-like system (no apt-get): install the packages that provide {list} \
             with your package manager"
        ))
    }
}

/// Whether we run with effective uid 0 (read from /proc, no libc needed).
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_root_is_told_the_exact_command() {
        match install_plan(false, true, &["libhwloc-dev", "pkg-config"]) {
            Plan::Tell(msg) => {
                assert!(
                    msg.contains("sudo apt-get install -y libhwloc-dev pkg-config"),
                    "{msg}"
                )
            }
            Plan::Install(_) => panic!("must not try apt-get without root"),
        }
    }

    #[test]
    fn root_installs_with_apt_get() {
        match install_plan(true, true, &["g++"]) {
            Plan::Install(cmds) => {
                let last = show(&cmds[1]);
                assert!(
                    last.contains("apt-get install -y -qq --no-install-recommends g++"),
                    "{last}"
                );
            }
            Plan::Tell(m) => panic!("root should install: {m}"),
        }
    }

    #[test]
    fn a_failed_test_is_named_with_its_panic() {
        let log = "running 3 tests
test a::ok ... ok
test b::flaky ... FAILED
test c::also ... FAILED

failures:

---- b::flaky stdout ----

thread 'b::flaky' panicked at crates/b/src/lib.rs:10:5:
kept 40 of 50 hot keys
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

---- c::also stdout ----
some output

failures:
    b::flaky
    c::also
";
        let mut f = Failures::default();
        log.lines().for_each(|l| f.read(l));
        assert_eq!(
            f.summary(),
            "; failed tests: b::flaky (kept 40 of 50 hot keys); c::also"
        );
        assert_eq!(Failures::default().summary(), "");
    }

    #[test]
    fn present_packages_need_nothing() {
        assert!(
            ensure_packages(&[SystemPackage {
                apt: "coreutils",
                provides: "ls",
                needed_by: "test"
            }])
            .is_ok()
        );
    }
}
