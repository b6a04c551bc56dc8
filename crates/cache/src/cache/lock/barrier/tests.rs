//! The fallback barrier's thread check, over a fake `/proc` and this
//! process's own.

use super::imp::{cpu_list, reached};

/// A thread may run where the barrier did not visit only on a CPU
/// that is offline: any other CPU of any thread's allowed list left
/// unvisited fails the barrier closed.
#[test]
fn a_barrier_reaches_a_thread_only_through_every_online_cpu_it_may_use() {
    assert_eq!(
        cpu_list("0-3,8,10-11"),
        Some(vec![(0, 3), (8, 8), (10, 11)])
    );
    assert_eq!(cpu_list("5"), Some(vec![(5, 5)]));
    for bad in ["", "1-", "a", "3-1", "0,,1"] {
        assert_eq!(cpu_list(bad), None, "{bad:?}");
    }
    let visited = [true, true, false, false];
    let all = |l| cpu_list(l).unwrap();
    assert!(reached(&all("0-1"), None, &visited));
    assert!(reached(&all("1"), Some(&all("0-3")), &visited));
    // An online CPU not visited: another cpuset's thread runs there.
    assert!(!reached(&all("0-2"), Some(&all("0-3")), &visited));
    assert!(!reached(&all("0-2"), None, &visited));
    // Past the CPUs visited at all (CpuSet::MAX_CPU).
    assert!(!reached(&all("0,2000"), None, &visited));
    // Offline CPUs in an allowed list need no visit.
    assert!(reached(&all("0-3"), Some(&all("0-1")), &visited));
}

/// The threads' masks as `/proc` gives them: a thread in this one's
/// cgroups needs no mask; another's must lie within the CPUs visited
/// (or offline); a task list, or a status other than a thread's that
/// exited, that cannot be read fails closed, as does a process with
/// no thread readable at all.
#[test]
#[cfg_attr(miri, ignore = "Miri isolates the file system")]
fn a_barrier_reaches_the_threads_proc_lists() {
    use super::imp::reaches_every_thread_in;
    use std::fs;
    /// Removes the fake tree however the test ends.
    struct Tree(std::path::PathBuf);
    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let tree = Tree(std::env::temp_dir().join(format!("mmbatch-proc-{}", std::process::id())));
    let root = &tree.0;
    let _ = fs::remove_dir_all(root);
    let task = |tid: &str, cgroup: &str, status: Option<&str>| {
        let dir = root.join("proc/self/task").join(tid);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup"), cgroup).unwrap();
        if let Some(status) = status {
            fs::write(dir.join("status"), status).unwrap();
        }
    };
    let (proc, online) = (root.join("proc"), root.join("online"));
    fs::create_dir_all(proc.join("thread-self")).unwrap();
    fs::write(proc.join("thread-self/cgroup"), "0::/ours\n").unwrap();
    fs::write(&online, "0-3\n").unwrap();
    let visited = [true, true, false, false];
    let check = || reaches_every_thread_in(&proc, &online, &visited);
    assert!(!check(), "no task list: fails closed");
    task("1", "0::/ours\n", None);
    assert!(check(), "a thread in our cgroups, no mask read");
    task(
        "2",
        "0::/other\n",
        Some("Name:\tw\nCpus_allowed_list:\t0-1\n"),
    );
    assert!(check(), "another cgroup's thread within the CPUs visited");
    task("3", "0::/other\n", Some("Cpus_allowed_list:\t1-2\n"));
    assert!(!check(), "CPU 2 is online and was not visited");
    fs::write(&online, "0-1\n").unwrap();
    assert!(check(), "CPU 2 offline: nothing runs there");
    task("4", "0::/other\n", Some("Name:\tno mask\n"));
    assert!(!check(), "a mask that cannot be read");
    fs::remove_dir_all(proc.join("self/task/4")).unwrap();
    task("5", "0::/other\n", None);
    assert!(check(), "a thread that exited (no status) is skipped");
    task("6", "0::/other\n", None);
    fs::create_dir(proc.join("self/task/6/status")).unwrap();
    assert!(!check(), "a status that exists but cannot be read");
    fs::remove_dir_all(proc.join("self/task")).unwrap();
    task("5", "0::/other\n", None);
    assert!(!check(), "no thread readable at all");
    task("2", "0::/other\n", Some("Cpus_allowed_list:\t0-1\n"));
    assert!(check(), "only another cgroup's threads, each reached");
}

/// On this host every thread of the test process is reached by
/// visiting the CPUs this thread may move to.
#[cfg(all(target_os = "linux", not(miri)))]
#[test]
fn visiting_every_cpu_reaches_this_process() {
    let _other = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(200)));
    assert!(super::imp::visit_every_cpu());
}
