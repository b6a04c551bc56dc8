//! A region restored from the same image through three sources, side by
//! side: `cargo run --release -p mmbatch-benches --example source_kinds`
//! (needs a userfaultfd). The image (`MIB` MiB, default 256) is written to
//! `DIR` (default `/dev/shm`); then, for window orders 0, 4 and 9, a
//! region with one handler is built over:
//!
//! - `File`: the image file, each window `pread` into the handler's
//!   buffer and copied from it;
//! - `InMemory(mapped)`: the file mapped read-only (as a
//!   `memmap2::Mmap` would be), each window copied straight from the
//!   mapping;
//! - `InMemory(Arc<[u8]>)`: the image on the heap, copied straight from
//!   it.
//!
//! Every page is read once, in order, and the time to do so gives MiB/s:
//! the median of `REPS` runs (default 7), the three sources interleaved.
//! The file's pages are in the page cache and the mapping is faulted in
//! before the clock (a warm restore). docs/restore.md gives a run.

use std::{fs::File, sync::Arc, time::Instant};

use mmbatch_faultaround::{InMemory, PageSource, UffdRegion};
use mmbatch_mmap::{MapFlags, Mapping, ProtFlags};

/// A mapping's bytes, as `InMemory` takes them.
struct Mapped(Mapping);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice().expect("mapped readable")
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// MiB/s reading every page of a region over `source` once.
fn restore(len: usize, order: u32, source: impl PageSource) -> f64 {
    let region = UffdRegion::new(len, order, source, 1).expect("a userfaultfd");
    let bytes = region.as_slice();
    let start = Instant::now();
    let mut sum = 0u64;
    for at in (0..len).step_by(4096) {
        sum += u64::from(bytes[at]);
    }
    std::hint::black_box(sum);
    len as f64 / f64::from(1 << 20) / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let len = env("MIB", 256) << 20;
    let reps = env("REPS", 7).max(1);
    let dir = std::env::var("DIR").unwrap_or_else(|_| "/dev/shm".to_owned());
    let path = format!("{dir}/mmbatch-source-kinds-{}", std::process::id());
    let image: Vec<u8> = (0..len).map(|i| (i / 4096 * 7 + i % 251) as u8).collect();
    std::fs::write(&path, &image).expect("writing the image");
    let file = File::open(&path).expect("opening the image");
    // SAFETY: the image file is this example's own; nothing writes or
    // truncates it until it is removed at the end.
    let mapping = unsafe {
        Mapping::file(
            std::os::fd::AsFd::as_fd(&file),
            0,
            len,
            ProtFlags::READ,
            MapFlags::SHARED,
        )
    }
    .expect("mapping the image");
    let mapped = Arc::new(Mapped(mapping));
    // Faulted in before the clock, as a warm page cache is.
    let warm: u64 = mapped
        .as_ref()
        .as_ref()
        .iter()
        .step_by(4096)
        .map(|&b| u64::from(b))
        .sum();
    std::hint::black_box(warm);
    let heap: Arc<[u8]> = image.into();
    println!(
        "window order | File (pread) | InMemory(mapped) | InMemory(Arc<[u8]>)   MiB/s, median of {reps}"
    );
    for order in [0, 4, 9] {
        let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
        for _ in 0..reps {
            a.push(restore(len, order, File::open(&path).expect("the image")));
            b.push(restore(len, order, InMemory(SharedMapped(mapped.clone()))));
            c.push(restore(len, order, InMemory(heap.clone())));
        }
        let (a, b, c) = (median(a), median(b), median(c));
        println!(
            "{order:>12} | {a:>12.0} | {b:>9.0} ({:.2}x) | {c:>12.0} ({:.2}x)",
            b / a,
            c / a
        );
    }
    std::fs::remove_file(&path).expect("removing the image");
}

/// One mapping shared by every region built over it.
struct SharedMapped(Arc<Mapped>);

impl AsRef<[u8]> for SharedMapped {
    fn as_ref(&self) -> &[u8] {
        self.0.as_ref().as_ref()
    }
}
