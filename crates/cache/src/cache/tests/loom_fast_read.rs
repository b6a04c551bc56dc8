//! The readers' fast path (`percpu_down_read` while `rcu_sync_is_idle`):
//! an owner counts itself with a plain store and no barrier between its
//! count and its second read of the state word; the writer that ends the
//! fast mode runs the heavy barrier (`membarrier`, emulated: see
//! `lock/barrier.rs`) before it reads the counts.
//!
//! A fast reader and a writer never overlap. Broken on purpose by a
//! writer that skips the heavy barrier (`write_without_heavy_barrier`):
//! loom finds the reader's count still in its store buffer while the
//! reader misses `block`.
//!
//! A fast reader and two writers, the first ending the fast mode: the
//! reader checks that the lock is still fast after its count. Broken on purpose
//! by a reader that checks only `block` there
//! (`read_fast_checking_only_block`): loom finds the first writer's heavy
//! barrier landing before the count, that writer gone before the second
//! read, and the second writer — which saw the mode slow and ran no
//! barrier — missing the count.

use loom::{sync::Arc, thread};

use crate::cache::lock::{ShardLock, set_owned, set_stripe};

/// A fast lock, and a thread owning its stripe 1 that reads it (`broken`:
/// checking only `block` after its count).
fn fast_lock_and_reader(broken: bool) -> (Arc<ShardLock<(u32, u32)>>, thread::JoinHandle<()>) {
    let lock = Arc::new(ShardLock::new((0u32, 0u32), 2));
    lock.go_fast();
    let l = lock.clone();
    let reader = thread::spawn(move || {
        set_stripe(1);
        set_owned(1);
        let r = if broken {
            l.read_fast_checking_only_block()
        } else {
            l.read()
        };
        assert_eq!(r.0, r.1, "a fast reader saw a write half done");
    });
    (lock, reader)
}

/// A fast reader owning stripe 1 and a writer; `broken` skips the heavy
/// barrier.
fn fast_reader_and_writer(broken: bool) {
    super::model(move || {
        let (lock, reader) = fast_lock_and_reader(false);
        set_stripe(0);
        {
            let mut w = if broken {
                lock.write_without_heavy_barrier()
            } else {
                lock.write()
            };
            w.0 += 1;
            w.1 += 1;
        }
        reader.join().unwrap();
        assert_eq!(*lock.read(), (1, 1));
        assert!(!lock.is_fast(), "the writer ended the fast mode");
    });
}

#[test]
fn a_fast_reader_and_a_writer_exclude_each_other() {
    fast_reader_and_writer(false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_writer_that_skips_the_heavy_barrier_is_caught() {
    fast_reader_and_writer(true);
}

/// A fast reader owning stripe 1 and two writers; `broken` checks only
/// `block` after the count.
fn fast_reader_and_two_writers(broken: bool) {
    super::model(move || {
        let (lock, reader) = fast_lock_and_reader(broken);
        let l = lock.clone();
        let first = thread::spawn(move || {
            set_stripe(0);
            let mut w = l.write();
            w.0 += 1;
            w.1 += 1;
        });
        set_stripe(0);
        {
            let mut w = lock.write();
            w.0 += 1;
            w.1 += 1;
        }
        first.join().unwrap();
        reader.join().unwrap();
        assert_eq!(*lock.read(), (2, 2));
    });
}

#[test]
fn a_fast_reader_and_two_writers_exclude_each_other() {
    fast_reader_and_two_writers(false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_fast_reader_that_checks_only_block_is_caught() {
    fast_reader_and_two_writers(true);
}

/// A lock whose first fast spell a writer ended with no reader about,
/// made fast again, a fast reader and a writer: the second spell's end
/// must wait for the reader as the first's would have (each heavy
/// barrier is a new request that every fast reader answers).
#[test]
fn a_second_fast_spell_ends_as_the_first() {
    super::model(|| {
        let lock = Arc::new(ShardLock::new((0u32, 0u32), 2));
        lock.go_fast();
        set_stripe(0);
        {
            let mut w = lock.write();
            w.0 += 1;
            w.1 += 1;
        }
        lock.go_fast();
        assert!(lock.is_fast(), "free and slow: fast again");
        let l = lock.clone();
        let reader = thread::spawn(move || {
            set_stripe(1);
            set_owned(1);
            let r = l.read();
            assert_eq!(r.0, r.1, "a fast reader saw a write half done");
        });
        {
            let mut w = lock.write();
            w.0 += 1;
            w.1 += 1;
        }
        reader.join().unwrap();
        assert_eq!(*lock.read(), (2, 2));
    });
}
