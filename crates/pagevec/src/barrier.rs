//! Asymmetric memory barriers: a free `light()` on the hot path, paired with
//! an expensive `heavy()` on the rare path, in the manner of folly's
//! `asymmetricLightBarrier`/`asymmetricHeavyBarrier` and the kernel's own
//! `synchronize_rcu_expedited()` in `lru_cache_disable()`.
//!
//! `heavy()` is `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: every thread
//! of this process that is running executes a full barrier, and one that is
//! not running passed one when it was switched out. So a `light()` that is
//! only a compiler fence orders as a `fence(SeqCst)` would against `heavy()`.
//! Where membarrier is unavailable (old kernel, seccomp, Miri, not Linux), or fails
//! after registering (see `heavy`), both sides
//! fall back to `fence(SeqCst)`. Miri and loom have their own (`barrier/miri.rs`,
//! `barrier/loom.rs`).

#[cfg(all(target_os = "linux", not(any(mmbatch_loom, miri))))]
mod imp {
    use std::sync::{
        Mutex, OnceLock, PoisonError,
        atomic::{AtomicU8, Ordering},
    };

    use rustix::thread::{MembarrierCommand, membarrier};

    use crate::sync::{compiler_fence, fence};

    /// Both sides are real fences: membarrier was never had, or the
    /// barrier owed since it failed was had.
    const FENCED: u8 = 0;
    /// `light` is a compiler fence and `heavy` a membarrier.
    const EXPEDITED: u8 = 1;
    /// membarrier failed: `light` is a real fence from now on, and every
    /// `heavy` owes, until one has it, a barrier on every thread (for the
    /// `light`s that ran as compiler fences before).
    const OWED: u8 = 2;

    /// Set to `EXPEDITED` once, before any `light()` that relies on it can
    /// run: `init()` is called when a `Batcher` is built, which
    /// happens-before its use.
    static STATE: AtomicU8 = AtomicU8::new(FENCED);
    static INIT: OnceLock<()> = OnceLock::new();
    /// Held while the owed barrier is had, so that a `heavy` on another
    /// thread meanwhile waits for it rather than return early.
    static SETTLING: Mutex<()> = Mutex::new(());

    /// Registers the process for private expedited membarrier (Linux ≥ 4.14).
    pub(crate) fn init() {
        INIT.get_or_init(|| {
            if membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok() {
                STATE.store(EXPEDITED, Ordering::Relaxed);
            }
        });
    }

    /// Whether `light()` is a compiler fence paired with a membarrier in
    /// `heavy()` (else both sides are real fences).
    pub(crate) fn expedited() -> bool {
        STATE.load(Ordering::Relaxed) == EXPEDITED
    }

    #[inline(always)]
    pub(crate) fn light() {
        if expedited() {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// A full barrier on every thread of the process that pairs with
    /// [`light`]. membarrier can fail after its registration worked (a
    /// seccomp filter installed since, as sandboxes do late, or a passing
    /// ENOMEM for the kernel's cpumask): it registers again and tries once
    /// more; failing still, `light` turns into a real fence from then on
    /// and this barrier is had the slow way
    /// ([`visit_every_cpu`]), for the `light`s that ran as compiler
    /// fences before. Until one such visit succeeds, every `heavy` owes it
    /// (a concurrent one waits for it).
    ///
    /// # Panics
    /// If no barrier can be had (membarrier and `sched_setaffinity` both
    /// refused): the queuers' ops could be missed. The next call tries
    /// again.
    pub(crate) fn heavy() {
        match STATE.load(Ordering::SeqCst) {
            FENCED => {
                fence(Ordering::SeqCst);
                return;
            }
            EXPEDITED => {
                if membarrier(MembarrierCommand::PrivateExpedited).is_ok()
                    || membarrier(MembarrierCommand::RegisterPrivateExpedited)
                        .and_then(|()| membarrier(MembarrierCommand::PrivateExpedited))
                        .is_ok()
                {
                    return;
                }
                // Whoever sees it fail first: lights are real fences from
                // here on.
                let _ = STATE.compare_exchange(EXPEDITED, OWED, Ordering::SeqCst, Ordering::SeqCst);
            }
            _ => {}
        }
        settle();
    }

    /// Has the barrier owed since membarrier failed, or waits for the
    /// `heavy` that is having it. A visit that began after `light` turned
    /// into a real fence is what the earlier lights need, whoever ran it:
    /// a light that read `EXPEDITED` either finished on its CPU before the
    /// visit reached that CPU, or was switched out (a full barrier) in
    /// between.
    #[cold]
    fn settle() {
        let _settling = SETTLING.lock().unwrap_or_else(PoisonError::into_inner);
        if STATE.load(Ordering::SeqCst) == OWED {
            assert!(
                visit_every_cpu(),
                "Batcher: membarrier(2) failed after registering (a seccomp filter installed \
                 since?) and the kernel refused to move this thread onto each CPU \
                 (sched_setaffinity): no barrier pairs with the queuers' light ones. Allow \
                 either system call"
            );
            STATE.store(FENCED, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
    }

    /// A full barrier on every thread of the process by the scheduler's
    /// hand (`synchronize_sched` as it once was): the calling thread moves
    /// onto each CPU it may run on in turn, so a thread running on a CPU
    /// was switched out — a full barrier (`__schedule`'s
    /// `smp_mb__after_spinlock`, which membarrier relies on) — before the
    /// caller ran there; then its affinity is put back. False if the
    /// kernel refused a move other than to a CPU that is offline or
    /// outside the process's cpuset (where none of its threads run).
    /// A process whose threads sit in different cpusets (cgroup v2's
    /// threaded mode) may have threads on a CPU this thread cannot move
    /// to: this barrier does not reach them, and such a process should
    /// allow membarrier.
    ///
    /// The same as `mmbatch-cache`'s shard lock has: two copies of a
    /// fallback neither crate should make the other depend on.
    #[cold]
    fn visit_every_cpu() -> bool {
        use rustix::{
            io::Errno,
            thread::{CpuSet, sched_getaffinity, sched_setaffinity},
        };
        let Ok(before) = sched_getaffinity(None) else {
            return false;
        };
        let mut visited = 0;
        let mut refused = false;
        for cpu in 0..CpuSet::MAX_CPU {
            let mut one = CpuSet::new();
            one.set(cpu);
            match sched_setaffinity(None, &one) {
                Ok(()) => visited += 1,
                Err(Errno::INVAL) => {}
                Err(_) => {
                    refused = true;
                    break;
                }
            }
        }
        let restored = sched_setaffinity(None, &before).is_ok();
        visited > 0 && !refused && restored
    }
}

// Off Linux (no membarrier) as under Miri: SeqCst fences on both sides.
#[cfg(any(miri, all(not(target_os = "linux"), not(mmbatch_loom))))]
#[path = "barrier/miri.rs"]
mod imp;

#[cfg(all(mmbatch_loom, not(miri)))]
#[path = "barrier/loom.rs"]
mod imp;

#[cfg(all(mmbatch_loom, not(miri)))]
pub(crate) use imp::model_with_heavy_barrier;
pub(crate) use imp::{expedited, heavy, init, light};
