//! PageVec op sequences against `Vec` with the same capacity, counting
//! drops: contents, order and the number of live items must always agree.
#![no_main]

use std::cell::Cell;

use libfuzzer_sys::fuzz_target;
use mmbatch_pagevec::PageVec;

const N: usize = 8;

struct Tracked<'a>(u8, &'a Cell<usize>);

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.1.set(self.1.get() + 1);
    }
}

fuzz_target!(|data: &[u8]| {
    let drops = Cell::new(0);
    let mut created = 0usize;
    let mut pv: PageVec<Tracked<'_>, N> = PageVec::new();
    let mut model: Vec<u8> = Vec::new();
    let mut bytes = data.iter().copied();
    while let Some(b) = bytes.next() {
        let arg = bytes.next().unwrap_or(0);
        match b % 8 {
            0..=2 => {
                created += 1;
                match pv.try_push(Tracked(arg, &drops)) {
                    Ok(space) => {
                        model.push(arg);
                        assert_eq!(space, N - model.len());
                    }
                    Err(e) => {
                        assert_eq!(model.len(), N);
                        assert_eq!(e.element().0, arg); // handed back, then dropped
                    }
                }
            }
            3 => assert_eq!(pv.pop().map(|t| t.0), model.pop()),
            4 => {
                pv.retain(|t| t.0 & arg != 0);
                model.retain(|v| v & arg != 0);
            }
            5 => {
                let take = usize::from(arg % 10);
                let got: Vec<u8> = pv.drain().take(take).map(|t| t.0).collect();
                let want: Vec<u8> = model.drain(..).take(take).collect();
                assert_eq!(got, want);
            }
            6 => {
                pv.clear();
                model.clear();
            }
            _ => {
                let copy = std::mem::take(&mut pv);
                let take = usize::from(arg % 10);
                let got: Vec<u8> = copy.into_iter().take(take).map(|t| t.0).collect();
                let want: Vec<u8> = model.drain(..).take(take).collect();
                assert_eq!(got, want);
            }
        }
        let now: Vec<u8> = pv.iter().map(|t| t.0).collect();
        assert_eq!(now, model);
        assert_eq!(created - drops.get(), model.len(), "leak or double drop");
    }
    drop(pv);
    assert_eq!(drops.get(), created);
});
