//! `hang_guard`: a test that outlives its guard aborts the process, naming
//! itself; one whose guard is dropped in time runs on.

use std::time::Duration;

use mmbatch_testkit::{child, hang_guard_within};

#[test]
fn a_test_that_outlives_its_guard_aborts_naming_it() {
    let name = "a_test_that_outlives_its_guard_aborts_naming_it";
    if let Some(run) = child::parent(name, Duration::from_secs(20)) {
        assert_eq!(run.signal(), Some(libc::SIGABRT), "{}", run.output);
        assert!(
            run.output.contains("stuck did not finish in 100ms (hang)"),
            "{}",
            run.output
        );
        return;
    }
    let _hang = hang_guard_within("stuck", Duration::from_millis(100));
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_guard_dropped_in_time_never_aborts() {
    let name = "a_guard_dropped_in_time_never_aborts";
    if let Some(run) = child::parent(name, Duration::from_secs(20)) {
        run.expect_success();
        return;
    }
    drop(hang_guard_within("quick", Duration::from_millis(200)));
    std::thread::sleep(Duration::from_millis(600));
}
