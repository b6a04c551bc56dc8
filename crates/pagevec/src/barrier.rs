//! Asymmetric memory barriers: a free `light()` on the hot path, paired with
//! an expensive `heavy()` on the rare path, in the manner of folly's
//! `asymmetricLightBarrier`/`asymmetricHeavyBarrier` and the kernel's own
//! `synchronize_rcu_expedited()` in `lru_cache_disable()`.
//!
//! `heavy()` is `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: every thread
//! of this process that is running executes a full barrier, and one that is
//! not running passed one when it was switched out. So a `light()` that is
//! only a compiler fence orders as a `fence(SeqCst)` would against `heavy()`.
//! Where membarrier is unavailable (old kernel, seccomp, Miri) both sides
//! fall back to `fence(SeqCst)`. Under loom, see the note on the loom `imp` module below.

#[cfg(not(any(loom, miri)))]
mod imp {
    use std::sync::{
        OnceLock,
        atomic::{AtomicBool, Ordering},
    };

    use rustix::thread::{MembarrierCommand, membarrier};

    use crate::sync::{compiler_fence, fence};

    /// Set once, before any `light()` that relies on it can run: `init()` is
    /// called when a `Batcher` is built, which happens-before its use.
    static EXPEDITED: AtomicBool = AtomicBool::new(false);
    static INIT: OnceLock<()> = OnceLock::new();

    /// Registers the process for private expedited membarrier (Linux ≥ 4.14).
    pub(crate) fn init() {
        INIT.get_or_init(|| {
            let ok = membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok();
            EXPEDITED.store(ok, Ordering::Relaxed);
        });
    }

    /// Whether `heavy()` is a membarrier (else both sides are real fences).
    pub(crate) fn expedited() -> bool {
        EXPEDITED.load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn light() {
        if expedited() {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    pub(crate) fn heavy() {
        if expedited() && membarrier(MembarrierCommand::PrivateExpedited).is_ok() {
            return;
        }
        // Registration succeeded but the call failed (cannot happen per the
        // man page); a plain fence would not pair with compiler-only light
        // barriers, so say so loudly rather than lose the guarantee silently.
        assert!(
            !expedited(),
            "membarrier(PRIVATE_EXPEDITED) failed after registration succeeded"
        );
        fence(Ordering::SeqCst);
    }
}

#[cfg(miri)]
mod imp {
    use crate::sync::{Ordering, fence};

    pub(crate) fn init() {}

    pub(crate) fn expedited() -> bool {
        false
    }

    #[inline(always)]
    pub(crate) fn light() {
        fence(Ordering::SeqCst);
    }

    pub(crate) fn heavy() {
        fence(Ordering::SeqCst);
    }
}

/// Under loom, `light()` is nothing — what it compiles to on a membarrier
/// host, and the weakest case — unless the model pairs it with `heavy()`.
/// Loom's SeqCst fence is stronger than a C++ one (it orders against every
/// earlier release), so a fence here would hide ordering bugs in the ring
/// protocol that production, where `light()` is a compiler fence, has.
#[cfg(all(loom, not(miri)))]
mod imp {
    use std::cell::Cell;

    use crate::sync::{Ordering, fence};

    // Loom runs a model's threads as coroutines on the test's own OS thread,
    // so a std thread-local is per model.
    std::thread_local!(static PAIRED: Cell<bool> = const { Cell::new(false) });

    /// Declares that this model calls `heavy()` (`Batcher::disable`), so the
    /// light barrier must be modelled as the SeqCst fence it acts as then.
    pub(crate) fn model_with_heavy_barrier() {
        PAIRED.with(|p| p.set(true));
    }

    pub(crate) fn init() {}

    pub(crate) fn expedited() -> bool {
        false
    }

    pub(crate) fn light() {
        if PAIRED.with(Cell::get) {
            fence(Ordering::SeqCst);
        }
    }

    pub(crate) fn heavy() {
        assert!(
            PAIRED.with(Cell::get),
            "a loom model that calls Batcher::disable must call \
             barrier::model_with_heavy_barrier() first"
        );
        fence(Ordering::SeqCst);
    }
}

#[cfg(all(loom, not(miri)))]
pub(crate) use imp::model_with_heavy_barrier;
pub(crate) use imp::{expedited, heavy, init, light};
