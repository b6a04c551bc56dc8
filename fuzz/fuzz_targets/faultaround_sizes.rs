//! Fault-around's public API with arbitrary sizes: windows around any page
//! of any VMA, engine page caches and mappings of any length, userfaultfd
//! regions of any length, order and handler count. Every call returns a
//! value or a clear error — never a panic or a wrap — and regions that are
//! made serve their pages. Real allocations are kept small.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use mmbatch_faultaround::{
    Error, MAX_ORDER, MapPages, UffdRegion, Window, Zeroes,
    engine::{FileMapping, PageCache},
};
use mmbatch_lru::{Config, Engine, Pfn};
use mmbatch_testkit::bytes::Bytes;

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);

    // The window: inside the VMA and the page table, at most 2^order.
    let (page, order) = (b.size(), b.u8() as u32 % 12);
    let (start, end) = (b.size(), b.size());
    match Window::around(page, order, start..end) {
        Ok(w) => {
            assert!(w.pages.contains(&page) && w.len() <= 1 << order);
            assert!(w.pages.start >= start && w.pages.end <= end);
        }
        Err(Error::OrderTooLarge { .. }) => assert!(order > MAX_ORDER),
        Err(Error::FaultOutsideVma { .. }) => assert!(!(start..end).contains(&page)),
        Err(e) => panic!("unexpected {e}"),
    }

    // The engine's page cache and a mapping of it.
    let pages = b.size();
    let lru = Arc::new(Engine::new(Config::new(64)).unwrap());
    // Between 2^16 pages and the limit the cache is a real allocation:
    // skipped.
    if !(1 << 16..=u64::from(u32::MAX)).contains(&pages) {
        match PageCache::new(lru, pages) {
            Ok(cache) => {
                for _ in 0..8 {
                    let (i, pfn) = (b.size(), b.u8() as u32 % 80);
                    let _ = cache.insert(i, Pfn(pfn), b.u8() % 2 == 0);
                }
                if let Ok(m) = FileMapping::new(&cache, order) {
                    for _ in 0..8 {
                        let p = b.size();
                        let _ = m.read(p);
                        let _ = m.fault(p);
                    }
                }
            }
            Err(e) => assert!(pages > u64::from(u32::MAX), "{e}"),
        }
    }

    // A userfaultfd region: any length, order and handler count; small
    // ones are touched.
    let len = b.size() as usize;
    let handlers = b.size() as usize % 80;
    match UffdRegion::new(len, order, Zeroes(len as u64), handlers) {
        Ok(r) => {
            if len <= 1 << 22 {
                let at = b.size() as usize % len;
                assert_eq!(r.as_slice()[at], 0);
            }
        }
        Err(Error::NoPermission { .. } | Error::Unsupported { .. }) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
