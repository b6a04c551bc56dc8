//! `PageTables` as a user maps, unmaps and reads it: what each call
//! returns, where the range ends, and the locks it counts.

use mmbatch_lru::{OutOfRange, PTRS_PER_TABLE, PageTables, Pfn};

#[test]
fn map_and_unmap_return_what_was_there() {
    let pt = PageTables::new(4);
    assert_eq!(pt.map(1, Pfn(7)), Ok(None), "unmapped before");
    assert_eq!(pt.map(1, Pfn(8)), Ok(Some(Pfn(7))), "the frame replaced");
    assert_eq!((pt.lookup(1), pt.peek(1)), (Some(Pfn(8)), Some(Pfn(8))));
    assert_eq!((pt.lookup(0), pt.peek(0)), (None, None));
    assert_eq!(pt.unmap(1), Ok(Some(Pfn(8))));
    assert_eq!(pt.unmap(1), Ok(None), "already unmapped");
    assert_eq!((pt.lookup(1), pt.peek(1)), (None, None));
}

/// The range ends at `len`, also inside a table (here 5 of 512 entries).
#[test]
fn pages_past_the_end_are_out_of_range() {
    let pt = PageTables::new(5);
    assert_eq!((pt.len(), pt.is_empty()), (5, false));
    let past = OutOfRange { vpn: 5, len: 5 };
    assert_eq!(pt.map(5, Pfn(1)), Err(past));
    assert_eq!(pt.unmap(5), Err(past));
    assert_eq!((pt.lookup(5), pt.peek(5)), (None, None));
    assert_eq!(pt.walk(5, 9, |_, _| true), 5, "nothing walked");
    assert_eq!(pt.fill(3, 9, |_, _| Some(Pfn(2))), 2, "filled 3 and 4 only");
    let empty = PageTables::new(0);
    assert!(empty.is_empty());
    assert_eq!(empty.map(0, Pfn(1)), Err(OutOfRange { vpn: 0, len: 0 }));
}

/// Every call that takes a table's lock counts once; `peek`, the MMU's
/// read, takes none. A walk or fill takes one lock for its whole run.
#[test]
fn each_locked_call_counts_one_acquisition() {
    let pt = PageTables::new(2 * PTRS_PER_TABLE as u64);
    assert_eq!(pt.lock_acquisitions(), 0);
    pt.map(0, Pfn(1)).unwrap();
    pt.map(PTRS_PER_TABLE as u64, Pfn(2)).unwrap();
    pt.unmap(0).unwrap();
    assert_eq!(pt.lookup(3), None);
    assert_eq!(pt.peek(3), None);
    assert_eq!(pt.lock_acquisitions(), 4);
    assert_eq!(pt.fill(0, 64, |_, _| Some(Pfn(3))), 64);
    assert_eq!(pt.walk(0, 64, |_, _| true), 64);
    assert_eq!(pt.lock_acquisitions(), 6);
}

/// `fill` and `walk` stay within the first page's table, see what each
/// entry holds, and `fill` sets only what its callback gives a frame for.
#[test]
fn fill_and_walk_stop_at_the_end_of_a_table() {
    let t = PTRS_PER_TABLE as u64;
    let pt = PageTables::new(2 * t);
    pt.map(t - 2, Pfn(9)).unwrap();
    let mut seen = Vec::new();
    let set = pt.fill(t - 3, t + 5, |vpn, now| {
        seen.push((vpn, now));
        now.is_none().then_some(Pfn(vpn as u32))
    });
    assert_eq!(seen, [(t - 3, None), (t - 2, Some(Pfn(9))), (t - 1, None)]);
    assert_eq!(set, 2);
    let frame = |vpn: u64| Some(Pfn(vpn as u32));
    let got: Vec<_> = (t - 3..t + 1).map(|v| pt.peek(v)).collect();
    assert_eq!(got, [frame(t - 3), Some(Pfn(9)), frame(t - 1), None]);
    let mut walked = Vec::new();
    let next = pt.walk(t - 2, t + 2, |vpn, e| {
        walked.push((vpn, e));
        true
    });
    assert_eq!(next, t, "the next table is the next walk's");
    assert_eq!(walked, [(t - 2, Some(Pfn(9))), (t - 1, frame(t - 1))]);
    // The second table from its start.
    assert_eq!(pt.fill(t, t + 2, |vpn, _| frame(vpn)), 2);
    assert_eq!(pt.lookup(t + 1), frame(t + 1));
    assert_eq!(pt.walk(t, 2 * t + 9, |_, _| true), 2 * t);
}

#[test]
fn out_of_range_says_how_large_to_build_them() {
    let e = PageTables::new(5).map(5, Pfn(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "virtual page 5 is outside the page tables (pages 0..5): build them with \
         PageTables::new(6)"
    );
    let far = OutOfRange {
        vpn: mmbatch_lru::MAX_VIRTUAL_PAGES,
        len: 5,
    };
    assert!(
        far.to_string().contains("at most MAX_VIRTUAL_PAGES"),
        "{far}"
    );
}
