//! A huge page pool grown for a mapping and given back: [`PoolLock`],
//! [`PoolGrowth`], and the pool's persistent count they work from.

use std::{
    fs, io,
    marker::PhantomData,
    sync::{Condvar, Mutex, PoisonError},
};

use crate::HugePageSize;

impl HugePageSize {
    /// The pool's persistent pages: `nr_hugepages` less
    /// `surplus_hugepages` (pages allocated by overcommit, which leave as
    /// their mappings let them go). The total is read between two reads of
    /// the surplus that agree (a few tries), since an overcommitted page
    /// allocated or freed meanwhile moves both. `None` where a count
    /// cannot be read (no pool of this size, no sysfs) or never held
    /// still: a write from a wrong count would resize the pool under its
    /// other users.
    pub fn persistent_pages(self) -> Option<usize> {
        counts(self).map(|(_, persistent)| persistent)
    }

    /// Locks this size's pool against every other thread and process that
    /// takes the lock (an exclusive `flock` on its `nr_hugepages`, as the
    /// mmbatch crates and `cargo xtask repro` take it) until the lock
    /// drops: for a read of the pool and a change or a mapping that must
    /// follow it unmixed with another's. Blocks while another holds it. A
    /// thread that holds it already takes it again at once, and keeps it
    /// until its last `PoolLock` of the size drops, in any order; so does
    /// a child forked by the thread that held it, whose `flock` is its
    /// parent's (the two then hold it together until both let go, or
    /// the child exits). A child forked by another thread waits for the
    /// parent's release. A `PoolLock` that never drops (`mem::forget`)
    /// holds the lock until the process exits. Programs
    /// that write the pool without it (a shell's `echo`) can still race:
    /// the kernel offers no atomic adjustment.
    ///
    /// Where the pool's file cannot be opened (no such pool) or does not
    /// take `flock`, only this process's threads are serialised; so is a
    /// container with a sysfs mount of its own, whose file is another
    /// (its pool is the host's all the same).
    ///
    /// Take a 2 MiB pool's lock before a 1 GiB pool's where one holds
    /// both, and never wait for another thread while holding one: making
    /// or dropping a growth (or an `mmbatch-ktask` `HugeRegion` that grows
    /// the pool) takes the lock, so a thread that holds it and joins one
    /// that does waits forever.
    ///
    /// ```
    /// use mmbatch_mmap::{HugePageSize, MapFlags, Mapping, ProtFlags};
    ///
    /// # fn main() -> std::io::Result<()> {
    /// let size = HugePageSize::Size2M;
    /// let pool = size.lock_pool();
    /// // The pages two huge pages' mapping lacks, added to the pool (as
    /// // root) until `growth` drops; under the lock, no other grower
    /// // takes them before the mapping reserves them.
    /// let lacking = 2usize.saturating_sub(size.available_pages());
    /// let growth = match pool.grow(lacking) {
    ///     Ok(growth) => growth,
    ///     Err(e) => return Ok(eprintln!("{e}")), // not root
    /// };
    /// let flags = MapFlags::PRIVATE | size.map_flags();
    /// let Ok(map) = Mapping::new(2 * size.bytes(), ProtFlags::READ | ProtFlags::WRITE, flags)
    /// else {
    ///     return Ok(()); // the kernel found no memory for them
    /// };
    /// drop(pool);
    /// // ... use `map`; it drops before `growth`, which gives the pages back.
    /// # drop(map);
    /// # drop(growth);
    /// # Ok(()) }
    /// ```
    pub fn lock_pool(self) -> PoolLock {
        let me = Thread::current();
        let lock = &THREADS[self.index()];
        let mut holder = lock.holder.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = holder.thread.filter(|t| t.pid != me.pid) {
            if t.pthread == me.pthread {
                // A child forked by the holding thread, its `PoolLock`s
                // copied into this one: it holds the lock as that thread
                // did (the `flock`ed file is shared across the fork).
                holder.thread = Some(me);
            } else {
                // Another of the parent's threads held it, and none of
                // its `PoolLock`s is here to let go: the child's copy of
                // its file is closed (the parent's keeps the `flock`),
                // and the lock is claimed afresh, waiting for the parent.
                holder.file = None;
                holder.thread = None;
                holder.depth = 0;
            }
        }
        if holder.thread == Some(me) {
            holder.depth += 1;
        } else {
            while holder.thread.is_some() {
                holder = lock
                    .freed
                    .wait(holder)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            holder.thread = Some(me);
            holder.depth = 1;
            // Claimed: the `flock` waits for other processes outside the
            // mutex, which the claim's other waiters only read.
            drop(holder);
            let file = fs::File::open(self.pool_file("nr_hugepages")).ok();
            if let Some(f) = &file {
                // A signal's interruption waits again; another refusal
                // leaves the serialisation to this process's threads.
                let _ = rustix::io::retry_on_intr(|| {
                    rustix::fs::flock(f, rustix::fs::FlockOperation::LockExclusive)
                });
            }
            lock.holder
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .file = file;
        }
        PoolLock {
            size: self,
            _thread: PhantomData,
        }
    }

    /// This size's slot in [`THREADS`].
    fn index(self) -> usize {
        match self {
            HugePageSize::Size2M => 0,
            HugePageSize::Size1G => 1,
        }
    }
}

/// The pool's total (`nr_hugepages`) and its persistent part, as
/// [`HugePageSize::persistent_pages`] reads them.
fn counts(size: HugePageSize) -> Option<(usize, usize)> {
    for _ in 0..8 {
        let surplus = size.pool_count("surplus_hugepages")?;
        let total = size.pool_count("nr_hugepages")?;
        if size.pool_count("surplus_hugepages")? == surplus {
            return Some((total, total.saturating_sub(surplus)));
        }
    }
    None
}

/// [`counts`], or where the surplus never held still, one reading of
/// each: for a growth's give-back, which must not be skipped (the pool
/// would keep its pages for good), and at worst counts a page allocated
/// or freed meanwhile as persistent.
fn counts_or_one_reading(size: HugePageSize) -> Option<(usize, usize)> {
    counts(size).or_else(|| {
        let total = size.pool_count("nr_hugepages")?;
        Some((
            total,
            total.saturating_sub(size.pool_count("surplus_hugepages")?),
        ))
    })
}

/// Each size's lock among this process's threads (a thread's `flock`
/// alone would not do where the file refuses `flock`).
static THREADS: [ThreadLock; 2] = [const {
    ThreadLock {
        holder: Mutex::new(Holder {
            thread: None,
            depth: 0,
            file: None,
        }),
        freed: Condvar::new(),
    }
}; 2];

/// One size's lock among a process's threads.
struct ThreadLock {
    holder: Mutex<Holder>,
    /// Signalled as the holder lets the lock go.
    freed: Condvar,
}

/// Who holds a size's lock, and what they hold.
#[derive(Debug)]
struct Holder {
    thread: Option<Thread>,
    /// The holder's live `PoolLock`s of the size.
    depth: usize,
    /// `flock`ed; closed (so unlocked) before the lock is let go.
    file: Option<fs::File>,
}

/// A thread, told apart by the kernel's ids, which it keeps to its end:
/// a thread-local would be gone in another thread-local's destructor (a
/// growth kept in one, dropped at the thread's exit), where a second
/// `PoolLock` of the size taken there waited on its own thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Thread {
    pid: u32,
    tid: rustix::thread::Pid,
    /// Which survives a `fork` in the forking thread, as its tid does
    /// not: a child tells by it whether its one thread held the lock.
    pthread: libc::pthread_t,
}

impl Thread {
    fn current() -> Self {
        Self {
            pid: std::process::id(),
            tid: rustix::thread::gettid(),
            // SAFETY: no preconditions; it cannot fail.
            pthread: unsafe { libc::pthread_self() },
        }
    }
}

/// A huge page pool locked to this thread
/// ([`HugePageSize::lock_pool`]); its [`grow`](Self::grow) is the one
/// change of the pool that needs it.
#[derive(Debug)]
#[must_use = "the pool is unlocked as soon as the lock drops"]
pub struct PoolLock {
    size: HugePageSize,
    /// Not `Send`: the lock is its thread's.
    _thread: PhantomData<*const ()>,
}

impl PoolLock {
    /// The page size whose pool this locks.
    pub fn size(&self) -> HugePageSize {
        self.size
    }

    /// Grows the pool by `pages` persistent pages, or by as many as the
    /// kernel finds memory for (it compacts memory for them, and stops
    /// short without an error): the returned growth says how many, and
    /// takes them back out of the pool when it drops. A write of
    /// `nr_hugepages` (the kernel's `set_max_huge_pages`, `mm/hugetlb.c`)
    /// sets the persistent count, turning surplus pages persistent first,
    /// so the growth counts those too: given back, they leave the pool as
    /// their mappings let them go, as surplus pages would have.
    ///
    /// A grown pool's pages are free to any mapping of the size: what
    /// makes them this caller's is mapping them under the same lock.
    ///
    /// # Errors
    /// The pool's counts cannot be read ([`io::ErrorKind::NotFound`]: no
    /// pool of this size, or no sysfs), or `nr_hugepages` cannot be written
    /// (not root, or a read-only sysfs in a container), each naming the
    /// file. Fail point `mmap::pool_write` (feature `failpoints`, for
    /// tests) runs between the read of the pool and the write.
    pub fn grow(&self, pages: usize) -> io::Result<PoolGrowth> {
        let none = PoolGrowth {
            size: self.size,
            pages: 0,
        };
        // Nothing written: a write of the total would make every surplus
        // page persistent, and needs root.
        if pages == 0 {
            return Ok(none);
        }
        let file = self.size.pool_file("nr_hugepages");
        let (total, persistent) = counts(self.size).ok_or_else(|| {
            if self.size.pool_count("nr_hugepages").is_some() {
                io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "the huge page pool's counts ({file} and its surplus_hugepages) kept \
                         changing while read (overcommitted pages allocated and freed \
                         meanwhile): try again"
                    ),
                )
            } else {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "the huge page pool's counts ({file} and its surplus_hugepages) cannot \
                         be read: this kernel has no pool of that size, or sysfs is not mounted"
                    ),
                )
            }
        })?;
        fail_point!("mmap::pool_write");
        fs::write(&file, total.saturating_add(pages).to_string()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "writing {file} to grow the huge page pool: {e}: growing it needs root and \
                     a writable sysfs; or reserve the pages beforehand (`echo N > {file}`)"
                ),
            )
        })?;
        // Unread now, it is counted as not grown: never given back twice.
        let now = counts_or_one_reading(self.size).map_or(persistent, |(_, p)| p);
        Ok(PoolGrowth {
            pages: now.saturating_sub(persistent),
            ..none
        })
    }
}

impl Drop for PoolLock {
    fn drop(&mut self) {
        let lock = &THREADS[self.size.index()];
        let mut holder = lock.holder.lock().unwrap_or_else(PoisonError::into_inner);
        holder.depth = holder.depth.saturating_sub(1);
        if holder.depth == 0 {
            holder.file = None;
            holder.thread = None;
            lock.freed.notify_one();
        }
    }
}

/// Persistent pages a [`PoolLock::grow`] added to a huge page pool,
/// taken back out when it drops (under the pool's lock, which it takes).
/// Growths of any process can drop in any order: each takes out only its
/// own count. The kernel frees free pages down to the count written and
/// turns pages still mapped past it into surplus pages, freed as their
/// mappings let them go; so drop it after the mappings it was for, or
/// keep their pages in the pool as surplus until then.
#[derive(Debug)]
#[must_use = "dropped, the growth is taken back out of the pool"]
pub struct PoolGrowth {
    size: HugePageSize,
    pages: usize,
}

impl PoolGrowth {
    /// Pages the growth added to the pool's persistent count: up to those
    /// asked for, plus any surplus pages it made persistent.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// The page size of the pool it grew.
    pub fn size(&self) -> HugePageSize {
        self.size
    }
}

impl Drop for PoolGrowth {
    fn drop(&mut self) {
        if self.pages == 0 {
            return;
        }
        let _lock = self.size.lock_pool();
        if let Some((_, persistent)) = counts_or_one_reading(self.size) {
            let _ = fs::write(
                self.size.pool_file("nr_hugepages"),
                persistent.saturating_sub(self.pages).to_string(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::mpsc, time::Duration};

    use super::*;

    /// Another thread asking for `size`'s lock: the receiver hears once
    /// it has it (and has let it go).
    fn another_thread_locks(size: HugePageSize) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            drop(size.lock_pool());
            let _ = tx.send(());
        });
        rx
    }

    /// Fails, within 10 s, unless another thread can take `size`'s lock:
    /// a lock an earlier test never let go (a broken release) fails the
    /// test that needs it in bounded time, not at the binary's limit.
    fn assert_free(size: HugePageSize) {
        another_thread_locks(size)
            .recv_timeout(Duration::from_secs(10))
            .expect("the pool's lock is held for good: an earlier lock was never released");
    }

    /// A thread takes its own lock again, and the lock is held until the
    /// thread's last `PoolLock` drops, whichever drops first; another
    /// thread then gets it.
    #[test]
    fn a_thread_relocks_and_holds_until_its_last_lock_drops() {
        let _hang =
            mmbatch_testkit::hang_guard("a_thread_relocks_and_holds_until_its_last_lock_drops");
        let size = HugePageSize::Size1G;
        assert_free(size);
        let first = size.lock_pool();
        let second = size.lock_pool();
        assert_eq!(second.size(), size);
        drop(first);
        let other = another_thread_locks(size);
        assert!(
            other.recv_timeout(Duration::from_millis(100)).is_err(),
            "another thread locked the pool while this one held it"
        );
        // Another size's lock is another lock, to other threads too.
        another_thread_locks(HugePageSize::Size2M)
            .recv_timeout(Duration::from_secs(20))
            .expect("the 2 MiB pool's lock waited for the 1 GiB pool's");
        drop(second);
        other
            .recv_timeout(Duration::from_secs(20))
            .expect("the lock was not released with the thread's last PoolLock");
        // And taken again afresh.
        let again = size.lock_pool();
        let other = another_thread_locks(size);
        assert!(other.recv_timeout(Duration::from_millis(100)).is_err());
        drop(again);
        other.recv_timeout(Duration::from_secs(20)).unwrap();
    }

    /// A lock taken in a thread-local's destructor at the thread's exit
    /// (a growth kept in a thread-local), after the other thread-locals
    /// a lock once kept (its first one panicked there, gone, which
    /// aborts the process), works and is released. In a child, whose
    /// abort the parent sees.
    #[test]
    fn a_lock_taken_as_a_thread_exits_works() {
        use std::{cell::RefCell, sync::atomic::AtomicBool};
        const NAME: &str = "pool::tests::a_lock_taken_as_a_thread_exits_works";
        if let Some(run) = mmbatch_testkit::child::parent(NAME, Duration::from_secs(20)) {
            run.expect_success();
            return;
        }
        static LOCKED: AtomicBool = AtomicBool::new(false);
        struct LocksOnDrop;
        impl Drop for LocksOnDrop {
            fn drop(&mut self) {
                drop(HugePageSize::Size2M.lock_pool());
                LOCKED.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        std::thread_local! {
            static LATE: RefCell<Option<LocksOnDrop>> = const { RefCell::new(None) };
        }
        std::thread::spawn(|| {
            // Registered first, so destroyed last: after any
            // thread-local registered as the lock is taken.
            LATE.with(|l| *l.borrow_mut() = Some(LocksOnDrop));
            drop(HugePageSize::Size2M.lock_pool());
        })
        .join()
        .unwrap();
        assert!(LOCKED.load(std::sync::atomic::Ordering::SeqCst));
        // Released: another thread takes it.
        another_thread_locks(HugePageSize::Size2M)
            .recv_timeout(Duration::from_secs(10))
            .expect("the lock taken at the thread's exit was not released");
    }

    /// Two locks of one size nested in a thread-local's destructor at the
    /// thread's exit (a growth kept in a thread-local dropped with a lock
    /// held): the second takes it again at once. When the lock kept its
    /// holders in a thread-local of its own, gone by then, the second
    /// waited on its own thread for good. In a child, under a limit.
    #[test]
    fn nested_locks_at_a_threads_exit_take_it_again() {
        use std::{cell::RefCell, sync::atomic::AtomicBool};
        const NAME: &str = "pool::tests::nested_locks_at_a_threads_exit_take_it_again";
        if let Some(run) = mmbatch_testkit::child::parent(NAME, Duration::from_secs(20)) {
            run.expect_success();
            return;
        }
        static NESTED: AtomicBool = AtomicBool::new(false);
        struct LocksTwiceOnDrop;
        impl Drop for LocksTwiceOnDrop {
            fn drop(&mut self) {
                let outer = HugePageSize::Size2M.lock_pool();
                let inner = HugePageSize::Size2M.lock_pool();
                drop(outer);
                drop(inner);
                NESTED.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        std::thread_local! {
            static LATE: RefCell<Option<LocksTwiceOnDrop>> = const { RefCell::new(None) };
        }
        std::thread::spawn(|| {
            // Registered first, so destroyed last: after any
            // thread-local registered as the lock is taken.
            LATE.with(|l| *l.borrow_mut() = Some(LocksTwiceOnDrop));
            drop(HugePageSize::Size2M.lock_pool());
        })
        .join()
        .unwrap();
        assert!(NESTED.load(std::sync::atomic::Ordering::SeqCst));
        another_thread_locks(HugePageSize::Size2M)
            .recv_timeout(Duration::from_secs(10))
            .expect("the locks taken at the thread's exit were not released");
    }

    /// A child forked by a thread that holds the lock takes it at once,
    /// as that thread would (the `flock`ed file is the child's too), and
    /// lets it go. In a child process of the test, under a limit; the
    /// forked one exits with its verdict.
    #[test]
    fn a_child_forked_under_the_lock_takes_it() {
        const NAME: &str = "pool::tests::a_child_forked_under_the_lock_takes_it";
        if let Some(run) = mmbatch_testkit::child::parent(NAME, Duration::from_secs(20)) {
            run.expect_success();
            return;
        }
        assert_free(HugePageSize::Size1G);
        let held = HugePageSize::Size1G.lock_pool();
        // SAFETY: the forked child calls only what this test's one thread
        // (besides libtest's, idle in a join) left unlocked, and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // A hang ends in SIGALRM: the forked child holds the test's
            // output pipe, which its parent's limit does not close.
            // SAFETY: async-signal-safe; the default action ends it.
            unsafe { libc::alarm(10) };
            let again = HugePageSize::Size1G.lock_pool();
            // The parent's lock and this one: let go with the last.
            let slot = &THREADS[HugePageSize::Size1G.index()];
            let depth = |d| slot.holder.lock().map_or(usize::MAX, |h| h.depth) == d;
            let counted = depth(2);
            drop(again);
            let counted = counted && depth(1);
            drop(held);
            let counted = counted && depth(0);
            if !counted {
                // SAFETY: as below.
                unsafe { libc::_exit(8) };
            }
            // SAFETY: ends the forked child without running the test
            // harness's exit.
            unsafe { libc::_exit(7) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid, "waitpid: {}", io::Error::last_os_error());
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
            "the forked child did not take the lock and exit: status {status:#x}"
        );
        drop(held);
    }

    /// A child forked by a thread that does not hold the lock, while
    /// another of the process's threads does, waits for that thread's
    /// release (the `flock`), which a marker file written just before it
    /// tells: the holder's `PoolLock`s are not the child's to let go, and
    /// a child that took the lock over would never let it go.
    #[test]
    fn a_child_forked_beside_the_holder_waits_for_it() {
        const NAME: &str = "pool::tests::a_child_forked_beside_the_holder_waits_for_it";
        if let Some(run) = mmbatch_testkit::child::parent(NAME, Duration::from_secs(20)) {
            run.expect_success();
            return;
        }
        let size = HugePageSize::Size2M;
        if fs::File::open(size.pool_file("nr_hugepages")).is_err() {
            eprintln!("no 2 MiB pool here (no flock to wait on): not exercised");
            return;
        }
        assert_free(size);
        let marker = std::env::temp_dir().join(format!("mmbatch-pool-fork-{}", std::process::id()));
        let _ = fs::remove_file(&marker);
        let (locked, held) = mpsc::channel();
        let (release, go) = mpsc::channel::<()>();
        let m = marker.clone();
        let holder = std::thread::spawn(move || {
            let lock = size.lock_pool();
            locked.send(()).unwrap();
            let _ = go.recv();
            fs::write(&m, b"released").unwrap();
            drop(lock);
        });
        held.recv().unwrap();
        let path = std::ffi::CString::new(marker.to_str().unwrap()).unwrap();
        // SAFETY: the forked child makes system calls, locks a mutex no
        // thread held at the fork (the holder's claim ended before it
        // signalled) and exits; it allocates nothing.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: as in the test above.
            unsafe { libc::alarm(10) };
            let lock = size.lock_pool();
            // SAFETY: a C string; `access` only reads it.
            let after = unsafe { libc::access(path.as_ptr(), libc::F_OK) } == 0;
            drop(lock);
            // SAFETY: ends the forked child without the harness's exit.
            unsafe { libc::_exit(if after { 7 } else { 9 }) };
        }
        std::thread::sleep(Duration::from_millis(300));
        release.send(()).unwrap();
        holder.join().unwrap();
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        let _ = fs::remove_file(&marker);
        assert_eq!(waited, pid, "waitpid: {}", io::Error::last_os_error());
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
            "the forked child did not wait for the holder's release: status {status:#x}"
        );
    }

    /// Env var: the path a child writes once it holds the pool's lock.
    const CHILD: &str = "MMBATCH_POOL_LOCK_CHILD";

    /// The lock holds between processes (the `flock`): a child asking for
    /// it while this process holds it gets it only after the release,
    /// which a marker file written just before the release tells.
    #[test]
    fn another_process_waits_for_the_lock() {
        let _hang = mmbatch_testkit::hang_guard("another_process_waits_for_the_lock");
        const NAME: &str = "pool::tests::another_process_waits_for_the_lock";
        let size = HugePageSize::Size2M;
        if let Ok(marker) = std::env::var(CHILD) {
            let lock = size.lock_pool();
            assert!(
                std::path::Path::new(&marker).exists(),
                "the child locked the pool while its parent held it"
            );
            drop(lock);
            return;
        }
        if std::fs::File::open(size.pool_file("nr_hugepages")).is_err() {
            eprintln!("no 2 MiB pool here: not exercised");
            return;
        }
        let marker = std::env::temp_dir().join(format!("mmbatch-pool-lock-{}", std::process::id()));
        let _ = std::fs::remove_file(&marker);
        assert_free(size);
        let lock = size.lock_pool();
        let path = marker.to_str().unwrap().to_owned();
        let child = std::thread::spawn(move || {
            // Under the hang guard's limit: a lock never released fails.
            mmbatch_testkit::child::run(NAME, Duration::from_secs(20), &[(CHILD, &path)])
        });
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(&marker, b"released").unwrap();
        drop(lock);
        let run = child.join().unwrap();
        let _ = std::fs::remove_file(&marker);
        run.expect_success();
    }

    /// As root: a growth of two pages shows in the pool's counts, says
    /// so, and is taken back out when dropped; its lock dropped first or
    /// held (the drop takes it again).
    #[test]
    fn a_growth_is_counted_and_given_back() {
        let _hang = mmbatch_testkit::hang_guard("a_growth_is_counted_and_given_back");
        // The pool to this test: the binary's other pool tests wait.
        let _turn = mmbatch_testkit::huge::hold();
        let size = HugePageSize::Size2M;
        assert_free(size);
        let (Some(total), Some(surplus)) = (
            size.pool_count("nr_hugepages"),
            size.pool_count("surplus_hugepages"),
        ) else {
            eprintln!("no 2 MiB pool here: not exercised");
            return;
        };
        // No other process overcommits meanwhile on a test host.
        let before = total - surplus;
        assert_eq!(size.persistent_pages(), Some(before));
        let lock = size.lock_pool();
        // Nothing asked, nothing written (not even the total, which would
        // make surplus pages persistent): as any user.
        assert_eq!(lock.grow(0).unwrap().pages(), 0);
        assert_eq!(size.pool_count("nr_hugepages"), Some(total));
        let growth = match lock.grow(2) {
            Ok(g) => g,
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("needs root"), "{msg}");
                assert!(msg.contains("hugepages-2048kB/nr_hugepages"), "{msg}");
                eprintln!("not root: the pool cannot grow here; not exercised ({msg})");
                return;
            }
        };
        // Whether it grew is read from sysfs itself, not from the growth;
        // with a gigabyte available, it must have.
        if size.pool_count("nr_hugepages") < Some(total + 2) {
            drop(growth);
            let available = crate::huge::meminfo_bytes("MemAvailable").ok().flatten();
            assert!(
                available.is_none_or(|a| a < 1 << 30),
                "the pool did not grow by 2 pages with {available:?} bytes available"
            );
            eprintln!("no memory for two 2 MiB pages: not exercised");
            return;
        }
        // Surplus pages there were are persistent now, and counted.
        assert_eq!((growth.pages(), growth.size()), (2 + surplus, size));
        assert_eq!(size.persistent_pages(), Some(before + 2 + surplus));
        // Given back under the lock this thread holds, which it takes
        // again.
        drop(growth);
        assert_eq!(size.persistent_pages(), Some(before));
        let growth = lock.grow(1).unwrap();
        drop(lock);
        assert_eq!(size.persistent_pages(), Some(before + growth.pages()));
        drop(growth);
        assert_eq!(size.persistent_pages(), Some(before));
        assert_eq!(size.pool_count("nr_hugepages"), Some(total));
    }
}
