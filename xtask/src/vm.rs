//! `cargo xtask vm`: the host tests and the NUMA experiments in a QEMU
//! guest with N NUMA nodes, on Debian's own kernel (6.1 on bookworm), so
//! that placement is checked by a kernel that has more than one node and
//! the fallbacks for an older kernel actually run; or on its backports
//! kernel (6.12), for what needs a newer one (`dirty`'s soft-dirty rows).
//!
//! The guest is an initramfs: busybox, the test binaries and `repro`
//! (`--profile`'s builds: release, or CI's `ci`), and the shared
//! libraries they load (`ldd`), booted with `-kernel`/`-initrd`. Its `/init` runs each test binary, prints a
//! last line `mmbatch-vm: done, N failed`, and powers off; the guest's
//! console streams to our stdout, and our exit status is the tests'.
//! KVM when it works (probed with a boot that only powers off), else TCG.
//! A guest that does not finish in its time limit is killed.

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

mod initramfs;

use crate::util::{BUILD, SystemPackage, cargo, ensure_packages, exec, target_dir};
use initramfs::{Cpio, pack, read};

/// What the guest needs on the host.
pub(crate) const VM: &[SystemPackage] = &[
    SystemPackage {
        apt: "qemu-system-x86",
        provides: "qemu-system-x86_64",
        needed_by: "booting the NUMA guest (cargo xtask vm)",
    },
    SystemPackage {
        apt: "busybox-static",
        provides: "/bin/busybox",
        needed_by: "the guest's shell and mounts (cargo xtask vm)",
    },
];

/// Debian's cloud kernel: NUMA, userfaultfd, hugetlbfs and the serial
/// console built in, no modules needed for an initramfs-only guest.
const KERNEL_PACKAGE: &str = "linux-image-cloud-amd64";

/// The `repro` experiments a guest runs by default: the NUMA rows.
const GUEST_REPRO: &str = "timedmunlock,clear";

/// `cargo xtask vm`'s options.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct Args {
    /// NUMA nodes with CPUs (CPUs and memory split evenly across them).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    nodes: u16,
    /// vCPUs.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    cpus: u16,
    /// Guest memory in MiB, split over the nodes (at least 256 MiB a node).
    #[arg(long = "mem", value_name = "MIB", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(256..))]
    mem_mib: u32,
    /// One more node with memory and no CPUs.
    #[arg(long)]
    memory_only_node: bool,
    /// A kernel image with NUMA and userfaultfd built in (default: Debian's linux-image-cloud-amd64, unpacked into target/vm).
    #[arg(long, value_name = "PATH")]
    kernel: Option<PathBuf>,
    /// Debian's newer cloud kernel, from the host release's backports suite (6.12 on bookworm: soft-dirty bits and userfaultfd's asynchronous write protection in one kernel; under QEMU 7.2's TCG most of its boots crash, docs/restore.md).
    #[arg(long, conflicts_with = "kernel")]
    backports_kernel: bool,
    /// The `repro` experiments the guest runs after the tests (comma-separated ids), under the guest's --timeout rather than a test binary's limit.
    #[arg(long, value_name = "IDS", default_value = GUEST_REPRO, value_parser = repro_ids)]
    repro: String,
    /// `repro --scale` in the guest (the default guest has 2 GiB).
    #[arg(long, value_name = "SCALE", default_value_t = 0.01, value_parser = repro_scale)]
    repro_scale: f64,
    /// `repro --samples` in the guest.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repro_samples: u32,
    /// KVM, TCG, or KVM when a probe boot works (auto).
    #[arg(long, value_enum, default_value_t = AccelChoice::Auto)]
    accel: AccelChoice,
    /// Seconds before the guest is killed and reported.
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// The cargo profile the test binaries and `repro` are built with: `release`, or CI's `ci` (opt-level 1: built in three quarters of the time, as fast in a TCG guest; its timings are not performance).
    #[arg(long, default_value = "release", value_parser = ["release", "ci"])]
    profile: String,
    /// Run no `repro` experiment in the guest.
    #[arg(long, conflicts_with_all = ["repro", "repro_scale", "repro_samples"])]
    no_repro: bool,
    /// Crate names (ktask, mlock, faultaround, lru, cache, pagevec) or crate:test (ktask:numa_kernel); default ktask, mlock and faultaround.
    #[arg(value_name = "TESTS")]
    tests: Vec<String>,
    /// Arguments for every test binary, after `--` (e.g. `-- --nocapture`).
    #[arg(last = true, value_name = "TEST-ARGS")]
    test_args: Vec<String>,
}

/// `--accel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AccelChoice {
    /// KVM when a guest that only powers off boots with it, else TCG.
    Auto,
    /// KVM (`-accel kvm -cpu host`).
    Kvm,
    /// Software emulation.
    Tcg,
}

impl Args {
    fn nodes(&self) -> usize {
        usize::from(self.nodes)
    }

    fn cpus(&self) -> usize {
        usize::from(self.cpus)
    }

    fn mem(&self) -> usize {
        self.mem_mib as usize
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }

    /// The options for a 2-node, 2-vCPU guest (CI's).
    pub(crate) fn ci() -> Self {
        Self {
            nodes: 2,
            cpus: 2,
            mem_mib: 2048,
            memory_only_node: false,
            kernel: None,
            backports_kernel: false,
            repro: GUEST_REPRO.to_owned(),
            repro_scale: 0.01,
            repro_samples: 1,
            accel: AccelChoice::Auto,
            timeout: 600,
            no_repro: false,
            profile: crate::util::CI_PROFILE.to_owned(),
            tests: Vec::new(),
            test_args: Vec::new(),
        }
    }

    /// `repro`'s arguments in the guest.
    fn repro_args(&self) -> String {
        format!(
            "--only {} --scale {} --samples {}",
            self.repro, self.repro_scale, self.repro_samples
        )
    }

    fn check(&self) -> Result<(), String> {
        let nodes = self.nodes() + usize::from(self.memory_only_node);
        if self.mem() / nodes < 256 {
            return Err(format!(
                "--mem {} MiB over {nodes} nodes leaves under 256 MiB a node: give --mem {} or more",
                self.mem_mib,
                nodes * 256
            ));
        }
        Ok(())
    }
}

pub(crate) fn run(a: &Args) -> Result<(), String> {
    a.check()?;
    ensure_packages(BUILD)?;
    ensure_packages(VM)?;
    let dir = target_dir().join("vm");
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let kernel = match &a.kernel {
        Some(k) => k.clone(),
        None => debian_kernel(&dir, a.backports_kernel)?,
    };
    let (tests, repro) = build(a)?;
    let topology = topology(a);
    let initrd = dir.join("initrd.cpio");
    let repro_args = a.repro_args();
    pack(
        &initrd,
        &tests,
        repro
            .as_deref()
            .map(|r| (r, repro_args.as_str(), a.timeout)),
        &a.test_args,
    )?;
    let accel = accel(a, &dir, &kernel)?;
    eprintln!(
        "vm: {} node(s){}, {} vCPU(s), {} MiB, kernel {}, {}",
        a.nodes,
        if a.memory_only_node {
            " + 1 without CPUs"
        } else {
            ""
        },
        a.cpus,
        a.mem_mib,
        kernel.display(),
        match accel {
            Accel::Kvm => "KVM".to_owned(),
            Accel::Tcg(ref why) =>
                format!("TCG (software emulation: {why}); timings are not performance"),
        }
    );
    let start = Instant::now();
    let out = boot(&kernel, &initrd, a, &topology, &accel, a.timeout(), true)?;
    eprintln!("vm: guest ran {:.0} s", start.elapsed().as_secs_f64());
    match out {
        Boot::Done(0, _) => Ok(()),
        // Named here, not only in the console above: a CI log is often
        // read from its end, after the steps that ran later.
        Boot::Done(n, console) => Err(format!(
            "{n} test binar(y/ies) failed in the guest: {}",
            console.describe()
        )),
        Boot::NoReport => Err(
            "the guest stopped without its last line (a kernel panic or an init that died?): \
             see its output above"
                .to_owned(),
        ),
        Boot::TimedOut(console) => Err(format!(
            "the guest did not finish in {} s and was killed{} (raise --timeout if the host was busy){}",
            a.timeout,
            console
                .running
                .as_ref()
                .map_or(String::new(), |(name, since)| format!(
                    ", {name} having run {:.0} s of it{}",
                    since.elapsed().as_secs_f64(),
                    console.said()
                )),
            if console.binaries.is_empty() {
                String::new()
            } else {
                format!("; binaries that failed before then: {}", console.describe())
            }
        )),
    }
}

/// Why `cargo xtask vm` cannot run here, if it cannot: not Linux on
/// x86-64, or QEMU missing and not installable (no apt-get as root). CI
/// skips its VM step only then.
pub(crate) fn unavailable() -> Option<String> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Some(
            "the guest is an x86-64 Linux kernel under QEMU; this host is not x86-64 Linux"
                .to_owned(),
        );
    }
    ensure_packages(VM)
        .err()
        .map(|e| format!("QEMU cannot run: {e}"))
}

/// The node layout: `(cpus, MiB)` per node; CPUs split as evenly as the
/// count allows (a node may get none when there are fewer CPUs than
/// nodes), memory split evenly, and the memory-only node last.
fn topology(a: &Args) -> Vec<(Vec<usize>, usize)> {
    let nodes = a.nodes() + usize::from(a.memory_only_node);
    let mem = a.mem() / nodes;
    (0..nodes)
        .map(|n| {
            let cpus = if n < a.nodes() {
                (n * a.cpus() / a.nodes()..(n + 1) * a.cpus() / a.nodes()).collect()
            } else {
                Vec::new()
            };
            (cpus, mem)
        })
        .collect()
}

/// `node:cpu,cpu;node:...` for the guest's tests to compare with what
/// hwloc and sysfs report.
fn topology_env(t: &[(Vec<usize>, usize)]) -> String {
    t.iter()
        .enumerate()
        .map(|(n, (cpus, _))| {
            let c: Vec<String> = cpus.iter().map(ToString::to_string).collect();
            format!("{n}:{}", c.join(","))
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Debian's cloud kernel image, unpacked from its package into
/// `target/vm/kernel` (`apt-get download` + `dpkg-deb -x`: nothing is
/// installed on the host, and no root is needed); with `backports`, the
/// newer one from the host release's backports suite, into
/// `target/vm/kernel-backports`.
fn debian_kernel(dir: &Path, backports: bool) -> Result<PathBuf, String> {
    let kdir = dir.join(if backports {
        "kernel-backports"
    } else {
        "kernel"
    });
    if let Some(k) = find_vmlinuz(&kdir) {
        return Ok(k);
    }
    let apt = if backports {
        backports_apt(dir)?
    } else {
        Vec::new()
    };
    let package = match kernel_package(&apt)? {
        Some(p) => p,
        None if backports => {
            return Err(format!(
                "apt-cache knows no {KERNEL_PACKAGE} in this release's backports suite: \
                 pass --kernel PATH"
            ));
        }
        None if crate::util::is_root() => {
            // The package lists may be missing on a fresh machine.
            exec(Command::new("apt-get").args(["update", "-qq"]))?;
            kernel_package(&apt)?.ok_or_else(|| {
                format!("apt-cache knows no {KERNEL_PACKAGE} even after apt-get update; pass --kernel PATH")
            })?
        }
        None => {
            return Err(format!(
                "apt-cache knows no {KERNEL_PACKAGE}: run `sudo apt-get update` (or this command as \
                 root), or pass --kernel PATH"
            ));
        }
    };
    let dl = dir.join("deb");
    let _ = fs::remove_dir_all(&dl);
    fs::create_dir_all(&dl).map_err(|e| e.to_string())?;
    exec(
        Command::new("apt-get")
            .args(&apt)
            .args(["download", "-q", &package])
            .current_dir(&dl),
    )?;
    let deb = fs::read_dir(&dl)
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or("apt-get download left no .deb")?;
    exec(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&kdir))?;
    let _ = fs::remove_dir_all(&dl);
    find_vmlinuz(&kdir).ok_or_else(|| format!("{package} has no boot/vmlinuz-*"))
}

/// apt options that see only the host release's backports suite, through
/// a sources list and package lists of their own under
/// `dir/apt-backports` (the host's sources and lists are neither read nor
/// changed; its apt configuration and keys still apply), after fetching
/// those lists. Debian only: other releases' codenames have no backports
/// suite on Debian's mirror.
fn backports_apt(dir: &Path) -> Result<Vec<String>, String> {
    let release = fs::read_to_string("/etc/os-release")
        .map_err(|e| format!("reading /etc/os-release ({e}): pass --kernel PATH"))?;
    let field = |name: &str| {
        release
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(|c| c.trim_matches('"'))
            .filter(|c| !c.is_empty())
    };
    if field("ID") != Some("debian") {
        return Err(
            "--backports-kernel fetches Debian's backports kernel, and this host is not Debian \
             (/etc/os-release): pass a kernel with soft-dirty and userfaultfd as --kernel PATH"
                .to_owned(),
        );
    }
    let codename = field("VERSION_CODENAME").ok_or(
        "/etc/os-release names no VERSION_CODENAME (a Debian release): pass --kernel PATH",
    )?;
    let root = dir.join("apt-backports");
    for d in ["lists/partial", "cache/archives/partial", "sources.list.d"] {
        fs::create_dir_all(root.join(d))
            .map_err(|e| format!("creating {}: {e}", root.join(d).display()))?;
    }
    // Absolute: apt reads relative `Dir::` paths against its own.
    let root = root
        .canonicalize()
        .map_err(|e| format!("resolving {}: {e}", root.display()))?;
    let list = root.join("sources.list");
    // Debian's archive key, named where the host keeps it apart from
    // apt's own trusted keys.
    let keyring = Path::new("/usr/share/keyrings/debian-archive-keyring.gpg");
    let signed = if keyring.exists() {
        format!(" [signed-by={}]", keyring.display())
    } else {
        String::new()
    };
    fs::write(
        &list,
        format!("deb{signed} http://deb.debian.org/debian {codename}-backports main\n"),
    )
    .map_err(|e| format!("writing {}: {e}", list.display()))?;
    let opt = |k: &str, v: &Path| ["-o".to_owned(), format!("{k}={}", v.display())];
    let apt: Vec<String> = [
        opt("Dir::Etc::SourceList", &list),
        opt("Dir::Etc::SourceParts", &root.join("sources.list.d")),
        opt("Dir::State::Lists", &root.join("lists")),
        opt("Dir::Cache", &root.join("cache")),
        opt("Dir::State::status", Path::new("/dev/null")),
    ]
    .into_iter()
    .flatten()
    .collect();
    exec(Command::new("apt-get").args(&apt).args(["update", "-qq"])).map_err(|e| {
        format!("{e}: fetching {codename}-backports' package lists failed; pass --kernel PATH")
    })?;
    Ok(apt)
}

/// The versioned image package `linux-image-cloud-amd64` depends on, if
/// apt (with options `apt`) knows it.
fn kernel_package(apt: &[String]) -> Result<Option<String>, String> {
    let depends = Command::new("apt-cache")
        .args(apt)
        .args(["depends", KERNEL_PACKAGE])
        .output()
        .map_err(|e| {
            format!(
                "apt-cache not found ({e}): this is not a Debian-like host; pass a kernel \
                 with NUMA and userfaultfd built in as --kernel PATH"
            )
        })?;
    Ok(String::from_utf8_lossy(&depends.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_owned))
}

fn find_vmlinuz(kdir: &Path) -> Option<PathBuf> {
    fs::read_dir(kdir.join("boot"))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
}

/// A test binary: `crate:target` and its path.
type TestBin = (String, PathBuf);

/// Builds the test binaries (optimised, so the initramfs stays small and
/// TCG fast enough: `--profile`) and `repro`; returns `(name, path)` per
/// test binary, and `repro`'s path (cargo's, from its JSON messages).
fn build(a: &Args) -> Result<(Vec<TestBin>, Option<PathBuf>), String> {
    let crates: Vec<&str> = if a.tests.is_empty() {
        vec!["ktask", "mlock", "faultaround"]
    } else {
        a.tests
            .iter()
            .map(|t| t.split(':').next().unwrap_or(t))
            .collect()
    };
    let mut cmd = cargo();
    cmd.args([
        "test",
        "--profile",
        &a.profile,
        "--all-features",
        "--no-run",
    ]);
    for c in &crates {
        if !["ktask", "mlock", "faultaround", "lru", "cache", "pagevec"].contains(c) {
            return Err(format!(
                "unknown crate {c:?} in TESTS: ktask, mlock, faultaround, lru, cache or pagevec"
            ));
        }
        cmd.args(["-p", &format!("mmbatch-{c}")]);
    }
    eprintln!("vm: building the test binaries ({})", a.profile);
    let tests = test_binaries(&artifacts(&mut cmd, "the test binaries")?, &a.tests);
    if tests.is_empty() {
        return Err(format!("no test binary matches {:?}", a.tests));
    }
    let repro = if !a.no_repro {
        let mut cmd = cargo();
        cmd.args([
            "build",
            "--profile",
            &a.profile,
            "--quiet",
            "-p",
            "mmbatch-benches",
            "--bin",
            "repro",
        ]);
        let exe = bin_executable(&artifacts(&mut cmd, "repro")?)
            .ok_or("cargo built repro but named no executable")?;
        Some(exe)
    } else {
        None
    };
    Ok((tests, repro))
}

/// The test binaries among cargo's JSON messages `json` (one a line), as
/// `(crate:target, path)`: those of the six library crates the guest can
/// test that `wanted` names (all six if empty); examples, which `cargo
/// test` builds too, and other packages' binaries left out.
fn test_binaries(json: &str, wanted: &[String]) -> Vec<TestBin> {
    let mut tests = Vec::new();
    for line in json.lines() {
        let (Some(exe), Some(pkg)) = (json_str(line, "executable"), json_str(line, "package_id"))
        else {
            continue;
        };
        // Examples are programs with arguments of their own, not tests.
        if line.contains("\"kind\":[\"example\"]") {
            continue;
        }
        let krate = ["ktask", "mlock", "faultaround", "lru", "cache", "pagevec"]
            .into_iter()
            .find(|c| {
                pkg.contains(&format!("mmbatch-{c}")) || pkg.contains(&format!("crates/{c}#"))
            })
            .unwrap_or("?");
        let target = json_str(line, "name").unwrap_or_default();
        let name = format!("{krate}:{target}");
        let wanted = wanted.is_empty() || wanted.iter().any(|t| t == krate || *t == name);
        if wanted && krate != "?" {
            tests.push((name, PathBuf::from(exe)));
        }
    }
    tests
}

/// The executable of the binary target among cargo's JSON messages
/// `json` (a build of one `--bin`: libraries and build scripts have
/// none, test binaries another kind).
fn bin_executable(json: &str) -> Option<PathBuf> {
    json.lines()
        .filter(|l| l.contains("\"kind\":[\"bin\"]"))
        .find_map(|l| json_str(l, "executable"))
        .map(PathBuf::from)
}

/// Runs cargo build `cmd` (of `what`), its diagnostics shown as usual:
/// its JSON messages, one a line, among them the artifacts' paths.
fn artifacts(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("building {what} failed"));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The string value of `"key":"..."` in one line of cargo's JSON (paths
/// and names: no escapes in what we read).
fn json_str(line: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\":\"");
    let start = line.find(&pat)? + pat.len();
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_owned())
}

enum Accel {
    Kvm,
    /// Why not KVM.
    Tcg(String),
}

/// `--repro`: comma-separated experiment ids (letters, digits, `-`),
/// which the guest's shell script reads as one word.
fn repro_ids(s: &str) -> Result<String, String> {
    if !s.is_empty()
        && s.split(',')
            .all(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    {
        Ok(s.to_owned())
    } else {
        Err("experiment ids separated by commas, e.g. dirty,restore".to_owned())
    }
}

/// `--repro-scale`: a positive finite number.
fn repro_scale(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err("a positive number, e.g. 0.25".to_owned()),
    }
}

/// KVM if asked for, or if `auto` and a guest that only powers off boots
/// with it within 20 s (nested KVM fails on some hosts, or hangs at
/// "Booting from ROM"); TCG otherwise.
fn accel(a: &Args, dir: &Path, kernel: &Path) -> Result<Accel, String> {
    match a.accel {
        AccelChoice::Kvm => return Ok(Accel::Kvm),
        AccelChoice::Tcg => return Ok(Accel::Tcg("asked for with --accel tcg".to_owned())),
        AccelChoice::Auto => {}
    }
    if fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return Ok(Accel::Tcg("/dev/kvm is missing or not ours".to_owned()));
    }
    let probe = dir.join("probe.cpio");
    let mut cpio = Cpio::default();
    for d in ["bin", "proc"] {
        cpio.dir(d);
    }
    cpio.file("bin/busybox", &read(Path::new("/bin/busybox"))?, 0o755);
    cpio.file(
        "init",
        b"#!/bin/busybox sh\n/bin/busybox mount -t proc proc /proc\n\
          /bin/busybox echo 'mmbatch-vm: done, 0 failed'\n/bin/busybox sleep 1\n\
          /bin/busybox echo o > /proc/sysrq-trigger\n/bin/busybox sleep 5\n",
        0o755,
    );
    fs::write(&probe, cpio.finish()).map_err(|e| e.to_string())?;
    let small = Args {
        nodes: 1,
        cpus: 1,
        mem_mib: 256,
        accel: AccelChoice::Kvm,
        timeout: 20,
        no_repro: true,
        ..Args::ci()
    };
    let t = topology(&small);
    match boot(
        kernel,
        &probe,
        &small,
        &t,
        &Accel::Kvm,
        small.timeout(),
        false,
    )? {
        Boot::Done(..) => Ok(Accel::Kvm),
        Boot::TimedOut(..) => Ok(Accel::Tcg(
            "a KVM guest did not boot in 20 s (nested KVM hangs on this host)".to_owned(),
        )),
        Boot::NoReport => Ok(Accel::Tcg(
            "QEMU could not start a KVM guest (nested KVM refused on this host)".to_owned(),
        )),
    }
}

enum Boot {
    /// The guest's last line: this many test binaries failed, and
    /// what the console said of them.
    Done(usize, Console),
    NoReport,
    /// Killed at the deadline: what the console had said (the binary
    /// running, the binaries that had failed).
    TimedOut(Console),
}

/// Boots the guest and streams its console (when `echo`); kills it at
/// `timeout`.
fn boot(
    kernel: &Path,
    initrd: &Path,
    a: &Args,
    topology: &[(Vec<usize>, usize)],
    accel: &Accel,
    timeout: Duration,
    echo: bool,
) -> Result<Boot, String> {
    let mut cmd = Command::new("qemu-system-x86_64");
    match accel {
        Accel::Kvm => cmd.args(["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg(_) => cmd.args(["-accel", "tcg", "-cpu", "max"]),
    };
    let total: usize = topology.iter().map(|t| t.1).sum();
    cmd.args(["-m", &format!("{total}M"), "-smp", &a.cpus().to_string()]);
    for (n, (cpus, mem)) in topology.iter().enumerate() {
        cmd.args([
            "-object",
            &format!("memory-backend-ram,id=m{n},size={mem}M"),
            "-numa",
        ]);
        let mut node = format!("node,nodeid={n},memdev=m{n}");
        if let (Some(first), Some(last)) = (cpus.first(), cpus.last()) {
            node += &format!(",cpus={first}-{last}");
        }
        cmd.arg(node);
    }
    cmd.arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            &format!(
                "console=ttyS0 panic=-1 quiet loglevel=3 MMBATCH_VM_TOPOLOGY={} MMBATCH_VM={}",
                topology_env(topology),
                match accel {
                    Accel::Kvm => "qemu-kvm",
                    Accel::Tcg(_) => "qemu-tcg",
                }
            ),
            "-nographic",
            "-no-reboot",
            "-nodefaults",
            "-serial",
            "stdio",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting qemu-system-x86_64: {e}"))?;
    let (tx, rx) = mpsc::channel::<Option<String>>();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if tx.send(Some(line)).is_err() {
                    break;
                }
            }
            let _ = tx.send(None);
        });
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let mut closed = 0;
    let mut console = Console::default();
    while closed < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Some(line)) => {
                let line = line.trim_end_matches('\r');
                if echo {
                    let mut o = std::io::stdout().lock();
                    let _ = writeln!(o, "{line}");
                }
                console.read(line);
            }
            Ok(None) => closed += 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(Boot::TimedOut(console));
            }
        }
    }
    // The console closed: the guest powered off (or QEMU failed).
    let _ = child.kill();
    let _ = child.wait();
    Ok(match console.done {
        Some(n) => Boot::Done(n, console),
        None => Boot::NoReport,
    })
}

/// What the guest's console said, read line by line: its status line's
/// count, the binary running, and of the binaries that failed, each
/// `FAILED` line of the init script with the failed tests libtest
/// printed between it and the binary's `running` line, and their panics;
/// for a binary that names no failed test (`repro`, or one a hang guard
/// aborted), its panics, its own `NAME: ` lines and a guard's abort.
#[derive(Default)]
struct Console {
    /// The worst count a status line gave (the guest prints it twice).
    done: Option<usize>,
    /// The binary running now, as its `running` line names it, and since
    /// when; `None` between binaries (a hang then is not a binary's).
    running: Option<(String, Instant)>,
    binaries: Vec<String>,
    /// The tests of the binary running now.
    tests: crate::util::Failures,
    /// Its last [`SAID`] panic messages and `NAME: ` lines.
    said: Vec<String>,
    /// Whether the line before was a panic's `panicked at` line (its
    /// message is this one).
    after_panic: bool,
}

/// How many of a binary's own lines its failure keeps: for a failed
/// `repro`, its experiment's panic and the run's last two `repro: `
/// lines (the count run, the experiments that failed).
const SAID: usize = 3;

impl Console {
    fn read(&mut self, line: &str) {
        if let Some(n) = status(line) {
            self.done = self.done.max(Some(n));
        }
        if let Some(at) = line.find(RUNNING) {
            *self = Self {
                done: self.done,
                binaries: std::mem::take(&mut self.binaries),
                // The name, without printk text the console may have
                // run into the line after it.
                running: line[at + RUNNING.len()..]
                    .split(|c: char| c.is_whitespace() || c == '[')
                    .next()
                    .filter(|name| !name.is_empty())
                    .map(|name| (name.to_owned(), Instant::now())),
                ..Self::default()
            };
        } else if let Some(at) = line.find(ENDED[1]) {
            let binary = &line[at + ENDED[1].len()..];
            let mut why = self.tests.summary();
            if why.is_empty() {
                why = self.said();
            }
            self.binaries.push(format!("{binary}{why}"));
            self.running = None;
        } else if line.contains(ENDED[0]) {
            self.running = None;
        } else {
            self.tests.read(line);
            if line.starts_with("test ") && line.ends_with(" ... ok") {
                // What a test that passed printed (an expected panic) is
                // not why a later one failed.
                self.said.clear();
                self.after_panic = false;
                return;
            }
            let own = self
                .running
                .as_ref()
                .is_some_and(|(name, _)| line.starts_with(&format!("{name}: ")));
            // A hang guard's abort (`mmbatch_testkit::hang_guard`) names
            // the test, which libtest never gets to.
            let aborted = line.contains("(hang): aborting");
            if self.after_panic || own || aborted {
                self.said.push(line.chars().take(300).collect());
                if self.said.len() > SAID {
                    self.said.remove(0);
                }
            }
            self.after_panic = line.contains("panicked at");
        }
    }

    /// `: ` and what the running binary said ([`SAID`]), or empty.
    fn said(&self) -> String {
        if self.said.is_empty() {
            return String::new();
        }
        format!(": {}", self.said.join("; "))
    }

    /// Each failed binary with its tests, or where no binary's line was
    /// read whole (the kernel's messages can break one), the tests seen.
    fn describe(&self) -> String {
        if self.binaries.is_empty() {
            return format!("see the guest's output above{}", self.tests.summary());
        }
        self.binaries.join(" | ")
    }
}

/// The marker of the line the guest prints as it starts a binary.
const RUNNING: &str = "mmbatch-vm: running ";

/// The markers of the lines it prints as one ends.
const ENDED: [&str; 2] = ["mmbatch-vm: passed ", "mmbatch-vm: FAILED "];

/// The marker of the guest's status line, `mmbatch-vm: done, N failed`.
const STATUS: &str = "mmbatch-vm: done, ";

/// The failure count of a console line that holds the guest's status
/// line, wherever the kernel's own messages fell around it: the serial
/// console interleaves printk output (`[   29.04] sysrq: Power Off`)
/// with the guest's writes, before, after or inside the line.
fn status(line: &str) -> Option<usize> {
    line.match_indices(STATUS).find_map(|(at, m)| {
        let rest = &line[at + m.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || !rest[digits..].starts_with(" failed") {
            return None;
        }
        rest[..digits].parse().ok()
    })
}

#[cfg(test)]
mod tests;
