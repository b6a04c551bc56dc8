//! Replays the shared traces interleaved, as programs sharing one cache
//! would issue them (the LIRS paper's multi-program traces are such
//! mixes), into `LruCache` and its peers, read-through, and prints the
//! hit ratio of each beside OPT, exact LRU, quick_cache and moka, marking
//! where a policy falls more than half a point below the best of the last
//! three: `cargo run --release -p mmbatch-benches --example trace_mixes
//! [NAME]` (about 5 s). No mix was used to tune the policy.
//!
//! Each mix takes the traces' requests in bursts (1 to `2 * CHUNK`
//! requests, from a trace drawn at random in proportion to the requests
//! it has left, so that all of them run out together), each trace's keys
//! kept apart, the ARC traces cut to their first 400 000 requests; every
//! request counts. `CHUNK=200` (the default) sets the bursts; `NAME`
//! keeps the mixes whose name contains it;
//! `SIZES=250,1000,3000` sets the cache sizes; `REPS=3` runs each policy
//! three times (each with its own random hasher seed) and prints the
//! median with the least and greatest; `LAB_POLICY=adaptive,lirs` picks
//! the policies (`cache::policies`' names; `adaptive` alone by default).
//! The figures in docs/cache.md ("Unseen shapes: the shared traces
//! interleaved")
//! come from here.

use mmbatch_benches::cache_hits::{lab_policies, lab_row, next_uses, read_trace, traces_dir};

/// The mixes, each the shared traces' names joined by `+`.
const MIXES: [&str; 10] = [
    "lirs-cs+lirs-ps",
    "lirs-gli+lirs-sprite",
    "lirs-cs+lirs-gli+lirs-ps",
    "lirs-ps+lirs-sprite",
    "lirs-multi1+lirs-sprite",
    "lirs-cs+lirs-sprite",
    "lirs-gli+lirs-ps+lirs-sprite+lirs-cs",
    "OLTP+lirs-cs",
    "OLTP+lirs-gli",
    "P3+lirs-ps",
];

/// The most requests taken from each trace.
const MAX_REQUESTS: usize = 400_000;

/// Spreads keys over the hash space (each trace's keys offset first).
const H: u64 = 0x9E37_79B9_7F4A_7C15;

/// xorshift64: the bursts' order and lengths, fixed per run.
struct R(u64);
impl R {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The requests of `mix`, interleaved in bursts of 1 to `2 * chunk`.
fn interleave(mix: &str, chunk: u64) -> Vec<u64> {
    let parts: Vec<Vec<u64>> = mix
        .split('+')
        .enumerate()
        .map(|(i, name)| {
            let path = traces_dir().join(format!("{name}.lis.zst"));
            let trace = read_trace(&path, MAX_REQUESTS)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let apart = (i as u64 + 1) << 40;
            trace
                .into_iter()
                .map(|k| (k + apart).wrapping_mul(H))
                .collect()
        })
        .collect();
    let mut at = vec![0usize; parts.len()];
    let mut r = R(12345);
    let total: usize = parts.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        // The next burst's trace in proportion to the requests it has
        // left, so that the traces run out together and the whole mix is
        // interleaved (drawn uniformly, a short trace ended early and the
        // rest of the mix was the long one alone).
        let mut pick = r.below((total - out.len()) as u64) as usize;
        let i = (0..parts.len())
            .find(|&i| {
                let left = parts[i].len() - at[i];
                pick < left || {
                    pick -= left;
                    false
                }
            })
            .expect("a trace with requests left");
        let end = (at[i] + 1 + r.below(2 * chunk) as usize).min(parts[i].len());
        out.extend_from_slice(&parts[i][at[i]..end]);
        at[i] = end;
    }
    out
}

fn main() {
    let only = std::env::args().nth(1);
    let env = |name: &str| std::env::var(name).ok();
    let ours = lab_policies();
    let sizes: Vec<usize> = env("SIZES").map_or(vec![250, 1000, 3000], |v| {
        v.split(',')
            .map(|x| x.parse().expect("SIZES: numbers"))
            .collect()
    });
    let reps: usize = env("REPS").map_or(3, |v| v.parse().expect("REPS: a number"));
    let chunk: u64 = env("CHUNK").map_or(200, |v| v.parse().expect("CHUNK: a number"));
    for mix in MIXES {
        if only.as_deref().is_some_and(|o| !mix.contains(o)) {
            continue;
        }
        let t = interleave(mix, chunk.max(1));
        let next = next_uses(&t);
        for &c in &sizes {
            let label = format!("{mix:37} {c:5}");
            println!("{}", lab_row(&label, &t, &next, c, 0, &ours, reps));
        }
    }
}
