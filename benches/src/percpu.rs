//! [`PerCpu`]: one cache-padded, locked slot per CPU — the `batch`
//! experiment's `percpu-mutex-31` variant, the shape the kernel's
//! `cpu_fbatches` has (moved here from `mmbatch-pagevec`, whose users
//! never needed it).

use std::sync::{Mutex, MutexGuard, PoisonError};

use crossbeam_utils::CachePadded;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One value per CPU, each on its own cache line behind its own lock: the
/// userspace stand-in for the kernel's `DEFINE_PER_CPU` data guarded by a
/// `local_lock_t` (as `cpu_fbatches` in `mm/swap.c`).
///
/// The slot is chosen by the CPU the calling thread runs on
/// ([`current_cpu`]); a thread migrated between choosing and locking merely
/// uses another CPU's slot, which the lock makes safe. Unlike `local_lock`,
/// which disables preemption, this lock is a real (uncontended) mutex: it
/// costs two atomic read-modify-writes per use, which is why
/// `mmbatch_pagevec::Batcher` does not take one on its queueing fast path.
#[derive(Debug)]
pub struct PerCpu<T> {
    slots: Box<[CachePadded<Mutex<T>>]>,
}

/// The most slots a [`PerCpu`] has: the kernel's largest `NR_CPUS`
/// (`CONFIG_NR_CPUS` is at most 8192 on x86-64).
pub const MAX_CPUS: usize = 8192;

impl<T> PerCpu<T> {
    /// One slot for every CPU the system may run threads on
    /// (`_SC_NPROCESSORS_CONF`, like the kernel's possible-CPU mask), built
    /// by `init(cpu)`.
    pub fn new(init: impl FnMut(usize) -> T) -> Self {
        Self::with_cpus(possible_cpus(), init)
    }

    /// `cpus` slots (at least one, at most [`MAX_CPUS`]); CPU numbers
    /// beyond that wrap around. (Uncapped, `usize::MAX` overflowed the
    /// allocation's size and panicked.)
    pub fn with_cpus(cpus: usize, mut init: impl FnMut(usize) -> T) -> Self {
        let slots = (0..cpus.clamp(1, MAX_CPUS))
            .map(|cpu| CachePadded::new(Mutex::new(init(cpu))))
            .collect();
        Self { slots }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Always false: there is at least one slot.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The slot index [`local`](Self::local) would use now.
    pub fn local_index(&self) -> usize {
        current_cpu() % self.slots.len()
    }

    /// Locks the calling CPU's slot (`local_lock` + `this_cpu_ptr`).
    pub fn local(&self) -> MutexGuard<'_, T> {
        self.get(self.local_index())
    }

    /// Locks slot `cpu` (modulo the slot count), from any thread: how a
    /// remote drain reaches another CPU's batch (`per_cpu_ptr`).
    pub fn get(&self, cpu: usize) -> MutexGuard<'_, T> {
        lock(&self.slots[cpu % self.slots.len()])
    }

    /// Calls `f(cpu, slot)` for every slot in CPU order, one lock at a time.
    pub fn for_each(&self, mut f: impl FnMut(usize, &mut T)) {
        for (cpu, slot) in self.slots.iter().enumerate() {
            f(cpu, &mut lock(slot));
        }
    }

    /// Consumes the slots, in CPU order.
    pub fn into_inner(self) -> Vec<T> {
        self.slots
            .into_vec()
            .into_iter()
            .map(|slot| {
                slot.into_inner()
                    .into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            })
            .collect()
    }
}

/// Number of CPUs the system may run threads on (`_SC_NPROCESSORS_CONF`),
/// at least 1.
pub fn possible_cpus() -> usize {
    #[cfg(not(miri))]
    {
        // SAFETY: sysconf has no memory-safety preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        if n > 0 {
            return n as usize;
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU the calling thread is running on (`smp_processor_id`), from
/// `sched_getcpu` (an rseq or vDSO read with glibc, no system call). Where
/// that fails (or under Miri) each thread gets a fixed pseudo-CPU number
/// instead, so slots still spread threads.
pub fn current_cpu() -> usize {
    #[cfg(not(miri))]
    {
        // SAFETY: sched_getcpu has no preconditions; it returns -1 on error.
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu >= 0 {
            return cpu as usize;
        }
    }
    fallback_cpu()
}

fn fallback_cpu() -> usize {
    use std::{cell::Cell, sync::atomic};
    static NEXT: atomic::AtomicUsize = atomic::AtomicUsize::new(0);
    std::thread_local!(static CPU: Cell<Option<usize>> = const { Cell::new(None) });
    CPU.with(|c| match c.get() {
        Some(cpu) => cpu,
        None => {
            let cpu = NEXT.fetch_add(1, atomic::Ordering::Relaxed);
            c.set(Some(cpu));
            cpu
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_and_remote_reach_the_same_slots() {
        let p = PerCpu::with_cpus(3, |cpu| vec![cpu]);
        p.local().push(99);
        p.get(4).push(7); // wraps to slot 1
        let all = p.into_inner();
        assert_eq!(all.len(), 3);
        assert!(all[1].ends_with(&[7]));
        assert_eq!(all.iter().filter(|v| v.contains(&99)).count(), 1);
    }

    #[test]
    fn threads_summed_through_for_each() {
        let p = PerCpu::new(|_| 0usize);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        *p.local() += 1;
                    }
                });
            }
        });
        let mut total = 0;
        p.for_each(|_, n| total += *n);
        assert_eq!(total, 400);
    }

    #[test]
    fn current_cpu_is_in_range() {
        let cpu = current_cpu();
        assert!(cfg!(miri) || cpu < possible_cpus(), "cpu {cpu}");
    }
}

#[cfg(test)]
mod cap_tests {
    /// Any CPU count is a usable `PerCpu`: `usize::MAX` panicked with a
    /// capacity overflow.
    #[test]
    fn any_cpu_count_is_capped() {
        let p = super::PerCpu::with_cpus(usize::MAX, |_| 0u8);
        assert_eq!(p.len(), super::MAX_CPUS);
        assert_eq!(super::PerCpu::with_cpus(0, |_| 0u8).len(), 1);
    }
}
