//! The kernel's own accounting, read from /proc and /sys: locked bytes per
//! mapping (`/proc/self/smaps`) and per process (`VmLck`), the
//! memlock limits, the mapping count and `vm.max_map_count`, and the huge
//! page pools.

use std::{fs, io};

use rustix::process::{Resource, getrlimit};

/// The base page size (`rustix::param::page_size`, from the auxiliary
/// vector).
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// RLIMIT_MEMLOCK (soft, hard) in bytes; `u64::MAX` is unlimited.
pub fn memlock_limits() -> (u64, u64) {
    let limit = getrlimit(Resource::Memlock);
    (
        limit.current.unwrap_or(u64::MAX),
        limit.maximum.unwrap_or(u64::MAX),
    )
}

/// A field of /proc/self/status in kB, as bytes.
fn status_kb(field: &str) -> io::Result<u64> {
    let status = fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb.saturating_mul(1024))
        .ok_or_else(|| io::Error::other(format!("no {field} in /proc/self/status")))
}

/// Bytes the process has locked (`VmLck` in /proc/self/status).
pub fn process_locked_bytes() -> io::Result<u64> {
    status_kb("VmLck:")
}

/// Bytes of address space the process has mapped (`VmSize` in
/// /proc/self/status): what `mlockall(MCL_CURRENT)` would lock.
pub fn process_mapped_bytes() -> io::Result<u64> {
    status_kb("VmSize:")
}

/// Whether the process has CAP_IPC_LOCK in its effective set, in the
/// initial user namespace (then RLIMIT_MEMLOCK does not apply). The
/// kernel asks the initial namespace (`capable`): a rootless container's
/// root has the capability in its own namespace only, and the limit
/// still applies to it.
pub fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    let effective = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0);
    effective && in_initial_user_namespace()
}

/// Whether the process runs in the initial user namespace: the one whose
/// `/proc/self/ns/user` has inode `PROC_USER_INIT_INO` (fixed by the
/// kernel; a namespace's `uid_map` alone can copy the initial one's).
/// True where the link cannot be read (a kernel without user
/// namespaces, or no /proc).
pub fn in_initial_user_namespace() -> bool {
    const PROC_USER_INIT_INO: u64 = 0xEFFF_FFFD;
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self/ns/user").map_or(true, |m| m.ino() == PROC_USER_INIT_INO)
}

/// Mappings the process has now (lines of /proc/self/maps); 0 where that
/// file cannot be opened.
///
/// Async-signal-safe (`open`, `read`, `close` and a stack buffer), so the
/// fault handler can use it; and it needs no heap, because it is asked
/// exactly when the process is out of mappings, when a large buffer (which
/// malloc serves with a new mapping) cannot be had.
pub fn map_count() -> usize {
    use rustix::fs::{Mode, OFlags, open};
    // rustix makes the system calls itself (no errno, no allocation with
    // a &CStr path), and dropping the descriptor closes it.
    // Read-only (O_RDONLY is 0), closed on exec.
    let Ok(fd) = open(c"/proc/self/maps", OFlags::CLOEXEC, Mode::empty()) else {
        return 0;
    };
    // Small: the fault handler calls this on the signal stack (a few
    // KiB, shared with the frames of unoptimised builds), so one small
    // buffer and a plain loop over it, no iterator adapters.
    let mut buf = [0u8; 512];
    let mut lines = 0;
    while let Ok(n) = rustix::io::read(&fd, &mut buf) {
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            lines += usize::from(b == b'\n');
        }
    }
    lines
}

/// `vm.max_map_count` (0 if unreadable).
pub fn max_map_count() -> usize {
    fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn hugepage_file(size: usize, file: &str) -> usize {
    fs::read_to_string(format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB/{file}",
        size / 1024
    ))
    .ok()
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or(0)
}

/// Free huge pages of `size` bytes (`free_hugepages`), reserved ones
/// included: what a new mapping can still have is
/// [`HugePageSize::available_pages`](crate::HugePageSize::available_pages)
/// (free less reserved), which [`RegionBuilder::build`](crate::RegionBuilder::build)
/// checks before mapping anonymous memory.
pub fn huge_pages_free(size: usize) -> usize {
    hugepage_file(size, "free_hugepages")
}

/// Huge pages of `size` bytes in the pool (`nr_hugepages`).
pub fn huge_pages_total(size: usize) -> usize {
    hugepage_file(size, "nr_hugepages")
}

/// Bytes resident in the locked mappings (`lo` in /proc/self/smaps'
/// VmFlags) inside `[start, end)`.
///
/// Counts each mapping's `Rss`, not smaps' `Locked`: that one is
/// proportional, so a page shared copy-on-write with a child forked a
/// moment ago counts half, though it is as locked as before. A mapping
/// that reaches outside the range is left out whole; hugetlb mappings
/// count 0 (their pages are never swapped, and the kernel marks no
/// hugetlb mapping locked); so do pages not yet touched, and the shared
/// zero page that a locked read-only private mapping maps.
pub fn smaps_locked(start: usize, end: usize) -> io::Result<u64> {
    let smaps = fs::read_to_string("/proc/self/smaps")?;
    let mut total: u64 = 0;
    let mut inside = false;
    let mut rss: u64 = 0;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a >= start && b <= end;
                    rss = 0;
                    continue;
                }
            }
        }
        if !inside {
            continue;
        }
        if let Some(v) = line.strip_prefix("Rss:") {
            let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            rss = kb.saturating_mul(1024);
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            // VmFlags is each mapping's last line.
            if flags.split_whitespace().any(|f| f == "lo") {
                total = total.saturating_add(rss);
            }
        }
    }
    Ok(total)
}
