//! The machine's pool of 2 MiB huge pages, grown for a test and put back.

use std::sync::{Mutex, MutexGuard};

/// Bytes in a 2 MiB huge page.
pub const HUGE: usize = 2 << 20;
/// The pool's size, in pages.
pub const NR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
/// Pages of the pool no one holds.
pub const FREE: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";

/// A number in a sysfs file such as [`NR`] or [`FREE`]; 0 if unreadable.
pub fn read(path: &str) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.trim().parse().unwrap_or(0))
}

/// The pool's counts, for a failure's message: `nr 3, free 1, resv 0,
/// surplus 0, overcommit 0`.
pub fn state() -> String {
    let dir = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    ["nr", "free", "resv", "surplus"]
        .iter()
        .map(|c| format!("{c} {}", read(&format!("{dir}/{c}_hugepages"))))
        .chain([format!(
            "overcommit {}",
            read(&format!("{dir}/nr_overcommit_hugepages"))
        )])
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until `n` pages of the pool are free and unpromised (`free -
/// resv`), up to 10 s ([`scaled`](crate::child::scaled)), and panics
/// with the pool's counts if they do not come: a hugetlbfs memfd this
/// process closed lives on, with its page or its reservation, in a child
/// another test's thread forked and has not yet exec'd (a fork copies
/// every descriptor; `O_CLOEXEC` closes them only at the exec).
pub fn wait_available(n: usize) {
    let dir = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    let available = || read(FREE).saturating_sub(read(&format!("{dir}/resv_hugepages")));
    let limit = crate::child::scaled(std::time::Duration::from_secs(10));
    let start = std::time::Instant::now();
    while available() < n {
        assert!(
            start.elapsed() < limit,
            "{n} huge pages did not come free in {limit:?} ({})",
            state()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The pool is the machine's: one test of a binary at a time changes and
/// counts it.
static POOL: Mutex<()> = Mutex::new(());

/// The pool to this test, unchanged, while the guard lives: for a test
/// that counts it.
pub fn hold() -> MutexGuard<'static, ()> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n` more huge pages in the pool while it lives, and the pool to this
/// test; dropped, the pool is put back to its size before.
#[derive(Debug)]
pub struct Pool {
    before: usize,
    _only: MutexGuard<'static, ()>,
}

impl Pool {
    /// Grows the pool by `n` pages, or `None` where it cannot (not root,
    /// or memory too fragmented), after saying on stderr that the test did
    /// not run.
    pub fn grow(n: usize) -> Option<Pool> {
        let guard = hold();
        let before = read(NR);
        if std::fs::write(NR, (before + n).to_string()).is_err() || read(NR) < before + n {
            let _ = std::fs::write(NR, before.to_string());
            eprintln!("cannot reserve {n} 2 MiB huge pages here (needs root): not exercised");
            return None;
        }
        Some(Pool {
            before,
            _only: guard,
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = std::fs::write(NR, self.before.to_string());
    }
}
