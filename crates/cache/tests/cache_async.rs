//! Async single-flight loads (`get_or_insert_async`) under two
//! executors: tokio's multi-threaded runtime and futures' single-threaded
//! `LocalPool`, where the loader and its waiters share one thread.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
};

use mmbatch_cache::LruCache;

/// Pending `n` times (waking itself), then ready: a load that takes a
/// few turns of its executor.
struct Turns(usize);

impl Future for Turns {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Never ready: a load stuck until its future is dropped.
struct Never;

impl Future for Never {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

/// Runs `ask` (given a count to raise when it loads) on 16 tasks of
/// `rt`, each of which must return `want`; returns the loads counted.
/// Bounded: a lost wake-up fails the test instead of hanging it.
fn sixteen_tasks_on_tokio<T, Fut>(
    rt: &tokio::runtime::Runtime,
    ask: impl Fn(Arc<AtomicUsize>) -> Fut,
    want: T,
) -> usize
where
    T: PartialEq + std::fmt::Debug + Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    let loads = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        let tasks: Vec<_> = (0..16).map(|_| tokio::spawn(ask(loads.clone()))).collect();
        let all = async {
            for t in tasks {
                assert_eq!(t.await.unwrap(), want);
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), all)
            .await
            .expect("the tasks were not all woken within 20 s (a lost wake-up)");
    });
    loads.load(Ordering::SeqCst)
}

/// A tokio runtime of 4 worker threads, with its timer.
fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap()
}

/// A load that counts itself in `loads` and takes 20 ms.
async fn slow_load<T>(loads: &AtomicUsize, value: T) -> T {
    loads.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    value
}

/// 16 tasks on 4 worker threads ask for one key: one load, every task
/// gets its value.
#[test]
fn one_load_for_many_tasks_on_tokio() {
    // A waiter that never parks spins its worker, and the timeout then
    // never runs: the guard aborts the binary instead of a hang.
    let _hang = mmbatch_testkit::hang_guard("one_load_for_many_tasks_on_tokio");
    let cache = Arc::new(LruCache::<u64, u64>::new(64));
    let ask = |loads: Arc<AtomicUsize>| {
        let cache = cache.clone();
        async move { cache.get_or_insert_async(7, slow_load(&loads, 70)).await }
    };
    assert_eq!(sixteen_tasks_on_tokio(&tokio_runtime(), ask, 70), 1);
    assert_eq!(cache.stats().loads, 1);
}

/// Borrowed keys on tokio's multi-threaded runtime: 16 tasks ask for one
/// `String` key by `&str` (the futures are `Send`, as `spawn` needs): one
/// load, every task gets its value, and a later ask is a hit.
#[test]
fn one_load_by_a_borrowed_key_for_many_tasks_on_tokio() {
    let _hang = mmbatch_testkit::hang_guard("one_load_by_a_borrowed_key_for_many_tasks_on_tokio");
    let cache = Arc::new(LruCache::<String, usize>::new(64));
    let ask = |loads: Arc<AtomicUsize>| {
        let cache = cache.clone();
        async move {
            cache
                .get_or_insert_async_ref("answer", slow_load(&loads, 42))
                .await
        }
    };
    let rt = tokio_runtime();
    assert_eq!(sixteen_tasks_on_tokio(&rt, ask, 42), 1);
    let r: Result<usize, &str> =
        rt.block_on(cache.try_get_or_insert_async_ref("answer", async { Err("not asked") }));
    assert_eq!(r, Ok(42), "a hit runs no loader");
    assert_eq!(cache.stats().loads, 1);
    assert_eq!(cache.peek("answer"), Some(42));
}

/// On one thread (futures' `LocalPool`): waiters share the loader's
/// thread and wait for it (a thread-identity check would take them for
/// the loader reaching its own key), and a failed load hands the key to
/// a waiter, which loads it.
#[test]
fn waiters_on_the_loaders_thread_wait_and_take_over_a_failed_load() {
    let _hang = mmbatch_testkit::hang_guard(
        "waiters_on_the_loaders_thread_wait_and_take_over_a_failed_load",
    );
    use futures_executor::LocalPool;
    use futures_executor::LocalSpawner;
    let mut pool = LocalPool::new();
    let spawner: LocalSpawner = pool.spawner();
    let cache = Arc::new(LruCache::<u64, u64>::new(64));
    let loads = Arc::new(AtomicUsize::new(0));
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    for t in 0..8u64 {
        let (cache, loads, got) = (cache.clone(), loads.clone(), got.clone());
        use futures_util::task::LocalSpawnExt as _;
        spawner
            .spawn_local(async move {
                let r = cache
                    .try_get_or_insert_async(3, async {
                        let n = loads.fetch_add(1, Ordering::SeqCst);
                        Turns(3).await;
                        // The first load fails; the next succeeds.
                        if n == 0 { Err("down") } else { Ok(30 + t) }
                    })
                    .await;
                got.lock().unwrap().push(r);
            })
            .unwrap();
    }
    // Until no task can go on: a lost wake-up leaves tasks unfinished
    // (counted below) instead of hanging the test.
    pool.run_until_stalled();
    let got = got.lock().unwrap();
    assert_eq!(loads.load(Ordering::SeqCst), 2, "{got:?}");
    assert_eq!(got.iter().filter(|r| r.is_err()).count(), 1, "{got:?}");
    let ok: Vec<u64> = got.iter().filter_map(|r| r.ok()).collect();
    assert_eq!(ok.len(), 7);
    assert!(ok.iter().all(|&v| v == ok[0]), "{got:?}");
}

/// A loader's future dropped mid-load wakes the waiters, and one of them
/// loads; a waiter's future dropped mid-wait takes nothing with it.
#[test]
fn dropped_loads_and_waits_hand_over() {
    // The polls below run on this thread: a wait that never parks spins
    // here, where no `recv_timeout` reaches it.
    let _hang = mmbatch_testkit::hang_guard("dropped_loads_and_waits_hand_over");
    let cache = Arc::new(LruCache::<u64, u64>::new(64));
    let waker = std::task::Waker::noop().clone();
    let mut cx = Context::from_waker(&waker);
    // A load that never finishes, polled once (it claims the key).
    let mut stuck = Box::pin(cache.get_or_insert_async(9, async {
        Never.await;
        0
    }));
    assert!(stuck.as_mut().poll(&mut cx).is_pending());
    // A waiter, polled once (waiting), then dropped.
    let mut gone = Box::pin(cache.get_or_insert_async(9, async { unreachable!() }));
    assert!(gone.as_mut().poll(&mut cx).is_pending());
    drop(gone);
    // Another waiter, on a thread, blocked on the stuck load.
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let cache = cache.clone();
        std::thread::spawn(move || {
            let v = futures_executor::block_on(cache.get_or_insert_async(9, async { 90 }));
            let _ = tx.send(v);
        });
    }
    let wait = std::time::Duration::from_millis(50);
    assert!(rx.recv_timeout(wait).is_err(), "the waiter did not wait");
    // The stuck load is dropped: the waiter wakes and loads (bounded: a
    // lost wake-up fails here instead of hanging).
    drop(stuck);
    let v = rx.recv_timeout(std::time::Duration::from_secs(20));
    assert_eq!(v, Ok(90), "the waiter was not woken within 20 s");
    assert_eq!(cache.peek(&9), Some(90));
    assert_eq!(cache.stats().loads, 2);
}

/// A loader whose future panics: the panic reaches the task that polled
/// it, and its waiters start over (one of them loads) as soon as it
/// unwinds, before the panicked future is dropped — an executor that
/// keeps a panicked task's future (or is slow to drop it) holds no key.
#[test]
fn a_loader_that_panics_hands_the_key_over() {
    let _hang = mmbatch_testkit::hang_guard("a_loader_that_panics_hands_the_key_over");
    let cache = Arc::new(LruCache::<u64, u64>::new(64));
    let waker = std::task::Waker::noop().clone();
    let mut cx = Context::from_waker(&waker);
    // A load that panics at its second poll, polled once (it claims the
    // key).
    let mut loader = Box::pin(cache.get_or_insert_async(5, async {
        Turns(1).await;
        panic!("the loader broke")
    }));
    assert!(loader.as_mut().poll(&mut cx).is_pending());
    // A waiter, on a thread, blocked on the load: `asking` is set just
    // before it asks, and it is then given 100 ms to park.
    let (tx, rx) = std::sync::mpsc::channel();
    let asking = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (cache, asking) = (cache.clone(), asking.clone());
        std::thread::spawn(move || {
            asking.store(true, Ordering::SeqCst);
            let v = futures_executor::block_on(cache.get_or_insert_async(5, async { 50 }));
            let _ = tx.send(v);
        });
    }
    mmbatch_testkit::wait_until(
        "the waiter to ask",
        std::time::Duration::from_secs(10),
        || asking.load(Ordering::SeqCst),
    );
    let wait = std::time::Duration::from_millis(100);
    assert!(rx.recv_timeout(wait).is_err(), "the waiter did not wait");
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = loader.as_mut().poll(&mut cx);
    }))
    .expect_err("the loader's panic reaches its poller");
    assert_eq!(mmbatch_testkit::panic_message(&*panic), "the loader broke");
    // The panicked future is still alive: the waiter loads anyway.
    let v = rx.recv_timeout(std::time::Duration::from_secs(20));
    assert_eq!(
        v,
        Ok(50),
        "the waiter was not woken within 20 s of the panic"
    );
    drop(loader);
    assert_eq!(cache.peek(&5), Some(50));
    assert_eq!(cache.stats().loads, 2);
    cache.check_invariants().unwrap();
}

/// `get_or_guard_async` on tokio's multi-threaded runtime: 16 tasks ask
/// for one `String` key by `&str`; one gets the guard and holds it
/// across a 20 ms `.await` (the guard and the future are `Send`, as
/// `spawn` needs) before inserting; every task gets its value. A guard
/// dropped unused (its task given up) wakes the waiters, one of which
/// gets the guard next.
#[test]
fn one_guard_for_many_tasks_on_tokio() {
    let _hang = mmbatch_testkit::hang_guard("one_guard_for_many_tasks_on_tokio");
    let cache = Arc::new(LruCache::<String, usize>::new(64));
    let ask = |loads: Arc<AtomicUsize>| {
        let cache = cache.clone();
        async move {
            match cache.get_or_guard_async("seven").await {
                Ok(v) => v,
                Err(guard) => {
                    assert_eq!(guard.key(), "seven");
                    let v = slow_load(&loads, 70).await;
                    guard.insert(v)
                }
            }
        }
    };
    let rt = tokio_runtime();
    assert_eq!(sixteen_tasks_on_tokio(&rt, ask, 70), 1);
    assert_eq!(cache.stats().loads, 1);
    let ask = |loads: Arc<AtomicUsize>| {
        let cache = cache.clone();
        async move {
            match cache.get_or_guard_async("eight").await {
                Ok(v) => v,
                Err(guard) => {
                    // The first to load gives up; the next one loads.
                    if loads.fetch_add(1, Ordering::SeqCst) == 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        drop(guard);
                        return 80;
                    }
                    guard.insert(80)
                }
            }
        }
    };
    assert_eq!(sixteen_tasks_on_tokio(&rt, ask, 80), 2);
    assert_eq!(cache.get("eight"), Some(80));
}

/// `get_or_insert_async_if` on tokio: 16 tasks find a cached value their
/// `replace_if` refuses: one load replaces it, every task gets the new
/// value.
#[test]
fn one_reload_of_a_refused_value_for_many_tasks_on_tokio() {
    let _hang =
        mmbatch_testkit::hang_guard("one_reload_of_a_refused_value_for_many_tasks_on_tokio");
    let cache = Arc::new(LruCache::<u64, i64>::new(64));
    cache.insert(7, -1);
    let ask = |loads: Arc<AtomicUsize>| {
        let cache = cache.clone();
        async move {
            cache
                .get_or_insert_async_if(7, slow_load(&loads, 70), |v| *v < 0)
                .await
        }
    };
    assert_eq!(sixteen_tasks_on_tokio(&tokio_runtime(), ask, 70), 1);
    assert_eq!(cache.get(&7), Some(70));
}

/// On one thread (futures' `LocalPool`), shared errors asked: the first
/// task's load fails after its seven waiters are in, and each of them
/// returns that error (one `Arc`); a ninth task, of the plain form, starts
/// over and loads.
#[test]
fn a_shared_error_reaches_every_waiting_task() {
    let _hang = mmbatch_testkit::hang_guard("a_shared_error_reaches_every_waiting_task");
    use futures_executor::LocalPool;
    use futures_util::task::LocalSpawnExt as _;
    #[derive(Debug)]
    struct Down;
    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    let cache = Arc::new(LruCache::<u64, u64>::new(64));
    let loads = Arc::new(AtomicUsize::new(0));
    let shared = Arc::new(std::sync::Mutex::new(Vec::new()));
    for _ in 0..8 {
        let (cache, loads, shared) = (cache.clone(), loads.clone(), shared.clone());
        spawner
            .spawn_local(async move {
                let r = cache
                    .try_get_or_insert_async_shared(3, async {
                        loads.fetch_add(1, Ordering::SeqCst);
                        Turns(3).await;
                        Err::<u64, _>(Down)
                    })
                    .await;
                shared.lock().unwrap().push(r);
            })
            .unwrap();
    }
    let plain = Arc::new(std::sync::Mutex::new(None));
    {
        let (cache, loads, plain) = (cache.clone(), loads.clone(), plain.clone());
        spawner
            .spawn_local(async move {
                let r = cache
                    .try_get_or_insert_async(3, async {
                        loads.fetch_add(1, Ordering::SeqCst);
                        Ok::<u64, Down>(30)
                    })
                    .await;
                *plain.lock().unwrap() = Some(r.unwrap());
            })
            .unwrap();
    }
    pool.run_until_stalled();
    let shared = shared.lock().unwrap();
    assert_eq!(shared.len(), 8, "tasks left unfinished (a lost wake-up)");
    let errors: Vec<_> = shared.iter().map(|r| r.as_ref().unwrap_err()).collect();
    assert!(errors.iter().all(|e| Arc::ptr_eq(e, errors[0])));
    assert_eq!(*plain.lock().unwrap(), Some(30));
    assert_eq!(loads.load(Ordering::SeqCst), 2);
}

/// The shared-error forms by a borrowed key (`&str` for a `String`
/// key): four tasks waiting on a failing load get its one error; the
/// blocking form by reference then loads and caches.
#[test]
fn a_shared_error_reaches_waiters_by_a_borrowed_key() {
    let _hang = mmbatch_testkit::hang_guard("a_shared_error_reaches_waiters_by_a_borrowed_key");
    use futures_executor::LocalPool;
    use futures_util::task::LocalSpawnExt as _;
    #[derive(Debug)]
    struct Down;
    let mut pool = LocalPool::new();
    let cache = Arc::new(LruCache::<String, u64>::new(64));
    let loads = Arc::new(AtomicUsize::new(0));
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    for _ in 0..4 {
        let (cache, loads, results) = (cache.clone(), loads.clone(), results.clone());
        pool.spawner()
            .spawn_local(async move {
                let r = cache
                    .try_get_or_insert_async_shared_ref("key", async {
                        loads.fetch_add(1, Ordering::SeqCst);
                        Turns(3).await;
                        Err::<u64, _>(Down)
                    })
                    .await;
                results.lock().unwrap().push(r);
            })
            .unwrap();
    }
    pool.run_until_stalled();
    let results = results.lock().unwrap();
    assert_eq!(results.len(), 4, "tasks left unfinished");
    let errors: Vec<_> = results.iter().map(|r| r.as_ref().unwrap_err()).collect();
    assert!(errors.iter().all(|e| Arc::ptr_eq(e, errors[0])));
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    let r: Result<u64, Arc<Down>> = cache.try_get_or_insert_shared_ref("key", || Ok(7));
    assert_eq!((r.unwrap(), cache.get("key")), (7, Some(7)));
}

/// The fallible async `_if` loader: a refused value is loaded again and
/// replaced; a failing load returns its error and leaves the cached
/// value; an accepted value runs no loader.
#[test]
fn try_get_or_insert_async_if_reloads_or_leaves_the_value() {
    let cache = LruCache::<u8, i64>::new(16);
    futures_executor::block_on(async {
        cache.insert(1, -1);
        let r = cache
            .try_get_or_insert_async_if(1, async { Err("down") }, |v| *v < 0)
            .await;
        assert_eq!((r, cache.get(&1)), (Err("down"), Some(-1)));
        let r = cache
            .try_get_or_insert_async_if(1, async { Ok::<_, &str>(7) }, |v| *v < 0)
            .await;
        assert_eq!((r, cache.get(&1)), (Ok(7), Some(7)));
        let r = cache
            .try_get_or_insert_async_if(1, async { Err("not asked") }, |v| *v < 0)
            .await;
        assert_eq!(r, Ok(7));
    });
    assert_eq!(cache.stats().loads, 2);
}

/// A waiting future dropped before the load lands (a request that timed
/// out) takes its waker out of the load's room: with a load hung for
/// good, the wakers of every timed-out waiter (and the tasks they keep
/// alive) used to pile up until it landed. Polled by hand, each waiter
/// with a waker of its own whose references are counted.
#[test]
fn a_dropped_waiter_leaves_no_waker_behind() {
    struct Counted;
    impl std::task::Wake for Counted {
        fn wake(self: Arc<Self>) {}
    }
    let cache: LruCache<u32, u32> = LruCache::new(16);
    let noop = std::task::Waker::from(Arc::new(Counted));
    let mut cx = Context::from_waker(&noop);
    let mut loader = Box::pin(cache.get_or_insert_async(7, async {
        Never.await;
        1
    }));
    assert!(loader.as_mut().poll(&mut cx).is_pending(), "the load hangs");
    let waker = Arc::new(Counted);
    for _ in 0..3 {
        let w = std::task::Waker::from(waker.clone());
        let mut cx = Context::from_waker(&w);
        let mut waiter = Box::pin(cache.get_or_insert_async(7, async { 2 }));
        assert!(waiter.as_mut().poll(&mut cx).is_pending(), "it waits");
        // Polled again, it keeps one registration.
        assert!(waiter.as_mut().poll(&mut cx).is_pending());
        drop(waiter);
    }
    assert_eq!(
        Arc::strong_count(&waker),
        1,
        "wakers of dropped waiters still held by the load's room"
    );
    drop(loader);
}

/// A waiting future polled again with another waker (a task moved to
/// another executor thread) is woken through the new one, and the room
/// lets the old one go.
#[test]
fn a_waiter_repolled_with_a_new_waker_is_woken_by_it() {
    struct Flag(std::sync::atomic::AtomicBool);
    impl std::task::Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let cache: LruCache<u32, u32> = LruCache::new(16);
    let guard = cache.get_or_guard(&7).unwrap_err();
    let (a, b) = (Arc::new(Flag(false.into())), Arc::new(Flag(false.into())));
    let mut waiter = Box::pin(cache.get_or_insert_async(7, async { 2 }));
    for flag in [&a, &b] {
        let w = std::task::Waker::from(flag.clone());
        assert!(
            waiter
                .as_mut()
                .poll(&mut Context::from_waker(&w))
                .is_pending()
        );
    }
    assert_eq!(Arc::strong_count(&a), 1, "the old waker let go");
    assert_eq!(guard.insert(1), 1);
    assert!(b.0.load(Ordering::SeqCst), "woken through the new waker");
    assert!(!a.0.load(Ordering::SeqCst));
    let w = std::task::Waker::from(b.clone());
    assert_eq!(
        waiter.as_mut().poll(&mut Context::from_waker(&w)),
        Poll::Ready(1)
    );
}

/// The panic message of `r`'s error.
fn panic_message(r: std::thread::Result<impl std::fmt::Debug>) -> String {
    let e = r.expect_err("a load of its own key returned");
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// A load whose future asks for its own key (awaits that key's load, a
/// guard of it, or a blocking load of it) would wait for itself for ever:
/// on one thread nothing else runs the outer load, and on many it never
/// completes. It panics, naming the cause, as the blocking form does;
/// seen on the old code: a hang (the hang guard's abort), on futures'
/// executor and on tokio's current-thread runtime alike. Another key's
/// load inside a load is untouched, and the key loads afresh after.
#[test]
fn an_async_load_that_needs_its_own_key_panics_rather_than_hangs() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let _hang = mmbatch_testkit::hang_guard(
        "an_async_load_that_needs_its_own_key_panics_rather_than_hangs",
    );
    let cache: LruCache<u32, u32> = LruCache::new(10);
    let c = &cache;
    let nested = catch_unwind(AssertUnwindSafe(|| {
        futures_executor::block_on(
            c.get_or_insert_async(1, async { c.get_or_insert_async(1, async { 2 }).await + 1 }),
        )
    }));
    assert!(panic_message(nested).contains("its own key"));
    let guarded = catch_unwind(AssertUnwindSafe(|| {
        futures_executor::block_on(
            c.get_or_insert_async(1, async { c.get_or_guard_async(&1).await.map_or(0, |v| v) }),
        )
    }));
    assert!(panic_message(guarded).contains("its own key"));
    let blocking = catch_unwind(AssertUnwindSafe(|| {
        futures_executor::block_on(
            c.get_or_insert_async(1, async { c.get_or_insert_with(1, || 3) }),
        )
    }));
    assert!(panic_message(blocking).contains("same key on its own thread"));
    // tokio's current-thread runtime, as `#[tokio::test]` builds it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let on_tokio = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(
            c.get_or_insert_async(1, async { c.get_or_insert_async(1, async { 2 }).await + 1 }),
        )
    }));
    assert!(panic_message(on_tokio).contains("its own key"));
    // Another key inside a load; then the key, loaded afresh.
    let two = futures_executor::block_on(
        c.get_or_insert_async(2, async { c.get_or_insert_async(3, async { 3 }).await - 1 }),
    );
    assert_eq!((two, c.get(&3)), (2, Some(3)));
    assert_eq!(
        futures_executor::block_on(c.get_or_insert_async(1, async { 5 })),
        5
    );
}
