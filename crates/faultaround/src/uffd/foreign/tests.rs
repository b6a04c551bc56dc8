//! A foreign handler's build: its ranges made areas, and what it
//! refuses, with the cause.

use super::*;

const P: usize = 4096;

fn r(base: usize, len: usize, offset: u64) -> UffdRange {
    UffdRange { base, len, offset }
}

/// Each event a handler cannot serve is named, and the features a VMM
/// asks for in Firecracker's protocol pass.
#[test]
fn unserved_features_are_named() {
    use linux_raw_sys::general as k;
    let f = |x: u32| u64::from(x);
    assert_eq!(unserved(0), None);
    assert_eq!(unserved(f(k::UFFD_FEATURE_EVENT_REMOVE)), None);
    for (bit, name) in [
        (k::UFFD_FEATURE_EVENT_FORK, "UFFD_FEATURE_EVENT_FORK"),
        (k::UFFD_FEATURE_EVENT_REMAP, "UFFD_FEATURE_EVENT_REMAP"),
        (k::UFFD_FEATURE_SIGBUS, "UFFD_FEATURE_SIGBUS"),
    ] {
        let got = unserved(f(bit | k::UFFD_FEATURE_EVENT_REMOVE));
        assert_eq!(got.map(|(n, _)| n), Some(name));
    }
    // Write-protect faults come from a range registered MODE_WP, not
    // from the feature bit, which a VMM may ask for and never use.
    let wp = f(k::UFFD_FEATURE_PAGEFAULT_FLAG_WP);
    assert_eq!(unserved(wp), None);
    assert_eq!(unserved(wp | f(k::UFFD_FEATURE_WP_ASYNC)), None);
    // Unmap events and the minor-fault features are served (or harmless).
    assert_eq!(
        unserved(f(k::UFFD_FEATURE_EVENT_UNMAP | k::UFFD_FEATURE_MINOR_SHMEM)),
        None
    );
}

#[test]
fn ranges_become_areas_sorted_by_offset() {
    let a = areas(
        &[r(0x20_0000, 2 * P, 4 * P as u64), r(0x10_0000, 4 * P, 0)],
        P,
    )
    .unwrap();
    assert_eq!(
        a,
        [
            Area {
                base: 0x10_0000,
                first: 0,
                pages: 4
            },
            Area {
                base: 0x20_0000,
                first: 4,
                pages: 2
            },
        ]
    );
}

#[test]
fn bad_ranges_are_refused_with_the_cause() {
    let msg = |rs: &[UffdRange]| areas(rs, P).unwrap_err().to_string();
    assert!(msg(&[]).contains("needs the ranges"));
    assert!(msg(&[r(0x1000, 100, 0)]).contains("multiples of the page size"));
    assert!(msg(&[r(0x1001, P, 0)]).contains("multiples of the page size"));
    assert!(msg(&[r(0x1000, P, 7)]).contains("multiples of the page size"));
    assert!(msg(&[r(0x1000, 0, 0)]).contains("not 0"));
    assert!(msg(&[r(usize::MAX & !(P - 1), P, 0)]).contains("runs past the end"));
    assert!(msg(&[r(0x1000, 2 * P, 0), r(0x2000, P, 8 * P as u64)]).contains("overlap in memory"));
    assert!(
        msg(&[r(0x1000, 2 * P, 0), r(0x10_0000, P, P as u64)]).contains("overlap in the source")
    );
}

#[test]
fn a_descriptor_that_is_not_a_userfaultfd_is_refused() {
    let f = std::fs::File::open("/proc/self/stat").unwrap();
    let e = adopt(OwnedFd::from(f)).unwrap_err().to_string();
    assert!(e.contains("not a userfaultfd"), "{e}");
}

/// Write tracking over a page cache is refused before the descriptor
/// is looked at: the VMM's writes to a shared mapping reach the file,
/// and every page would read as written.
#[test]
fn a_page_cache_handler_refuses_write_tracking() {
    let f = std::fs::File::open("/proc/self/stat").unwrap();
    let Err(e) = UffdHandler::builder(OwnedFd::from(f), [r(0x10_0000, P, 0)])
        .track_writes_of(std::process::id())
        .build_over_page_cache()
    else {
        panic!("write tracking over a page cache was accepted");
    };
    assert!(
        matches!(
            e,
            Error::BadSetting {
                setting: "track_writes_of",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("writes reach its file"), "{e}");
}
