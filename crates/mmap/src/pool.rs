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
                // This crate's unit tests wait in bounded time (`tests`).
                #[cfg(not(test))]
                {
                    holder = lock
                        .freed
                        .wait(holder)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                #[cfg(test)]
                {
                    holder = tests::wait_bounded(&lock.freed, holder);
                }
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
                #[cfg(not(test))]
                let _ = rustix::io::retry_on_intr(|| {
                    rustix::fs::flock(f, rustix::fs::FlockOperation::LockExclusive)
                });
                #[cfg(test)]
                tests::flock_bounded(f, lock);
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
mod tests;
