//! A cache whose shards went fast (lookups skipping their barrier), then a
//! seccomp filter that makes membarrier(2) fail, as a sandbox installs one
//! after start-up. The change that ends the spell panicked inside
//! `insert`, having cleared the shard's fast mode without the barrier a
//! later writer then skipped. Now the cache stops going fast and goes on
//! with its readers' ordinary counts; with no barrier to be had at all, a
//! change panics, naming the cause, and the shard stays fast, so no later
//! change skips the barrier either.
//!
//! Each test runs in a child process: the filter is the process's for
//! good.
#![cfg(all(target_os = "linux", not(miri)))]

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use mmbatch_cache::LruCache;
use mmbatch_testkit::{
    child,
    seccomp::{refuse_syscalls, refuse_syscalls_on_this_thread},
};

/// Each child's bound: every test here takes well under a second; a
/// waiter stranded by a lost wake-up fails at this bound, under
/// cargo-mutants' timeout (a mutant that strands one must fail, not
/// time out).
const LIMIT: Duration = Duration::from_secs(20);

/// A cache of one shard whose lookups skip their barrier: looked up until
/// its stats say so.
fn fast_cache() -> LruCache<u64, u64> {
    let c = LruCache::builder(1024).shards(1).build().unwrap();
    for k in 0..100 {
        c.insert(k, k);
    }
    look_up_until_fast(&c, |k| k);
    c
}

/// Looks up keys `key(0..100)` (each cached with value `k`) on this
/// thread until the cache's one shard skips its barrier.
fn look_up_until_fast<K: std::hash::Hash + Eq + Clone>(
    c: &LruCache<K, u64>,
    key: impl Fn(u64) -> K,
) {
    let start = std::time::Instant::now();
    while c.stats().fast_read_shards == 0 {
        for k in 0..100 {
            assert_eq!(c.get(&key(k)), Some(k));
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the shard never went fast (membarrier unavailable here?)"
        );
    }
}

/// Lookups on another thread all along, some of them fast when the
/// spell ends.
fn with_a_reader(c: &LruCache<u64, u64>, f: impl FnOnce()) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                for k in 0..100 {
                    assert_eq!(c.get(&k), Some(k));
                }
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        stop.store(true, Ordering::Relaxed);
        if let Err(e) = r {
            std::panic::resume_unwind(e);
        }
    });
}

#[test]
fn membarrier_failing_after_the_cache_went_fast_falls_back_to_counted_reads() {
    let name = "membarrier_failing_after_the_cache_went_fast_falls_back_to_counted_reads";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let c = fast_cache();
    refuse_syscalls(&[libc::SYS_membarrier]);
    // SAFETY: membarrier(MEMBARRIER_CMD_QUERY), integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, 0, 0, 0) };
    assert_eq!(r, -1, "the filter let membarrier through");
    with_a_reader(&c, || {
        // Ends the spell: the barrier had the slow way.
        assert_eq!(c.insert(1000, 1000), None);
        for k in 2000..2100 {
            c.insert(k, k);
        }
    });
    assert_eq!(c.stats().fast_read_shards, 0);
    // Quiet again, long past the wait for a spell: the shard stays slow.
    stays_slow_and_serves(&c);
}

/// Looks up keys `0..100` of `c` (each cached with its own value), with
/// writers quiet long past the wait for a spell (`fast_cache` goes fast
/// in a few rounds of these where membarrier works): no shard may go
/// fast; then a write and its read still work.
fn stays_slow_and_serves(c: &LruCache<u64, u64>) {
    for _ in 0..200 {
        for k in 0..100 {
            assert_eq!(c.get(&k), Some(k));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(
        c.stats().fast_read_shards,
        0,
        "went fast with no membarrier"
    );
    c.insert(3000, 3000);
    assert_eq!(c.get(&3000), Some(3000));
    c.check_invariants().unwrap();
}

/// A sandbox that refuses membarrier from the start (its filter in place
/// before the cache is made): registration fails, and no shard ever
/// skips its readers' barrier, however quiet its writers.
#[test]
fn membarrier_refused_from_the_start_keeps_every_read_counted() {
    let name = "membarrier_refused_from_the_start_keeps_every_read_counted";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    refuse_syscalls(&[libc::SYS_membarrier]);
    let c = LruCache::builder(1024).shards(1).build().unwrap();
    for k in 0..100 {
        c.insert(k, k);
    }
    stays_slow_and_serves(&c);
}

#[test]
fn with_no_barrier_to_be_had_a_change_panics_and_the_shard_stays_fast() {
    let name = "with_no_barrier_to_be_had_a_change_panics_and_the_shard_stays_fast";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let c = fast_cache();
    refuse_syscalls(&[libc::SYS_membarrier, libc::SYS_sched_setaffinity]);
    with_a_reader(&c, || {
        for _ in 0..2 {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                c.insert(1000, 1000);
            }));
            let e = r.expect_err("a change with no barrier went through");
            let msg = mmbatch_testkit::panic_message(&*e);
            println!("{msg}");
            assert!(
                msg.contains("membarrier") && msg.contains("fast_reads(false)"),
                "{msg}"
            );
            // Still fast: the next change owes the barrier too.
            assert_eq!(c.stats().fast_read_shards, 1);
        }
    });
    // Lookups go on, and see what they saw.
    for k in 0..100 {
        assert_eq!(c.get(&k), Some(k));
    }
    assert_eq!(c.get(&1000), None);
}

/// Makes the one shard of `c` fast again (a quiet spell of lookups on
/// this thread), then refuses this thread (only) every barrier.
fn fast_again_then_refused_here<K: std::hash::Hash + Eq + Clone>(
    c: &LruCache<K, u64>,
    key: impl Fn(u64) -> K,
) {
    look_up_until_fast(c, key);
    refuse_syscalls_on_this_thread(&[libc::SYS_membarrier, libc::SYS_sched_setaffinity]);
}

/// Key 5000 loaded by `outcome` on a thread that, once a second thread
/// waits on the load, makes the shard fast again and loses every barrier
/// (a sandbox confining one worker), while the waiter's thread keeps them.
/// Returns how the loader ended and what the waiter got.
fn refused_loader_and_its_waiter(
    c: &LruCache<u64, u64>,
    outcome: impl FnOnce() -> Result<u64, &'static str> + Send,
) -> (std::thread::Result<Result<u64, &'static str>>, u64) {
    let waiting = AtomicBool::new(false);
    std::thread::scope(|s| {
        let loader = s.spawn(|| {
            c.try_get_or_insert_with(5000, || {
                while !waiting.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                // Let the waiter reach its room.
                std::thread::sleep(Duration::from_millis(50));
                fast_again_then_refused_here(c, |k| k);
                outcome()
            })
        });
        // Claimed once the loader's flight is in: then wait on it.
        while c.stats().loads == 0 {
            std::thread::yield_now();
        }
        let waiter = s.spawn(|| {
            waiting.store(true, Ordering::Release);
            c.get_or_insert_with(5000, || 5001)
        });
        let loaded = loader.join();
        (loaded, waiter.join().unwrap())
    })
}

/// A loader that fails where the shard cannot be changed (its thread,
/// sandboxed since it claimed the key, can have no barrier) hands its
/// waiter an empty room, and the waiter, on a thread that can, loads the
/// key. It hung: the loader's clean-up took the write lock, which
/// panicked, and the waiter's room was never completed.
#[test]
fn a_loader_failing_with_no_barrier_releases_its_waiters() {
    let name = "a_loader_failing_with_no_barrier_releases_its_waiters";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let c = fast_cache();
    let (loaded, waited) = refused_loader_and_its_waiter(&c, || Err("the source failed"));
    assert_eq!(loaded.unwrap(), Err("the source failed"));
    // The waiter starts over and loads the key itself.
    assert_eq!(waited, 5001);
    assert_eq!(c.get(&5000), Some(5001));
    assert_eq!(c.stats().loads, 2);
    c.check_invariants().unwrap();
}

/// A loader that panics where no barrier can be had: its own panic
/// unwinds (it aborted the process, panicking again in the clean-up),
/// and the waiter goes on as above.
#[test]
fn a_loader_panicking_with_no_barrier_unwinds_and_releases_its_waiters() {
    let name = "a_loader_panicking_with_no_barrier_unwinds_and_releases_its_waiters";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let c = fast_cache();
    let (loaded, waited) = refused_loader_and_its_waiter(&c, || panic!("the loader's own panic"));
    let e = loaded.expect_err("the loader's panic was lost");
    assert_eq!(
        mmbatch_testkit::panic_message(&*e),
        "the loader's own panic"
    );
    assert_eq!(waited, 5001);
    assert_eq!(c.get(&5000), Some(5001));
    c.check_invariants().unwrap();
}

/// With no barrier anywhere in the process, a load that fails returns
/// its error (the flight is left behind, marked abandoned) and one that
/// succeeds panics as any change does, naming the cause.
#[test]
fn with_no_barrier_anywhere_a_failed_load_returns_its_error() {
    let name = "with_no_barrier_anywhere_a_failed_load_returns_its_error";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let c = fast_cache();
    // The claim is a change too: claimed first, with the barrier.
    let r = c.try_get_or_insert_with(5000, || {
        fast_again_then_refused_here(&c, |k| k);
        Err("the source failed")
    });
    assert_eq!(r, Err("the source failed"));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.get_or_insert_with(5000, || 5001)
    }));
    let msg = mmbatch_testkit::panic_message(&*r.expect_err("changed with no barrier"));
    assert!(msg.contains("membarrier"), "{msg}");
    for k in 0..100 {
        assert_eq!(c.get(&k), Some(k));
    }
}

/// A key whose drop panics while `PANIC_ON_DROP` names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Touchy(u64);

static PANIC_ON_DROP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

impl Drop for Touchy {
    fn drop(&mut self) {
        if PANIC_ON_DROP.load(Ordering::SeqCst) == self.0 && !std::thread::panicking() {
            panic!("Touchy({}) dropped", self.0);
        }
    }
}

/// An abandoned flight's key copy whose drop panics when a later claim
/// takes the flight out: the claim's own flight must still be cleaned up.
/// It was dropped before the claim's clean-up existed, leaving that flight
/// with no loader: the next caller for its key waited forever.
#[test]
fn a_key_that_panics_as_an_abandoned_flight_is_cleared_strands_no_one() {
    let name = "a_key_that_panics_as_an_abandoned_flight_is_cleared_strands_no_one";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let c: LruCache<Touchy, u64> = LruCache::builder(1024).shards(1).build().unwrap();
    for k in 0..100 {
        c.insert(Touchy(k), k);
    }
    std::thread::scope(|s| {
        // A sandboxed thread abandons its load of 5000.
        s.spawn(|| {
            let r = c.try_get_or_insert_with(Touchy(5000), || {
                fast_again_then_refused_here(&c, Touchy);
                Err("the source failed")
            });
            assert_eq!(r, Err("the source failed"));
        })
        .join()
        .unwrap();
    });
    PANIC_ON_DROP.store(5000, Ordering::SeqCst);
    // A claim of the key takes the abandoned flight out; its key copy
    // panics as it drops.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.get_or_insert_with(Touchy(5000), || 6000)
    }));
    let msg = mmbatch_testkit::panic_message(&*r.expect_err("the key's drop panicked"));
    assert_eq!(msg, "Touchy(5000) dropped");
    PANIC_ON_DROP.store(u64::MAX, Ordering::SeqCst);
    // Another thread loading the key does not wait for a loader that is
    // gone.
    let v = std::thread::scope(|s| {
        s.spawn(|| c.get_or_insert_with(Touchy(5000), || 6001))
            .join()
            .unwrap()
    });
    assert_eq!(v, 6001);
    c.check_invariants().unwrap();
}
