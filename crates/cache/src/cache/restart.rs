//! Warm restarts (`save`, `warm`): what a cache holds, in the order its
//! policy values it, and what the policy has learned, recorded by one
//! cache and taken up by another, as REAP records and replays a working
//! set.

use std::hash::{BuildHasher, Hash};

use super::{LruCache, Policy, RemovalCause, Weigher, shard};

/// A key as [`LruCache::save`] records it: with whether the policy held
/// it on its active list (the kernel's `PG_active`), which
/// [`LruCache::warm`] restores.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SavedKey<K> {
    /// The key.
    pub key: K,
    /// Whether it was active: used more than once while cached.
    pub active: bool,
}

/// What [`LruCache::save`] records: the keys, hottest first, and what the
/// policy had learned, for [`LruCache::warm`]. Persist the keys as you
/// like and the state with [`PolicyState::to_bytes`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Saved<K> {
    /// The keys, hottest first (see [`LruCache::save`]).
    pub keys: Vec<SavedKey<K>>,
    /// What the policy had learned.
    pub state: PolicyState,
}

/// What a cache's policy had learned when it was saved, beyond which
/// keys were hot: under [`Policy::Adaptive`], the policy its duel had
/// chosen (once learned: the duel had warmed up, or had taken the choice
/// from a save itself; without it a new cache's duel chooses only once
/// its simulations have warmed up on about a thousand sampled requests)
/// and whether its sample had hit; `Workingset`'s targets and refault statistics; LIRS's share
/// of HIR entries. Shares of a shard's size, so they carry to a cache of
/// another size or shard count. Not carried: the history of keys no
/// longer cached (shadows, LIRS's non-resident entries), the admission's
/// frequency sketch and the duel's simulations, all hashed under the
/// saved cache's hasher. The default has learned nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PolicyState {
    /// Under `Adaptive`, the duel's verdict and whether its sample had
    /// hit.
    verdict: Option<(Policy, bool)>,
    workingset: Option<shard::Learned>,
    hir_share: Option<f64>,
}

/// Why [`PolicyState::from_bytes`] refused its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyStateError(&'static str);

impl std::fmt::Display for PolicyStateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not a saved cache's policy state: {}; pass the bytes `PolicyState::to_bytes` \
             gave, or warm from the keys alone with `PolicyState::default()`",
            self.0
        )
    }
}

impl std::error::Error for PolicyStateError {}

/// The first byte of [`PolicyState::to_bytes`]: its layout's version.
const STATE_VERSION: u8 = 1;

/// The second byte: the duel's verdict (see [`policy_byte`]), or this
/// for none.
const NO_VERDICT: u8 = 0xff;

/// The third byte's flags: which parts are present, and two booleans.
const HAS_WORKINGSET: u8 = 1;
const THRASHING: u8 = 2;
const HAS_HIR: u8 = 4;
const HIT: u8 = 8;

/// Where the parts lie.
const WORKINGSET_AT: std::ops::Range<usize> = 4..4 + shard::LEARNED_BYTES;
const HIR_AT: std::ops::Range<usize> = WORKINGSET_AT.end..WORKINGSET_AT.end + 8;
const _: () = assert!(HIR_AT.end == PolicyState::BYTES);

/// A verdict's byte: fixed, whatever order the duel keeps its contenders
/// in (test `policy_state_bytes_round_trip_and_bad_bytes_are_refused`).
fn policy_byte(p: Policy) -> u8 {
    match p {
        Policy::Workingset => 0,
        Policy::Lirs => 1,
        Policy::Lru => 2,
        Policy::LirsTinyLfu => 3,
        Policy::ActiveInactive | Policy::Adaptive => NO_VERDICT,
    }
}

/// The verdict of byte `b` (see [`policy_byte`]); `None` for no
/// contender's.
fn byte_policy(b: u8) -> Option<Policy> {
    shard::CONTENDERS.into_iter().find(|&p| policy_byte(p) == b)
}

impl PolicyState {
    /// The length of [`to_bytes`](Self::to_bytes).
    pub const BYTES: usize = 36;

    /// Under [`Policy::Adaptive`], the policy the saved cache's duel had
    /// chosen; `None` for another policy, a duel that had neither warmed
    /// up nor taken a choice from a save, or a default state.
    pub fn policy(&self) -> Option<Policy> {
        self.verdict.map(|(p, _)| p)
    }

    /// The state as bytes of a fixed little-endian layout, its first a
    /// version, to persist beside the keys.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = STATE_VERSION;
        b[1] = self.verdict.map_or(NO_VERDICT, |(p, _)| policy_byte(p));
        let mut flags = 0;
        if self.verdict.is_some_and(|(_, hit)| hit) {
            flags += HIT;
        }
        if let Some(l) = self.workingset {
            let mut w = [0u8; shard::LEARNED_BYTES];
            flags += HAS_WORKINGSET;
            if l.encode(&mut w) {
                flags += THRASHING;
            }
            b[WORKINGSET_AT].copy_from_slice(&w);
        }
        if let Some(h) = self.hir_share {
            flags += HAS_HIR;
            b[HIR_AT].copy_from_slice(&h.to_le_bytes());
        }
        b[2] = flags;
        b
    }

    /// The state [`to_bytes`](Self::to_bytes) gave. Numbers outside the
    /// bounds a cache keeps them in are brought within them.
    ///
    /// # Errors
    /// [`PolicyStateError`], naming the cause, if the bytes are not
    /// [`BYTES`](Self::BYTES) long, of another version, name no policy the
    /// default chooses between, hold flags or bytes `to_bytes` never
    /// writes, or a number that is not finite.
    pub fn from_bytes(b: &[u8]) -> Result<Self, PolicyStateError> {
        let b: &[u8; Self::BYTES] = b
            .try_into()
            .map_err(|_| PolicyStateError("not PolicyState::BYTES long"))?;
        if b[0] != STATE_VERSION {
            return Err(PolicyStateError("another layout version"));
        }
        let flags = b[2];
        let has = |f: u8| flags & f == f;
        let policy = match b[1] {
            NO_VERDICT => None,
            k => Some(byte_policy(k).ok_or(PolicyStateError("no such policy"))?),
        };
        let unknown = flags >= 2 * HIT
            || has(THRASHING) && !has(HAS_WORKINGSET)
            || has(HIT) && policy.is_none();
        if unknown {
            return Err(PolicyStateError("unknown flags"));
        }
        let unused =
            |at: std::ops::Range<usize>, used: bool| !used && b[at].iter().any(|&x| x != 0);
        if b[3] != 0 || unused(WORKINGSET_AT, has(HAS_WORKINGSET)) || unused(HIR_AT, has(HAS_HIR)) {
            return Err(PolicyStateError("bytes where no part is"));
        }
        let not_finite = PolicyStateError("a number not finite");
        let workingset = if has(HAS_WORKINGSET) {
            let w = b[WORKINGSET_AT].try_into().expect("LEARNED_BYTES");
            Some(shard::Learned::decode(w, has(THRASHING)).ok_or(not_finite.clone())?)
        } else {
            None
        };
        let hir_share = if has(HAS_HIR) {
            let h = f64::from_le_bytes(b[HIR_AT].try_into().expect("8 bytes"));
            Some(shard::hir_share_within(h).ok_or(not_finite)?)
        } else {
            None
        };
        Ok(Self {
            verdict: policy.map(|p| (p, has(HIT))),
            workingset,
            hir_share,
        })
    }
}

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// The cached keys in the order the policy values them, and what the
    /// policy has learned, for a warm restart ([`warm`](Self::warm)):
    /// each shard's active entries before its inactive ones, each list
    /// from its most recent end, the shards interleaved rank by rank
    /// (every shard's hottest, then every shard's next), so that any
    /// prefix holds the hottest of every shard. Weakly consistent, as
    /// [`iter`](Self::iter); clones keys only. The values come back
    /// through `warm`'s loader.
    ///
    /// # Panics
    /// If called from user code that the cache runs under any shard's
    /// write lock: it reads every shard.
    pub fn save(&self) -> Saved<K> {
        let mut workingset = Vec::new();
        let mut hir = Vec::new();
        let per_shard: Vec<Vec<SavedKey<K>>> = self
            .shards
            .iter()
            .map(|shard| {
                let lv = shard.read();
                let now = self.now();
                let (ws, h) = lv.learned_state();
                workingset.extend(ws);
                hir.extend(h);
                lv.in_order()
                    .filter(|&i| lv.live_at(i, now))
                    .map(|i| SavedKey {
                        key: lv.node(i).key.clone(),
                        active: lv.is_active(i),
                    })
                    .collect()
            })
            .collect();
        let longest = per_shard.iter().map(Vec::len).max().unwrap_or(0);
        let mut its: Vec<_> = per_shard.into_iter().map(Vec::into_iter).collect();
        let mut keys = Vec::with_capacity(its.iter().map(ExactSizeIterator::len).sum());
        for _ in 0..longest {
            keys.extend(its.iter_mut().filter_map(Iterator::next));
        }
        let verdict = self.duel.as_ref().and_then(|duel| duel.learned_verdict());
        let workingset = shard::Learned::mean(&workingset)
            .or_else(|| self.duel.as_ref().and_then(|duel| duel.learned()));
        let hir_share = (!hir.is_empty()).then(|| hir.iter().sum::<f64>() / hir.len() as f64);
        Saved {
            keys,
            state: PolicyState {
                verdict,
                workingset,
                hir_share,
            },
        }
    }

    /// Warms the cache from a [`save`](Self::save), as a REAP restore
    /// replays a working set. First the policy takes up `state`, what the
    /// saved one had learned, unless it has learned on its own already (a
    /// cache in use keeps what it learned): under [`Policy::Adaptive`] the
    /// saved duel's choice, until the duel's verdict moves (it cannot
    /// before its simulations have seen their warm-up of sampled
    /// accesses); in each
    /// shard the statistics of the policy the shard runs
    /// ([`PolicyState::default`] learns afresh). Then `keys`, hottest
    /// first, read as it goes: each key not cached is loaded with `load`
    /// (outside every lock; `None` skips the key) and placed behind the
    /// entries warmed before it, active if it was, so that the policy
    /// values the warmed entries as the saved cache did. Stops calling
    /// `load` for a shard once it is full (a warm never evicts; an entry
    /// too heavy for the room left is dropped, and lighter ones still
    /// tried), and reading `keys` once every shard is; returns the entries
    /// warmed. Calls made meanwhile go on as usual; a key inserted
    /// meanwhile is not overwritten.
    ///
    /// # Panics
    /// As [`insert`](Self::insert), and if `load` panics (the entries
    /// warmed before stay).
    pub fn warm(
        &self,
        state: &PolicyState,
        keys: impl IntoIterator<Item = SavedKey<K>>,
        mut load: impl FnMut(&K) -> Option<V>,
    ) -> usize {
        if let (Some((p, hit)), Some(duel)) = (state.verdict, &self.duel) {
            duel.resume(p, hit);
        }
        for shard in self.shards.iter() {
            shard.write().resume(state.workingset, state.hir_share);
        }
        let mut full = vec![false; self.shards.len()];
        let mut left = full.len();
        let mut warmed = 0;
        for SavedKey { key, active } in keys {
            if left == 0 {
                break;
            }
            let hash = self.hash(&key);
            let s = self.shard_index(hash);
            if full[s] || self.contains_key(&key) {
                continue;
            }
            let Some(value) = load(&key) else { continue };
            let weight = self.weigh(&key, &value);
            // Before the lock: an `Expiry` that panics changes nothing.
            let created = self.created(&key, &value);
            let mut expired = None;
            let inserted = {
                let mut lv = self.shards[s].write();
                let now = self.now();
                match lv.find(hash, |k| *k == key) {
                    Some(i) if lv.live_at(i, now) => Ok(false),
                    found => {
                        // Expired meanwhile: out (heard so), and the
                        // loaded value goes in.
                        if let Some(i) = found {
                            let mut none = u32::MAX;
                            expired = Some(lv.remove(i, &mut none));
                        }
                        let deadline = Self::deadline(now, created);
                        lv.insert_warm(hash, key, value, weight, deadline, active)
                            .map(|()| true)
                            .map_err(|entry| (entry, lv.is_full()))
                    }
                }
            };
            if let Some(n) = expired {
                self.notify(std::iter::once((n.key, n.value)), RemovalCause::Expired);
            }
            match inserted {
                Ok(true) => warmed += 1,
                Ok(false) => {}
                Err((entry, is_full)) => {
                    // Dropped outside the lock. Too heavy for the room
                    // left, a lighter key may still fit.
                    drop(entry);
                    if is_full {
                        full[s] = true;
                        left -= 1;
                    }
                }
            }
        }
        warmed
    }
}
