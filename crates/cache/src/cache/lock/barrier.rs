//! Asymmetric barriers: a reader's barrier that costs nothing
//! ([`light`]: a compiler fence) made whole, when a writer needs it, by a
//! barrier the writer runs on every thread of the process at once
//! ([`heavy`]: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`). This is
//! what the kernel's `percpu_down_read` gets from RCU: while no writer is
//! about, readers skip `smp_mb()`, and a writer that arrives waits a grace
//! period (`rcu_sync_enter`), after which every reader either shows its
//! count or sees the writer. Userspace RCU's `membarrier` flavour and
//! folly's `asymmetricHeavyBarrier` do the same with this system call.
//!
//! Under loom the heavy barrier is emulated as signal-based userspace RCU
//! does it: the writer asks every thread inside a fast read for a full
//! fence and waits until each has run one; a reader checks for the request
//! at each [`light`] point of its fast path (where a real interrupt could
//! land between its steps) and when it leaves. Loom cannot interrupt a
//! thread, so the points are explicit; a reader outside a fast read needs
//! none, since its own steps are locked instructions or fenced.

#[cfg(not(mmbatch_loom))]
mod imp {
    use std::sync::atomic::{AtomicU8, Ordering, compiler_fence};

    /// Not yet asked, registered, or refused (an old kernel, a seccomp
    /// filter, not Linux, Miri, or a heavy barrier that failed since).
    const UNKNOWN: u8 = 0;
    const READY: u8 = 1;
    const REFUSED: u8 = 2;

    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// Whether [`heavy`] works in this process: registers it the first
    /// time (`MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`, Linux 4.14), so
    /// the heavy barrier may be used from then on.
    pub(crate) fn available() -> bool {
        match STATE.load(Ordering::Acquire) {
            READY => true,
            REFUSED => false,
            _ => register(),
        }
    }

    #[cold]
    fn register() -> bool {
        #[cfg(all(target_os = "linux", not(miri)))]
        let ok =
            rustix::thread::membarrier(rustix::thread::MembarrierCommand::RegisterPrivateExpedited)
                .is_ok();
        #[cfg(not(all(target_os = "linux", not(miri))))]
        let ok = false;
        // From UNKNOWN only: a heavy barrier that failed meanwhile (on
        // another thread) said REFUSED, and that stands.
        let now = if ok { READY } else { REFUSED };
        match STATE.compare_exchange(UNKNOWN, now, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => ok,
            Err(state) => state == READY,
        }
    }

    /// The reader's half: keeps the compiler from moving the reader's
    /// count past its loads; the CPU may, until a [`heavy`] barrier.
    #[inline(always)]
    pub(crate) fn light(_slot: usize) {
        compiler_fence(Ordering::SeqCst);
    }

    /// Nothing outside loom (see the module docs).
    #[inline(always)]
    pub(crate) fn enter(_slot: usize) {}

    /// The writer's half: a full barrier on every running thread of the
    /// process before it returns (an interrupt to each CPU that runs one
    /// of them; its cost: `docs/cache.md#lock-implementation-measurements`).
    /// Only called once [`available`] said yes. False if no barrier could
    /// be had: the caller must not trust the readers' counts.
    ///
    /// membarrier can fail after its registration worked: a seccomp filter
    /// installed since (sandboxes install them per thread, late), or a
    /// registration the process lost (a child of `fork` keeps its
    /// parent's on Linux 6.18, but that is not documented). It registers
    /// again once; failing still, no lock goes fast again ([`available`]
    /// says no from then on) and this barrier is had the slow way
    /// ([`visit_every_cpu`]).
    pub(crate) fn heavy() -> bool {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            use rustix::thread::{MembarrierCommand, membarrier};
            if membarrier(MembarrierCommand::PrivateExpedited).is_ok()
                || membarrier(MembarrierCommand::RegisterPrivateExpedited)
                    .and_then(|()| membarrier(MembarrierCommand::PrivateExpedited))
                    .is_ok()
            {
                return true;
            }
            STATE.store(REFUSED, Ordering::Release);
            visit_every_cpu()
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        unreachable!("the heavy barrier is never available here")
    }

    /// A full barrier on every thread of the process by the scheduler's
    /// hand (`synchronize_sched` as it once was: run on every CPU in
    /// turn): the calling thread moves onto each CPU it may run on, one
    /// after the other, and a thread that was running on a CPU was
    /// switched out before the caller ran there — and a context switch is
    /// a full barrier (`__schedule`'s `smp_mb__after_spinlock`, which
    /// membarrier itself relies on). Then its affinity is put back. Slow
    /// (a migration per CPU, tens of microseconds each), but it runs once
    /// per shard lock that was fast when membarrier failed. False if the
    /// kernel refused a move other than to a CPU that is offline or
    /// outside this thread's cpuset, or if a CPU that some thread of the
    /// process may run on was not visited ([`reaches_every_thread`]): a
    /// thread in another cpuset (cgroup v2's threaded mode, or a v1
    /// cpuset per thread) or on a CPU past `CpuSet::MAX_CPU`. The caller then fails closed (the change
    /// panics, naming `Builder::fast_reads(false)`) rather than trust
    /// counts a barrier did not reach.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[cold]
    pub(super) fn visit_every_cpu() -> bool {
        use rustix::{
            io::Errno,
            thread::{CpuSet, sched_getaffinity, sched_setaffinity},
        };
        let Ok(before) = sched_getaffinity(None) else {
            return false;
        };
        let mut visited = vec![false; CpuSet::MAX_CPU];
        let mut refused = false;
        for (cpu, seen) in visited.iter_mut().enumerate() {
            let mut one = CpuSet::new();
            one.set(cpu);
            match sched_setaffinity(None, &one) {
                Ok(()) => *seen = true,
                Err(Errno::INVAL) => {}
                Err(_) => {
                    refused = true;
                    break;
                }
            }
        }
        let restored = sched_setaffinity(None, &before).is_ok();
        !refused && restored && reaches_every_thread(&visited)
    }

    /// Whether every online CPU that some thread of the process may run
    /// on is in `visited`: a thread in this one's cgroups shares its
    /// cpuset, which the visit covered; another's `Cpus_allowed_list`
    /// (`/proc/self/task/*/status`, against
    /// `/sys/devices/system/cpu/online`) must be covered. False if that
    /// cannot be read. A thread that exits meanwhile is skipped; one that
    /// starts meanwhile inherits its creator's cgroups.
    #[cfg(all(target_os = "linux", not(miri)))]
    fn reaches_every_thread(visited: &[bool]) -> bool {
        use std::path::Path;
        reaches_every_thread_in(
            Path::new("/proc"),
            Path::new("/sys/devices/system/cpu/online"),
            visited,
        )
    }

    /// [`reaches_every_thread`] over the `proc` file system mounted at
    /// `proc` and the online CPU list at `online`.
    #[cfg(any(test, all(target_os = "linux", not(miri))))]
    pub(super) fn reaches_every_thread_in(
        proc: &std::path::Path,
        online: &std::path::Path,
        visited: &[bool],
    ) -> bool {
        // Unreadable, every CPU counts as online.
        let online = std::fs::read_to_string(online)
            .ok()
            .and_then(|l| cpu_list(l.trim()));
        // A thread in this thread's cgroups shares its cpuset, every CPU
        // of which the visit reached: its mask is not read (an io_uring
        // worker's may list every CPU, and it runs no fast read).
        let ours = std::fs::read_to_string(proc.join("thread-self/cgroup")).ok();
        let Ok(tasks) = std::fs::read_dir(proc.join("self/task")) else {
            return false;
        };
        let mut threads = 0;
        for task in tasks {
            let Ok(task) = task else { return false };
            let cgroup = std::fs::read_to_string(task.path().join("cgroup")).ok();
            if ours.is_some() && cgroup == ours {
                threads += 1;
                continue;
            }
            let status = match std::fs::read_to_string(task.path().join("status")) {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => return false,
            };
            let allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|l| cpu_list(l.trim()));
            match allowed {
                Some(allowed) if reached(&allowed, online.as_deref(), visited) => threads += 1,
                _ => return false,
            }
        }
        threads > 0
    }

    /// The CPUs of the kernel's CPU list `list` ("0-3,8,10-11"), as
    /// inclusive ranges; `None` if `list` is not one.
    #[cfg(any(test, all(target_os = "linux", not(miri))))]
    pub(super) fn cpu_list(list: &str) -> Option<Vec<(usize, usize)>> {
        list.split(',')
            .map(|part| {
                let (first, last) = match part.split_once('-') {
                    Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
                    None => (part.parse().ok()?, part.parse().ok()?),
                };
                (first <= last).then_some((first, last))
            })
            .collect()
    }

    /// Whether each CPU in `allowed` is in `visited` or not in `online`
    /// (a thread cannot run on an offline CPU); with `online` unknown,
    /// every CPU must be visited.
    #[cfg(any(test, all(target_os = "linux", not(miri))))]
    pub(super) fn reached(
        allowed: &[(usize, usize)],
        online: Option<&[(usize, usize)]>,
        visited: &[bool],
    ) -> bool {
        let is_online =
            |cpu: usize| online.is_none_or(|o| o.iter().any(|&(a, b)| (a..=b).contains(&cpu)));
        allowed.iter().all(|&(first, last)| {
            (first..=last).all(|cpu| visited.get(cpu).copied().unwrap_or(false) || !is_online(cpu))
        })
    }

    #[cfg(all(test, target_os = "linux", not(miri)))]
    mod tests {
        use super::*;

        /// A registration that loses its race to a refusal (another
        /// thread's heavy barrier failed and said `REFUSED` first) answers
        /// no, whatever its own call gave: the refusal stands, and no lock
        /// goes fast on it. In a child process: the state is the process's.
        #[test]
        fn a_registration_that_loses_to_a_refusal_answers_no() {
            let name = "cache::lock::barrier::imp::tests::a_registration_that_loses_to_a_refusal_answers_no";
            if let Some(run) =
                mmbatch_testkit::child::parent(name, std::time::Duration::from_secs(20))
            {
                run.expect_success();
                return;
            }
            STATE.store(REFUSED, Ordering::Release);
            assert!(!register(), "registered over a refusal");
            assert!(!available());
            std::process::exit(0);
        }
    }
}

#[cfg(mmbatch_loom)]
mod imp {
    use crate::sync::{AtomicBool, AtomicUsize, Ordering};
    use loom::sync::atomic::fence;

    use super::super::MAX_STRIPES;

    /// The emulation's state, afresh in each execution.
    struct Emulation {
        /// Heavy barriers asked for so far.
        asked: AtomicUsize,
        /// Per owned stripe number: inside a fast read, and the last
        /// request it answered with a fence.
        inside: [AtomicBool; MAX_STRIPES],
        answered: [AtomicUsize; MAX_STRIPES],
    }

    loom::lazy_static! {
        static ref EMULATION: Emulation = Emulation {
            asked: AtomicUsize::new(0),
            inside: std::array::from_fn(|_| AtomicBool::new(false)),
            answered: std::array::from_fn(|_| AtomicUsize::new(0)),
        };
    }

    /// A fast read begins: writers from now on wait for this thread's
    /// fence. Requests made before are not answered (a later one is): the
    /// reader's steps see those writers through the fences here, and an
    /// answer would put a fence between its steps that the real reader
    /// does not have, hiding the bugs the models look for.
    pub(crate) fn enter(slot: usize) {
        let e = &*EMULATION;
        e.inside[slot].store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let asked = e.asked.load(Ordering::SeqCst);
        fence(Ordering::SeqCst);
        e.answered[slot].store(asked, Ordering::SeqCst);
    }

    /// Where an interrupt could land: answers a pending request with a
    /// full fence.
    pub(crate) fn light(slot: usize) {
        let e = &*EMULATION;
        let asked = e.asked.load(Ordering::SeqCst);
        if e.answered[slot].load(Ordering::Relaxed) < asked {
            fence(Ordering::SeqCst);
            e.answered[slot].store(asked, Ordering::SeqCst);
        }
    }

    /// The fast read ends (its guard drops). A read that leaves without
    /// having entered is the emulation's own fault (writers never waited
    /// for it): the model fails rather than pass with no barrier modelled.
    /// One fast read a stripe at a time, as every model makes (a nested
    /// one would need a count, not a flag).
    pub(crate) fn leave(slot: usize) {
        light(slot);
        let entered = EMULATION.inside[slot].swap(false, Ordering::SeqCst);
        assert!(
            entered,
            "a fast read on stripe {slot} left without entering"
        );
    }

    /// Asks every thread inside a fast read for a fence and waits for
    /// each; always had.
    pub(crate) fn heavy() -> bool {
        let e = &*EMULATION;
        fence(Ordering::SeqCst);
        let asked = e.asked.fetch_add(1, Ordering::SeqCst) + 1;
        fence(Ordering::SeqCst);
        for slot in 0..MAX_STRIPES {
            while e.inside[slot].load(Ordering::SeqCst)
                && e.answered[slot].load(Ordering::SeqCst) < asked
            {
                loom::thread::yield_now();
            }
        }
        fence(Ordering::SeqCst);
        true
    }
}

#[cfg(not(mmbatch_loom))]
pub(super) use imp::available;
#[cfg(mmbatch_loom)]
pub(super) use imp::leave;
pub(super) use imp::{enter, heavy, light};

#[cfg(all(test, not(mmbatch_loom)))]
mod tests;
