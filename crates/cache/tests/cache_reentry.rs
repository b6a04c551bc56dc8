//! User code that runs under a shard's lock — a value's `Clone` (a hit
//! clones under the read lock) and a key's `Eq` (every lookup) — and calls
//! back into the same cache. Each ran into a lock its own thread held and
//! hung; now a call that can proceed does, and one that cannot panics,
//! naming the cause, also when the call comes back through another shard
//! ([`chains`]). Each scenario runs in a child process with a bounded
//! wait.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        OnceLock,
        atomic::{AtomicBool, AtomicU8, Ordering},
        mpsc,
    },
    time::Duration,
};

use mmbatch_cache::LruCache;
use mmbatch_testkit::child;

const LIMIT: Duration = Duration::from_secs(30);

/// What a [`Val`]'s next clone does besides cloning.
static ON_CLONE: AtomicU8 = AtomicU8::new(NOTHING);
const NOTHING: u8 = 0;
const INSERT: u8 = 1;
const SIGNAL_THEN_GET: u8 = 2;

/// Set just before the other thread's insertion.
static WRITER_CALLED: AtomicBool = AtomicBool::new(false);

/// The cache the clones call into (one shard: every key shares its lock).
static CACHE: OnceLock<LruCache<u32, Val>> = OnceLock::new();
/// Told when a clone has begun (under the read lock).
static BEGUN: OnceLock<std::sync::Mutex<mpsc::Sender<()>>> = OnceLock::new();

fn cache() -> &'static LruCache<u32, Val> {
    CACHE.get_or_init(|| LruCache::builder(64).shards(1).build().unwrap())
}

/// The message of the panic `r` must hold.
fn panic_message<T: std::fmt::Debug>(r: std::thread::Result<T>) -> String {
    mmbatch_testkit::panic_message(&*r.unwrap_err())
}

/// A value whose `Clone` calls back into [`CACHE`] once, as [`ON_CLONE`]
/// says.
#[derive(Debug, PartialEq)]
struct Val(u32);

impl Clone for Val {
    fn clone(&self) -> Self {
        match ON_CLONE.swap(NOTHING, Ordering::SeqCst) {
            INSERT => {
                cache().insert(1000, Val(1000));
            }
            SIGNAL_THEN_GET => {
                BEGUN.get().unwrap().lock().unwrap().send(()).unwrap();
                // Long enough for the writer to set `block` and wait for
                // this reader (on the code before, this test hung every
                // time it was run).
                std::thread::sleep(Duration::from_millis(300));
                assert!(
                    WRITER_CALLED.load(Ordering::SeqCst),
                    "the writer has not started: the nested read tests nothing"
                );
                assert_eq!(cache().get(&2), Some(Val(2)));
            }
            _ => {}
        }
        Val(self.0)
    }
}

/// A `Clone` that inserts into the shard its `get` holds for reading:
/// the write waited for its own thread's read count forever. Now it
/// panics, naming the cause, and the cache works after.
#[test]
fn a_clone_that_inserts_into_its_shard_panics_instead_of_hanging() {
    let name = "a_clone_that_inserts_into_its_shard_panics_instead_of_hanging";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let c = cache();
    c.insert(1, Val(1));
    ON_CLONE.store(INSERT, Ordering::SeqCst);
    let msg = panic_message(catch_unwind(AssertUnwindSafe(|| c.get(&1))));
    println!("{msg}");
    assert!(msg.contains("would deadlock"), "{msg}");
    assert!(msg.contains("Clone"), "{msg}");
    // The lock is whole: reads and writes go on.
    c.insert(3, Val(3));
    assert_eq!(c.get(&1), Some(Val(1)));
    assert_eq!(c.get(&3), Some(Val(3)));
    c.check_invariants().unwrap();
}

/// A `Clone` that reads the shard it holds while another thread's
/// insertion waits for it: the nested read waited for the writer, which
/// waited for the outer read. A thread that already reads a shard now
/// reads it again without waiting (the writer cannot be writing: it waits
/// for that thread).
#[test]
fn a_clone_that_reads_its_shard_behind_a_waiting_writer_does_not_deadlock() {
    let name = "a_clone_that_reads_its_shard_behind_a_waiting_writer_does_not_deadlock";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    let c = cache();
    c.insert(1, Val(1));
    c.insert(2, Val(2));
    let (tx, rx) = mpsc::channel();
    BEGUN.set(std::sync::Mutex::new(tx)).unwrap();
    ON_CLONE.store(SIGNAL_THEN_GET, Ordering::SeqCst);
    let wrote = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(c.get(&1), Some(Val(1))));
        rx.recv().unwrap();
        WRITER_CALLED.store(true, Ordering::SeqCst);
        c.insert(3, Val(3));
        wrote.store(true, Ordering::SeqCst);
    });
    assert!(wrote.load(Ordering::SeqCst));
    assert_eq!(c.get(&3), Some(Val(3)));
    c.check_invariants().unwrap();
}

/// A key whose `Eq` reads the cache, during an insertion into its own
/// shard: the read waited for the writer its own thread was. Now it
/// panics, naming the cause, and the cache works after.
#[test]
fn an_eq_that_reads_its_shard_during_an_insert_panics_instead_of_hanging() {
    let name = "an_eq_that_reads_its_shard_during_an_insert_panics_instead_of_hanging";
    if let Some(run) = child::parent(name, LIMIT) {
        run.expect_success();
        return;
    }
    static KEYS: OnceLock<LruCache<Key, u32>> = OnceLock::new();
    static ARMED: AtomicBool = AtomicBool::new(false);
    /// A key whose `Eq` looks another key up once armed.
    #[derive(Clone, Debug)]
    struct Key(u32);
    impl std::hash::Hash for Key {
        fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
            self.0.hash(h);
        }
    }
    impl PartialEq for Key {
        fn eq(&self, other: &Self) -> bool {
            if ARMED.swap(false, Ordering::SeqCst) {
                let _ = KEYS.get().unwrap().get(&Key(7));
            }
            self.0 == other.0
        }
    }
    impl Eq for Key {}
    let c = KEYS.get_or_init(|| LruCache::builder(64).shards(1).build().unwrap());
    c.insert(Key(1), 1);
    ARMED.store(true, Ordering::SeqCst);
    // The insertion's lookup compares `Key(1)` with the cached `Key(1)`.
    let msg = panic_message(catch_unwind(AssertUnwindSafe(|| c.insert(Key(1), 2))));
    println!("{msg}");
    assert!(msg.contains("would deadlock"), "{msg}");
    c.insert(Key(2), 2);
    assert_eq!(c.get(&Key(2)), Some(2));
    assert_eq!(c.get(&Key(1)), Some(1));
    c.check_invariants().unwrap();
}

/// Chains that cross shards: user code under shard A's lock uses shard B,
/// and user code under B's lock calls back into A. Only the innermost
/// lock of each kind used to be known, so these hung.
mod chains {
    use super::*;
    use std::sync::Mutex;

    /// What the next clones of a [`Hop`] do, first first.
    static SCRIPT: Mutex<Vec<Step>> = Mutex::new(Vec::new());
    static HOPS: OnceLock<LruCache<u32, Hop>> = OnceLock::new();
    /// The key cached in the shard key 1 is not in.
    static OTHER: OnceLock<u32> = OnceLock::new();

    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// Look the key of the other shard up.
        GetOther,
        /// Replace key 1's value (a change of its shard).
        InsertOne,
        /// Tell the test, wait for its writer to wait on key 1's shard,
        /// then look key 1 up.
        SignalThenGetOne,
    }

    #[derive(Debug, PartialEq)]
    struct Hop(u32);

    impl Clone for Hop {
        fn clone(&self) -> Self {
            let step = {
                let mut script = SCRIPT.lock().unwrap();
                (!script.is_empty()).then(|| script.remove(0))
            };
            let c = HOPS.get().unwrap();
            match step {
                Some(Step::GetOther) => {
                    let _ = c.get(OTHER.get().unwrap());
                }
                Some(Step::InsertOne) => {
                    c.insert(1, Hop(100));
                }
                Some(Step::SignalThenGetOne) => {
                    BEGUN.get().unwrap().lock().unwrap().send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(300));
                    assert!(
                        WRITER_CALLED.load(Ordering::SeqCst),
                        "no writer to wait for"
                    );
                    let _ = c.get(&1);
                }
                None => {}
            }
            Hop(self.0)
        }
    }

    /// Fills `c`, a cache of two one-entry shards, with key 1 and a key
    /// of the other shard, which it returns (`entry(k)` makes key `k` and
    /// its value).
    fn fill_both<K, V>(c: &LruCache<K, V>, entry: impl Fn(u32) -> (K, V)) -> u32
    where
        K: std::hash::Hash + Eq + Clone,
        V: Clone,
    {
        let put = |k| {
            let (k, v) = entry(k);
            c.insert(k, v);
        };
        let one = entry(1).0;
        put(1);
        // A key of the same shard evicts key 1 (one entry a shard).
        let other = (2..)
            .find(|&k| {
                put(k);
                c.contains_key(&one) || {
                    put(1);
                    false
                }
            })
            .unwrap();
        assert!(c.contains_key(&one) && c.contains_key(&entry(other).0));
        other
    }

    /// [`HOPS`], filled by [`fill_both`].
    fn two_shards() -> &'static LruCache<u32, Hop> {
        let c = HOPS.get_or_init(|| LruCache::builder(2).shards(2).build().unwrap());
        OTHER.set(fill_both(c, |k| (k, Hop(k)))).unwrap();
        c
    }

    /// Reads A, then B (from A's value's `Clone`), then changes A (from
    /// B's): the change waited for its own thread's read of A.
    #[test]
    fn a_change_of_a_shard_read_two_calls_out_panics_instead_of_hanging() {
        let name = "chains::a_change_of_a_shard_read_two_calls_out_panics_instead_of_hanging";
        if let Some(run) = child::parent(name, LIMIT) {
            run.expect_success();
            return;
        }
        let c = two_shards();
        *SCRIPT.lock().unwrap() = vec![Step::GetOther, Step::InsertOne];
        let msg = panic_message(catch_unwind(AssertUnwindSafe(|| c.get(&1))));
        println!("{msg}");
        assert!(msg.contains("would deadlock"), "{msg}");
        assert!(msg.contains("lookup"), "{msg}");
        // Both locks are whole: reads and writes go on.
        c.insert(1, Hop(2));
        assert_eq!(c.get(&1), Some(Hop(2)));
        assert!(c.get(OTHER.get().unwrap()).is_some());
        c.check_invariants().unwrap();
    }

    /// Reads A, then B, then A again while another thread's change of A
    /// waits for the first read: the third read waited for that writer.
    #[test]
    fn a_read_of_a_shard_read_two_calls_out_passes_a_waiting_writer() {
        let name = "chains::a_read_of_a_shard_read_two_calls_out_passes_a_waiting_writer";
        if let Some(run) = child::parent(name, LIMIT) {
            run.expect_success();
            return;
        }
        let c = two_shards();
        let (tx, rx) = mpsc::channel();
        BEGUN.set(std::sync::Mutex::new(tx)).unwrap();
        *SCRIPT.lock().unwrap() = vec![Step::GetOther, Step::SignalThenGetOne];
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(c.get(&1), Some(Hop(1))));
            rx.recv().unwrap();
            WRITER_CALLED.store(true, Ordering::SeqCst);
            c.insert(1, Hop(3));
        });
        assert_eq!(c.get(&1), Some(Hop(3)));
        c.check_invariants().unwrap();
    }

    /// Changes A, then B (from a key's `Eq` during A's change), then looks
    /// A up (from a key's `Eq` during B's change): the lookup waited for
    /// its own thread's change of A.
    #[test]
    fn a_lookup_of_a_shard_changed_two_calls_out_panics_instead_of_hanging() {
        let name = "chains::a_lookup_of_a_shard_changed_two_calls_out_panics_instead_of_hanging";
        if let Some(run) = child::parent(name, LIMIT) {
            run.expect_success();
            return;
        }
        static KEYS: OnceLock<LruCache<Key, u32>> = OnceLock::new();
        /// What the next comparisons do: 2, change the other shard's key;
        /// 1, look key 1 up; 0, nothing.
        static ARMED: AtomicU8 = AtomicU8::new(0);
        static OTHER_KEY: OnceLock<u32> = OnceLock::new();
        #[derive(Clone, Debug)]
        struct Key(u32);
        impl std::hash::Hash for Key {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                self.0.hash(h);
            }
        }
        impl PartialEq for Key {
            fn eq(&self, other: &Self) -> bool {
                let c = KEYS.get().unwrap();
                match ARMED.swap(0, Ordering::SeqCst) {
                    2 => {
                        ARMED.store(1, Ordering::SeqCst);
                        c.insert(Key(*OTHER_KEY.get().unwrap()), 7);
                    }
                    1 => {
                        let _ = c.get(&Key(1));
                    }
                    _ => {}
                }
                self.0 == other.0
            }
        }
        impl Eq for Key {}
        let c = KEYS.get_or_init(|| LruCache::builder(2).shards(2).build().unwrap());
        OTHER_KEY.set(fill_both(c, |k| (Key(k), k))).unwrap();
        ARMED.store(2, Ordering::SeqCst);
        // Replacing key 1 compares it with the cached key 1 (under A's
        // write lock), which replaces the other key (under B's), whose
        // comparison looks key 1 up.
        let msg = panic_message(catch_unwind(AssertUnwindSafe(|| c.insert(Key(1), 2))));
        println!("{msg}");
        assert!(msg.contains("would deadlock"), "{msg}");
        c.insert(Key(1), 3);
        assert_eq!(c.get(&Key(1)), Some(3));
        c.check_invariants().unwrap();
    }

    /// Two threads whose values' `Clone`s read across shards, crossed (A
    /// then B on one thread, B then A on the other), while an insertion
    /// waits on each shard: each nested read waited for the writer of the
    /// other shard, who waited for the other thread's outer read, a cycle
    /// no thread could leave. Now a writer that has waited long for
    /// readers steps back and lets them in before it takes the lock again.
    #[test]
    fn crossed_reads_behind_two_waiting_writers_do_not_deadlock() {
        let name = "chains::crossed_reads_behind_two_waiting_writers_do_not_deadlock";
        if let Some(run) = child::parent(name, LIMIT) {
            run.expect_success();
            return;
        }
        static CROSSED: OnceLock<LruCache<u32, Crossed>> = OnceLock::new();
        static OTHER_KEY: OnceLock<u32> = OnceLock::new();
        /// Whether clones read across, how many outer clones have begun,
        /// and whether they may go on to their nested read.
        static ARMED: AtomicBool = AtomicBool::new(false);
        static INSIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        static GO: AtomicBool = AtomicBool::new(false);
        thread_local! {
            static NESTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        #[derive(Debug, PartialEq)]
        struct Crossed(u32);
        impl Clone for Crossed {
            fn clone(&self) -> Self {
                if ARMED.load(Ordering::SeqCst) && !NESTED.get() {
                    INSIDE.fetch_add(1, Ordering::SeqCst);
                    while !GO.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let other = *OTHER_KEY.get().unwrap();
                    let across = if self.0 == 1 { other } else { 1 };
                    NESTED.set(true);
                    assert!(CROSSED.get().unwrap().get(&across).is_some());
                    NESTED.set(false);
                }
                Crossed(self.0)
            }
        }
        let c = CROSSED.get_or_init(|| LruCache::builder(2).shards(2).build().unwrap());
        let other = fill_both(c, |k| (k, Crossed(k)));
        OTHER_KEY.set(other).unwrap();
        ARMED.store(true, Ordering::SeqCst);
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(c.get(&1), Some(Crossed(1))));
            s.spawn(|| assert_eq!(c.get(&other), Some(Crossed(other))));
            while INSIDE.load(Ordering::SeqCst) < 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Both outer reads held: a writer for each shard waits for one.
            s.spawn(|| c.insert(1, Crossed(100)));
            s.spawn(|| c.insert(other, Crossed(200)));
            std::thread::sleep(Duration::from_millis(300));
            GO.store(true, Ordering::SeqCst);
        });
        ARMED.store(false, Ordering::SeqCst);
        assert_eq!(c.get(&1), Some(Crossed(100)));
        assert_eq!(c.get(&other), Some(Crossed(200)));
        c.check_invariants().unwrap();
    }
}
