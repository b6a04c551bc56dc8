//! One shard's [`Lruvec`]: its entries in a dense slab (insertion in
//! `insert.rs`, removal in `slab.rs`), a hash index over them, the two
//! lists (`struct lruvec`; linking in `list.rs`), reclaim
//! (`shrink_lruvec`, in `reclaim.rs`), where new entries start
//! (`refault.rs`), admission (`admit.rs`), the policy the duel chooses
//! (`adopt.rs`), shadows ([`Shadows`]) and the policy's tuned constants
//! (`tunables.rs`).
//! Everything here runs under the shard's lock and calls no user code
//! except `Eq` in lookups, so a panic there leaves the shard as it was.

mod admit;
mod adopt;
mod batch;
mod check;
mod duel;
mod expiry;
mod hit;
pub(super) mod index;
mod insert;
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

use super::{Policy, RemovalCause, flights::Flights, workingset::Shadows};
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
    pub(super) flights: Flights<K, V>,
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
            flights: Flights::new(),
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

    /// Whether the shard has no room for one more entry of weight 1.
    pub(super) fn is_full(&self) -> bool {
        self.over(1, 1)
    }

    /// Whether entry `i` is on the active list.
    pub(super) fn is_active(&self, i: u32) -> bool {
        self.list_of(i) == ACTIVE
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

#[cfg(all(test, not(mmbatch_loom)))]
mod tests;
