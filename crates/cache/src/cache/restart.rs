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
pub struct Saved<K> {
    /// The keys, hottest first (see [`LruCache::save`]).
    pub keys: Vec<SavedKey<K>>,
    /// What the policy had learned.
    pub state: PolicyState,
}

/// What a cache's policy had learned when it was saved, beyond which
/// keys were hot: under [`Policy::Adaptive`], which policy its shards ran
/// (a new cache's duel would take thousands of requests to choose it
/// again); `Workingset`'s targets and refault statistics; LIRS's share of
/// HIR entries. Shares of a shard's size, so they carry to a cache of
/// another size or shard count. The default has learned nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PolicyState {
    /// Under `Adaptive`, what the shards ran: an index into
    /// `duel::CONTENDERS`.
    runs: Option<u8>,
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

/// `runs`'s byte when the cache was not adaptive.
const NOT_ADAPTIVE: u8 = 0xff;

/// [`PolicyState::to_bytes`]'s flags.
const HAS_WORKINGSET: u8 = 1;
const THRASHING: u8 = 2;
const HAS_HIR: u8 = 4;

impl PolicyState {
    /// The length of [`to_bytes`](Self::to_bytes).
    pub const BYTES: usize = 36;

    /// Under [`Policy::Adaptive`], the policy the saved cache's shards
    /// ran; `None` for another policy or a default state.
    pub fn policy(&self) -> Option<Policy> {
        self.runs.map(|k| shard::CONTENDERS[usize::from(k)])
    }

    /// The state as bytes of a fixed little-endian layout, its first a
    /// version, to persist beside the keys.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = STATE_VERSION;
        b[1] = self.runs.unwrap_or(NOT_ADAPTIVE);
        if let Some(l) = self.workingset {
            let mut w = [0u8; shard::LEARNED_BYTES];
            let thrashing = l.encode(&mut w);
            b[2] |= HAS_WORKINGSET | if thrashing { THRASHING } else { 0 };
            b[4..28].copy_from_slice(&w);
        }
        if let Some(h) = self.hir_share {
            b[2] |= HAS_HIR;
            b[28..36].copy_from_slice(&h.to_le_bytes());
        }
        b
    }

    /// The state [`to_bytes`](Self::to_bytes) gave. Numbers outside the
    /// bounds a cache keeps them in are brought within them.
    ///
    /// # Errors
    /// [`PolicyStateError`], naming the cause, if the bytes are not
    /// [`BYTES`](Self::BYTES) long, of another version, name no policy a
    /// cache runs, or hold a number that is not finite.
    pub fn from_bytes(b: &[u8]) -> Result<Self, PolicyStateError> {
        let b: &[u8; Self::BYTES] = b
            .try_into()
            .map_err(|_| PolicyStateError("not PolicyState::BYTES long"))?;
        if b[0] != STATE_VERSION {
            return Err(PolicyStateError("another layout version"));
        }
        let runs = match b[1] {
            NOT_ADAPTIVE => None,
            k if usize::from(k) < shard::CONTENDERS.len() => Some(k),
            _ => return Err(PolicyStateError("no such policy")),
        };
        if b[2] & !(HAS_WORKINGSET | THRASHING | HAS_HIR) != 0 || b[3] != 0 {
            return Err(PolicyStateError("unknown flags"));
        }
        let workingset = if b[2] & HAS_WORKINGSET != 0 {
            let w = b[4..28].try_into().expect("LEARNED_BYTES");
            let l = shard::Learned::decode(w, b[2] & THRASHING != 0);
            Some(l.ok_or(PolicyStateError("a number not finite"))?)
        } else {
            None
        };
        let hir_share = if b[2] & HAS_HIR != 0 {
            let h = f64::from_le_bytes(b[28..].try_into().expect("8 bytes"));
            if !h.is_finite() {
                return Err(PolicyStateError("a number not finite"));
            }
            Some(h)
        } else {
            None
        };
        Ok(Self {
            runs,
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
        let runs = self.duel.as_ref().map(|duel| {
            let p = duel.policy();
            let k = shard::CONTENDERS.iter().position(|&c| c == p);
            // One of CONTENDERS: fits a u8.
            k.expect("the duel runs a contender") as u8
        });
        let workingset = shard::Learned::mean(&workingset)
            .or_else(|| self.duel.as_ref().and_then(|duel| duel.learned()));
        let hir_share = (!hir.is_empty()).then(|| hir.iter().sum::<f64>() / hir.len() as f64);
        Saved {
            keys,
            state: PolicyState {
                runs,
                workingset,
                hir_share,
            },
        }
    }

    /// Warms the cache from a [`save`](Self::save), as a REAP restore
    /// replays a working set. First the policy takes up `state`, what the
    /// saved one had learned (under [`Policy::Adaptive`], the policy its
    /// shards ran; a cache of another policy keeps its own and takes only
    /// the statistics that policy keeps; [`PolicyState::default`] learns
    /// afresh). Then `keys`, hottest first, read as it goes: each key not
    /// cached is loaded with `load` (outside every lock; `None` skips the
    /// key) and placed behind the entries warmed before it, active if it
    /// was, so that the policy values the warmed entries as the saved
    /// cache did. Stops calling `load` for a shard once it is full (a
    /// warm never evicts; an entry too heavy for the room left is
    /// dropped, and lighter ones still tried), and reading `keys` once
    /// every shard is; returns the entries warmed. Calls made meanwhile
    /// go on as usual; a key inserted meanwhile is not overwritten.
    pub fn warm(
        &self,
        state: &PolicyState,
        keys: impl IntoIterator<Item = SavedKey<K>>,
        mut load: impl FnMut(&K) -> Option<V>,
    ) -> usize {
        let policy = state.policy();
        if let (Some(p), Some(duel)) = (policy, &self.duel) {
            // A saved cache runs another policy than `Workingset` only
            // once its sample has hit.
            duel.resume(p, p != Policy::Workingset);
        }
        for shard in self.shards.iter() {
            shard
                .write()
                .resume(policy, state.workingset, state.hir_share);
        }
        let mut full = vec![false; self.shards.len()];
        let mut left = full.len();
        let mut warmed = 0;
        for SavedKey { key, active } in keys {
            if left == 0 {
                break;
            }
            let hash = self.hash(&key);
            let s = (hash >> 40) as usize & self.shard_mask;
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
