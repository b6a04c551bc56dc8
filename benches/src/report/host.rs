//! The machine a report was measured on.

use serde::{Deserialize, Serialize};

/// The machine a report was measured on.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Host {
    /// Online CPUs.
    pub cpus: usize,
    /// NUMA nodes with memory or CPUs (1 where the kernel has no NUMA).
    pub nodes: usize,
    /// `uname -r`.
    pub kernel: String,
    /// `MemTotal` in bytes.
    #[serde(default)]
    pub memory_bytes: u64,
    /// `MemAvailable` in bytes when the report was made.
    #[serde(default)]
    pub available_bytes: u64,
    /// Transparent huge pages: the bracketed choice of
    /// `/sys/kernel/mm/transparent_hugepage/enabled`, with the sizes whose
    /// own mode overrides it (`madvise (64kB always)`).
    #[serde(default)]
    pub thp: String,
    /// Reserved huge pages per size: (`2048kB`, total, free), from
    /// `/sys/kernel/mm/hugepages`.
    #[serde(default)]
    pub hugepages: Vec<(String, u64, u64)>,
    /// DAMON's running schemes, as `action (operations)`, from
    /// `/sys/kernel/mm/damon/admin/kdamonds`: a kernel thread that samples
    /// memory and acts on it (pages it out, ...) while benchmarks run.
    #[serde(default)]
    pub damon: Vec<String>,
    /// How the machine is virtualised when `cargo xtask vm` booted it
    /// (`qemu-tcg`, `qemu-kvm`, from `MMBATCH_VM`); empty on a host.
    #[serde(default)]
    pub guest: String,
    /// A cache line's round trip between two CPUs, measured just before
    /// and just after the experiment ran (`repro` fills it in): whether
    /// the host ran two CPUs at once, which every row that contends
    /// across threads depends on.
    #[serde(default)]
    pub round_trip: Vec<super::round_trip::RoundTrip>,
}

impl Host {
    /// Reads the host's CPUs, nodes, kernel release, memory, THP mode and
    /// huge page pools.
    pub fn detect() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let nodes = std::fs::read_dir("/sys/devices/system/node")
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .filter(|e| {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        name.strip_prefix("node")
                            .is_some_and(|n| n.parse::<u32>().is_ok())
                    })
                    .count()
            })
            .unwrap_or(0)
            .max(1);
        let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_owned());
        let kernel = read("/proc/sys/kernel/osrelease").unwrap_or_else(|_| "unknown".to_owned());
        let meminfo = read("/proc/meminfo").unwrap_or_default();
        let kib = |field: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|l| {
                    l.strip_prefix(field)?
                        .trim()
                        .strip_suffix("kB")?
                        .trim()
                        .parse()
                        .ok()
                })
                .unwrap_or(0)
                * 1024
        };
        let thp = crate::thp::Modes::read().describe();
        let mut hugepages: Vec<(String, u64, u64)> = std::fs::read_dir("/sys/kernel/mm/hugepages")
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .filter_map(|e| {
                        let size = e
                            .file_name()
                            .to_string_lossy()
                            .strip_prefix("hugepages-")?
                            .to_owned();
                        let n = |f: &str| -> u64 {
                            std::fs::read_to_string(e.path().join(f))
                                .ok()
                                .and_then(|s| s.trim().parse().ok())
                                .unwrap_or(0)
                        };
                        Some((size, n("nr_hugepages"), n("free_hugepages")))
                    })
                    .collect()
            })
            .unwrap_or_default();
        hugepages.sort();
        Self {
            damon: damon_schemes(std::path::Path::new("/sys/kernel/mm/damon/admin/kdamonds")),
            guest: std::env::var("MMBATCH_VM").unwrap_or_default(),
            cpus,
            nodes,
            kernel,
            memory_bytes: kib("MemTotal:"),
            available_bytes: kib("MemAvailable:"),
            thp,
            hugepages,
            round_trip: Vec::new(),
        }
    }

    /// One line: CPUs, nodes, memory, kernel, THP, huge pages.
    pub fn describe(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let huge = if self.hugepages.is_empty() {
            "none".to_owned()
        } else {
            self.hugepages
                .iter()
                .map(|(size, total, free)| format!("{size}: {total} reserved, {free} free"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let memory = if self.memory_bytes == 0 {
            "memory unknown".to_owned()
        } else {
            format!(
                "{:.1} GiB memory ({:.1} GiB available)",
                gib(self.memory_bytes),
                gib(self.available_bytes)
            )
        };
        format!(
            "{} CPUs, {} NUMA node(s), {memory}, Linux {}, THP {}, huge pages {huge}{}{}",
            self.cpus,
            self.nodes,
            self.kernel,
            if self.thp.is_empty() {
                "unknown"
            } else {
                &self.thp
            },
            self.guest_note(),
            self.damon_note(),
        ) + &self.round_trip_note()
    }

    /// `; cross-CPU round trip ...` once measured: each probe's best
    /// round trip (how far apart the two CPUs are: it moves when the
    /// hypervisor places the vCPUs elsewhere) and the share of it in which
    /// both CPUs ran, before and after the experiment.
    pub fn round_trip_note(&self) -> String {
        if self.round_trip.is_empty() {
            return String::new();
        }
        let join = |f: &dyn Fn(&super::round_trip::RoundTrip) -> String| {
            self.round_trip
                .iter()
                .map(f)
                .collect::<Vec<_>>()
                .join(" / ")
        };
        format!(
            "; cross-CPU round trip {} ns, both CPUs running {} of the probe{}",
            join(&|r| format!("{:.0}", r.best_ns)),
            join(&|r| format!("{:.0}%", r.concurrent_share() * 100.0)),
            if self.round_trip.len() == 2 {
                " (before / after)"
            } else {
                ""
            }
        )
    }

    /// `; DAMON on (...)` while DAMON runs schemes, else empty. On this
    /// project's 2-CPU host a `pageout` scheme over physical memory made
    /// one-thread pure-read samples of a cache dip from ~50 to ~30 Mops/s
    /// for stretches, and none did with it off (ad-hoc harness, pinned).
    pub fn damon_note(&self) -> String {
        if self.damon.is_empty() {
            return String::new();
        }
        format!(
            "; DAMON on ({}): it samples and acts on memory during the runs, and memory-bound \
             rows can dip while it works; as root, `echo off > \
             /sys/kernel/mm/damon/admin/kdamonds/<n>/state` stops it",
            self.damon.join(", ")
        )
    }

    /// `; a QEMU guest (...)` for a report made in `cargo xtask vm`'s
    /// guest, else empty.
    pub fn guest_note(&self) -> String {
        match self.guest.as_str() {
            "" => String::new(),
            "qemu-tcg" => {
                "; a QEMU guest under TCG (software emulation): timings are not performance"
                    .to_owned()
            }
            g => format!("; a {g} guest"),
        }
    }
}

/// The schemes of the kdamonds under `root` whose state is `on`.
fn damon_schemes(root: &std::path::Path) -> Vec<String> {
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).map(|s| s.trim().to_owned());
    let dirs = |p: std::path::PathBuf| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(p)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let mut out = Vec::new();
    for kdamond in dirs(root.to_path_buf()) {
        if read(kdamond.join("state")).ok().as_deref() != Some("on") {
            continue;
        }
        for ctx in dirs(kdamond.join("contexts")) {
            let ops = read(ctx.join("operations")).unwrap_or_default();
            for scheme in dirs(ctx.join("schemes")) {
                if let Ok(action) = read(scheme.join("action")) {
                    out.push(format!("{action} ({ops})"));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::damon_schemes;

    /// Only running kdamonds count, each scheme once, with its context's
    /// operations.
    #[test]
    fn damon_schemes_of_running_kdamonds() {
        let root = std::env::temp_dir().join(format!("mmbatch-damon-{}", std::process::id()));
        let put = |p: &str, v: &str| {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        };
        put("0/state", "on\n");
        put("0/contexts/0/operations", "paddr\n");
        put("0/contexts/0/schemes/0/action", "pageout\n");
        put("0/contexts/0/schemes/1/action", "lru_deprio\n");
        put("1/state", "off\n");
        put("1/contexts/0/operations", "vaddr\n");
        put("1/contexts/0/schemes/0/action", "hugepage\n");
        put("nr_kdamonds", "2\n");
        let found = damon_schemes(&root);
        let absent = damon_schemes(&root.join("absent"));
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, ["pageout (paddr)", "lru_deprio (paddr)"]);
        assert!(absent.is_empty());
    }
}
