//! A region's drop and its threads. In the library's own tests, which
//! cargo runs first: a thread that never counts itself out makes every
//! later region's drop wait the source timeout, so this is the test that
//! must fail first, in bounded time.

use std::time::Duration;

use mmbatch_testkit::child;

use crate::UffdRegion;

const PAGE: usize = 4096;

/// Dropping a region that served its faults and has none pending stops
/// every thread it started — handlers and watchdog — at once: none is
/// waited for up to the source timeout (30 s by default), as a thread
/// that never counts itself out would be.
#[test]
fn drop_of_an_idle_region_is_prompt() {
    const NAME: &str = "uffd::stop::tests::drop_of_an_idle_region_is_prompt";
    if let Some(run) = child::parent(NAME, Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    let image: Vec<u8> = (0..16 * PAGE)
        .map(|b| (b / PAGE * 7 + b % 251) as u8)
        .collect();
    let r = UffdRegion::builder(16 * PAGE)
        .handlers(2)
        .build(image.clone())
        .unwrap();
    assert_eq!(r.as_slice()[3 * PAGE], image[3 * PAGE]);
    let start = std::time::Instant::now();
    drop(r);
    let took = start.elapsed();
    println!("drop took {took:?}");
    assert!(took < child::scaled(Duration::from_secs(5)), "{took:?}");
    // Counted once their /proc entries are gone, which under TCG lags the
    // join by a moment (the Linux 6.1 guest saw 1 left at once).
    assert_eq!(
        mmbatch_testkit::threads_named_settled("uffd-", 0, child::scaled(Duration::from_secs(1))),
        0
    );
    std::process::exit(0);
}

/// A region shut down and then dropped drops at once: the drop finds its
/// threads already joined and waits for none of them, not the source
/// timeout for threads that are gone.
#[test]
fn drop_after_shutdown_is_prompt() {
    const NAME: &str = "uffd::stop::tests::drop_after_shutdown_is_prompt";
    if let Some(run) = child::parent(NAME, Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    let r = UffdRegion::builder(16 * PAGE)
        .handlers(2)
        .build(vec![7u8; 16 * PAGE])
        .unwrap();
    r.shutdown();
    let start = std::time::Instant::now();
    drop(r);
    let took = start.elapsed();
    println!("drop took {took:?}");
    assert!(took < child::scaled(Duration::from_secs(5)), "{took:?}");
    std::process::exit(0);
}

/// The process's open userfaultfd and eventfd descriptors.
fn uffd_fds() -> usize {
    mmbatch_testkit::open_fds_of(&["userfaultfd", "eventfd"])
}

/// Dropping a handler of a userfaultfd made elsewhere (here by this
/// process, as a VMM makes one) stops its threads and closes the
/// userfaultfd it was given and its eventfd: a VMM's handler process
/// that drops one handler to serve the next VM keeps none of the first's
/// threads or userfaultfd descriptors.
#[test]
fn a_dropped_foreign_handler_leaves_no_thread_or_descriptor() {
    const NAME: &str =
        "uffd::stop::tests::a_dropped_foreign_handler_leaves_no_thread_or_descriptor";
    if let Some(run) = child::parent(NAME, Duration::from_secs(20)) {
        println!("{}", run.output);
        run.expect_success();
        return;
    }
    let image: Vec<u8> = (0..16 * PAGE)
        .map(|b| (b / PAGE * 7 + b % 251) as u8)
        .collect();
    let base = mmbatch_testkit::vmm::map_anonymous(16 * PAGE);
    let before = uffd_fds();
    let uffd = mmbatch_testkit::vmm::userfaultfd(&[(base, 16 * PAGE)], 0);
    let range = crate::UffdRange {
        base: base as usize,
        len: 16 * PAGE,
        offset: 0,
    };
    let h = crate::UffdHandler::builder(uffd, [range])
        .handlers(2)
        .build(image.clone())
        .unwrap();
    // SAFETY: the mapping made above, never unmapped; the handler fills
    // the page before the read returns.
    let got = unsafe { base.wrapping_add(3 * PAGE).read_volatile() };
    assert_eq!(got, image[3 * PAGE]);
    // Its copy of the userfaultfd and the eventfd that wakes its threads.
    assert_eq!(uffd_fds(), before + 2);
    drop(h);
    let left =
        mmbatch_testkit::threads_named_settled("uffd-", 0, child::scaled(Duration::from_secs(2)));
    assert_eq!(left, 0, "handler threads left running");
    assert_eq!(uffd_fds(), before, "descriptors left open");
    std::process::exit(0);
}
