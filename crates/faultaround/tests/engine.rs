//! The engine's file mapping (feature `engine`): bad input is a clear
//! error.

use std::sync::Arc;

use mmbatch_faultaround::{
    Error, MapPages,
    engine::{FileMapping, PageCache},
};
use mmbatch_lru::{Config, Engine, Pfn};

/// The engine's page cache: an index past the file used to panic after
/// `lru_add` took the frame (leaking it); a slow-path fault outside the
/// mapping panicked instead of returning `FaultOutsideVma`.
#[test]
fn engine_page_cache_refuses_out_of_range_pages() {
    let lru = Arc::new(Engine::new(Config::new(8)).unwrap());
    let cache = PageCache::new(lru.clone(), 4).unwrap();
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache.insert(4, Pfn(0), true)
    }));
    let e = e.expect("no panic").unwrap_err();
    println!("{e}");
    // The frame was not taken: it can still be used.
    cache.insert(0, Pfn(0), true).unwrap();
    let m = FileMapping::new(&cache, 0).unwrap();
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.fault(100)));
    let e = e.expect("no panic").unwrap_err();
    assert!(matches!(e, Error::FaultOutsideVma { page: 100, .. }), "{e}");
    assert!(m.read(100).is_err());
}

/// A fault maps its page and counts it once; a file of pages is not
/// empty.
#[test]
fn a_fault_maps_its_page_and_counts_it_once() {
    let lru = Arc::new(Engine::new(Config::new(8)).unwrap());
    let cache = PageCache::new(lru, 4).unwrap();
    assert_eq!((cache.len(), cache.is_empty()), (4, false));
    let none = PageCache::new(Arc::new(Engine::new(Config::new(8)).unwrap()), 0).unwrap();
    assert_eq!((none.len(), none.is_empty()), (0, true));
    cache.insert(2, Pfn(0), true).unwrap();
    let m = FileMapping::new(&cache, 0).unwrap();
    m.fault(2).unwrap();
    assert_eq!(m.mapped(), 1);
    m.fault(2).unwrap();
    assert_eq!(m.mapped(), 1, "a page mapped already is not mapped again");
}

/// At order 0 a read fault takes the slow path alone, one page-table
/// lock, as `do_read_fault` calls `do_fault_around` only for a window of
/// more than one page: no fault-around pass over the faulting page first.
#[test]
fn order_zero_takes_no_fault_around_pass() {
    let lru = Arc::new(Engine::new(Config::new(8)).unwrap());
    let cache = PageCache::new(lru, 4).unwrap();
    // Page 1 cached but not read yet: fault-around could not map it.
    cache.insert(1, Pfn(1), false).unwrap();
    let m = FileMapping::new(&cache, 0).unwrap();
    let locks = m.pte_locks();
    assert_eq!(m.read(1).unwrap(), Pfn(1));
    assert_eq!((m.faults(), m.mapped()), (1, 1));
    assert_eq!(
        m.pte_locks() - locks,
        1,
        "one page-table lock for the fault"
    );
}

/// Fault-around maps only pages whose read has completed, as
/// `filemap_map_pages` skips a page not `PageUptodate`: a page cached but
/// still being read is left to its own fault, which reads it (and counts
/// the read) before mapping it.
#[test]
fn fault_around_skips_a_page_not_up_to_date() {
    let lru = Arc::new(Engine::new(Config::new(8)).unwrap());
    let cache = PageCache::new(lru, 4).unwrap();
    for i in 0..4 {
        cache.insert(i, Pfn(i as u32), i != 1).unwrap();
    }
    let m = FileMapping::new(&cache, 2).unwrap();
    assert_eq!(m.read(0).unwrap(), Pfn(0));
    assert_eq!((m.faults(), m.mapped()), (1, 3), "pages 0, 2 and 3, not 1");
    assert_eq!(cache.reads(), 0);
    assert_eq!(m.read(1).unwrap(), Pfn(1));
    assert_eq!((m.faults(), m.mapped(), cache.reads()), (2, 4, 1));
}

/// A fault on a page whose lock another holds (a read in flight, as
/// `filemap_fault` finds a locked folio) waits for the lock, then maps
/// it; it never takes over or drops the other's lock.
#[test]
fn a_fault_waits_for_the_page_lock() {
    let lru = Arc::new(Engine::new(Config::new(8)).unwrap());
    let cache = PageCache::new(lru.clone(), 4).unwrap();
    cache.insert(1, Pfn(1), true).unwrap();
    let m = FileMapping::new(&cache, 0).unwrap();
    assert!(lru.trylock_frame(Pfn(1)).unwrap());
    std::thread::scope(|s| {
        let fault = s.spawn(|| m.read(1));
        // `read` counts the fault before it takes it. Should it never be
        // counted, the lock is let go before the panic: the scope joins
        // the fault's thread, which would wait for it for good.
        let counted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            mmbatch_testkit::wait_until("the fault", std::time::Duration::from_secs(10), || {
                m.faults() == 1
            })
        }));
        if let Err(e) = counted {
            lru.unlock_frame(Pfn(1)).unwrap();
            std::panic::resume_unwind(e);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!fault.is_finished(), "the fault did not wait for the lock");
        assert!(lru.is_locked(Pfn(1)).unwrap(), "the fault dropped our lock");
        lru.unlock_frame(Pfn(1)).unwrap();
        fault.join().unwrap().unwrap();
    });
    assert_eq!(m.mapped(), 1);
    assert!(!lru.is_locked(Pfn(1)).unwrap(), "the fault kept the lock");
}
