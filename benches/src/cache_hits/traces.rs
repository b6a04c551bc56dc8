//! The ARC paper's traces (`benches/traces/`): where they are and how a
//! line of one becomes requests.

use std::{
    io::{self, BufRead, BufReader},
    path::{Path, PathBuf},
};

/// Where the traces are: `benches/traces` of the source tree.
pub fn traces_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/traces"))
}

/// The keys of the `.lis.zst` trace at `path`, one per page, at most
/// `max_keys` of them: each line `START COUNT IGNORED REQUEST_ID` is the
/// pages `START..START + COUNT`.
pub fn read_trace(path: &Path, max_keys: usize) -> io::Result<Vec<u64>> {
    let file = std::fs::File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let reader = BufReader::new(zstd::Decoder::new(file)?);
    let mut keys = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line?;
        let mut fields = line.split_ascii_whitespace();
        let (Some(start), Some(count)) = (fields.next(), fields.next()) else {
            continue; // a blank line
        };
        let parse = |f: &str| {
            f.parse::<u64>().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} line {}: {f:?}: {e}", path.display(), n + 1),
                )
            })
        };
        let (start, count) = (parse(start)?, parse(count)?);
        for page in start..start + count {
            if keys.len() == max_keys {
                return Ok(keys);
            }
            keys.push(page);
        }
    }
    Ok(keys)
}

/// The mixes `trace_mixes` replays, each the shared traces' names
/// joined by `+` (as [`interleave`] takes them).
pub const MIXES: [&str; 10] = [
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

/// The most requests [`interleave`] takes from each trace.
const MIX_MAX_REQUESTS: usize = 400_000;

/// Spreads keys over the hash space (each trace's keys offset first).
const MIX_SPREAD: u64 = crate::cache::SPREAD;

/// xorshift64: a mix's bursts' order and lengths, fixed per run.
struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The requests of the shared traces named in `mix` (joined by `+`, as
/// `lirs-cs+lirs-ps`) interleaved as programs sharing one cache issue
/// them: bursts of 1 to `2 * chunk` requests, each burst's trace drawn in
/// proportion to the requests it has left so that all of them run out
/// together, each trace's keys kept apart, at most 400 000 requests of
/// each. The same `mix` and `chunk` give the same requests.
pub fn interleave(mix: &str, chunk: u64) -> io::Result<Vec<u64>> {
    let parts = mix
        .split('+')
        .enumerate()
        .map(|(i, name)| {
            let path = traces_dir().join(format!("{name}.lis.zst"));
            let apart = (i as u64 + 1) << 40;
            Ok(read_trace(&path, MIX_MAX_REQUESTS)?
                .into_iter()
                .map(|k| (k + apart).wrapping_mul(MIX_SPREAD))
                .collect::<Vec<u64>>())
        })
        .collect::<io::Result<Vec<_>>>()?;
    let chunk = chunk.max(1);
    let mut at = vec![0usize; parts.len()];
    let mut r = Xorshift(12345);
    let total: usize = parts.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        // Drawn uniformly, a short trace ended early and the rest of the
        // mix was the long one alone.
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
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request of each trace is in the mix once, in its trace's
    /// order, each trace's keys apart, interleaved, and the traces run out
    /// together.
    #[test]
    fn a_mix_keeps_each_traces_requests_in_order() {
        let names = ["lirs-cs", "lirs-ps"];
        let mix = interleave("lirs-cs+lirs-ps", 50).unwrap();
        let mut from = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let t = read_trace(
                &traces_dir().join(format!("{name}.lis.zst")),
                MIX_MAX_REQUESTS,
            )
            .unwrap();
            let apart = (i as u64 + 1) << 40;
            from.push(
                t.into_iter()
                    .map(|k| (k + apart).wrapping_mul(MIX_SPREAD))
                    .collect::<Vec<u64>>(),
            );
        }
        assert_eq!(mix.len(), from[0].len() + from[1].len());
        let mut at = [0usize; 2];
        let (mut last, mut switches, mut ends) = (usize::MAX, 0, [0; 2]);
        for (n, k) in mix.iter().enumerate() {
            let i = (0..2)
                .find(|&i| from[i].get(at[i]) == Some(k))
                .expect("each request is its trace's next");
            at[i] += 1;
            switches += usize::from(i != last);
            last = i;
            ends[i] = n;
        }
        let expect = mix.len() / 50;
        assert!(
            switches > expect / 4,
            "{switches} runs, about {expect} bursts"
        );
        // Both run out in the mix's last tenth (drawn in proportion to
        // what each has left).
        for (i, end) in ends.into_iter().enumerate() {
            assert!(
                end > mix.len() * 9 / 10,
                "trace {i} ended at {end} of {}",
                mix.len()
            );
        }
    }
}
