//! One shard's [`Lruvec`]: its entries in a dense slab (removal in
//! `slab.rs`), a hash index over them, the two lists (`struct lruvec`;
//! linking in `list.rs`), reclaim (`shrink_lruvec`, in `reclaim.rs`),
//! where new entries start (`refault.rs`), shadows ([`Shadows`]) and the
//! policy's tuned constants (`tunables.rs`).
//! Everything here runs under the shard's lock and calls no user code
//! except `Eq` in lookups, so a panic there leaves the shard as it was.

mod batch;
mod check;
mod duel;
mod expiry;
mod hit;
pub(super) mod index;
mod list;
mod reclaim;
mod refault;
mod sketch;
mod slab;
mod stamp;
mod tunables;

pub(super) use batch::Batch;
pub(super) use duel::{CONTENDERS, Duel, Sampled};
pub(super) use refault::{LEARNED_BYTES, Learned, hir_share_within};
use sketch::Sketch;

use super::{Policy, RemovalCause, flight::Flight, workingset::Shadows};
use crate::sync::{AtomicU8, AtomicU16, AtomicU64, Ordering};
use tunables::*;

/// The user's predicate of pinned entries (see
/// [`Builder::pinned`](crate::Builder::pinned)).
pub(in crate::cache) type Pinned<K, V> = std::sync::Arc<dyn Fn(&K, &V) -> bool + Send + Sync>;

/// Entries an operation evicted, handed out of the lock to be dropped or
/// given to the listener there. Inline for the usual one or two: an
/// insertion allocates nothing for them.
pub(super) type Evicted<K, V> = smallvec::SmallVec<[(K, V, RemovalCause); 2]>;

const NIL: u32 = u32::MAX;
const INACTIVE: usize = 0;
const ACTIVE: usize = 1;

/// The bits counting hits since reclaim last looked: the multi-gen LRU's
/// `LRU_REFS` (`folio_inc_refs`). An inactive entry with any is activated
/// when reclaim reaches it (a protected tier, in MGLRU's terms); on the
/// active list each one is another turn before deactivation
/// (`PG_referenced` was one such turn).
const REFS: u8 = 0b111;
/// Where the count saturates: 4 (the kernel counts as far, with
/// `PG_referenced`, `PG_workingset` and two `LRU_REFS` bits); 3 and 5 lost
/// hits (`docs/cache.md#tunables-and-their-measurements`).
const MAX_REFS: u8 = 4;

/// The oldest a LIRS stamp reads, in its units (a 64th to a 128th of the
/// shard's entries in evictions, see `Lruvec::stamp_shift_for`): 2^14,
/// 128 to 256 shards' worth of evictions in a shard of up to 4 Mi
/// entries, far past how long a shadow lives (its table holds about
/// twice the shard's entries); an entry unused for longer reads as that
/// old ([`Lruvec::age_stamps`]).
const STAMP_OLDEST: u16 = 1 << 14;

/// The most entries a capacity of `capacity` holds, each weighing at
/// least 1 (saturated to `usize`).
fn capacity_entries(capacity: u64) -> usize {
    usize::try_from(capacity).unwrap_or(usize::MAX)
}

/// The most references a batched hit counts under `policy`: one under
/// [`Policy::Lru`] (a second chance, as CLOCK gives), else [`MAX_REFS`].
fn max_refs_of(policy: Policy) -> u8 {
    if policy == Policy::Lru { 1 } else { MAX_REFS }
}

/// `PG_active`: on the active list.
const ACTIVE_FLAG: u8 = 1 << 3;
/// `PG_workingset`: has been on the active list (set on deactivation, as
/// `shrink_active_list` does, and on a refault activation); kept in the
/// shadow at eviction.
const WORKINGSET: u8 = 1 << 4;
/// Activated by a refault, or retrying after a failed activation or a
/// failed retry, and not hit twice since (kept through deactivation):
/// evicted so, it failed, and its shadow says so.
const UNHIT: u8 = 1 << 5;
/// An `UNHIT` entry hit once: the next hit pays (see [`Lruvec::hit_flags`]).
const HIT_ONCE: u8 = 1 << 6;
/// Placed by a refault of an entry evicted from probation whose distance
/// lies between [`REACH_MIN`] and [`REACH_MAX`] times the shard's entries:
/// whether it is hit says whether such refaults should be activated (see
/// [`Lruvec::reach_outcome`]). Dropped once it has said so.
const IN_BAND: u8 = 1 << 7;

/// An entry's deadline on the expiry clock (nanoseconds; `u64::MAX`
/// never), and the cap no read moves it past.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::cache) struct Deadline {
    pub(in crate::cache) at: u64,
    pub(in crate::cache) cap: u64,
}

impl Deadline {
    /// Never.
    pub(in crate::cache) const NEVER: Deadline = Deadline {
        at: u64::MAX,
        cap: u64::MAX,
    };
}

/// One cached entry (`struct folio`, as far as a cache needs one): its key
/// and value, which a hit reads (with the entry's flags byte, in
/// [`Lruvec::flags`]). Its list links and hash are in [`Lruvec::links`] and its
/// weight in [`Lruvec::weights`] (only when the cache has a weigher): with
/// `u64` keys and values a node is 16 bytes, four to a cache line, none
/// straddling two.
pub(super) struct Node<K, V> {
    pub(super) key: K,
    pub(super) value: V,
}

/// An entry's place on its list (`folio->lru`) and its short hash
/// ([`short_hash`]: enough to find the entry in the index and to place its
/// shadow), at the entry's index: reclaim walks and relinks these,
/// lookups never read them.
#[derive(Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
    hash: u32,
}

/// The 32 bits of a key's hash a shard keeps: bits 8..40 (the shard was
/// chosen by the bits above).
fn short_hash(hash: u64) -> u32 {
    (hash >> 8) as u32
}

/// `n` as an `f64`, by way of `i64`: counts here are far below 2^63, and
/// x86-64 converts a signed integer in one instruction where an unsigned
/// one takes several and a branch (the policy's arithmetic runs on every
/// miss and at every step of reclaim).
fn real(n: usize) -> f64 {
    n as i64 as f64
}

/// The index's hash of a node: its short hash spread over 64 bits, since
/// hashbrown takes its buckets from the low bits and its tags from the
/// top seven.
fn index_hash(h: u32) -> u64 {
    u64::from(h).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A list's ends and length: `head` is the most recently added.
#[derive(Clone, Copy, Debug)]
struct List {
    head: u32,
    tail: u32,
    len: usize,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
    len: 0,
};

/// Where a new entry starts (`workingset_refault`'s verdict).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Active,
    /// The active list, unproven: a new key while the shard fills.
    Fill,
    Inactive,
    InactiveTail,
    /// The inactive head, marked `UNHIT`: in a thrashing shard, a refault
    /// whose activation (or last retry) failed retries on probation.
    Retry,
}

impl Place {
    /// The flags an entry placed so starts with.
    fn flags(self) -> u8 {
        match self {
            Place::Active => ACTIVE_FLAG | WORKINGSET | UNHIT,
            Place::Fill => ACTIVE_FLAG,
            Place::Retry => UNHIT,
            Place::Inactive | Place::InactiveTail => 0,
        }
    }

    /// The list it goes on.
    fn list(self) -> usize {
        if matches!(self, Place::Active | Place::Fill) {
            ACTIVE
        } else {
            INACTIVE
        }
    }
}

/// What an insertion did.
pub(super) enum Inserted<V> {
    /// The key was absent; it is cached now.
    New,
    /// The key's old value, replaced.
    Replaced(V),
    /// Heavier than the shard's capacity, or refused by the admission:
    /// not cached (any old value of the key was removed and is in the
    /// evicted list, with the new one).
    Rejected,
}

/// A shard: entries, index, lists, shadows and loads in flight (`struct
/// lruvec` with its share of the page cache).
pub(super) struct Lruvec<K, V> {
    nodes: Vec<Node<K, V>>,
    /// Each node's flags, at its index: set by hits under the read lock,
    /// read and cleared by reclaim under the write lock. Apart from the
    /// nodes (and the hash in the links), so that a `u64 -> u64` node is
    /// 16 bytes instead of 24 (`docs/cache.md#layout-measurements`).
    flags: Vec<AtomicU8>,
    /// Each node's [`Link`], at its index.
    links: Vec<Link>,
    /// Each node's weight, at its index, when `weighted`; empty otherwise
    /// (every entry weighs 1).
    weights: Vec<u64>,
    weighted: bool,
    /// Each node's deadline (nanoseconds on the cache's clock; `u64::MAX`
    /// never), at its index, when the cache expires entries; empty
    /// otherwise (docs/cache.md, "Expiry").
    deadlines: Vec<AtomicU64>,
    expiring: bool,
    /// Each node's cap on its deadline (a time to live that reads do not
    /// extend past), when a time to idle is capped by one; empty
    /// otherwise.
    caps: Vec<u64>,
    capped: bool,
    /// Each node's last access on the shadows' clock, at its index, under
    /// [`Policy::Lirs`], in units of `2^stamp_shift` evictions and kept to
    /// 16 bits (see [`stamp_of`](Self::stamp_of)); empty otherwise.
    stamps: Vec<AtomicU16>,
    lirs: bool,
    /// Whether `stamps` are kept: under [`Policy::Lirs`], and under
    /// [`Policy::Adaptive`] while its shards run LIRS once its sample has
    /// hit (until then an entry's last access is taken as now: a cache
    /// that hits nothing keeps nothing by it).
    stamped: bool,
    /// Under [`Policy::Adaptive`], the entries hit under the read lock
    /// while the shard runs [`Policy::Lru`], for the next write section to
    /// move to the head (see [`drain_moves`](Self::drain_moves)).
    moves: Option<Box<crossbeam_utils::CachePadded<Batch<LRU_MOVES>>>>,
    /// [`Policy::LirsTinyLfu`]: `Lirs` (as `policy` says) with its
    /// admission (see [`refuses`](Self::refuses)).
    admits: bool,
    /// How often keys were seen lately, kept while the shard admits: each
    /// miss and each reference reclaim finds, under the write lock.
    sketch: Option<Sketch>,
    /// Whether an entry is pinned ([`Builder::pinned`](crate::Builder::pinned)):
    /// reclaim passes it over.
    pinned: Option<Pinned<K, V>>,
    /// [`Policy::Lirs`]: the last access (on the shadows' clock) of the
    /// LIR entry last demoted, standing for LIRS's oldest LIR entry; a
    /// refault used more recently is LIR.
    lir_stamp: u32,
    /// [`Policy::Adaptive`]: the cache's duel, and the shard's buffer of
    /// sampled hits that found the duel busy (with its count of sampled
    /// hits since the last write section). Lookups replay sampled hits
    /// into the duel (its lock, `try_lock`), write the buffer (on its own
    /// lines) and read the sampling rate (copied here from the duel).
    duel: Option<(
        crate::sync::Arc<Duel>,
        Box<crossbeam_utils::CachePadded<Sampled>>,
    )>,
    /// The duel samples 1 key in `2^duel_shift`.
    duel_shift: u32,
    /// [`duel::sample_below`] of `duel_shift` under a duel, else 0 (no key
    /// is sampled): a lookup's whole test when its key is not sampled.
    sample_below: u64,
    /// The clock bits a stamp drops ([`lirs_now`](Self::lirs_now)).
    stamp_shift: u32,
    /// The clock's units (see `stamps`) at the last pass of
    /// [`age_stamps`](Self::age_stamps).
    stamps_aged: u32,
    /// The clock as the write section in progress read it: expired
    /// victims are heard as expired.
    pub(super) now: u64,
    /// The sweep's hand over the slab (expired entries reclaimed by the
    /// shard's writes).
    sweep: u32,
    /// No entry of the shard expires before this (a lower bound, `u64::MAX`
    /// with none due), as the kernel's timer base keeps `next_expiry`: while
    /// the clock is before it, lookups read no deadline and the sweep looks
    /// at nothing. Lowered as deadlines are set (a read may shorten one
    /// under the read lock, hence atomic), recomputed by
    /// [`recalc_next_expiry`](Self::recalc_next_expiry).
    next_expiry: AtomicU64,
    /// The recomputation's progress: slots below this have been read,
    /// their earliest deadline is `recalc_min`, and `recalc_floor` is at
    /// or below every deadline set since it began (and each moved below
    /// `recalc_pos` unread).
    recalc_pos: u32,
    recalc_min: u64,
    recalc_floor: AtomicU64,
    /// From short hashes to slots ([`index`]).
    table: index::Index,
    lists: [List; 2],
    weight: u64,
    capacity: u64,
    max_entries: usize,
    /// The entries the shard holds once full, which LIRS's stamps are
    /// scaled to: `max_entries` (at most the capacity) unweighted;
    /// weighted, where `max_entries` bounds little (a capacity in bytes,
    /// say), its length at its evictions (see
    /// [`follow_entries`](Self::follow_entries)), 0 before its first.
    full_entries: usize,
    policy: Policy,
    /// The most references a batched hit counts ([`mark_accessed`](Self::mark_accessed)):
    /// [`MAX_REFS`], 1 under [`Policy::Lru`] (kept rather than derived on
    /// every hit).
    max_refs: u8,
    batching: bool,
    pub(super) shadows: Shadows,
    /// Loads in flight in this shard (`get_or_insert_with`).
    pub(super) flights: Vec<Flight<K, V>>,
    /// The next flight's id.
    pub(super) next_flight: u64,
    pub(super) evictions: u64,
    pub(super) refaults: u64,
    pub(super) activations: u64,
    pub(super) rejected: u64,
    /// New entries the admission refused.
    pub(super) not_admitted: u64,
    /// [`Policy::Workingset`]'s target for the inactive list's share of
    /// the entries (ARC's `p`, as a share), moved by refaults.
    inactive_share: f64,
    /// [`Policy::Lirs`]'s target share of resident HIR entries (the
    /// inactive list), moved by `adapt_hir` between [`LIRS_HIR_MIN`] and
    /// [`LIRS_HIR`].
    pub(super) hir_share: f64,
    /// Whether `hir_share` moves: not in the duel's simulations
    /// (`duel/sims.rs`).
    pub(super) hir_adapts: bool,
    /// Whether `Workingset`'s statistics came from a saved cache
    /// ([`resume`](Self::resume)): [`learned`](Self::learned) hands them
    /// on before the shard's own evidence.
    resumed: bool,
    /// The share of recent misses that were refaults (see
    /// [`Lruvec::note_miss`]).
    refault_share: f32,
    /// The share of recent refaults too distant to activate (see
    /// [`DISTANT_ABOVE`]).
    distant_share: f32,
    /// The evictions at which the shard next looks at its lookups (see
    /// [`Lruvec::lookups`]), and the counts it saw last.
    next_look: u64,
    seen_lookups: (u64, u64),
    /// Whether its last window of lookups found its active list stale.
    stale: bool,
    /// Whether new keys may fill the active list (`fills`): from the
    /// shard's making or clearing to its next eviction.
    pub(super) fill: bool,
    /// Whether most misses refault: the shard takes the kernel's strict
    /// refault test instead of ARC's (see [`Lruvec::workingset_refault`]).
    thrashing: bool,
    /// How far back a refault from probation is activated, in multiples
    /// of the shard's entries (see [`REACH_MIN`]).
    reach: f64,
}

impl<K, V> Lruvec<K, V> {
    pub(super) fn new(
        policy: Policy,
        batching: bool,
        weighted: bool,
        (expiring, capped): (bool, bool),
        capacity: u64,
        max_entries: usize,
    ) -> Self {
        // `Adaptive` starts as `Workingset` (see `with_duel`);
        // `LirsTinyLfu` is `Lirs` that admits.
        let admits = policy == Policy::LirsTinyLfu;
        let policy = match policy {
            Policy::Adaptive => Policy::Workingset,
            Policy::LirsTinyLfu => Policy::Lirs,
            policy => policy,
        };
        Self {
            nodes: Vec::new(),
            flags: Vec::new(),
            links: Vec::new(),
            weights: Vec::new(),
            weighted,
            deadlines: Vec::new(),
            expiring,
            caps: Vec::new(),
            capped: expiring && capped,
            stamps: Vec::new(),
            lirs: policy == Policy::Lirs,
            stamped: policy == Policy::Lirs,
            lir_stamp: 0,
            admits,
            sketch: admits.then(|| Sketch::new(0)),
            pinned: None,
            duel: None,
            moves: None,
            duel_shift: 0,
            sample_below: 0,
            stamp_shift: Self::stamp_shift_for(Self::first_entries(
                weighted,
                capacity,
                max_entries,
            )),
            stamps_aged: 0,
            now: 0,
            sweep: 0,
            next_expiry: AtomicU64::new(u64::MAX),
            recalc_pos: 0,
            recalc_min: u64::MAX,
            recalc_floor: AtomicU64::new(u64::MAX),
            // Weighted, `max_entries` bounds little (a capacity in bytes
            // allows as many): the index starts narrow and widens at the
            // 65537th entry, if the shard ever holds that many
            // (`index_slot`).
            table: index::Index::new(if weighted { 0 } else { max_entries }),
            lists: [EMPTY; 2],
            weight: 0,
            capacity,
            max_entries,
            full_entries: Self::first_entries(weighted, capacity, max_entries),
            policy,
            max_refs: max_refs_of(policy),
            batching,
            shadows: Shadows::new(max_entries),
            flights: Vec::new(),
            next_flight: 0,
            evictions: 0,
            refaults: 0,
            activations: 0,
            rejected: 0,
            not_admitted: 0,
            inactive_share: 1.0 / (1 + INACTIVE_RATIO) as f64,
            hir_share: LIRS_HIR,
            hir_adapts: true,
            resumed: false,
            // Presumed thrashing until misses say otherwise: a loop's
            // first refaults, activated under ARC's rule, cost a loop 1.25x
            // the cache 20 of its 80 points of hits.
            refault_share: 1.0,
            distant_share: 0.0,
            next_look: 0,
            seen_lookups: (0, 0),
            stale: false,
            fill: true,
            thrashing: true,
            reach: REACH_START,
        }
    }

    /// [`full_entries`](Self::full_entries) before any eviction: what the
    /// capacity holds unweighted (every entry weighs 1), not known
    /// weighted (0).
    fn first_entries(weighted: bool, capacity: u64, max_entries: usize) -> usize {
        if weighted {
            0
        } else {
            max_entries.min(capacity_entries(capacity))
        }
    }

    /// Under [`Policy::Adaptive`]: takes part in `duel`, running the
    /// policy it chooses from each write section.
    pub(super) fn with_duel(mut self, duel: crate::sync::Arc<Duel>) -> Self {
        let shift = duel.shift();
        self.duel = Some((
            duel,
            Box::new(crossbeam_utils::CachePadded::new(Sampled::new())),
        ));
        self.set_duel_shift(shift);
        self.moves = Some(Box::new(crossbeam_utils::CachePadded::new(Batch::new())));
        self
    }

    /// Passes over the entries `pinned` holds pinned at reclaim.
    pub(super) fn with_pinned(mut self, pinned: Option<Pinned<K, V>>) -> Self {
        self.pinned = pinned;
        self
    }

    /// Whether the shard has a predicate of pinned entries.
    pub(super) fn pins(&self) -> bool {
        self.pinned.is_some()
    }

    /// Whether entry `i` is pinned now (the user's predicate; none: no).
    pub(super) fn is_pinned(&self, i: u32) -> bool {
        self.pinned.as_ref().is_some_and(|pinned| {
            let n = &self.nodes[i as usize];
            pinned(&n.key, &n.value)
        })
    }

    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Under [`Policy::Adaptive`], at a miss of the key of short hash
    /// `h`: feeds the duel and runs the policy it chooses.
    fn duel(&mut self, h: u32) {
        let Some((duel, sampled)) = &self.duel else {
            return;
        };
        duel.feed(sampled, self.samples(h).then_some(h), || {
            self.entries_when_full()
        });
        let (policy, hit) = (duel.policy(), duel.has_hit());
        // Weighted, the sample's rate follows the cache's entries.
        let shift = if self.weighted {
            duel.shift_now()
        } else {
            self.duel_shift
        };
        if shift != self.duel_shift {
            self.set_duel_shift(shift);
        }
        if policy != self.runs() {
            self.adopt(policy);
        }
        self.drain_moves();
        if self.lirs && hit && !self.stamped {
            self.keep_stamps();
        }
    }

    /// Starts keeping stamps, every entry's last access taken as now.
    fn keep_stamps(&mut self) {
        let now = self.stamp_now();
        self.stamps = (0..self.nodes.len()).map(|_| AtomicU16::new(now)).collect();
        self.stamps_aged = self.stamp_units();
        self.stamped = true;
    }

    /// Runs `policy` (one of [`duel::CONTENDERS`]) from now: the lists
    /// stay as they are and reclaim moves them to its targets
    /// ([`Policy::Lru`] drains the active list). A shard taking up LIRS
    /// counts a shard's worth of evictions as the LIR set's reach until
    /// its first demotion (it keeps stamps once the duel's sample has hit:
    /// see [`keep_stamps`](Self::keep_stamps)); one giving it up drops its
    /// stamps.
    fn adopt(&mut self, policy: Policy) {
        debug_assert!(duel::CONTENDERS.contains(&policy), "{policy:?}");
        let admits = policy == Policy::LirsTinyLfu;
        let policy = if admits { Policy::Lirs } else { policy };
        // LRU's batched moves (only a shard running LRU has any, and it
        // adopts no other policy but to leave it), dropped: their counts
        // stand.
        if let Some(moves) = &self.moves {
            moves.drain(|_| {});
        }
        self.admits = admits;
        // The sketch is kept while admission runs: counting for a shard
        // that might take admission up cost LIRS a fifth of its speed
        // (docs/cache.md). A shard taking it up starts counting afresh.
        if !admits {
            self.sketch = None;
        } else if self.sketch.is_none() {
            self.sketch = Some(Sketch::new(self.len()));
        }
        if policy == Policy::Lirs && self.lirs {
            // Admission taken up or given up: LIRS's lists, stamps and
            // reach stay as they are.
            return;
        }
        self.policy = policy;
        // Statistics taken from a save were `Workingset`'s, now left.
        self.resumed = false;
        self.lirs = policy == Policy::Lirs;
        self.max_refs = max_refs_of(policy);
        // `Workingset`'s aging of a stale active list (`lookups`) is no
        // other policy's: LIRS demotes its LIR set only to refill the HIR
        // set, LRU drains it.
        self.stale = false;
        if self.lirs {
            // A shard's worth back (weighted, what it holds as far as it
            // can tell before its first eviction). Truncated on purpose:
            // the shadows' clock wraps.
            let worth = if self.full_entries == 0 {
                self.entries_when_full()
            } else {
                self.full_entries
            };
            self.lir_stamp = self.shadows.now().wrapping_sub(worth as u32);
            // From no evidence, as `Workingset`'s statistics below.
            self.hir_share = LIRS_HIR;
        } else {
            self.stamps = Vec::new();
            self.stamped = false;
        }
        if policy == Policy::Lru {
            // LRU leaves none, and its evictions do not move the clock
            // the shadows are read by: kept, they would read as evicted
            // just before a return to the others however long LRU ran.
            self.shadows.clear();
        }
        if policy == Policy::Workingset {
            // No other policy keeps the statistics `Workingset` places new
            // entries by. The duel's simulation of it has kept them all
            // along, as shares of its size that hold for a shard's: the
            // shard takes them from there (its lists, shadows and flags
            // stay the other policy's). Learned afresh, a loop interleaved
            // with Zipf requests lost 5 points for the rest of the trace
            // after one change, below both policies run alone (test
            // `adaptive_changing_policy_keeps_what_either_gets`).
            match self.duel.as_ref().and_then(|(duel, _)| duel.learned()) {
                Some(learned) => self.take_learned(learned),
                None => {
                    // While the simulation's statistics are still mostly
                    // their start (see `Lruvec::learned`), from no
                    // evidence. Left at a new shard's "presumed
                    // thrashing", new keys went to the inactive tail, were
                    // gone before their second request, whose refault kept
                    // the share up: a shard whose keys are reused once soon
                    // after their first request hit 49% for twenty shards'
                    // worth of requests after the change, against 74%
                    // (test
                    // `a_shard_giving_up_lirs_places_new_keys_by_fresh_evidence`).
                    self.refault_share = 0.0;
                    self.distant_share = 0.0;
                    self.thrashing = false;
                }
            }
        }
    }

    /// The entries the shard would hold with its capacity full, at the
    /// mean weight of those it holds, and at most `max_entries` (0, not
    /// known, while it holds none): what a weighted cache's duel sizes
    /// its simulations by.
    fn entries_when_full(&self) -> usize {
        if self.weight == 0 {
            return 0;
        }
        let n = u128::from(self.len() as u64) * u128::from(self.capacity) / u128::from(self.weight);
        usize::try_from(n).map_or(self.max_entries, |n| n.min(self.max_entries))
    }

    /// The duel samples 1 key in `2^shift` from now (the cache was
    /// resized, or a weighted cache's duel follows its entries: see
    /// [`Duel::resize`], [`Duel::weighted`]).
    pub(super) fn set_duel_shift(&mut self, shift: u32) {
        // Without a duel no key is sampled (`samples`): the bound stays 0.
        debug_assert!(self.duel.is_some(), "a sampling rate for no duel");
        self.duel_shift = shift;
        self.sample_below = duel::sample_below(shift);
    }

    /// What the shard has learned, for a warm restart
    /// (`LruCache::save`): `Workingset`'s statistics while it runs that
    /// policy and they are mostly evidence ([`learned`](Self::learned)),
    /// and LIRS's HIR share while it runs LIRS and has evicted.
    pub(super) fn learned_state(&self) -> (Option<Learned>, Option<f64>) {
        let ws = (self.policy == Policy::Workingset)
            .then(|| self.learned())
            .flatten();
        // A share that never moved is the start, not learned.
        let hir = (self.lirs && self.evictions > 0).then_some(self.hir_share);
        (ws, hir)
    }

    /// Takes up what a saved cache learned (`LruCache::warm`): under
    /// [`Policy::Adaptive`], the duel's verdict at once (with stamps
    /// under LIRS once its sample has hit); then, unless the shard has
    /// evicted (it learns from its own evictions and refaults, and keeps
    /// what it learned), `Workingset`'s statistics if it runs that policy
    /// and LIRS's HIR share if it runs LIRS (a shard taking up either
    /// later starts them as [`adopt`](Self::adopt) says, not from these).
    pub(super) fn resume(&mut self, ws: Option<Learned>, hir: Option<f64>) {
        if let Some((duel, _)) = &self.duel {
            let (policy, hit) = (duel.policy(), duel.has_hit());
            if policy != self.runs() {
                self.adopt(policy);
            }
            if self.lirs && hit && !self.stamped {
                self.keep_stamps();
            }
        }
        if self.evictions > 0 {
            return;
        }
        if let Some(l) = ws.filter(|_| self.policy == Policy::Workingset) {
            self.take_learned(l);
            self.resumed = true;
        }
        if let Some(h) = hir.filter(|_| self.lirs && self.hir_adapts) {
            self.hir_share = h;
        }
    }

    /// The policy the shard runs: its cache's, or under
    /// [`Policy::Adaptive`] the duel's verdict it last took up.
    pub(super) fn runs(&self) -> Policy {
        if self.admits {
            Policy::LirsTinyLfu
        } else {
            self.policy
        }
    }

    /// Counts a reference reclaim found on entry `i` in the sketch, if
    /// one is kept: an entry hit between two of reclaim's looks at it
    /// counts once, as a hit under the read lock writes no sketch.
    fn count_reference(&mut self, i: u32) {
        self.count(self.links[i as usize].hash);
    }

    /// Counts the key of short hash `hash` in the sketch, if one is kept
    /// (widened first if the shard has outgrown it).
    fn count(&mut self, hash: u32) {
        let (entries, most) = (self.len(), self.max_entries);
        if let Some(s) = &mut self.sketch {
            s.fit(entries, most);
            s.add(hash);
        }
    }

    /// [`Policy::LirsTinyLfu`]'s admission (TinyLFU's): whether a new key
    /// of short hash `hash`, one LIRS would make HIR, loses its place to
    /// victim `t`, having been seen no more often lately than `t`'s key
    /// (ties keep the victim: a loop's keys, alike, do not churn each
    /// other). An expired victim never keeps its place. Read after the
    /// victim is taken, whose reclaim may move the LIR set's reach.
    fn refuses(&self, hash: u32, t: u32) -> bool {
        self.sketch.as_ref().is_some_and(|s| {
            self.lirs_place(self.shadows.peek(hash)) == Place::Inactive
                && !self.expired(t)
                && s.estimate(hash) <= s.estimate(self.links[t as usize].hash)
        })
    }

    /// [`Policy::Lirs`] (not `LirsTinyLfu`, whose admission contests new
    /// keys) in a weighted shard that must evict (the caller tests all
    /// three): whether a new key of short hash `hash` and `weight`, one
    /// LIRS would make HIR, weighs more than the free room and the HIR
    /// entries reclaim would evict for it (see
    /// [`hir_weight_below`](Self::hir_weight_below)). Such a key is
    /// declined (see [`decline`](Self::decline)). Why: caching it evicts
    /// LIR entries, which a cold key never does in LIRS; in shards of 50
    /// entries weighing 1-16 KiB cold keys took the LIR set this way, and
    /// LIRS hit little more than LRU (docs/cache.md, "Weighted LIRS in
    /// small shards"). Read before reclaim runs, which may move the LIR
    /// set's reach: a key let in may still be placed HIR.
    #[inline(never)]
    fn hir_cannot_hold(&self, hash: u32, weight: u64) -> bool {
        // What the free room leaves to evict (nothing: the entry bound
        // is what the shard is over).
        let need = weight.saturating_sub(self.capacity.saturating_sub(self.weight));
        self.hir_weight_below(need) && self.lirs_place(self.shadows.peek(hash)) == Place::Inactive
    }

    /// Whether the HIR entries reclaim would evict weigh less than `need`
    /// (0: never): counted from the inactive tail, the order reclaim
    /// takes them in, as far as `need`, passing over pinned ones; while
    /// the inactive list is empty, the active tail, which reclaim would
    /// demote and evict. A hit HIR entry counts: reclaim makes it LIR and
    /// demotes the LIR set's last entry in its place, as LIRS does.
    /// An expired entry on the way counts as room enough (reclaim never
    /// keeps one). Counted here rather than kept: a weight kept per list
    /// cost every shard's link and unlink, unweighted ones too. The walk
    /// reads the entries that caching the key would evict, no more.
    fn hir_weight_below(&self, need: u64) -> bool {
        let (list, most) = match self.lists[INACTIVE].len {
            0 => (ACTIVE, 1),
            n => (INACTIVE, n),
        };
        let mut t = self.lists[list].tail;
        if t == NIL {
            return false;
        }
        let mut sum = 0;
        for _ in 0..most {
            if self.expired(t) {
                return false;
            }
            if !self.is_pinned(t) {
                sum += self.weight_of(t);
                if sum >= need {
                    return false;
                }
            }
            t = self.links[t as usize].prev;
        }
        true
    }

    /// Declines a new key of short hash `hash` (see
    /// [`hir_cannot_hold`](Self::hir_cannot_hold)) as if it had been
    /// cached as HIR and evicted unhit at once: its shadow, its only one,
    /// holds now, so that a request within the LIR set's reach makes it
    /// LIR, and the clock ticks as at an eviction. The entry goes to
    /// `out`, evicted.
    fn decline(&mut self, hash: u32, key: K, value: V, out: &mut Evicted<K, V>) -> Inserted<V> {
        // An older shadow of the key goes: two would fill its bucket, and
        // the first found would date from an older decline.
        let _ = self.shadows.refault(hash);
        self.shadows.fit(self.len());
        self.shadows.eviction_at(hash, false, true, self.lirs_now());
        self.age_stamps();
        self.not_admitted += 1;
        out.push((key, value, RemovalCause::Evicted));
        Inserted::Rejected
    }

    /// Whether the shard is thrashing by its misses (see
    /// [`Lruvec::note_miss`]); not while it is only presumed to, and never
    /// under a policy without refault detection.
    pub(super) fn thrashing(&self) -> bool {
        self.policy == Policy::Workingset && self.thrashing && self.misses_count()
    }

    /// Whether misses count towards the refault share: once the shard has
    /// evicted half its size (see [`Lruvec::note_miss`]).
    fn misses_count(&self) -> bool {
        self.evictions > 0 && self.evictions * 2 >= self.len() as u64
    }

    pub(super) fn weight(&self) -> u64 {
        self.weight
    }

    pub(super) fn node(&self, i: u32) -> &Node<K, V> {
        &self.nodes[i as usize]
    }

    /// Entry `i`'s weight.
    fn weight_of(&self, i: u32) -> u64 {
        if self.weighted {
            self.weights[i as usize]
        } else {
            1
        }
    }

    fn set_flags(&mut self, i: u32, f: u8) {
        self.flags[i as usize].store(f, Ordering::Relaxed);
    }

    fn flags(&self, i: u32) -> u8 {
        self.flags[i as usize].load(Ordering::Relaxed)
    }

    /// Whether the shard is over its capacity with `extra` more weight and
    /// `extra_entries` more entries.
    fn over(&self, extra: u64, extra_entries: usize) -> bool {
        self.weight + extra > self.capacity || self.len() + extra_entries > self.max_entries
    }

    /// Caches a new entry (its key is absent), evicting to make room
    /// first: the new entry is never its own victim. Under
    /// [`Policy::Workingset`] a refault close enough goes active at once
    /// (`workingset_refault`).
    pub(super) fn insert_new(
        &mut self,
        hash: u64,
        key: K,
        value: V,
        weight: u64,
        deadline: Deadline,
        out: &mut Evicted<K, V>,
    ) -> Inserted<V> {
        if weight > self.capacity {
            self.rejected += 1;
            out.push((key, value, RemovalCause::Evicted));
            return Inserted::Rejected;
        }
        debug_assert!(self.weighted || weight == 1, "unweighted entries weigh 1");
        let hash = short_hash(hash);
        self.duel(hash);
        if matches!(self.policy, Policy::Workingset | Policy::Lirs) {
            self.shadows.prefetch(hash);
        }
        // The usual insertion displaces one entry: the new one takes its
        // slot, so nothing in the slab moves (freeing the slot would move
        // the last entry into it and re-point its index entry).
        let mut none = NIL;
        let mut hole = NIL;
        // The usual victim's shadow is left last, after the new entry is
        // linked: its bucket loads meanwhile (see `evict_detached_later`).
        let mut shadow = None;
        if self.over(weight, 1) {
            if self.weighted && self.lirs && !self.admits && self.hir_cannot_hold(hash, weight) {
                return self.decline(hash, key, value, out);
            }
            if let Some(t) = self.pick_victim(&mut none) {
                if self.refuses(hash, t) {
                    // Counted after its contest, which it enters with
                    // what it had been seen before.
                    self.count(hash);
                    self.not_admitted += 1;
                    self.tick_refused();
                    // The victim stays, for another turn.
                    if self.lists[INACTIVE].tail == t {
                        self.rotate(INACTIVE);
                    }
                    out.push((key, value, RemovalCause::Evicted));
                    return Inserted::Rejected;
                }
                self.note_victim(t);
                shadow = self.evict_detached_later(t);
                hole = t;
                if self.over(weight, 0) {
                    // Heavier than what it displaced: free the slot and
                    // evict more.
                    let cause = self.cause(t);
                    let n = self.free_slot(t, &mut none);
                    out.push((n.key, n.value, cause));
                    hole = NIL;
                    self.evict_while_over(weight, 1, &mut none, out);
                }
            }
        }
        if hole == NIL && self.over(weight, 1) {
            // Reclaim found no room (every entry it could evict is
            // pinned): the new one is not cached, rather than overfill the
            // shard; counted as a refused key is.
            self.leave_shadow(shadow);
            self.count(hash);
            self.tick_refused();
            self.rejected += 1;
            out.push((key, value, RemovalCause::Evicted));
            return Inserted::Rejected;
        }
        self.count(hash);
        let (place, in_band) = match self.policy {
            Policy::Workingset => self.workingset_refault(hash),
            Policy::Lirs => (self.lirs_refault(hash), false),
            _ => (Place::Inactive, false),
        };
        let flags = place.flags() | if in_band { IN_BAND } else { 0 };
        let i = if hole == NIL {
            self.nodes.push(Node { key, value });
            self.flags.push(AtomicU8::new(flags));
            self.links.push(Link {
                prev: NIL,
                next: NIL,
                hash,
            });
            if self.weighted {
                self.weights.push(weight);
            }
            self.push_deadline(deadline);
            if self.stamped {
                self.stamps.push(AtomicU16::new(self.stamp_now()));
            }
            self.nodes.len() as u32 - 1
        } else {
            let cause = self.cause(hole);
            let n = &mut self.nodes[hole as usize];
            let old = (
                std::mem::replace(&mut n.key, key),
                std::mem::replace(&mut n.value, value),
                cause,
            );
            out.push(old);
            self.set_deadline(hole, deadline);
            if self.stamped {
                self.stamps[hole as usize].store(self.stamp_now(), Ordering::Relaxed);
            }
            self.links[hole as usize].hash = hash;
            self.set_flags(hole, flags);
            if self.weighted {
                self.weights[hole as usize] = weight;
            }
            hole
        };
        self.link_at(i, place.list(), place == Place::InactiveTail);
        self.index_slot(hash, i);
        self.weight += weight;
        self.leave_shadow(shadow);
        Inserted::New
    }

    /// Replaces entry `i`'s value (a hit on it, as `lru`'s `put`), then
    /// evicts others past the capacity. Too heavy for the shard: the entry
    /// is removed and the new value rejected.
    pub(super) fn replace(
        &mut self,
        i: u32,
        value: V,
        weight: u64,
        deadline: Deadline,
        out: &mut Evicted<K, V>,
    ) -> Inserted<V> {
        if weight > self.capacity {
            let mut none = NIL;
            let n = self.remove(i, &mut none);
            self.rejected += 1;
            out.push((n.key, value, RemovalCause::Evicted));
            return Inserted::Replaced(n.value);
        }
        self.set_deadline(i, deadline);
        let old = std::mem::replace(&mut self.nodes[i as usize].value, value);
        if self.weighted {
            let was = std::mem::replace(&mut self.weights[i as usize], weight);
            self.weight = self.weight - was + weight;
        }
        if self.batching {
            // Under the write lock already: drained whether or not this hit
            // filled the batch.
            let _ = self.mark_accessed(i);
            self.drain_moves();
        } else {
            self.touch(i);
        }
        let mut protect = i;
        self.evict_while_over(0, 0, &mut protect, out);
        if self.over(0, 0) {
            // Every other entry is pinned: the new value does not fit.
            let mut none = NIL;
            let n = self.remove(protect, &mut none);
            self.rejected += 1;
            out.push((n.key, n.value, RemovalCause::Evicted));
        }
        Inserted::Replaced(old)
    }

    /// Whether the shard has no room for one more entry of weight 1.
    pub(super) fn is_full(&self) -> bool {
        self.over(1, 1)
    }

    /// Whether entry `i` is on the active list.
    pub(super) fn is_active(&self, i: u32) -> bool {
        self.list_of(i) == ACTIVE
    }

    /// Inserts an absent key to warm the shard (`LruCache::warm`): at the
    /// tail of the active list if `active`, else of the inactive list, so
    /// that entries warmed hottest first keep that order; only into room
    /// it has (it evicts nothing: the entries already warmed are hotter),
    /// else hands the entry back.
    pub(super) fn insert_warm(
        &mut self,
        hash: u64,
        key: K,
        value: V,
        weight: u64,
        deadline: Deadline,
        active: bool,
    ) -> Result<(), (K, V)> {
        if self.over(weight, 1) {
            return Err((key, value));
        }
        let hash = short_hash(hash);
        // Active as it was: not on trial (`UNHIT`), as a refault is.
        let (flags, list) = if active && self.policy != Policy::Lru {
            (ACTIVE_FLAG | WORKINGSET, ACTIVE)
        } else {
            (0, INACTIVE)
        };
        self.nodes.push(Node { key, value });
        self.flags.push(AtomicU8::new(flags));
        self.links.push(Link {
            prev: NIL,
            next: NIL,
            hash,
        });
        if self.weighted {
            self.weights.push(weight);
        }
        self.push_deadline(deadline);
        if self.stamped {
            self.stamps.push(AtomicU16::new(self.stamp_now()));
        }
        let i = self.nodes.len() as u32 - 1;
        self.link_at(i, list, true);
        self.index_slot(hash, i);
        self.weight += weight;
        Ok(())
    }

    /// Indexes slot `i`, just filled, under short hash `hash`, first
    /// making a narrow index wide if `i` is past what it holds: a
    /// weighted shard starts narrow whatever its `max_entries` (see
    /// [`new`](Self::new)), and any shard may grow past its first
    /// `max_entries` by `set_capacity`.
    #[inline]
    fn index_slot(&mut self, hash: u32, i: u32) {
        let links = &self.links;
        if i as usize >= index::NARROW_MAX {
            // Once, at the shard's 65537th entry: a rehash of the table.
            self.table.widen(|j| index_hash(links[j as usize].hash));
        }
        self.table
            .insert(index_hash(hash), i, |j| index_hash(links[j as usize].hash));
    }

    /// Takes a new share of the capacity and of `max_entries`
    /// (`set_capacity`), evicting through the policy down to it, into
    /// `out`.
    pub(super) fn set_capacity(
        &mut self,
        capacity: u64,
        max_entries: usize,
        out: &mut Evicted<K, V>,
    ) {
        self.capacity = capacity;
        self.max_entries = max_entries;
        self.shadows.set_limit(max_entries);
        if !self.weighted {
            // Weighted, the entries the new share holds are known at its
            // next evictions (`follow_entries`): the scale stays meanwhile.
            self.full_entries = Self::first_entries(false, capacity, max_entries);
        }
        self.restamp(self.full_entries);
        let mut none = NIL;
        // A resize's evictions say nothing of how the HIR set is reused.
        let hir_share = self.hir_share;
        self.evict_while_over(0, 0, &mut none, out);
        self.hir_share = hir_share;
    }

    /// The entries' indices hottest first: the active list from its head
    /// (the most recent end) to its tail, then the inactive list likewise
    /// — the order reclaim would keep them in (`lru_to_folio` walks the
    /// other way, from the tails).
    pub(super) fn in_order(&self) -> impl Iterator<Item = u32> + '_ {
        [ACTIVE, INACTIVE].into_iter().flat_map(move |list| {
            let l = self.lists[list];
            std::iter::successors((l.len > 0).then_some(l.head), move |&i| {
                Some(self.links[i as usize].next)
            })
            .take(l.len)
        })
    }

    /// Drops every entry and shadow (the listener is not called); the
    /// entries are returned to be dropped outside the lock.
    pub(super) fn clear(&mut self) -> Vec<Node<K, V>> {
        self.table.clear();
        // Empty again: the next keys fill the active list, as a new
        // shard's do.
        self.fill = true;
        self.lists = [EMPTY; 2];
        self.hir_share = LIRS_HIR;
        self.weight = 0;
        self.shadows.clear();
        self.weights = Vec::new();
        self.deadlines = Vec::new();
        self.next_expiry.store(u64::MAX, Ordering::Relaxed);
        self.recalc_pos = 0;
        self.recalc_min = u64::MAX;
        self.recalc_floor.store(u64::MAX, Ordering::Relaxed);
        self.caps = Vec::new();
        self.stamps = Vec::new();
        self.lir_stamp = 0;
        self.links = Vec::new();
        self.flags = Vec::new();
        std::mem::take(&mut self.nodes)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
