//! Locked regions with arbitrary lengths, offsets, chunk sizes and
//! batches: every call returns a value or a clear error — never a panic, a
//! wrap, or a mapping left behind. Real mappings are kept small (and
//! unlocked, so the memlock limit is not the subject).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmbatch_mlock::{FaultLockedRegion, HugePageSize, LockPolicy, LockedRegion, Pages, accounting};
use mmbatch_testkit::bytes::Bytes;

/// Whether any byte of `[start, start + len)` is mapped now
/// (`/proc/self/maps`).
fn mapped(start: usize, len: usize) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines().any(|l| {
        let range = l.split(' ').next().unwrap_or("");
        let (a, b) = range.split_once('-').unwrap_or(("0", "0"));
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap_or(0),
            usize::from_str_radix(b, 16).unwrap_or(0),
        );
        a < start + len && start < b
    })
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let maps = accounting::map_count();
    let page = accounting::page_size();
    let len = b.size() as usize;
    let pages = match b.u8() % 4 {
        0 => Pages::Transparent,
        // Huge pages are not reserved by the fuzzer: a clear error.
        1 => Pages::Huge(HugePageSize::Size2M),
        _ => Pages::Base,
    };
    // Lengths above 64 MiB that could be mapped are skipped: the fuzzer
    // measures arithmetic, not the host's memory.
    let small = len <= 64 << 20;
    // The regions made, to tell a mapping of theirs left behind from one
    // the sanitizer's allocator made meanwhile (which moves the count too).
    let mut made = Vec::new();
    if small || len > isize::MAX as usize {
        let policy = [LockPolicy::Unlocked, LockPolicy::OnFault][usize::from(b.u8() % 2)];
        match LockedRegion::builder(len).pages(pages).policy(policy).build() {
            Ok(r) => {
                assert!(small && len > 0 && len % r.page_size() == 0);
                made.push((r.as_ptr() as usize, r.len()));
                for _ in 0..4 {
                    let (off, n) = (b.size() as usize, b.size() as usize);
                    // Every refusal prints (its message does arithmetic).
                    if let Err(e) = r.lock_range(off, n) {
                        let _ = e.to_string();
                    }
                    if let Err(e) = r.unlock_range(off, n) {
                        let _ = e.to_string();
                    }
                }
                if let Err(e) = r.unlock_chunked(b.size() as usize) {
                    let _ = e.to_string();
                }
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
                made.push((f.region().as_ptr() as usize, f.region().len()));
                for _ in 0..4 {
                    if let Err(e) = f.read(b.size() as usize) {
                        let _ = e.to_string();
                    }
                }
                assert!(f.faults() <= (len / page) as u64);
            }
        }
    }
    if accounting::map_count() != maps {
        for &(start, len) in &made {
            assert!(!mapped(start, len), "a mapping leaked: {start:#x} + {len}");
        }
    }
});
