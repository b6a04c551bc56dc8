//! How much memory a memfd this process fills can still take:
//! [`UffdRegion::page_cache_from`](super::UffdRegion::page_cache_from)
//! refuses an image larger than that before writing a byte, rather than
//! filling the memfd until the kernel's OOM killer picks a process.

use std::fs;

/// Bytes a memfd this process fills could still take before the kernel
/// must kill something to make room: `MemAvailable` plus `SwapFree` (a
/// memfd's pages can be swapped), and no more than any memory cgroup on
/// this process's path has left (its limit less what it holds other than
/// file pages it can reclaim: page cache, but not shmem or tmpfs). `None`
/// where neither `MemAvailable` nor a cgroup's limit can be read: nothing
/// is refused then.
///
/// Fail point `uffd::memory_room` reports its argument instead
/// (`return(4194304)`).
pub(super) fn memory_room() -> Option<u64> {
    fail_point!("uffd::memory_room", |bytes: Option<String>| bytes
        .and_then(|b| b.parse().ok()));
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let machine = meminfo_bytes(&meminfo, "MemAvailable")
        .map(|avail| avail.saturating_add(meminfo_bytes(&meminfo, "SwapFree").unwrap_or(0)));
    let cgroups = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    memory_cgroups(&cgroups)
        .filter_map(|dir| cgroup_room(&dir))
        .chain(machine)
        .min()
}

/// A field of `/proc/meminfo` (`MemAvailable:  24247912 kB`), in bytes.
fn meminfo_bytes(meminfo: &str, field: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Where a cgroup's memory files are, and their names.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CgroupDir {
    /// The cgroup's directory under `/sys/fs/cgroup`.
    path: String,
    /// Version 2 (`memory.max`, `memory.current`, `file` and `shmem` in
    /// `memory.stat`) or 1 (`memory.limit_in_bytes`,
    /// `memory.usage_in_bytes`, `total_cache` and `total_shmem`).
    v2: bool,
}

/// The directories of the memory cgroups `/proc/self/cgroup` (`proc`)
/// places this process in, and of each of their ancestors (a limit set
/// on a parent holds its children too): cgroup v2's `0::/path` and
/// cgroup v1's `N:memory:/path`.
fn memory_cgroups(proc: &str) -> impl Iterator<Item = CgroupDir> + '_ {
    proc.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            // v2's hierarchy lists no controllers (its id is 0); each of
            // v1's lists its own, or a `name=`.
            if controllers.is_empty() {
                Some(("/sys/fs/cgroup".to_owned(), path, true))
            } else if controllers.split(',').any(|c| c == "memory") {
                Some(("/sys/fs/cgroup/memory".to_owned(), path, false))
            } else {
                None
            }
        })
        .flat_map(|(root, path, v2)| {
            // `/a/b` gives `/a/b`, `/a` and the root.
            let mut dirs = vec![root.clone()];
            let mut at = root;
            for part in path.split('/').filter(|p| !p.is_empty()) {
                at = format!("{at}/{part}");
                dirs.push(at.clone());
            }
            dirs.into_iter().map(move |path| CgroupDir { path, v2 })
        })
}

/// What the cgroup at `dir` has left: its limit less what it holds other
/// than reclaimable file pages; `None` without a limit (or where its files
/// cannot be read).
fn cgroup_room(dir: &CgroupDir) -> Option<u64> {
    let read = |name: &str| fs::read_to_string(format!("{}/{name}", dir.path)).ok();
    let (limit, usage, keys) = if dir.v2 {
        ("memory.max", "memory.current", ("file", "shmem"))
    } else {
        (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            ("total_cache", "total_shmem"),
        )
    };
    room(
        &read(limit)?,
        &read(usage)?,
        &read("memory.stat").unwrap_or_default(),
        keys,
    )
}

/// A cgroup's room from the contents of its limit, usage and `memory.stat`
/// files, `(cache, shmem)` naming in the last its file pages and the shmem
/// and tmpfs pages among them, which it cannot reclaim without swap (with
/// swap it can: the room is then understated by them, which may refuse an
/// image that would fit);
/// `None` for no limit (`max`, or v1's `PAGE_COUNTER_MAX` pages: anything
/// at or above 2^62).
fn room(limit: &str, usage: &str, stat: &str, (cache, shmem): (&str, &str)) -> Option<u64> {
    let limit: u64 = limit.trim().parse().ok()?;
    if limit >= 1 << 62 {
        return None;
    }
    let usage: u64 = usage.trim().parse().ok()?;
    let field = |key: &str| -> u64 {
        stat.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0)
    };
    let reclaimable = field(cache).saturating_sub(field(shmem));
    Some(limit.saturating_sub(usage.saturating_sub(reclaimable)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_are_read_in_bytes() {
        let m = "MemTotal:       24731408 kB\nMemAvailable:   24247912 kB\nSwapFree:              0 kB\n";
        assert_eq!(meminfo_bytes(m, "MemAvailable"), Some(24_247_912 * 1024));
        assert_eq!(meminfo_bytes(m, "SwapFree"), Some(0));
        assert_eq!(meminfo_bytes(m, "Mem"), None, "a prefix is not a field");
        assert_eq!(meminfo_bytes(m, "Cached"), None);
    }

    #[test]
    fn memory_cgroups_of_both_versions_and_their_ancestors() {
        let dirs: Vec<_> = memory_cgroups(
            "9:name=systemd:/\n4:memory:/api/x1\n3:cpu,cpuacct:/api\n0::/user.slice/s\n",
        )
        .collect();
        let v1 = |p: &str| CgroupDir {
            path: format!("/sys/fs/cgroup/memory{p}"),
            v2: false,
        };
        let v2 = |p: &str| CgroupDir {
            path: format!("/sys/fs/cgroup{p}"),
            v2: true,
        };
        assert_eq!(
            dirs,
            [
                v1(""),
                v1("/api"),
                v1("/api/x1"),
                v2(""),
                v2("/user.slice"),
                v2("/user.slice/s"),
            ]
        );
        let combined: Vec<_> = memory_cgroups("5:cpuset,memory:/\n").collect();
        assert_eq!(combined, [v1("")]);
    }

    #[test]
    fn a_cgroups_room_is_its_limit_less_what_it_holds_but_cache() {
        let v2 = ("file", "shmem");
        let stat = "anon 100\nfile 300\nfile_mapped 7\nshmem 0\n";
        assert_eq!(room("1000\n", "500\n", stat, v2), Some(800));
        assert_eq!(room("1000", "1500", "", v2), Some(0), "over its limit");
        assert_eq!(room("max\n", "500", stat, v2), None);
        let v1 = ("total_cache", "total_shmem");
        assert_eq!(room("9223372036854771712\n", "5", "", v1), None);
        let stat = "cache 50\ntotal_cache 300\n";
        assert_eq!(room("1000", "500", stat, v1), Some(800));
        // A snapshot in /dev/shm, or an earlier page cache's memfd: file
        // pages, but not reclaimable.
        let stat = "anon 100\nfile 300\nshmem 250\nshmem_thp 0\n";
        assert_eq!(room("1000", "500", stat, v2), Some(550));
        let stat = "total_cache 300\ntotal_shmem 300\n";
        assert_eq!(room("1000", "500", stat, v1), Some(500));
    }

    /// A cgroup's files read from its directory, either version.
    #[test]
    fn a_cgroup_directorys_files_give_its_room() {
        let dir = std::env::temp_dir().join(format!("mmbatch-room-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let at = |v2| CgroupDir {
            path: dir.to_str().unwrap().to_owned(),
            v2,
        };
        let write = |name: &str, text: &str| fs::write(dir.join(name), text).unwrap();
        write("memory.max", "4096\n");
        write("memory.current", "1024\n");
        write("memory.stat", "anon 1000\nfile 24\nshmem 4\n");
        assert_eq!(cgroup_room(&at(true)), Some(4096 - 1004));
        write("memory.limit_in_bytes", "8192\n");
        write("memory.usage_in_bytes", "2048\n");
        assert_eq!(cgroup_room(&at(false)), Some(8192 - 2048), "no total_cache");
        write("memory.stat", "total_cache 48\ntotal_shmem 8\n");
        assert_eq!(cgroup_room(&at(false)), Some(8192 - 2008));
        write("memory.max", "max\n");
        assert_eq!(cgroup_room(&at(true)), None);
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(cgroup_room(&at(true)), None, "no such directory");
    }

    /// On this host: some room, and no more than the machine has.
    #[test]
    fn this_hosts_room_is_within_its_memory_and_swap() {
        let Some(room) = memory_room() else { return };
        let m = fs::read_to_string("/proc/meminfo").unwrap();
        let total =
            meminfo_bytes(&m, "MemTotal").unwrap() + meminfo_bytes(&m, "SwapTotal").unwrap_or(0);
        assert!(room <= total, "room {room} of {total}");
    }
}
