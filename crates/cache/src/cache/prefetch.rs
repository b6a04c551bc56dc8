//! A prefetch hint: starts loading a cache line the caller will need soon
//! without waiting for it (`prefetch()` in the kernel's
//! `include/linux/prefetch.h`). A plain load kept alive with `black_box`
//! fetched the line too, but the CPU cannot retire it before the data
//! arrives.

/// Hints that `*p`'s cache line will be read soon. A no-op where no
/// prefetch instruction is wired up (and under Miri).
#[inline(always)]
pub(super) fn prefetch_read<T>(p: &T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // Safe to call since Rust 1.87 (SSE is in x86_64's baseline); unsafe
    // at the MSRV.
    #[allow(unused_unsafe)]
    // SAFETY: `_mm_prefetch` is a hint: it reads nothing the program
    // observes and cannot fault, and `p` is a live reference besides; SSE,
    // which it needs, is part of every x86_64 CPU.
    unsafe {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>((p as *const T).cast::<i8>());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}
