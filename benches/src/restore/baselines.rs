//! The `restore` rows that are not a `UffdRegion`: reading the whole image
//! first, the copy floor, and the kernel's own private file mapping.

use std::{os::unix::fs::FileExt, time::Instant};

use super::{Image, PAGE, Sample, check, share, touch};

/// `eager`: the whole image read into anonymous memory, then the working
/// set touched.
pub(super) fn eager(image: &Image, runs: &[(u64, u64)], threads: usize) -> Result<Sample, String> {
    let start = Instant::now();
    let len = image.len();
    let mut m = mmbatch_mmap::Mapping::anonymous(len).map_err(|e| e.to_string())?;
    let mem = m.as_mut_slice().expect("read-write");
    let chunk = 512 * PAGE;
    for (i, c) in mem.chunks_mut(chunk).enumerate() {
        image
            .file
            .read_exact_at(c, (i * chunk) as u64)
            .map_err(|e| e.to_string())?;
    }
    touch(m.as_ptr() as usize, runs, threads);
    finish(start, m.as_ptr(), runs, len as u64)
}

/// `copy-floor`: each thread reads its share of the runs (dealt out in
/// turn, as [`touch`] deals them) from the page cache straight into memory
/// made resident before the clock starts, then the working set is touched.
///
/// `fresh`: the memory mapped but not populated, inside the clock: each
/// page is allocated and zeroed by the kernel as the read lands in it —
/// the floor of a restore into fresh anonymous memory, which every
/// userfaultfd restore is.
pub(super) fn copy_floor(
    image: &Image,
    runs: &[(u64, u64)],
    threads: usize,
    fresh: bool,
) -> Result<Sample, String> {
    let start = Instant::now();
    let m = if fresh {
        mmbatch_mmap::Mapping::anonymous(image.len())
    } else {
        mmbatch_mmap::Mapping::populated(image.len())
    }
    .map_err(|e| e.to_string())?;
    let (file, base) = (&image.file, m.as_ptr() as usize);
    let start = if fresh { start } else { Instant::now() };
    let copied: std::io::Result<()> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mine: Vec<_> = runs.iter().skip(t).step_by(threads).copied().collect();
                s.spawn(move || {
                    for (first, n) in mine {
                        let at = first as usize * PAGE;
                        // SAFETY: the run lies inside `m`, resident and
                        // writable; the threads' runs are disjoint.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(
                                (base + at) as *mut u8,
                                n as usize * PAGE,
                            )
                        };
                        if fresh {
                            // Allocated in one call a run, as a restore
                            // would, not a fault a page.
                            // SAFETY: `dst` is a run of `m`'s own pages.
                            let r = unsafe {
                                libc::madvise(
                                    dst.as_mut_ptr().cast(),
                                    dst.len(),
                                    libc::MADV_POPULATE_WRITE,
                                )
                            };
                            if r != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                        }
                        file.read_exact_at(dst, at as u64)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("a copying thread panicked"))
    });
    copied.map_err(|e| e.to_string())?;
    touch(base, runs, threads);
    let bytes_read = runs.iter().map(|r| r.1).sum::<u64>() * PAGE as u64;
    finish(start, m.as_ptr(), runs, bytes_read)
}

/// `file-mapping`: a private mapping of the image, read; `cow`: written
/// too, so each page is copied out of the page cache on its write fault.
pub(super) fn file_mapping(
    image: &Image,
    runs: &[(u64, u64)],
    threads: usize,
    cow: bool,
) -> Result<Sample, String> {
    let start = Instant::now();
    let prot = if cow {
        mmbatch_mmap::ProtFlags::READ | mmbatch_mmap::ProtFlags::WRITE
    } else {
        mmbatch_mmap::ProtFlags::READ
    };
    // SAFETY: the image is this experiment's own file; nothing writes or
    // truncates it while mapped (a private mapping's writes go to copies).
    let m = unsafe {
        mmbatch_mmap::Mapping::file(
            std::os::fd::AsFd::as_fd(&image.file),
            0,
            image.len(),
            prot,
            mmbatch_mmap::MapFlags::PRIVATE,
        )
    }
    .map_err(|e| e.to_string())?;
    if cow {
        touch_write(m.as_ptr() as usize, runs, threads);
    } else {
        touch(m.as_ptr() as usize, runs, threads);
    }
    finish(start, m.as_ptr(), runs, 0)
}

/// Stops a row's clock once its working set has been touched, then checks
/// the memory at `base` against the image (untimed).
fn finish(
    start: Instant,
    base: *const u8,
    runs: &[(u64, u64)],
    bytes_read: u64,
) -> Result<Sample, String> {
    let sample = Sample {
        elapsed_s: start.elapsed().as_secs_f64(),
        bytes_read,
        ..Sample::default()
    };
    check(base, runs)?;
    Ok(sample)
}

/// As [`touch`], writing each page's first byte back as it was read: a
/// write fault per page.
fn touch_write(base: usize, runs: &[(u64, u64)], threads: usize) {
    std::thread::scope(|s| {
        for t in 0..threads {
            let pages = share(runs, t, threads);
            s.spawn(move || {
                for p in pages {
                    let at = (base + p as usize * PAGE) as *mut u8;
                    // SAFETY: inside the caller's writable mapping of the
                    // image.
                    let b = unsafe { std::ptr::read_volatile(at) };
                    // SAFETY: as above; the byte written is the one read.
                    unsafe { std::ptr::write_volatile(at, b) };
                }
            });
        }
    });
}
