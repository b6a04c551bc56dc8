//! The guest's initramfs: its `/init` script, the test binaries and
//! `repro` with the shared libraries they load, packed as a `newc` cpio
//! archive for `-initrd`.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

/// How long one test binary may run in the guest before it is killed
/// and counted failed: the slowest (faultaround's `vmm`) takes about 30 s
/// under TCG on a quiet 2-CPU host, 0.5 s on the host itself.
pub(super) const BINARY_LIMIT_SECS: u64 = 180;

/// The guest's `/init`.
pub(super) fn init_script(
    tests: &[(String, PathBuf)],
    repro: Option<(&str, u64)>,
    test_args: &[String],
    limit_secs: u64,
) -> String {
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
    // `run NAME CMD...`: one binary under a limit of its own (`$limit`
    // seconds where set, else `limit_secs`), so a hang is named and
    // killed and the binaries after it still run.
    s += &format!(
        "run() {{\n\
           name=$1; shift\n\
           lim=${{limit:-{limit_secs}}}\n\
           echo \"mmbatch-vm: running $name\"\n\
           t0=$(date +%s)\n\
           timeout -s KILL $lim \"$@\"; rc=$?\n\
           t=$(($(date +%s) - t0))\n\
           if [ $rc -eq 0 ]; then\n\
             echo \"mmbatch-vm: passed $name in $t s\"\n\
           elif [ $rc -eq 137 ] && [ $t -ge $lim ]; then\n\
             echo \"mmbatch-vm: FAILED $name: killed at its $lim s limit (a hang, or a guest far slower than usual: a test binary's limit is BINARY_LIMIT_SECS in xtask/src/vm/initramfs.rs, repro's the guest's --timeout)\"\n\
             failed=$((failed+1))\n\
           else\n\
             echo \"mmbatch-vm: FAILED $name (exit status $rc after $t s)\"\n\
             failed=$((failed+1))\n\
           fi\n\
         }}\n"
    );
    let args = test_args.join(" ");
    for (name, _) in tests {
        let file = name.replace(':', "-");
        s += &format!("run {name} /tests/{file} {args}\n");
    }
    if let Some((args, limit)) = repro {
        // Its own limit: an experiment at a larger scale may take longer
        // than a test binary may; the guest's whole time bounds it.
        // Each node's free memory first: an experiment's NUMA row that
        // finds a node short says so, and this line says what the tests
        // left behind.
        s += "for n in /sys/devices/system/node/node*; do\n\
                echo \"mmbatch-vm: before repro: $(basename $n) $(grep MemFree $n/meminfo | sed 's/.*MemFree: *//') free\"\n\
              done\n\
              echo \"mmbatch-vm: before repro: /tmp holds $(du -sk /tmp | cut -f1) kB, \
                numa_balancing $(cat /proc/sys/kernel/numa_balancing 2>/dev/null || echo absent)\"\n";
        s += &format!("limit={limit}\nrun repro /repro {args} --out /tmp/repro\n");
    }
    // The status line twice, a second apart, and a second more before the
    // power-off: the console drains each before the next is written, so
    // the kernel's "sysrq: Power Off" cannot land inside the first.
    s += "echo \"mmbatch-vm: done, $failed failed\"\n\
          sleep 1\n\
          echo \"mmbatch-vm: done, $failed failed\"\n\
          sleep 1\n\
          echo o > /proc/sysrq-trigger\n\
          sleep 5\n";
    s
}

/// Writes the initramfs: busybox, `/init`, the binaries and every shared
/// library they load, as an uncompressed newc cpio (the kernel unpacks it
/// into its rootfs).
pub(super) fn pack(
    path: &Path,
    tests: &[(String, PathBuf)],
    repro: Option<(&Path, &str, u64)>,
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
        init_script(
            tests,
            repro.map(|r| (r.1, r.2)),
            test_args,
            BINARY_LIMIT_SECS,
        )
        .as_bytes(),
        0o755,
    );
    let mut binaries: Vec<(String, &Path)> = tests
        .iter()
        .map(|(n, p)| (format!("tests/{}", n.replace(':', "-")), p.as_path()))
        .collect();
    if let Some((r, _, _)) = repro {
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

pub(super) fn read(p: &Path) -> Result<Vec<u8>, String> {
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
pub(super) struct Cpio {
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

    pub(super) fn dir(&mut self, name: &str) {
        if self.dirs.insert(name.to_owned()) {
            self.entry(name, 0o040_755, &[]);
        }
    }

    pub(super) fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, 0o100_000 | perm, data);
    }

    pub(super) fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }
}
