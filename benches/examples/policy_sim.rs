//! Single-threaded simulations of candidate replacement policies over the
//! `cache-hits` traces, beside exact LRU and the peers' figures from the
//! last `cache-hits` run: a quick way to ask whether a policy family can
//! reach issue 46's targets before building it into `LruCache`'s shards.
//! `cargo run --release -p mmbatch-benches --example policy_sim [NAME]`
//! (comma-separated filters, as `policy_lab`).
//!
//! The W-TinyLFU variants are written as a shard would run them: hits
//! only count references on the entry (the read lock's `mark_accessed`,
//! at most four), and lists move only when reclaim looks at an entry.
//! LIRS is exact: its stack moves on every hit, which a shard's read path
//! cannot do, so its rows bound what a CLOCK-Pro approximation could get.
//! `ClockLirs` is LIRS as a shard could run it (hits only stamp the entry;
//! see its doc); `clirs-exact` gives it the exact oldest LIR entry (a scan
//! per demotion: slow on the 10240-entry shapes, so filter to `lirs-`).
//! `qc` is quick_cache 0.7's policy (`HotCold`), the `qc-` variants its
//! knobs. `clirs-tlfu` is `ClockLirs` with TinyLFU's admission in front
//! of its HIR set (a sketch counting every access); `clirs-tlfu-r` the
//! same with the sketch counting only misses and the references reclaim
//! finds, as a shard could keep it. The `fam:` cases are
//! `policy_families`' at 500 and 5000 entries, hits counted from a fifth
//! of the trace on (no peer figures: `policy_families` has them). The `mix:` cases replay `cache_hits::MIXES` at 250, 1000 and
//! 3000 entries, in bursts of up to `2 * SIM_CHUNK` requests (200 by
//! default). `SIM_VARIANTS=a,b` keeps those variants; `SIM_EVICT_TIME=1`
//! makes the `ClockLirs` ghosts keep the eviction time instead of the last
//! access.

use std::collections::HashMap;

use mmbatch_benches::cache_hits::{
    LIRS_TRACES, MIXES, OLTP_SIZES, P3_SIZES, SYNTH_CAPACITY, SYNTH_KEYS, SYNTH_OPS, Shape,
    families::{FAMILIES, family},
    interleave, read_trace, traces_dir,
};

/// `(trace, size) -> (exact LRU, quick_cache, moka)` from the README's
/// last `cache-hits` table (for the deltas printed; not measured here).
const PEERS: &[(&str, usize, f64, f64, f64)] = &[
    ("OLTP", 1000, 32.83, 35.24, 34.25),
    ("OLTP", 2000, 42.47, 43.73, 39.80),
    ("OLTP", 5000, 53.65, 54.13, 48.05),
    ("OLTP", 10000, 60.70, 61.29, 53.88),
    ("OLTP", 15000, 64.63, 64.82, 56.57),
    ("P3", 32768, 3.56, 13.01, 18.79),
    ("P3", 131072, 44.79, 48.56, 45.96),
    ("lirs-multi1", 250, 42.86, 49.10, 47.10),
    ("lirs-multi1", 500, 46.51, 55.69, 54.80),
    ("lirs-multi1", 1000, 48.23, 67.61, 67.85),
    ("lirs-gli", 250, 0.91, 15.98, 14.08),
    ("lirs-gli", 500, 0.95, 32.00, 27.55),
    ("lirs-gli", 1000, 11.21, 48.70, 41.58),
    ("lirs-ps", 200, 12.19, 36.15, 49.22),
    ("lirs-ps", 500, 48.55, 56.63, 56.80),
    ("lirs-ps", 1000, 48.55, 65.82, 62.98),
    ("lirs-sprite", 100, 21.58, 29.92, 31.14),
    ("lirs-sprite", 500, 78.30, 76.00, 74.06),
    ("lirs-sprite", 1000, 90.64, 87.63, 82.94),
    ("lirs-cs", 100, 1.83, 4.90, 1.09),
    ("lirs-cs", 300, 1.83, 16.21, 12.73),
    ("lirs-cs", 500, 1.83, 27.90, 28.57),
    ("zipf0.9", 10240, 60.55, 68.64, 68.31),
    ("zipf0.9-scan", 10240, 40.73, 51.83, 50.33),
    ("loop1.25x", 10240, 0.00, 60.74, 79.98),
    ("loop1.25x-noise", 10240, 0.00, 61.03, 69.25),
    ("shifting", 10240, 60.17, 64.10, 61.84),
    ("hot-cold", 10240, 16.78, 28.82, 28.00),
];

fn mix(x: u64, seed: u64) -> u64 {
    let mut z = x ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A count-min sketch of 4-bit counters, halved every `10 × capacity`
/// increments (TinyLFU's reset).
struct Sketch {
    rows: [Vec<u8>; 4],
    mask: usize,
    added: usize,
    period: usize,
}

impl Sketch {
    /// A sketch for a cache of `capacity` entries: 4 rows of `4 ×
    /// capacity` counters (`SIM_SKETCH_WIDTH` sets the multiple).
    fn new(capacity: usize) -> Self {
        let per: f64 = std::env::var("SIM_SKETCH_WIDTH")
            .map_or(4.0, |w| w.parse().expect("SIM_SKETCH_WIDTH: a number"));
        let width = ((capacity.max(16) as f64 * per) as usize).next_power_of_two();
        Sketch {
            rows: std::array::from_fn(|_| vec![0; width]),
            mask: width - 1,
            added: 0,
            period: 10 * capacity.max(16),
        }
    }
    fn estimate(&self, k: u64) -> u8 {
        (0..4)
            .map(|r| self.rows[r][mix(k, r as u64 + 1) as usize & self.mask])
            .min()
            .unwrap()
    }
    fn add(&mut self, k: u64, n: u8) {
        let e = self.estimate(k);
        if e >= 15 {
            return;
        }
        for r in 0..4 {
            let c = &mut self.rows[r][mix(k, r as u64 + 1) as usize & self.mask];
            // Conservative update: only the smallest counters grow.
            if *c < e + n {
                *c = (e + n).min(15);
            }
        }
        self.added += 1;
        if self.added >= self.period {
            for row in &mut self.rows {
                for c in row.iter_mut() {
                    *c /= 2;
                }
            }
            self.added /= 2;
        }
    }
}

const NIL: usize = usize::MAX;
const WINDOW: usize = 0;
const PROBATION: usize = 1;
const PROTECTED: usize = 2;

#[derive(Clone)]
struct Node {
    key: u64,
    refs: u8,
    list: usize,
    prev: usize,
    next: usize,
}

/// Doubly linked lists over a slab; head = most recent.
struct Lists {
    nodes: Vec<Node>,
    free: Vec<usize>,
    head: [usize; 3],
    tail: [usize; 3],
    len: [usize; 3],
    index: HashMap<u64, usize>,
}

impl Lists {
    fn new() -> Self {
        Lists {
            nodes: Vec::new(),
            free: Vec::new(),
            head: [NIL; 3],
            tail: [NIL; 3],
            len: [0; 3],
            index: HashMap::new(),
        }
    }
    fn unlink(&mut self, i: usize) {
        let (p, n, l) = (self.nodes[i].prev, self.nodes[i].next, self.nodes[i].list);
        if p == NIL {
            self.head[l] = n;
        } else {
            self.nodes[p].next = n;
        }
        if n == NIL {
            self.tail[l] = p;
        } else {
            self.nodes[n].prev = p;
        }
        self.len[l] -= 1;
    }
    fn push_head(&mut self, i: usize, l: usize) {
        let h = self.head[l];
        self.nodes[i].list = l;
        self.nodes[i].prev = NIL;
        self.nodes[i].next = h;
        if h == NIL {
            self.tail[l] = i;
        } else {
            self.nodes[h].prev = i;
        }
        self.head[l] = i;
        self.len[l] += 1;
    }
    fn push_tail(&mut self, i: usize, l: usize) {
        let t = self.tail[l];
        self.nodes[i].list = l;
        self.nodes[i].next = NIL;
        self.nodes[i].prev = t;
        if t == NIL {
            self.head[l] = i;
        } else {
            self.nodes[t].next = i;
        }
        self.tail[l] = i;
        self.len[l] += 1;
    }
    fn move_head(&mut self, i: usize, l: usize) {
        self.unlink(i);
        self.push_head(i, l);
    }
    fn add(&mut self, key: u64, l: usize) -> usize {
        let node = Node {
            key,
            refs: 0,
            list: l,
            prev: NIL,
            next: NIL,
        };
        let i = if let Some(i) = self.free.pop() {
            self.nodes[i] = node;
            i
        } else {
            self.nodes.push(node);
            self.nodes.len() - 1
        };
        self.push_head(i, l);
        self.index.insert(key, i);
        i
    }
    fn remove(&mut self, i: usize) {
        self.unlink(i);
        self.index.remove(&self.nodes[i].key);
        self.free.push(i);
    }
    fn total(&self) -> usize {
        self.len.iter().sum()
    }
}

/// W-TinyLFU as a shard would run it: a window (second-chance FIFO),
/// then an SLRU main (probation, protected at most 80% of main) whose
/// moves happen when reclaim reaches an entry; a window victim enters main
/// only if the sketch says it is more frequent than main's victim.
/// `fold`: hits reach the sketch only as the reference counts reclaim
/// reads (else every access is counted, as Caffeine does through its read
/// buffer). `climb`: the window's size follows Caffeine's hill climber.
struct Tlfu {
    l: Lists,
    sketch: Sketch,
    cap: usize,
    window: f64,
    fold: bool,
    climb: bool,
    step: f64,
    prev_rate: f64,
    sample: (u64, u64),
    rng: u64,
    max_refs: u8,
}

impl Tlfu {
    fn new(cap: usize, window_pct: f64, fold: bool, climb: bool) -> Self {
        Tlfu {
            l: Lists::new(),
            sketch: Sketch::new(cap),
            cap,
            window: (cap as f64 * window_pct).max(1.0),
            fold,
            climb,
            step: -0.0625 * cap as f64,
            prev_rate: 0.0,
            sample: (0, 0),
            rng: 0x1234_5678,
            max_refs: 4,
        }
    }

    fn access(&mut self, k: u64) -> bool {
        let hit = if let Some(&i) = self.l.index.get(&k) {
            let n = &mut self.l.nodes[i];
            n.refs = (n.refs + 1).min(self.max_refs);
            if !self.fold {
                self.sketch.add(k, 1);
            }
            true
        } else {
            self.sketch.add(k, 1);
            self.insert(k);
            false
        };
        if hit {
            self.sample.0 += 1;
        } else {
            self.sample.1 += 1;
        }
        if self.climb {
            self.climb_step();
        }
        hit
    }

    fn climb_step(&mut self) {
        let (h, m) = self.sample;
        if ((h + m) as usize) < 10 * self.cap {
            return;
        }
        let rate = h as f64 / (h + m) as f64;
        let change = rate - self.prev_rate;
        let amount = if change >= 0.0 { self.step } else { -self.step };
        self.step = if change.abs() >= 0.05 {
            0.0625 * self.cap as f64 * amount.signum()
        } else {
            0.98 * amount
        };
        self.prev_rate = rate;
        self.sample = (0, 0);
        self.window = (self.window + amount).clamp(1.0, self.cap as f64 - 1.0);
    }

    fn fold_refs(&mut self, i: usize) -> u8 {
        let n = &mut self.l.nodes[i];
        let r = n.refs;
        n.refs = 0;
        if self.fold && r > 0 {
            let k = n.key;
            self.sketch.add(k, r);
        }
        r
    }

    fn insert(&mut self, k: u64) {
        self.l.add(k, WINDOW);
        // The window over its share: its tail (second chance for a hit
        // one) becomes a candidate for main.
        while (self.l.len[WINDOW] as f64) > self.window {
            let t = self.l.tail[WINDOW];
            if self.fold_refs(t) > 0 {
                self.l.move_head(t, WINDOW);
                continue;
            }
            self.l.unlink(t);
            self.l.push_head(t, PROBATION);
            if self.l.total() > self.cap {
                let v = self.main_victim(t);
                if v == NIL {
                    self.l.remove(t);
                    continue;
                }
                let (cf, vf) = (
                    self.sketch.estimate(self.l.nodes[t].key),
                    self.sketch.estimate(self.l.nodes[v].key),
                );
                self.rng = mix(self.rng, 7);
                let admit = cf > vf || (cf >= 6 && self.rng & 127 == 0);
                self.l.remove(if admit { v } else { t });
            }
        }
        // Main over its share (the window grew): main's victim goes.
        while self.l.total() > self.cap {
            let v = self.main_victim(NIL);
            let v = if v == NIL { self.l.tail[WINDOW] } else { v };
            self.l.remove(v);
        }
    }

    /// Main's victim, `skip` passed over: the probation tail once hit
    /// ones are promoted and protected fits its share; `NIL` if main holds
    /// nothing else.
    fn main_victim(&mut self, skip: usize) -> usize {
        loop {
            // Protected over 80% of main: its tail steps down (a hit one
            // gets another turn).
            let main = self.cap as f64 - self.window;
            let mut turns = self.l.len[PROTECTED];
            while (self.l.len[PROTECTED] as f64) > 0.8 * main && turns > 0 {
                turns -= 1;
                let t = self.l.tail[PROTECTED];
                if self.fold_refs(t) > 0 {
                    self.l.move_head(t, PROTECTED);
                } else {
                    self.l.unlink(t);
                    self.l.push_head(t, PROBATION);
                }
            }
            let mut t = self.l.tail[PROBATION];
            if t == skip && t != NIL {
                t = self.l.nodes[t].prev;
            }
            if t == NIL {
                let p = self.l.tail[PROTECTED];
                if p == NIL {
                    return NIL;
                }
                self.fold_refs(p);
                self.l.unlink(p);
                self.l.push_tail(p, PROBATION);
                continue;
            }
            if self.fold_refs(t) > 0 {
                self.l.move_head(t, PROTECTED);
                continue;
            }
            return t;
        }
    }
}

/// LIRS (Jiang and Zhang, SIGMETRICS 2002), exact: the stack `S` in
/// recency order holds LIR entries, resident HIR entries and non-resident
/// HIR entries (ghosts, at most `ghosts` times the cache: the runs here
/// leave them unbounded, as the paper's pruning alone does); the queue `Q`
/// holds the resident HIR entries (`hir` of the cache). An entry is LIR
/// when its inter-reference recency is below the oldest LIR's recency.
struct Lirs {
    // list 0: the stack S; list 1: the queue Q (a second link per key).
    s: Lists,
    q: Lists,
    /// Per key: 0 LIR, 1 resident HIR, 2 non-resident HIR.
    state: HashMap<u64, u8>,
    cap: usize,
    lir_max: usize,
    lir: usize,
    ghosts_max: usize,
    ghosts: usize,
}

impl Lirs {
    fn new(cap: usize, hir: f64, ghosts: f64) -> Self {
        let hirs = ((cap as f64 * hir) as usize).max(1);
        Lirs {
            s: Lists::new(),
            q: Lists::new(),
            state: HashMap::new(),
            cap,
            lir_max: cap - hirs,
            lir: 0,
            ghosts_max: (cap as f64 * ghosts) as usize,
            ghosts: 0,
        }
    }

    /// Removes HIR entries from the stack's bottom until an LIR one is
    /// there.
    fn prune(&mut self) {
        loop {
            let t = self.s.tail[0];
            if t == NIL {
                return;
            }
            let k = self.s.nodes[t].key;
            match self.state[&k] {
                0 => return,
                1 => self.s.remove(t),
                _ => {
                    self.s.remove(t);
                    self.state.remove(&k);
                    self.ghosts -= 1;
                }
            }
        }
    }

    /// The bottom LIR entry becomes a resident HIR at the queue's end.
    fn demote_bottom(&mut self) {
        let t = self.s.tail[0];
        let k = self.s.nodes[t].key;
        self.s.remove(t);
        self.state.insert(k, 1);
        self.q.add(k, 0);
        self.lir -= 1;
        self.prune();
    }

    fn raise(&mut self, k: u64) {
        if let Some(&i) = self.s.index.get(&k) {
            self.s.move_head(i, 0);
        } else {
            self.s.add(k, 0);
        }
    }

    fn access(&mut self, k: u64) -> bool {
        match self.state.get(&k).copied() {
            Some(0) => {
                let bottom = self.s.tail[0] == self.s.index[&k];
                self.raise(k);
                if bottom {
                    self.prune();
                }
                true
            }
            Some(1) => {
                if self.s.index.contains_key(&k) {
                    self.raise(k);
                    self.state.insert(k, 0);
                    let qi = self.q.index[&k];
                    self.q.remove(qi);
                    self.lir += 1;
                    self.demote_bottom();
                } else {
                    self.raise(k);
                    let qi = self.q.index[&k];
                    self.q.move_head(qi, 0);
                }
                true
            }
            ghost => {
                let resident = self.lir + self.q.total();
                if resident >= self.cap {
                    // Evict the queue's front (its oldest).
                    let f = self.q.tail[0];
                    let fk = self.q.nodes[f].key;
                    self.q.remove(f);
                    if self.s.index.contains_key(&fk) {
                        self.state.insert(fk, 2);
                        self.ghosts += 1;
                    } else {
                        self.state.remove(&fk);
                    }
                }
                if ghost == Some(2) {
                    self.ghosts -= 1;
                }
                if self.lir < self.lir_max {
                    self.raise(k);
                    self.state.insert(k, 0);
                    self.lir += 1;
                } else if ghost == Some(2) {
                    self.raise(k);
                    self.state.insert(k, 0);
                    self.lir += 1;
                    self.demote_bottom();
                } else {
                    self.raise(k);
                    self.state.insert(k, 1);
                    self.q.add(k, 0);
                }
                // Bound the ghosts: drop the oldest non-resident ones.
                while self.ghosts > self.ghosts_max {
                    let mut t = self.s.tail[0];
                    while t != NIL && self.state[&self.s.nodes[t].key] != 2 {
                        t = self.s.nodes[t].prev;
                    }
                    if t == NIL {
                        break;
                    }
                    let gk = self.s.nodes[t].key;
                    self.s.remove(t);
                    self.state.remove(&gk);
                    self.ghosts -= 1;
                }
                false
            }
        }
    }
}

/// LIRS as a shard could run it: hits only stamp the entry with the miss
/// clock (`t`, one tick per miss) and mark it referenced; lists move only
/// at reclaim. The LIR set is the active list (list 0), the resident HIR
/// entries the inactive list (list 1, `hir` of the cache), the
/// non-resident HIR entries shadows holding the entry's last access (`t`
/// at its eviction with `SIM_EVICT_TIME`; at most `ghosts` x the cache,
/// oldest dropped). LIRS's test ("its recency is below the oldest LIR
/// entry's") becomes: a refault's distance below `r`, the age of the LIR
/// entry last demoted. Demotion takes, of `scan` entries at the active
/// tail, the one with the oldest stamp (CLOCK second chance when `scan`
/// is 0: a referenced tail goes round once).
struct ClockLirs {
    l: Lists,
    stamps: Vec<u64>,
    prev: Vec<u64>,
    irr: bool,
    last_access: bool,
    /// 0: `r` is the demoted entry's age; 1: the oldest stamp of the
    /// hand's last whole lap; 2: the larger of the two.
    lap: u8,
    lap_seen: usize,
    lap_min: u64,
    lap_w: Option<u64>,
    ghosts: HashMap<u64, u64>,
    ghost_q: std::collections::VecDeque<(u64, u64)>,
    t: u64,
    r: u64,
    cap: usize,
    lir_max: usize,
    ghost_max: usize,
    scan: usize,
    /// TinyLFU's admission (Einziger et al., 2017): a miss that LIRS
    /// would make HIR is not cached unless the sketch counts its key more
    /// often than the victim's.
    admission: Option<Sketch>,
    /// The sketch counts misses and the references reclaim finds (the
    /// shards' read path writes no sketch), not every access.
    admission_at_reclaim: bool,
    /// Admission as W-TinyLFU's: every miss is cached, and the HIR
    /// victim contests the oldest LIR entry's place instead.
    window: bool,
}

impl ClockLirs {
    fn new(cap: usize, hir: f64, ghosts: f64, scan: usize, irr: bool) -> Self {
        let hirs = ((cap as f64 * hir) as usize).max(1);
        ClockLirs {
            l: Lists::new(),
            stamps: Vec::new(),
            prev: Vec::new(),
            irr,
            last_access: std::env::var_os("SIM_EVICT_TIME").is_none(),
            lap: 0,
            lap_seen: 0,
            lap_min: u64::MAX,
            lap_w: None,
            ghosts: HashMap::new(),
            ghost_q: std::collections::VecDeque::new(),
            t: 0,
            r: u64::MAX,
            cap,
            lir_max: cap.saturating_sub(hirs).max(1),
            ghost_max: ((cap as f64 * ghosts) as usize).max(1),
            scan,
            admission: None,
            admission_at_reclaim: false,
            window: false,
        }
    }

    fn stamp(&mut self, i: usize) {
        if self.stamps.len() <= i {
            self.stamps.resize(i + 1, 0);
            self.prev.resize(i + 1, 0);
        }
        self.prev[i] = self.stamps[i];
        self.stamps[i] = self.t;
    }

    /// The oldest LIR entry (by the rule in the struct's doc) to the
    /// inactive head; `r` becomes its age.
    fn demote(&mut self) {
        let victim = if self.scan == usize::MAX {
            // Exact: the LIR entry with the oldest stamp.
            let mut best = self.l.tail[0];
            let mut at = best;
            while at != NIL {
                if self.stamps[at] < self.stamps[best] {
                    best = at;
                }
                at = self.l.nodes[at].prev;
            }
            best
        } else if self.scan == 0 {
            loop {
                let t = self.l.tail[0];
                self.lap_min = self.lap_min.min(self.stamps[t]);
                self.lap_seen += 1;
                if self.lap_seen >= self.l.len[0] {
                    self.lap_w = Some(self.lap_min);
                    self.lap_seen = 0;
                    self.lap_min = u64::MAX;
                }
                if self.l.nodes[t].refs > 0 {
                    self.l.nodes[t].refs = 0;
                    self.count_at_reclaim(t);
                    self.l.move_head(t, 0);
                } else {
                    break t;
                }
            }
        } else {
            let mut best = self.l.tail[0];
            let mut at = best;
            for _ in 0..self.scan {
                if at == NIL {
                    break;
                }
                if self.stamps[at] < self.stamps[best] {
                    best = at;
                }
                at = self.l.nodes[at].prev;
            }
            best
        };
        let age = self.t - self.stamps[victim];
        let lap = self.lap_w.map_or(age, |w| self.t - w);
        self.r = match self.lap {
            0 => age,
            1 => lap,
            _ => age.max(lap),
        };
        self.l.nodes[victim].refs = 0;
        self.l.unlink(victim);
        self.l.push_head(victim, 1);
    }

    /// Counts a reference reclaim found on entry `i` (with
    /// `admission_at_reclaim`).
    fn count_at_reclaim(&mut self, i: usize) {
        if let (Some(s), true) = (&mut self.admission, self.admission_at_reclaim) {
            s.add(self.l.nodes[i].key, 1);
        }
    }

    fn access(&mut self, k: u64) -> bool {
        let hit = self.l.index.get(&k).copied();
        if let Some(s) = &mut self.admission {
            if hit.is_none() || !self.admission_at_reclaim {
                s.add(k, 1);
            }
        }
        if let Some(i) = hit {
            self.l.nodes[i].refs = 1;
            self.stamp(i);
            return true;
        }
        self.t += 1;
        let ghost = self.ghosts.get(&k).copied();
        let lir = self.l.len[0] < self.lir_max || ghost.is_some_and(|g| self.t - g < self.r);
        let mut contested = false;
        // Reclaim: the inactive tail, promoted if it was hit.
        while self.l.total() >= self.cap {
            let x = self.l.tail[1];
            if x == NIL {
                self.demote();
                continue;
            }
            if self.l.nodes[x].refs > 0 {
                self.l.nodes[x].refs = 0;
                self.count_at_reclaim(x);
                self.l.unlink(x);
                // LIRS: a hit resident HIR entry whose reuse distance is
                // above the oldest LIR's age stays HIR.
                if self.irr && self.stamps[x] - self.prev[x] >= self.r {
                    self.l.push_head(x, 1);
                    continue;
                }
                self.l.push_head(x, 0);
                if self.l.len[0] > self.lir_max {
                    self.demote();
                }
                continue;
            }
            let key = self.l.nodes[x].key;
            let lir_tail = self.l.tail[0];
            if let (true, Some(s)) = (
                self.window && !contested && lir_tail != NIL,
                &self.admission,
            ) {
                // W-TinyLFU's contest, the HIR set as its window: the HIR
                // victim takes the oldest LIR entry's place if counted
                // more often (once a miss).
                contested = true;
                if s.estimate(key) > s.estimate(self.l.nodes[lir_tail].key) {
                    self.l.unlink(x);
                    self.l.push_head(x, 0);
                    if self.l.len[0] > self.lir_max {
                        self.demote();
                    }
                    continue;
                }
            }
            if let (false, false, Some(s)) = (lir, self.window, &self.admission) {
                if s.estimate(k) <= s.estimate(key) {
                    // Not admitted: the victim stays, for another turn.
                    self.l.move_head(x, 1);
                    return false;
                }
            }
            self.ghosts.remove(&k);
            // LIRS's stack keeps the entry's last access, not its
            // eviction: a loop's blocks would otherwise pass for recent.
            let last = if self.last_access {
                self.stamps[x]
            } else {
                self.t
            };
            self.l.remove(x);
            self.ghosts.insert(key, last);
            self.ghost_q.push_back((key, last));
            while self.ghosts.len() > self.ghost_max {
                let (gk, gt) = self.ghost_q.pop_front().unwrap();
                if self.ghosts.get(&gk) == Some(&gt) {
                    self.ghosts.remove(&gk);
                }
            }
        }
        let i = self.l.add(k, if lir { 0 } else { 1 });
        self.stamp(i);
        // A new entry's previous access: its eviction, if remembered.
        self.prev[i] = ghost.unwrap_or(0);
        if self.l.len[0] > self.lir_max {
            self.demote();
        }
        false
    }
}

/// quick_cache 0.7's policy (its `shard.rs`), for reference: new keys
/// go cold (hot while the hot ring has room), a ghost hit goes hot; the
/// cold tail goes hot if referenced, else becomes a ghost (FIFO, `ghosts`
/// x the cache); the hot ring is CLOCK with a count of up to `max_f`
/// references, evicting (no ghost) past `hot` of the cache.
struct HotCold {
    l: Lists,
    ghosts: HashMap<u64, u64>,
    ghost_q: std::collections::VecDeque<(u64, u64)>,
    t: u64,
    cap: usize,
    hot_max: usize,
    ghost_max: usize,
    max_f: u8,
}

impl HotCold {
    fn new(cap: usize, hot: f64, ghosts: f64, max_f: u8) -> Self {
        HotCold {
            l: Lists::new(),
            ghosts: HashMap::new(),
            ghost_q: std::collections::VecDeque::new(),
            t: 0,
            cap,
            hot_max: ((cap as f64 * hot) as usize).clamp(1, cap),
            ghost_max: (cap as f64 * ghosts) as usize,
            max_f,
        }
    }

    fn advance_hot(&mut self) {
        loop {
            let x = self.l.tail[0];
            if self.l.nodes[x].refs > 0 {
                self.l.nodes[x].refs -= 1;
                self.l.move_head(x, 0);
                continue;
            }
            self.l.remove(x);
            return;
        }
    }

    fn advance_cold(&mut self) {
        let x = self.l.tail[1];
        if x == NIL {
            return self.advance_hot();
        }
        if self.l.nodes[x].refs > 0 {
            self.l.nodes[x].refs -= 1;
            self.l.move_head(x, 0);
            while self.l.len[0] > self.hot_max {
                self.advance_hot();
            }
            return;
        }
        let key = self.l.nodes[x].key;
        self.l.remove(x);
        self.t += 1;
        self.ghosts.insert(key, self.t);
        self.ghost_q.push_back((key, self.t));
        while self.ghosts.len() > self.ghost_max {
            let (gk, gt) = self.ghost_q.pop_front().unwrap();
            if self.ghosts.get(&gk) == Some(&gt) {
                self.ghosts.remove(&gk);
            }
        }
    }

    fn access(&mut self, k: u64) -> bool {
        if let Some(&i) = self.l.index.get(&k) {
            let r = &mut self.l.nodes[i].refs;
            *r = (*r + 1).min(self.max_f);
            return true;
        }
        let hot = self.ghosts.remove(&k).is_some() || self.l.len[0] < self.hot_max;
        self.l.add(k, if hot { 0 } else { 1 });
        while self.l.total() > self.cap {
            self.advance_cold();
        }
        false
    }
}

/// Exact LRU.
struct Lru {
    l: Lists,
    cap: usize,
}

impl Lru {
    fn access(&mut self, k: u64) -> bool {
        if let Some(&i) = self.l.index.get(&k) {
            self.l.move_head(i, 0);
            return true;
        }
        self.l.add(k, 0);
        if self.l.total() > self.cap {
            let t = self.l.tail[0];
            self.l.remove(t);
        }
        false
    }
}

/// The hit % of `trace` through `access`, counting requests from `skip`
/// on (all are replayed).
fn run(trace: &[u64], skip: usize, mut access: impl FnMut(u64) -> bool) -> f64 {
    let h = trace
        .iter()
        .enumerate()
        .filter(|&(i, &k)| access(k) && i >= skip)
        .count();
    h as f64 * 100.0 / trace.len().saturating_sub(skip).max(1) as f64
}

fn main() {
    let only = std::env::args().nth(1);
    let want = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|o| name.contains(o)))
    };
    let mut cases: Vec<(String, Vec<u64>, Vec<usize>)> = Vec::new();
    for (name, sizes) in [("OLTP", OLTP_SIZES.to_vec()), ("P3", P3_SIZES.to_vec())] {
        if want(name) {
            let t = read_trace(&traces_dir().join(format!("{name}.lis.zst")), usize::MAX).unwrap();
            cases.push((name.into(), t, sizes));
        }
    }
    for (name, sizes) in LIRS_TRACES {
        let name = format!("lirs-{name}");
        if want(&name) {
            let t = read_trace(&traces_dir().join(format!("{name}.lis.zst")), usize::MAX).unwrap();
            cases.push((name, t, sizes.to_vec()));
        }
    }
    for (i, shape) in Shape::ALL.into_iter().enumerate() {
        if want(shape.name()) {
            let n = SYNTH_OPS as usize;
            let t = shape.trace(SYNTH_KEYS, SYNTH_CAPACITY, n, 11 + i as u64);
            cases.push((shape.name().into(), t, vec![SYNTH_CAPACITY]));
        }
    }
    // The families of `policy_families`, at its sizes and length, hits
    // counted from a fifth on as it counts them (one case a size: a
    // family's trace depends on the cache's size).
    let mut skips: HashMap<String, usize> = HashMap::new();
    for name in FAMILIES {
        let name_c = format!("fam:{name}");
        if want(&name_c) {
            for c in [500, 5000] {
                let t = family(name, c, 600_000, 7);
                skips.insert(format!("{name_c}@{c}"), t.len() / 5);
                cases.push((name_c.clone(), t, vec![c]));
            }
        }
    }
    for m in MIXES {
        let name = format!("mix:{m}");
        if want(&name) {
            let chunk =
                std::env::var("SIM_CHUNK").map_or(200, |c| c.parse().expect("SIM_CHUNK: a number"));
            cases.push((name, interleave(m, chunk).unwrap(), vec![250, 1000, 3000]));
        }
    }
    type Make = Box<dyn Fn(usize) -> Box<dyn FnMut(u64) -> bool>>;
    let tlfu = |fold: bool, climb: bool| -> Make {
        Box::new(move |c| {
            let mut p = Tlfu::new(c, 0.01, fold, climb);
            Box::new(move |k| p.access(k))
        })
    };
    let lirs = |hir: f64| -> Make {
        Box::new(move |c| {
            let mut p = Lirs::new(c, hir, f64::INFINITY);
            Box::new(move |k| p.access(k))
        })
    };
    let clock_lirs_irr = |hir: f64, ghosts: f64, scan: usize, irr: bool| -> Make {
        Box::new(move |c| {
            let mut p = ClockLirs::new(c, hir, ghosts, scan, irr);
            Box::new(move |k| p.access(k))
        })
    };
    let clock_lirs =
        |hir: f64, ghosts: f64, scan: usize| -> Make { clock_lirs_irr(hir, ghosts, scan, false) };
    let clock_lirs_admission = |at_reclaim: bool, window: bool| -> Make {
        Box::new(move |c| {
            let mut p = ClockLirs::new(c, 0.01, 2.0, 0, false);
            p.admission = Some(Sketch::new(c));
            p.admission_at_reclaim = at_reclaim;
            p.window = window;
            Box::new(move |k| p.access(k))
        })
    };
    let hot_cold = |hot: f64, ghosts: f64, max_f: u8| -> Make {
        Box::new(move |c| {
            let mut p = HotCold::new(c, hot, ghosts, max_f);
            Box::new(move |k| p.access(k))
        })
    };
    let all: Vec<(&str, Make)> = vec![
        ("qc", hot_cold(0.97, 0.5, 2)),
        ("qc-f1", hot_cold(0.97, 0.5, 1)),
        ("qc-f3", hot_cold(0.97, 0.5, 3)),
        ("qc-h99", hot_cold(0.99, 0.5, 2)),
        ("qc-h90", hot_cold(0.90, 0.5, 2)),
        ("qc-g1", hot_cold(0.97, 1.0, 2)),
        ("qc-g2", hot_cold(0.97, 2.0, 2)),
        ("qc-g025", hot_cold(0.97, 0.25, 2)),
        ("w1", tlfu(false, false)),
        ("w1-fold", tlfu(true, false)),
        ("climb", tlfu(false, true)),
        ("climb-fold", tlfu(true, true)),
        ("lirs1", lirs(0.01)),
        ("lirs10", lirs(0.10)),
        ("clirs", clock_lirs(0.01, 2.0, 0)),
        ("clirs-s8", clock_lirs(0.01, 2.0, 8)),
        ("clirs-g1", clock_lirs(0.01, 1.0, 0)),
        ("clirs-h3", clock_lirs(0.03, 2.0, 0)),
        ("clirs-g4", clock_lirs(0.01, 4.0, 0)),
        ("clirs-irr", clock_lirs_irr(0.01, 2.0, 0, true)),
        ("clirs-exact", clock_lirs_irr(0.01, 2.0, usize::MAX, true)),
        ("clirs-lap", {
            Box::new(move |c| {
                let mut p = ClockLirs::new(c, 0.01, 2.0, 0, true);
                p.lap = 1;
                Box::new(move |k| p.access(k))
            })
        }),
        ("clirs-lapmax", {
            Box::new(move |c| {
                let mut p = ClockLirs::new(c, 0.01, 2.0, 0, true);
                p.lap = 2;
                Box::new(move |k| p.access(k))
            })
        }),
        ("clirs-exact-g", clock_lirs_irr(0.01, 1e9, usize::MAX, true)),
        ("clirs-irr3", clock_lirs_irr(0.03, 2.0, 0, true)),
        ("clirs-ginf", clock_lirs(0.01, 1e9, 0)),
        ("clirs-tlfu", clock_lirs_admission(false, false)),
        ("clirs-tlfu-r", clock_lirs_admission(true, false)),
        ("clirs-wtlfu-r", clock_lirs_admission(true, true)),
    ];
    // SIM_VARIANTS=a,b keeps those variants.
    let keep = std::env::var("SIM_VARIANTS").ok();
    let variants: Vec<(&str, Make)> = all
        .into_iter()
        .filter(|(n, _)| {
            keep.as_deref()
                .is_none_or(|k| k.split(',').any(|x| x == *n))
        })
        .collect();
    print!("{:>16} {:>6} {:>6} {:>6}", "trace", "size", "lru", "peer");
    for (n, _) in &variants {
        print!(" {n:>10}");
    }
    println!();
    let mut worst = vec![f64::MAX; variants.len()];
    let mut met = vec![0; variants.len()];
    let mut rows = 0;
    for (name, trace, sizes) in &cases {
        for &c in sizes {
            let mut lru = Lru {
                l: Lists::new(),
                cap: c,
            };
            let skip = skips.get(&format!("{name}@{c}")).copied().unwrap_or(0);
            let lru_pct = run(trace, skip, |k| lru.access(k));
            let peer = PEERS
                .iter()
                .find(|p| p.0 == name && p.1 == c)
                .map(|p| p.3.max(p.4));
            print!(
                "{name:>16} {c:>6} {lru_pct:6.2} {:>6}",
                peer.map_or("-".into(), |p| format!("{p:.2}"))
            );
            rows += 1;
            for (v, (_, make)) in variants.iter().enumerate() {
                let mut p = make(c);
                let pct = run(trace, skip, &mut *p);
                let bar = peer.unwrap_or(0.0).max(lru_pct) - 0.5;
                let d = pct - bar;
                worst[v] = worst[v].min(d);
                met[v] += usize::from(d >= 0.0);
                print!(" {pct:6.2}{}", if d >= 0.0 { "    " } else { " !! " });
            }
            println!();
        }
    }
    for (v, (n, _)) in variants.iter().enumerate() {
        println!(
            "{n}: target met on {} of {rows}, worst {:+.2}",
            met[v], worst[v]
        );
    }
}
