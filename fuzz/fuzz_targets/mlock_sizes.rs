//! Locked regions with arbitrary lengths, offsets, chunk sizes and
//! batches: every call returns a value or a clear error — never a panic, a
//! wrap, or a mapping left behind. Real mappings are kept small (and
//! unlocked, so the memlock limit is not the subject).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmbatch_mlock::{FaultLockedRegion, LockPolicy, LockedRegion, Pages, accounting};
use mmbatch_testkit::bytes::Bytes;

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let maps = accounting::map_count();
    let page = accounting::page_size();
    let len = b.size() as usize;
    let pages = match b.u8() % 4 {
        0 => Pages::Transparent,
        // Huge pages are not reserved by the fuzzer: a clear error.
        1 => Pages::Huge2M,
        _ => Pages::Base,
    };
    // Lengths above 64 MiB that could be mapped are skipped: the fuzzer
    // measures arithmetic, not the host's memory.
    let small = len <= 64 << 20;
    if small || len > isize::MAX as usize {
        let policy = [LockPolicy::Unlocked, LockPolicy::OnFault][usize::from(b.u8() % 2)];
        match LockedRegion::builder(len).pages(pages).policy(policy).build() {
            Ok(r) => {
                assert!(small && len > 0 && len % r.page_size() == 0);
                for _ in 0..4 {
                    let (off, n) = (b.size() as usize, b.size() as usize);
                    let _ = r.lock_range(off, n);
                    let _ = r.unlock_range(off, n);
                }
                let _ = r.unlock_chunked(b.size() as usize);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
        let batch = b.size() as usize;
        if small {
            if let Ok(f) = FaultLockedRegion::new(
                LockedRegion::builder(len).policy(LockPolicy::Unlocked),
                batch,
            ) {
                for _ in 0..4 {
                    let _ = f.read(b.size() as usize);
                }
                assert!(f.faults() <= (len / page) as u64);
            }
        }
    }
    assert_eq!(accounting::map_count(), maps, "a mapping leaked");
});
