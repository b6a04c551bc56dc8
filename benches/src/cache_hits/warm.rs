//! Warm restarts (`LruCache::save` and `warm`): a cache that served the
//! first half of a trace is saved; a new cache is warmed from the save
//! (with the policy's state, from the keys alone, or naively, by
//! inserting the saved keys in order, as a peer's iterate-and-insert
//! would), and the next tenth of the trace is replayed read-through into
//! it, against a cold cache and against the saved cache going on (what
//! no restart can beat: it keeps the history of keys it no longer
//! holds). Scoring requests after the save, not the trace's start again,
//! keeps the warm state from being scored on the requests that made it.

use std::time::Instant;

use mmbatch_cache::{LruCache, PolicyState};

use crate::Row;

/// How the restarted cache starts.
pub(super) const STARTS: [&str; 5] = ["cold", "warmed", "keys-only", "naive-insert", "continued"];

/// The row name of start `how` on `trace` at `pages`.
pub(super) fn row_name(how: &str, trace: &str, pages: usize) -> String {
    format!("warm-restart/{how}/{trace}/pages-{pages}")
}

/// The rows of one trace at one size: each start's hit ratio over the
/// tenth of `trace` that follows its first half.
pub(super) fn rows(trace: &[u64], name: &str, pages: usize) -> Vec<Row> {
    let half = trace.len() / 2;
    let next = &trace[half..(half + trace.len() / 10).min(trace.len())];
    let cache = |_: ()| -> LruCache<u64, u64> {
        LruCache::builder(pages as u64)
            .build()
            .expect("a valid capacity")
    };
    let before = cache(());
    for &k in &trace[..half] {
        if before.get(&k).is_none() {
            before.insert(k, k);
        }
    }
    let saved = before.save();
    let mut before = Some(before);
    STARTS
        .iter()
        .map(|&how| {
            let c = match how {
                "continued" => before.take().expect("continued once"),
                _ => cache(()),
            };
            match how {
                "warmed" => {
                    c.warm(&saved.state, saved.keys.iter().cloned(), |&k| Some(k));
                }
                "keys-only" => {
                    c.warm(&PolicyState::default(), saved.keys.iter().cloned(), |&k| {
                        Some(k)
                    });
                }
                "naive-insert" => {
                    for s in &saved.keys {
                        c.insert(s.key, s.key);
                    }
                }
                _ => {}
            }
            // Timed: the replay alone, so each row's ops/s compare.
            let start = Instant::now();
            let mut hits = 0u64;
            for &k in next {
                if c.get(&k).is_some() {
                    hits += 1;
                } else {
                    c.insert(k, k);
                }
            }
            let pct = (hits as f64 * 100.0 / next.len().max(1) as f64 * 1000.0).round() / 1000.0;
            let mut row = Row::timed(
                row_name(how, name, pages),
                vec![start.elapsed().as_secs_f64()],
                [
                    ("hit_ratio_pct", pct),
                    ("saved_keys", saved.keys.len() as f64),
                ],
            );
            row.ops_per_sample = Some(next.len() as f64);
            row
        })
        .collect()
}
