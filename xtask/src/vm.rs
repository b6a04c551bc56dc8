//! `cargo xtask vm`: the host tests and the NUMA experiments in a QEMU
//! guest with N NUMA nodes, on Debian's own kernel (6.1 on bookworm), so
//! that placement is checked by a kernel that has more than one node and
//! the fallbacks for an older kernel actually run.
//!
//! The guest is an initramfs: busybox, the test binaries and `repro`
//! (release builds), and the shared libraries they load (`ldd`), booted
//! with `-kernel`/`-initrd`. Its `/init` runs each test binary, prints a
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

use crate::util::{BUILD, SystemPackage, cargo, ensure_packages, exec, target_dir};

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
    /// KVM, TCG, or KVM when a probe boot works (auto).
    #[arg(long, value_enum, default_value_t = AccelChoice::Auto)]
    accel: AccelChoice,
    /// Seconds before the guest is killed and reported.
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// Skip the NUMA rows of `repro` in the guest.
    #[arg(long)]
    no_repro: bool,
    /// Crate names (ktask, mlock, faultaround, lru, pagevec) or crate:test (ktask:numa_kernel); default ktask, mlock and faultaround.
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
            accel: AccelChoice::Auto,
            timeout: 300,
            no_repro: false,
            tests: Vec::new(),
            test_args: Vec::new(),
        }
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
        None => debian_kernel(&dir)?,
    };
    let (tests, repro) = build(a)?;
    let topology = topology(a);
    let initrd = dir.join("initrd.cpio");
    pack(&initrd, &tests, repro.as_deref(), &a.test_args)?;
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
        Boot::Done(0) => Ok(()),
        Boot::Done(n) => Err(format!("{n} test binar(y/ies) failed in the guest")),
        Boot::NoReport => Err(
            "the guest stopped without its last line (a kernel panic or an init that died?): \
             see its output above"
                .to_owned(),
        ),
        Boot::TimedOut => Err(format!(
            "the guest did not finish in {} s and was killed (raise --timeout)",
            a.timeout
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
/// installed on the host, and no root is needed).
fn debian_kernel(dir: &Path) -> Result<PathBuf, String> {
    let kdir = dir.join("kernel");
    if let Some(k) = find_vmlinuz(&kdir) {
        return Ok(k);
    }
    let package = match kernel_package()? {
        Some(p) => p,
        None if crate::util::is_root() => {
            // The package lists may be missing on a fresh machine.
            exec(Command::new("apt-get").args(["update", "-qq"]))?;
            kernel_package()?.ok_or_else(|| {
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

/// The versioned image package `linux-image-cloud-amd64` depends on, if
/// apt knows it.
fn kernel_package() -> Result<Option<String>, String> {
    let depends = Command::new("apt-cache")
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

/// Builds the test binaries (release, so the initramfs stays small and
/// TCG fast enough) and `repro`; returns `(name, path)` per test binary.
/// A test binary: `crate:target` and its path.
type TestBin = (String, PathBuf);

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
    cmd.args(["test", "--release", "--no-run", "--message-format=json"]);
    for c in &crates {
        if !["ktask", "mlock", "faultaround", "lru", "pagevec"].contains(c) {
            return Err(format!(
                "unknown crate {c:?} in TESTS: ktask, mlock, faultaround, lru or pagevec"
            ));
        }
        cmd.args(["-p", &format!("mmbatch-{c}")]);
    }
    eprintln!("vm: building the test binaries (release)");
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err("building the test binaries failed".to_owned());
    }
    let mut tests = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (Some(exe), Some(pkg)) = (json_str(line, "executable"), json_str(line, "package_id"))
        else {
            continue;
        };
        let krate = ["ktask", "mlock", "faultaround", "lru", "pagevec"]
            .into_iter()
            .find(|c| {
                pkg.contains(&format!("mmbatch-{c}")) || pkg.contains(&format!("crates/{c}#"))
            })
            .unwrap_or("?");
        let target = json_str(line, "name").unwrap_or_default();
        let name = format!("{krate}:{target}");
        let wanted = a.tests.is_empty() || a.tests.iter().any(|t| t == krate || *t == name);
        if wanted && krate != "?" {
            tests.push((name, PathBuf::from(exe)));
        }
    }
    if tests.is_empty() {
        return Err(format!("no test binary matches {:?}", a.tests));
    }
    let repro = if !a.no_repro {
        exec(cargo().args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "mmbatch-benches",
            "--bin",
            "repro",
        ]))?;
        Some(target_dir().join("release/repro"))
    } else {
        None
    };
    Ok((tests, repro))
}

/// The string value of `"key":"..."` in one line of cargo's JSON (paths
/// and names: no escapes in what we read).
fn json_str(line: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\":\"");
    let start = line.find(&pat)? + pat.len();
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_owned())
}

/// The guest's `/init`.
fn init_script(tests: &[(String, PathBuf)], repro: bool, test_args: &[String]) -> String {
    let mut s = String::from(
        "#!/bin/busybox sh\n\
         /bin/busybox --install -s /bin\n\
         export PATH=/bin HOME=/tmp TMPDIR=/tmp\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sysfs /sys\n\
         mount -t devtmpfs devtmpfs /dev\n\
         mount -t tmpfs tmpfs /tmp\n\
         mkdir -p /dev/hugepages && mount -t hugetlbfs hugetlbfs /dev/hugepages\n\
         echo \"mmbatch-vm: guest kernel $(uname -r), $(nproc) CPU(s), $(cd /sys/devices/system/node && echo node*)\"\n\
         for n in /sys/devices/system/node/node*; do\n\
           echo \"mmbatch-vm: $(basename $n): cpus [$(cat $n/cpulist)], $(grep MemTotal $n/meminfo | sed 's/.*MemTotal: *//')\"\n\
         done\n\
         echo \"mmbatch-vm: THP $(cat /sys/kernel/mm/transparent_hugepage/enabled)\"\n\
         failed=0\n",
    );
    let args = test_args.join(" ");
    for (name, _) in tests {
        let file = name.replace(':', "-");
        s += &format!(
            "echo \"mmbatch-vm: running {name}\"\n\
             /tests/{file} {args} || {{ echo \"mmbatch-vm: FAILED {name}\"; failed=$((failed+1)); }}\n"
        );
    }
    if repro {
        // The NUMA rows as a smoke: interleaved munlock and clear with
        // per-node threads, at a size a small guest holds.
        s += "echo \"mmbatch-vm: running repro (NUMA rows, smoke)\"\n\
              /repro --only timedmunlock,clear --scale 0.01 --samples 1 --out /tmp/repro \
              || { echo \"mmbatch-vm: FAILED repro\"; failed=$((failed+1)); }\n";
    }
    s += "echo \"mmbatch-vm: done, $failed failed\"\n\
          echo o > /proc/sysrq-trigger\n\
          sleep 5\n";
    s
}

/// Writes the initramfs: busybox, `/init`, the binaries and every shared
/// library they load, as an uncompressed newc cpio (the kernel unpacks it
/// into its rootfs).
fn pack(
    path: &Path,
    tests: &[(String, PathBuf)],
    repro: Option<&Path>,
    test_args: &[String],
) -> Result<(), String> {
    let mut cpio = Cpio::default();
    for d in [
        "bin", "proc", "sys", "dev", "tmp", "tests", "lib", "lib64", "usr", "usr/lib",
    ] {
        cpio.dir(d);
    }
    cpio.file("bin/busybox", &read(Path::new("/bin/busybox"))?, 0o755);
    cpio.file(
        "init",
        init_script(tests, repro.is_some(), test_args).as_bytes(),
        0o755,
    );
    let mut binaries: Vec<(String, &Path)> = tests
        .iter()
        .map(|(n, p)| (format!("tests/{}", n.replace(':', "-")), p.as_path()))
        .collect();
    if let Some(r) = repro {
        binaries.push(("repro".to_owned(), r));
    }
    let mut libs = std::collections::BTreeSet::new();
    for (dest, src) in &binaries {
        cpio.file(dest, &read(src)?, 0o755);
        libs.extend(shared_libs(src)?);
    }
    for lib in libs {
        let rel = lib
            .strip_prefix("/")
            .unwrap_or(&lib)
            .to_string_lossy()
            .into_owned();
        if let Some(parent) = Path::new(&rel).parent() {
            let mut acc = PathBuf::new();
            for c in parent.components() {
                acc.push(c);
                cpio.dir(&acc.to_string_lossy());
            }
        }
        // Through symlinks: the file itself, under the name the binary asks for.
        cpio.file(&rel, &read(&lib)?, 0o755);
    }
    let bytes = cpio.finish();
    fs::write(path, &bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
    eprintln!(
        "vm: initramfs {} ({:.0} MiB, {} binaries)",
        path.display(),
        bytes.len() as f64 / (1 << 20) as f64,
        binaries.len()
    );
    Ok(())
}

fn read(p: &Path) -> Result<Vec<u8>, String> {
    fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()))
}

/// The shared libraries `bin` loads, with the dynamic loader (`ldd`).
fn shared_libs(bin: &Path) -> Result<Vec<PathBuf>, String> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .map_err(|e| format!("running ldd: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// A newc ("070701") cpio archive, built in memory.
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    ino: u32,
    dirs: std::collections::BTreeSet<String>,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        if self.dirs.insert(name.to_owned()) {
            self.entry(name, 0o040_755, &[]);
        }
    }

    fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, 0o100_000 | perm, data);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }
}

enum Accel {
    Kvm,
    /// Why not KVM.
    Tcg(String),
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
          /bin/busybox echo 'mmbatch-vm: done, 0 failed'\n\
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
        Boot::Done(_) => Ok(Accel::Kvm),
        Boot::TimedOut => Ok(Accel::Tcg(
            "a KVM guest did not boot in 20 s (nested KVM hangs on this host)".to_owned(),
        )),
        Boot::NoReport => Ok(Accel::Tcg(
            "QEMU could not start a KVM guest (nested KVM refused on this host)".to_owned(),
        )),
    }
}

enum Boot {
    /// The guest's last line: this many test binaries failed.
    Done(usize),
    NoReport,
    TimedOut,
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
    let mut done = None;
    while closed < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Some(line)) => {
                let line = line.trim_end_matches('\r');
                if echo {
                    let mut o = std::io::stdout().lock();
                    let _ = writeln!(o, "{line}");
                }
                if let Some(n) = line
                    .strip_prefix("mmbatch-vm: done, ")
                    .and_then(|r| r.strip_suffix(" failed"))
                {
                    done = n.trim().parse().ok();
                }
            }
            Ok(None) => closed += 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(Boot::TimedOut);
            }
        }
    }
    // The console closed: the guest powered off (or QEMU failed).
    let _ = child.kill();
    let _ = child.wait();
    Ok(done.map_or(Boot::NoReport, Boot::Done))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            vm: Args,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(
            std::iter::once("vm").chain(args.iter().copied()),
        )
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
}
