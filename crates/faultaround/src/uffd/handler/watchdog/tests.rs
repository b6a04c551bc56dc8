//! The watchdog's handoffs that need a region's threads but no loom.

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use mmbatch_testkit::child;

use super::super::Fault;
use crate::UffdRegion;

const PAGE: usize = 4096;

/// A handler the watchdog claimed that leaves (every serving place taken)
/// while a fault waits in the deferred queue wakes a sleeping handler for
/// it: the nudge that queued the fault may have been read by the leaving
/// handler just before it stalled (docs/mutants.md, `back_from_stuck`),
/// and with it unpassed the fault's reader would wait until some other
/// fault woke a handler. The state is the one the claimed handler meets
/// when its source call returns between the watchdog's claim and its
/// count: both serving handlers asleep in `poll`, the nudge read, a fault
/// queued (the claimed thread is the test's, calling `back_from_stuck`).
#[test]
fn a_handler_leaving_after_a_stall_wakes_a_sleeping_one_for_a_queued_fault() {
    const NAME: &str = "uffd::handler::watchdog::tests::\
         a_handler_leaving_after_a_stall_wakes_a_sleeping_one_for_a_queued_fault";
    // In a child, bounded: a region whose handlers cannot be stopped (a
    // blocking userfaultfd) must fail the test, not hang it.
    if let Some(run) = child::parent(NAME, Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    let image: Vec<u8> = (0..8 * PAGE).map(|b| (b / PAGE + 1) as u8).collect();
    let r = UffdRegion::builder(8 * PAGE)
        .handlers(2)
        .build(image)
        .unwrap();
    let s = &r.shared;
    // Both handlers start with nothing served and sleep in `poll` (one
    // still at the top of its loop would pop the fault without a nudge).
    mmbatch_testkit::wait_until(
        "the handlers' sleep",
        child::scaled(Duration::from_secs(5)),
        || mmbatch_testkit::threads_named_asleep("uffd-handler-") == 2,
    );
    // The claimed thread: a third, in a slot of its own (as a claimed
    // replacement would be), counted stuck as the watchdog's claim counts it.
    let me = s.watch.free.lock().unwrap().pop().unwrap();
    s.watch.stuck.fetch_add(1, Ordering::AcqRel);
    let page = 5;
    s.deferred.lock().unwrap().push_back(Fault {
        addr: s.addr(page) as usize,
        minor: false,
    });
    assert!(
        !s.back_from_stuck(me),
        "two handlers serve: the claimed one must leave"
    );
    let until = Instant::now() + child::scaled(Duration::from_secs(5));
    while !s.resident(page as usize, 1)[0] && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        s.resident(page as usize, 1)[0],
        "the queued fault's page was not served within 5 s: no sleeping handler was woken for it"
    );
    assert!(s.deferred.lock().unwrap().is_empty());
    assert_eq!(s.watch.stuck.load(Ordering::Acquire), 0);
    assert_eq!(r.as_slice()[page as usize * PAGE], 6);
    drop(r);
    std::process::exit(0);
}
