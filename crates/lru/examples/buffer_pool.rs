//! A small buffer pool on the engine: loader threads read pages into free
//! frames and touch hot ones, a reclaimer keeps free frames available under
//! pressure, and a few pages are pinned with mlock.
//!
//! `cargo run --release -p mmbatch-lru --example buffer_pool`

use std::sync::Mutex;

use mmbatch_lru::{Config, Engine, Event, LruList, Pfn};

const FRAMES: u32 = 4096;
const THREADS: u32 = 4;
const READS_PER_THREAD: u32 = 50_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lru = Engine::new(Config::new(FRAMES as usize))?;
    let free: Mutex<Vec<Pfn>> = Mutex::new((0..FRAMES).map(Pfn).collect());
    // Pin the first 16 frames: e.g. a pool's own metadata.
    for _ in 0..16 {
        let pfn = free.lock().unwrap().pop().expect("free frames at start");
        lru.lru_add(pfn)?;
        lru.mlock(pfn)?;
    }
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (lru, free) = (&lru, &free);
            s.spawn(move || {
                let mut x = 0x2545_f491_u32 ^ t;
                for _ in 0..READS_PER_THREAD {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    // Load a page into a free frame, reclaiming when short.
                    let frame = loop {
                        if let Some(pfn) = free.lock().unwrap().pop() {
                            break pfn;
                        }
                        let mut freed = Vec::new();
                        lru.shrink(0, 32, |pfn| {
                            freed.push(pfn); // write back if dirty, then reuse
                            true
                        })
                        .expect("node 0");
                        lru.lru_add_drain(); // survivors' moves, this thread's adds
                        free.lock().unwrap().extend(freed);
                    };
                    lru.lru_add(frame).expect("a free frame");
                    // One page in eight is hot: touched twice, so activated.
                    if x % 8 == 0 {
                        lru.mark_accessed(frame).unwrap();
                        lru.mark_accessed(frame).unwrap();
                    }
                }
                lru.lru_add_drain();
            });
        }
    });
    lru.lru_add_drain_all();
    lru.check_invariants()?;
    let [inactive, active, unevictable] = lru.list_sizes(0)?;
    let s = lru.stats();
    println!("frames: {FRAMES}, free {}", free.lock().unwrap().len());
    println!("lists: inactive {inactive}, active {active}, unevictable {unevictable}");
    for e in [Event::Activate, Event::Scan, Event::Steal, Event::Culled] {
        println!("{:>24} {}", e.name(), s.event(e));
    }
    println!(
        "lru_lock acquisitions: {} for {} batched ops ({} batches, {} drains)",
        s.lock_acquisitions, s.batches.ops, s.batches.batches, s.batches.drains
    );
    assert_eq!(unevictable, 16, "pinned pages are never reclaimed");
    assert!(
        lru.list(0, LruList::Unevictable)?
            .iter()
            .all(|p| p.0 >= FRAMES - 16)
    );
    Ok(())
}
