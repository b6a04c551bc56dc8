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
    /// `/sys/kernel/mm/transparent_hugepage/enabled`.
    #[serde(default)]
    pub thp: String,
    /// Reserved huge pages per size: (`2048kB`, total, free), from
    /// `/sys/kernel/mm/hugepages`.
    #[serde(default)]
    pub hugepages: Vec<(String, u64, u64)>,
    /// How the machine is virtualised when `cargo xtask vm` booted it
    /// (`qemu-tcg`, `qemu-kvm`, from `MMBATCH_VM`); empty on a host.
    #[serde(default)]
    pub guest: String,
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
        let thp = read("/sys/kernel/mm/transparent_hugepage/enabled")
            .ok()
            .and_then(|s| Some(s.split_once('[')?.1.split_once(']')?.0.to_owned()))
            .unwrap_or_else(|| "unavailable".to_owned());
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
            guest: std::env::var("MMBATCH_VM").unwrap_or_default(),
            cpus,
            nodes,
            kernel,
            memory_bytes: kib("MemTotal:"),
            available_bytes: kib("MemAvailable:"),
            thp,
            hugepages,
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
            "{} CPUs, {} NUMA node(s), {memory}, Linux {}, THP {}, huge pages {huge}{}",
            self.cpus,
            self.nodes,
            self.kernel,
            if self.thp.is_empty() {
                "unknown"
            } else {
                &self.thp
            },
            self.guest_note(),
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
