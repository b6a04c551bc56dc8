//! The shard lock's handshake (`percpu_down_read` against
//! `percpu_down_write`): a reader counts itself, then checks `block`; a
//! writer sets `block`, then waits for the counts. A reader on another
//! stripe than the writer's never overlaps its `&mut` (loom's `UnsafeCell`
//! tracks both). Broken on purpose by a writer that waits for the counts
//! before setting `block` (`write_checking_first`): loom finds the reader
//! counted in between, so the model can fail.
//!
//! And a thread's second read of a lock it reads already (user code under
//! the lock calling back into the cache) passes a writer waiting for the
//! first: waiting for that writer, as a reader otherwise does, would wait
//! for itself. Broken on purpose by a second read that waits
//! (`read_waiting_for_writers`): loom finds the schedule that never ends,
//! for a sharer (known by its thread's record) and an owner (known by its
//! stripe's count). An owner that took its first read for a second (its
//! count, already including that read, compared with 0 instead of 1) went
//! past the writer: loom found it in `a_writer_excludes_an_owner_of_another_stripe`.
//!
//! And a thread that owns its stripe number counts itself with plain
//! stores, beside a thread sharing that stripe with locked ones, and the
//! writer waits for both counts. Broken on purpose by two threads owning
//! one number (what `OWNERS` rules out): loom finds the lost update that
//! lets the writer in beside a reader.
//!
//! And a lookup's optional write (`write_if_cheap`: the drain of a full
//! batch of LRU moves, which declines rather than wait) excludes a reader
//! as `write` does. Broken on purpose by one that takes `block` without
//! looking at the counts (`write_if_cheap_without_readers`): loom finds
//! the reader counted before `block` beside it.
//!
//! And two writers exclude each other: a writer takes `block` from clear
//! to set in one compare-and-swap, which is the writers' lock. Broken on
//! purpose by a writer that sets it with a plain store
//! (`write_without_excluding_writers`): loom finds both writers holding
//! `&mut`.

use loom::{sync::Arc, thread};

use crate::cache::lock::{ShardLock, set_owned, set_stripe};

/// A thread that reads `lock` once on stripe 1 (`owner`: owning the
/// number), checking that no write is half done.
fn reader_on_stripe_1(lock: Arc<ShardLock<(u32, u32)>>, owner: bool) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        set_stripe(1);
        if owner {
            set_owned(1);
        }
        let r = lock.read();
        assert_eq!(r.0, r.1, "a reader saw a write half done");
    })
}

/// A writer on stripe 0 and a reader on stripe 1 (`owner`: that owns
/// the number); `broken` checks the counts before it blocks readers.
fn writer_and_reader(owner: bool, broken: bool) {
    super::model(move || {
        let lock = Arc::new(ShardLock::new((0u32, 0u32), 2));
        let reader = reader_on_stripe_1(lock.clone(), owner);
        set_stripe(0);
        {
            let mut w = if broken {
                lock.write_checking_first()
            } else {
                lock.write()
            };
            w.0 += 1;
            w.1 += 1;
        }
        reader.join().unwrap();
        assert_eq!(*lock.read(), (1, 1));
    });
}

#[test]
fn a_writer_excludes_a_reader_on_another_stripe() {
    writer_and_reader(false, false);
}

#[test]
fn a_writer_excludes_an_owner_of_another_stripe() {
    writer_and_reader(true, false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_writer_that_checks_before_blocking_is_caught() {
    writer_and_reader(false, true);
}

/// A lookup's optional write (`write_if_cheap`, which drains a full batch
/// of LRU moves and never waits) on stripe 0 and a reader on stripe 1
/// (`owner`: that owns the number): the write, if taken, never overlaps
/// the read; `broken` takes `block` without looking at the readers'
/// counts.
fn optional_write_and_reader(owner: bool, broken: bool) {
    super::model(move || {
        let lock = Arc::new(ShardLock::new((0u32, 0u32), 2));
        let reader = reader_on_stripe_1(lock.clone(), owner);
        set_stripe(0);
        let w = if broken {
            lock.write_if_cheap_without_readers()
        } else {
            lock.write_if_cheap()
        };
        if let Some(mut w) = w {
            w.0 += 1;
            w.1 += 1;
        }
        reader.join().unwrap();
        let r = lock.read();
        assert_eq!(r.0, r.1);
    });
}

#[test]
fn a_lookups_optional_write_excludes_a_reader() {
    optional_write_and_reader(false, false);
}

#[test]
fn a_lookups_optional_write_excludes_an_owner() {
    optional_write_and_reader(true, false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn an_optional_write_that_ignores_readers_is_caught() {
    optional_write_and_reader(false, true);
}

/// A reader that reads the lock again while holding it, and a writer
/// that may come in between; `owner`: the reader owns its stripe number
/// (it knows its first read by its stripe's count, not by its thread's
/// record); `broken` makes the second read wait for writers as a first
/// read does.
fn nested_read_and_writer(owner: bool, broken: bool) {
    super::model(move || {
        let lock = Arc::new(ShardLock::new((0u32, 0u32), 2));
        let l = lock.clone();
        let reader = thread::spawn(move || {
            set_stripe(1);
            if owner {
                set_owned(1);
            }
            let outer = l.read();
            let inner = if broken {
                l.read_waiting_for_writers()
            } else {
                l.read()
            };
            assert_eq!(inner.0, inner.1, "a nested reader saw a write half done");
            assert_eq!(*inner, *outer);
        });
        set_stripe(0);
        {
            let mut w = lock.write();
            w.0 += 1;
            w.1 += 1;
        }
        reader.join().unwrap();
        assert_eq!(*lock.read(), (1, 1));
    });
}

#[test]
fn a_nested_read_passes_a_waiting_writer() {
    nested_read_and_writer(false, false);
}

#[test]
fn an_owners_nested_read_passes_a_waiting_writer() {
    nested_read_and_writer(true, false);
}

/// Loom panics with "Model exceeded maximum number of branches" on the
/// schedule that never ends (the writer spins on the first read's count,
/// the second read waits for the writer to clear `block`); unwinding, its runtime
/// then panics again on its own poisoned state, and that second payload
/// is the one the test sees, hence no `expected`.
#[test]
#[should_panic]
fn a_nested_read_that_waits_for_the_writer_is_caught() {
    nested_read_and_writer(false, true);
}

/// As [`a_nested_read_that_waits_for_the_writer_is_caught`], for an owner.
#[test]
#[should_panic]
fn an_owners_nested_read_that_waits_for_the_writer_is_caught() {
    nested_read_and_writer(true, true);
}

/// Two readers on stripe 1 and a writer on stripe 0: one reader owns
/// stripe number 1 and the other shares the stripe, or (`broken`) both
/// count as its owner.
fn owner_sharer_and_writer(broken: bool) {
    super::model(move || {
        let lock = Arc::new(ShardLock::new((0u32, 0u32), 2));
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let l = lock.clone();
                thread::spawn(move || {
                    set_stripe(1);
                    if r == 0 || broken {
                        set_owned(1);
                    }
                    let g = l.read();
                    assert_eq!(g.0, g.1, "a reader saw a write half done");
                })
            })
            .collect();
        set_stripe(0);
        {
            let mut w = lock.write();
            w.0 += 1;
            w.1 += 1;
        }
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(*lock.read(), (1, 1));
    });
}

#[test]
fn an_owner_and_a_sharer_of_one_stripe_exclude_a_writer() {
    owner_sharer_and_writer(false);
}

/// Loom's first failing schedule: both owners read the count as 0 and
/// store 1 (one count lost), the first to leave stores 0, and the
/// second's leave takes it below zero (debug builds check; loom runs with
/// debug assertions). Between those leaves the count read 0 while a reader
/// held the lock: a writer could take it.
#[test]
#[should_panic(expected = "an owned stripe's count went below zero")]
fn two_owners_of_one_stripe_are_caught() {
    owner_sharer_and_writer(true);
}

/// Two writers on two stripes; `broken` writers set `block`
/// without taking it from clear.
fn two_writers(broken: bool) {
    super::model(move || {
        let lock = Arc::new(ShardLock::new((0u32, 0u32), 2));
        let writers: Vec<_> = (0..2)
            .map(|t| {
                let l = lock.clone();
                thread::spawn(move || {
                    set_stripe(t);
                    let mut w = if broken {
                        l.write_without_excluding_writers()
                    } else {
                        l.write()
                    };
                    w.0 += 1;
                    w.1 += 1;
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(*lock.read(), (2, 2));
    });
}

#[test]
fn two_writers_exclude_each_other() {
    two_writers(false);
}

/// Loom's first failing schedule: both writers store `block`, find no
/// reader, and write the pair at once (its cell tracking reports the
/// second `&mut`).
#[test]
#[should_panic(expected = "Causality violation")]
fn writers_that_do_not_take_block_from_clear_are_caught() {
    two_writers(true);
}
