//! The machine's pool of 2 MiB huge pages, grown for a test and put back.

use std::sync::{Mutex, MutexGuard};

/// Bytes in a 2 MiB huge page.
pub const HUGE: usize = 2 << 20;
/// The pool's size, in pages.
pub const NR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
/// Pages of the pool no one holds.
pub const FREE: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";
/// Free pages promised to mappings (still counted in [`FREE`]).
const RESV: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages";

/// A number in a sysfs file such as [`NR`] or [`FREE`]; 0 if unreadable.
pub fn read(path: &str) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.trim().parse().unwrap_or(0))
}

/// The pool's counts, for a failure's message: `nr 3, free 1, resv 0,
/// surplus 0, overcommit 0`.
pub fn state() -> String {
    [
        ("nr", NR),
        ("free", FREE),
        ("resv", RESV),
        ("surplus", SURPLUS),
        ("overcommit", OVERCOMMIT),
    ]
    .map(|(name, path)| format!("{name} {}", read(path)))
    .join(", ")
}

/// Waits until `n` pages of the pool are free and unpromised (`free -
/// resv`), up to 10 s ([`scaled`](crate::child::scaled)), and panics
/// with the pool's counts if they do not come: a hugetlbfs memfd this
/// process closed lives on, with its page or its reservation, in a child
/// another test's thread forked and has not yet exec'd (a fork copies
/// every descriptor; `O_CLOEXEC` closes them only at the exec).
pub fn wait_available(n: usize) {
    let available = || read(FREE).saturating_sub(read(RESV));
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

/// Surplus pages (overcommitted ones in use): counted in [`NR`], which a
/// write sets without them (the persistent count).
pub const SURPLUS: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/surplus_hugepages";
/// Surplus pages the kernel may allocate past the persistent count.
const OVERCOMMIT: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_overcommit_hugepages";

/// The pool's persistent pages: what a write of [`NR`] sets. The count
/// read between two reads of the surplus that agree (a surplus page
/// allocated or freed in between would throw it off by one; as
/// `mmbatch_mmap`'s pool counts are read), or after 100 tries the last.
fn persistent() -> usize {
    let mut surplus = read(SURPLUS);
    for _ in 0..100 {
        let nr = read(NR);
        let again = read(SURPLUS);
        if again == surplus {
            return nr.saturating_sub(surplus);
        }
        surplus = again;
    }
    read(NR).saturating_sub(surplus)
}

/// `n` more free huge pages in the pool while it lives, and the pool to
/// this test; dropped, the persistent count goes back down by what it
/// grew, so that surplus pages it made persistent are surplus again (as
/// `mmbatch_mmap`'s `PoolGrowth` does) rather than kept for good.
#[derive(Debug)]
pub struct Pool {
    grew: usize,
    _only: MutexGuard<'static, ()>,
}

impl Pool {
    /// Grows the pool by `n` free pages, or `None` where it cannot (not
    /// root, or memory too fragmented), after saying on stderr that the
    /// test did not run.
    pub fn grow(n: usize) -> Option<Pool> {
        let guard = hold();
        let (nr, before) = (read(NR), persistent());
        // A write sets the persistent count and makes surplus pages
        // persistent first (the kernel's `set_max_huge_pages`): all of
        // them and `n` fresh pages past them.
        let grown = std::fs::write(NR, (nr + n).to_string()).is_ok() && read(NR) >= nr + n;
        let pool = Pool {
            grew: persistent().saturating_sub(before),
            _only: guard,
        };
        if !grown {
            drop(pool);
            eprintln!("cannot reserve {n} 2 MiB huge pages here (needs root): not exercised");
            return None;
        }
        Some(pool)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.grew > 0 {
            let _ = std::fs::write(NR, persistent().saturating_sub(self.grew).to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A growth over a surplus page (an overcommitted page in use) gives
    /// it back as surplus: the pool's persistent count is what it was,
    /// and the page leaves the pool with its mapping. Put back to its
    /// size before (surplus included), the pool kept the page as a
    /// persistent one for good. Root only, and only where the pool has
    /// no free page (which a mapping would take instead).
    #[test]
    fn a_growth_over_a_surplus_page_gives_it_back_as_surplus() {
        let overcommit = read(OVERCOMMIT);
        if read(FREE) > 0 || std::fs::write(OVERCOMMIT, (overcommit + 1).to_string()).is_err() {
            eprintln!("not exercised: needs root and a pool without free pages");
            return;
        }
        struct Restore(usize);
        impl Drop for Restore {
            fn drop(&mut self) {
                let _ = std::fs::write(OVERCOMMIT, self.0.to_string());
            }
        }
        let _restore = Restore(overcommit);
        // SAFETY: a fresh private mapping chosen by the kernel.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                HUGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            eprintln!("not exercised: no surplus page to be had");
            return;
        }
        // SAFETY: the mapping's first byte, writable.
        unsafe { p.cast::<u8>().write(1) };
        let (persistent_before, surplus_before) = (persistent(), read(SURPLUS));
        assert!(surplus_before >= 1, "the page is not surplus: {}", state());
        let pool = Pool::grow(1).expect("grown as root");
        assert!(read(FREE) >= 1, "{}", state());
        drop(pool);
        let after = (persistent(), read(SURPLUS));
        // SAFETY: the mapping made above; nothing refers to it.
        unsafe { libc::munmap(p, HUGE) };
        assert_eq!(
            after,
            (persistent_before, surplus_before),
            "(persistent, surplus) after the growth dropped; now {}",
            state()
        );
    }
}
