//! Batcher step sequences from several threads, checked after every step
//! against the sequential model the proptest uses.
#![no_main]

use libfuzzer_sys::fuzz_target;

use mmbatch_models::batcher as model;

use model::{KEYS, Step, THREADS};

fuzz_target!(|data: &[u8]| {
    let steps: Vec<Step> = data
        .chunks(2)
        .take(200)
        .map(|c| {
            let (op, arg) = (c[0], c.get(1).copied().unwrap_or(0));
            let t = usize::from(arg) % THREADS;
            let k = (arg >> 4) % KEYS;
            match op % 16 {
                0..=9 => Step::Queue(t, k),
                10 => Step::ApplyNow(t, k),
                11 | 12 => Step::DrainLocal(t),
                13 => Step::DrainAll(t),
                14 => Step::Disable(t),
                _ => Step::Enable(t),
            }
        })
        .collect();
    if let Err(e) = model::run(&steps) {
        panic!("{e}");
    }
});
