//! `cache-memory` end to end: the `repro` binary re-executed as a child
//! per cache, at the smoke run's scale.

use std::path::Path;

use cache_memory::Which;
use mmbatch_benches::{Config, Quiet, cache_memory};

#[test]
fn each_cache_is_measured_in_a_child_of_repro() {
    let cfg = Config {
        scale: 0.001,
        threads: None,
        samples: 1,
    };
    let r = cache_memory::run_with_exe(Path::new(env!("CARGO_BIN_EXE_repro")), &cfg, &mut Quiet);
    // Three workloads, a row per cache each, and the payload row of the
    // strings workload.
    let caches = Which::CACHES.len();
    assert_eq!(r.rows.len(), 3 * caches + 1, "{:?}", r.notes);
    for which in Which::CACHES {
        assert!(
            r.rows.iter().any(|row| row.name.contains(which.name())),
            "no row for {}: {:?}",
            which.name(),
            r.notes
        );
    }
    for row in &r.rows {
        assert_eq!(row.samples_s.len(), 1, "{}: {:?}", row.name, r.notes);
        let bytes = row.counters["bytes_per_entry"];
        // More than the entry itself, less than a page per entry.
        assert!((16.0..4096.0).contains(&bytes), "{}: {bytes}", row.name);
    }
    let payload = r.row("payload/string16-vec64/entries-16384").unwrap();
    // 16 + 64 bytes of buffers at least.
    assert!(payload.counters["payload_heap_bytes_per_entry"] >= 80.0);
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("target: LruCache <= 64 bytes")),
        "{:?}",
        r.notes
    );
}
