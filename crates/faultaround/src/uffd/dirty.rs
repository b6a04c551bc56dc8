//! Write tracking: the pages a region's process wrote since a moment it
//! chose, from the kernel's userfaultfd write-protect bits. Every page goes
//! in write-protected (`UFFDIO_COPY_MODE_WP`); with `UFFD_FEATURE_WP_ASYNC`
//! the kernel resolves a first write itself, clearing the bit, with no
//! handler round trip — the soft-dirty bit's cost — and `PAGEMAP_SCAN`
//! (Linux 6.7) lists the pages whose bit is clear, and can set it again in
//! the same walk.

use std::{ffi::c_void, ops::Range};

use linux_raw_sys::general::{
    PAGE_IS_PRESENT, PAGE_IS_SWAPPED, PAGE_IS_WRITTEN, PM_SCAN_CHECK_WPASYNC, PM_SCAN_WP_MATCHING,
    page_region, pm_scan_arg,
};
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, opcode};

use super::UffdRegion;
use crate::Error;

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: Opcode = opcode::read_write::<pm_scan_arg>(b'f', 16);

/// Regions one `PAGEMAP_SCAN` call can return.
const BATCH: usize = 256;

/// `PAGEMAP_SCAN` with its argument: returns the regions it filled.
struct Scan<'a>(&'a mut pm_scan_arg);

// SAFETY: the opcode is PAGEMAP_SCAN, whose argument is a `struct
// pm_scan_arg` the kernel reads and updates (`walk_end`), and whose return
// value is the number of `page_region`s written to `vec`, which the caller
// points at a buffer of `vec_len` of them.
unsafe impl Ioctl for Scan<'_> {
    type Output = usize;
    const IS_MUTATING: bool = true;
    fn opcode(&self) -> Opcode {
        PAGEMAP_SCAN
    }
    fn as_ptr(&mut self) -> *mut c_void {
        std::ptr::from_mut(self.0).cast()
    }
    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut c_void) -> rustix::io::Result<usize> {
        Ok(out as usize)
    }
}

impl UffdRegion {
    /// The pages written since the region was built or since the last
    /// [`take_written_pages`](Self::take_written_pages), as sorted,
    /// disjoint ranges of page indices: a page the process (or a system
    /// call on its behalf) wrote, not one the handlers filled. A page
    /// discarded since (`MADV_DONTNEED`) is not reported: it reads as
    /// zeros until written again. Refused
    /// unless the region was built with
    /// [`track_writes`](super::UffdRegionBuilder::track_writes).
    pub fn written_pages(&self) -> Result<Vec<Range<u64>>, Error> {
        self.scan(false)
    }

    /// [`written_pages`](Self::written_pages), and write-protects those
    /// pages again in the same walk of the page table, so the next call
    /// reports only writes after this one: a write racing with the walk
    /// lands in one report or the next, never in neither.
    pub fn take_written_pages(&self) -> Result<Vec<Range<u64>>, Error> {
        self.scan(true)
    }

    fn scan(&self, reset: bool) -> Result<Vec<Range<u64>>, Error> {
        let s = &self.shared;
        if !s.track {
            return Err(Error::BadSetting {
                setting: "track_writes",
                value: "false".into(),
                why: "the region was built without write tracking: build it with \
                      UffdRegionBuilder::track_writes(true)"
                    .into(),
            });
        }
        let sys = |op| move |source| Error::Sys { op, source };
        let pagemap =
            std::fs::File::open("/proc/self/pagemap").map_err(sys("opening /proc/self/pagemap"))?;
        let (base, end) = (s.areas[0].base as u64, (s.areas[0].base + s.len) as u64);
        let mut regions = vec![
            page_region {
                start: 0,
                end: 0,
                categories: 0,
            };
            BATCH
        ];
        let mut out: Vec<Range<u64>> = Vec::new();
        let mut at = base;
        while at < end {
            let mut arg = pm_scan_arg {
                size: std::mem::size_of::<pm_scan_arg>() as u64,
                flags: if reset {
                    u64::from(PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC)
                } else {
                    0
                },
                start: at,
                end,
                walk_end: 0,
                vec: regions.as_mut_ptr() as u64,
                vec_len: BATCH as u64,
                max_pages: 0,
                category_inverted: 0,
                // A hole (a page never filled, or discarded) reads as
                // "written" — no write-protect bit to be clear of — so only
                // pages that are there count.
                category_mask: u64::from(PAGE_IS_WRITTEN),
                category_anyof_mask: u64::from(PAGE_IS_PRESENT | PAGE_IS_SWAPPED),
                return_mask: u64::from(PAGE_IS_WRITTEN),
            };
            // SAFETY: `arg` is a `struct pm_scan_arg` whose `vec` points at
            // `regions`, `BATCH` entries long; the walk covers only our own
            // mapping, which lives as long as `self`.
            let n = unsafe { rustix::ioctl::ioctl(&pagemap, Scan(&mut arg)) }.map_err(|e| {
                Error::Sys {
                    op: "PAGEMAP_SCAN on /proc/self/pagemap (Linux 6.7)",
                    source: e.into(),
                }
            })?;
            let page = s.page as u64;
            for r in &regions[..n.min(BATCH)] {
                let pages = (r.start - base) / page..(r.end - base).div_ceil(page);
                match out.last_mut() {
                    Some(last) if last.end == pages.start => last.end = pages.end,
                    _ => out.push(pages),
                }
            }
            // A full buffer stops the walk early: go on from where it did.
            if arg.walk_end <= at {
                break;
            }
            at = arg.walk_end;
        }
        Ok(out)
    }
}
