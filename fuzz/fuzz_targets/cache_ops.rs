//! `LruCache` operation sequences under a capacity, policy and batching
//! mode chosen by the first byte, checked after every step against the
//! oracles the property tests use (latest values; the `lru` crate's exact
//! order under `Policy::Lru` with batching off; under `Policy::LirsTinyLfu`
//! a new key refused admission is heard evicted in its own step) and the
//! cache's invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmbatch_cache::Policy;

use mmbatch_models::cache as cache_model;

use cache_model::{Op, run};

fuzz_target!(|data: &[u8]| {
    let Some((&m, rest)) = data.split_first() else { return };
    let capacity = usize::from(m & 0x0f) + 1;
    let policy = [Policy::Workingset, Policy::ActiveInactive, Policy::Lru, Policy::LirsTinyLfu]
        [usize::from(m >> 4) & 3];
    let batching = m & 0x40 == 0;
    let ops: Vec<Op> = rest
        .chunks(2)
        .take(400)
        .map(|c| {
            let (op, arg) = (c[0], c.get(1).copied().unwrap_or(0));
            let k = arg % 32;
            let v = u32::from(op >> 3);
            match op % 8 {
                0 | 1 => Op::Insert(k, v),
                2 | 3 => Op::Get(k),
                4 => Op::Peek(k),
                5 if op & 0x80 != 0 => Op::RemoveIf(k, v),
                5 => Op::Remove(k),
                6 => Op::GetOrInsert(k, v),
                _ if arg == 0xff => Op::Clear,
                _ if arg == 0xfe => Op::Iter,
                _ if arg == 0xfd => Op::Drain,
                _ if arg >= 0xf0 => Op::Retain(arg & 3),
                _ if arg >= 0xe0 => Op::SetCapacity(arg & 15),
                _ => Op::Compute(k, v),
            }
        })
        .collect();
    if let Err(e) = run(capacity, policy, batching, &ops) {
        panic!("capacity {capacity}, {policy:?}, batching {batching}: {e}");
    }
});
