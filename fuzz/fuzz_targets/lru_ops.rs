//! LRU engine operation sequences from several threads, under modes chosen
//! by the first byte, checked after every step against the sequential
//! model the proptest uses (lists in order, flags, references, counters,
//! invariants).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmbatch_lru::{Mode, Modes};

use mmbatch_models::engine as model;

use model::{FRAMES, Step, THREADS};

fuzz_target!(|data: &[u8]| {
    let Some((&m, rest)) = data.split_first() else { return };
    let mode = |bit: u8| if m & (1 << bit) != 0 { Mode::Immediate } else { Mode::Batched };
    let modes = Modes {
        lru_add: mode(0),
        activate: mode(1),
        deactivate: mode(2),
        rotate: mode(3),
        mlock: mode(4),
    };
    let steps: Vec<Step> = rest
        .chunks(2)
        .take(300)
        .map(|c| {
            let (op, arg) = (c[0], c.get(1).copied().unwrap_or(0));
            let t = usize::from(op >> 4) % THREADS;
            let p = u32::from(arg) % FRAMES;
            match op % 16 {
                0 | 1 => Step::Add(t, p),
                2..=4 => Step::Mark(t, p),
                5 => Step::Activate(t, p),
                6 => Step::Deactivate(t, p),
                7 => Step::Rotate(t, p),
                8 => Step::Isolate(t, p),
                9 => Step::Putback(t, p),
                10 => Step::Mlock(t, p),
                11 => Step::Munlock(t, p),
                12 | 13 => Step::Drain(t),
                _ => Step::Shrink(t, arg % 6, arg.rotate_left(3)),
            }
        })
        .collect();
    if let Err(e) = model::run(modes, &steps) {
        panic!("{e}");
    }
});
