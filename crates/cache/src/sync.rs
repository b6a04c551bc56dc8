//! The crate's only door to atomics and locks: std normally, loom under
//! `cfg(mmbatch_loom)` (after sharded-slab's `src/sync.rs`).

// Loom's models are meaningless without the debug assertions they check
// (tokio's guard): `cargo xtask loom` builds them optimized (the
// workspace's `loom` profile) with `-C debug-assertions=on`.
#[cfg(all(mmbatch_loom, not(debug_assertions)))]
compile_error!("loom models need debug assertions: run them with `cargo xtask loom`");

#[cfg(mmbatch_loom)]
pub(crate) use loom::sync::{
    Arc, Condvar, Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering},
};

#[cfg(not(mmbatch_loom))]
pub(crate) use std::sync::{
    Arc, Condvar, Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering},
};

/// Names the calling thread among the live ones (a load's loader).
#[cfg(mmbatch_loom)]
pub(crate) type ThreadToken = loom::thread::ThreadId;

/// The calling thread's [`ThreadToken`].
#[cfg(mmbatch_loom)]
pub(crate) fn thread_token() -> ThreadToken {
    loom::thread::current().id()
}

/// Names the calling thread among the live ones (a load's loader): the
/// address of a thread-local of its own, which no other thread has while
/// it lives. `thread::current().id()` counts a reference to the thread's
/// handle up and down, two locked instructions a load.
#[cfg(not(mmbatch_loom))]
pub(crate) type ThreadToken = usize;

/// The calling thread's [`ThreadToken`].
#[cfg(not(mmbatch_loom))]
pub(crate) fn thread_token() -> ThreadToken {
    std::thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    TOKEN.with(|t| std::ptr::from_ref(t).addr())
}

/// Locks `m`, ignoring poisoning: what it guards is consistent whenever
/// user code can panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A wait's rounds below this spin (see [`spin`]); from it a waiter
/// yields. Trades a waiter's CPU time for the holder's: the 15 spinning
/// rounds take about 2 300 pauses in all (timings: docs/cache.md,
/// "Waiting").
#[cfg(not(mmbatch_loom))]
const SPIN_ROUNDS: u32 = 16;

/// A spinning round's longest spin, as a power of two of pauses (256).
/// Trades throughput under contention (its polls take the lock's
/// line from a holder about to take it again) against a waiter's latency
/// (how late it sees the lock free).
#[cfg(not(mmbatch_loom))]
const SPIN_MAX_SHIFT: u32 = 8;

/// One round of waiting for another thread: spins twice as long as the
/// round before (exponential backoff, up to [`SPIN_MAX_SHIFT`]) for the
/// rounds below [`SPIN_ROUNDS`], then yields the CPU (its holder may be
/// descheduled on a host this small), then naps; loom yields every
/// round, as its spin loops must. Why back off: a waiter that polls
/// steadily takes the lock's line from the holder between each of its
/// operations, and two threads on one contended shard then ran at a
/// fifth of one thread's rate (docs/cache.md, "Waiting").
#[cfg(not(mmbatch_loom))]
pub(crate) fn spin(round: &mut u32) {
    *round += 1;
    if *round < SPIN_ROUNDS {
        // Miri runs a pause as a step of its own: one a round there.
        let shift = if cfg!(miri) {
            0
        } else {
            (*round).min(SPIN_MAX_SHIFT)
        };
        for _ in 0..1u32 << shift {
            std::hint::spin_loop();
        }
    } else if *round < 1024 {
        std::thread::yield_now();
    } else {
        // A holder stuck in slow user code: stop burning the CPU.
        std::thread::sleep(std::time::Duration::from_micros(50));
        #[cfg(test)]
        bound_in_tests(*round, TEST_SPIN_ROUNDS, "a lock's waiter spun");
    }
}

/// [`spin`]'s rounds in the crate's unit tests: 210 000, at least 10 s
/// of 50 us naps (past its first 1024 rounds); also the most times a
/// reader is turned back by writers there (`wait_for_writer`).
#[cfg(test)]
#[cfg_attr(mmbatch_loom, allow(dead_code))]
pub(crate) const TEST_SPIN_ROUNDS: u32 = 210_000;

/// In the crate's unit tests, ends the binary once a wait on a shard lock
/// has taken `limit` rounds (or retries), naming the wait: no passing test
/// waits seconds or retries that often, and one that does waits on a
/// guard never released (a broken protocol). An abort, not a panic: a
/// test whose other threads spin on would hang in its scope's join, and
/// the binary with it. Rounds, not time: Miri's clock runs at its own
/// pace.
#[cfg(test)]
#[cfg_attr(mmbatch_loom, allow(dead_code))]
pub(crate) fn bound_in_tests(round: u32, limit: u32, what: &str) {
    if round >= limit {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "{what} {round} times, far past any passing test: a guard was never released or a \
             wait never ends (a broken lock protocol); aborting the tests"
        );
        std::process::abort();
    }
}

/// See the std version.
#[cfg(mmbatch_loom)]
pub(crate) fn spin(_round: &mut u32) {
    loom::thread::yield_now();
}

/// `smp_mb()` between a SeqCst write and a SeqCst read of another location
/// (a Dekker handshake, as in `ShardLock`). In the C++ model the two
/// SeqCst accesses are already ordered, so this is nothing outside loom;
/// loom treats SeqCst accesses as AcqRel (a documented limitation that
/// reports such handshakes as races) but models SeqCst fences exactly.
/// So the loom model checks the handshake's order of steps, with fences;
/// that the shipped SeqCst accesses need none rests on the C++ model's
/// single total order of SeqCst operations, not on loom (weakening them
/// would pass loom and break the real build).
#[inline]
pub(crate) fn smp_mb() {
    #[cfg(mmbatch_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

#[cfg(all(test, not(mmbatch_loom)))]
mod tests {
    use std::time::{Duration, Instant};

    /// A waiter past its first 1024 rounds naps (50 us a round) instead of
    /// spinning on, so a lock holder descheduled on a small host gets a
    /// CPU back. A lower bound on sleeping, which no clock cuts short.
    #[test]
    fn a_long_wait_naps() {
        let mut round = 1024;
        let start = Instant::now();
        for _ in 0..100 {
            super::spin(&mut round);
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(5), "100 rounds took {took:?}");
    }
}
