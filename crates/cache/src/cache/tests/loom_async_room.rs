//! The async handoff of single-flight loads: a waiting future registers
//! its waker in the flight's room under the lock the loader's completion
//! takes, so a waiter that saw the load in progress is always woken.
//! Broken on purpose (`poll_wait_racy`: the state checked and the waker
//! registered under two holds of the lock) the completion can fall
//! between them and wake nobody — loom finds the waiter left pending and
//! never woken. (Waited with `block_on`, loom reports that as a deadlock,
//! then aborts unwinding the blocked future; the model polls by hand so
//! the broken variant fails as a test.)
//! And two async callers of one key, through the cache: one loader, both
//! get its value.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use loom::{sync::Arc, thread};

use super::cache;
use crate::{
    Policy,
    cache::flight::{Room, RoomWait},
};

/// A wait through the racy registration.
struct Racy(Arc<Room<u32>>);

impl Future for Racy {
    type Output = Option<u32>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u32>> {
        self.0.poll_wait_racy(cx).map(Result::ok)
    }
}

/// A waker that records being woken.
struct Flag(loom::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, loom::sync::atomic::Ordering::SeqCst);
    }
}

fn handoff(racy: bool) {
    super::model(move || {
        let room = Arc::new(Room::new());
        let done = {
            let room = room.clone();
            thread::spawn(move || room.complete(Ok(5)))
        };
        let flag = std::sync::Arc::new(Flag(loom::sync::atomic::AtomicBool::new(false)));
        let waker = std::task::Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        // The wait lives until the end: dropped, it takes its waker out.
        let mut wait = RoomWait::new(room.clone());
        let polled = if racy {
            Pin::new(&mut Racy(room.clone())).poll(&mut cx)
        } else {
            Pin::new(&mut wait).poll(&mut cx).map(Result::ok)
        };
        done.join().unwrap();
        match polled {
            Poll::Ready(got) => assert_eq!(got, Some(5)),
            Poll::Pending => {
                assert!(
                    flag.0.load(loom::sync::atomic::Ordering::SeqCst),
                    "a waiter left pending was never woken"
                );
                let again = Pin::new(&mut wait).poll(&mut cx);
                assert_eq!(again.map(Result::ok), Poll::Ready(Some(5)));
            }
        }
        drop(wait);
    });
}

#[test]
fn loom_a_waiting_future_is_woken_by_the_load() {
    handoff(false);
}

#[test]
#[should_panic(expected = "never woken")]
fn loom_registering_the_waker_apart_from_the_check_is_caught() {
    handoff(true);
}

/// A wait dropped before its load lands (a request timed out), racing
/// the landing, takes its waker out: none is left registered. Broken on
/// purpose (`RoomWait` without its `Drop`) this fails "a dropped wait's
/// waker stayed".
#[test]
fn loom_a_dropped_wait_leaves_no_waker() {
    super::model(|| {
        let room = Arc::new(Room::new());
        let done = {
            let room = room.clone();
            thread::spawn(move || room.complete(Ok(5)))
        };
        let flag = std::sync::Arc::new(Flag(loom::sync::atomic::AtomicBool::new(false)));
        let waker = std::task::Waker::from(flag);
        let mut cx = Context::from_waker(&waker);
        let mut wait = RoomWait::new(room.clone());
        let _ = Pin::new(&mut wait).poll(&mut cx);
        drop(wait);
        assert_eq!(room.wakers(), 0, "a dropped wait's waker stayed");
        done.join().unwrap();
    });
}

#[test]
fn loom_two_async_callers_one_loader() {
    super::model(|| {
        let (cache, _) = cache(4, Policy::Workingset, true);
        let cache = Arc::new(cache);
        let runs = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let other = {
            let (c, runs) = (cache.clone(), runs.clone());
            thread::spawn(move || {
                loom::future::block_on(c.get_or_insert_async(7, async move {
                    runs.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
                    70
                }))
            })
        };
        let r2 = runs.clone();
        let mine = loom::future::block_on(cache.get_or_insert_async(7, async move {
            r2.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
            70
        }));
        assert_eq!((mine, other.join().unwrap()), (70, 70));
        assert_eq!(
            runs.load(loom::sync::atomic::Ordering::Relaxed),
            1,
            "loader ran twice"
        );
    });
}
