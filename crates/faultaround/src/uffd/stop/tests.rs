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
