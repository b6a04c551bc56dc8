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

/// Needed to build the workspace.
pub(crate) const BUILD: &[SystemPackage] = &[
    SystemPackage {
        apt: "gcc",
        provides: "cc",
        needed_by: "linking (rustc calls cc)",
    },
    SystemPackage {
        apt: "libclang-dev",
        provides: "/usr/lib/x86_64-linux-gnu/libclang-1*",
        needed_by: "bindgen in userfaultfd-sys (mmbatch-faultaround)",
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
    SystemPackage {
        apt: "linux-libc-dev",
        provides: "/usr/include/linux/userfaultfd.h",
        needed_by: "userfaultfd-sys's bindings",
    },
];

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
