//! A shard's loads in flight ([`Flight`]s), found by their key's hash.
//!
//! A claim, a removal and a landing each look for one key's flights,
//! under the shard's write lock. A few flights are a list, scanned whole
//! (as cheap as it gets when a shard has none or one); past [`FEW`] they
//! move to a table by hash, so a claim looks only at its own key's however
//! many loads the shard has on (the list alone cost 17 us a miss with 1250
//! loads on in a shard: docs/cache.md, "Loads in flight").

use hashbrown::HashTable;

use super::flight::Flight;

/// The most flights a shard keeps in a list: past it they move to a table
/// by hash (a scan of a few against a table's insert and removal, about
/// 170 instructions a load: docs/cache.md, "Loads in flight").
const FEW: usize = 8;

/// A shard's loads in flight, and the ids it gives them.
pub(super) struct Flights<K, V> {
    held: Held<K, V>,
    /// The flights the table held after its last sweep of the abandoned
    /// ones, and the claims since: the next sweep comes when the claims
    /// reach that many (and [`FEW`]), so a sweep (of a table whose room
    /// [`shrink`] keeps within a few times its flights, at most twice as
    /// many as the claims) costs a claim O(1) amortized, and an abandoned
    /// flight of a key nobody asks for again is gone within that many
    /// claims. (A list is swept when full, before it would become a
    /// table: it holds at most [`FEW`] given up.)
    swept: usize,
    claims: usize,
    /// The most flights the table held since it was made or last shrunk:
    /// its room is about that (removals leave it, and a sweep walks it).
    peak: usize,
    /// The next flight's id.
    next_id: u64,
}

enum Held<K, V> {
    /// Up to [`FEW`] flights.
    Few(Vec<Flight<K, V>>),
    /// Flights by their key's hash, until there are none.
    Many(HashTable<Flight<K, V>>),
}

impl<K, V> Flights<K, V> {
    pub(super) fn new() -> Self {
        Self {
            held: Held::Few(Vec::new()),
            swept: 0,
            claims: 0,
            peak: 0,
            next_id: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        match &self.held {
            Held::Few(v) => v.len(),
            Held::Many(t) => t.len(),
        }
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An id for a new flight, unique in this shard.
    #[inline]
    pub(super) fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Adds `flight`, under its key's hash. A full list first sweeps its
    /// abandoned flights out into `gone` (for the caller to drop after
    /// the lock), and moves to a table only if that left it full.
    #[inline]
    pub(super) fn push(&mut self, flight: Flight<K, V>, gone: &mut Vec<Flight<K, V>>) {
        match &mut self.held {
            Held::Few(v) if v.len() < FEW => v.push(flight),
            _ => self.push_many(flight, gone),
        }
    }

    /// [`push`](Self::push) to a full list or a table.
    #[inline(never)]
    fn push_many(&mut self, flight: Flight<K, V>, gone: &mut Vec<Flight<K, V>>) {
        if let Held::Few(v) = &mut self.held {
            let (out, kept): (Vec<_>, Vec<_>) = std::mem::take(v)
                .into_iter()
                .partition(Flight::is_abandoned);
            gone.extend(out);
            *v = kept;
            if v.len() < FEW {
                v.push(flight);
                return;
            }
        }
        let t = match &mut self.held {
            Held::Many(t) => t,
            Held::Few(v) => {
                let mut t = HashTable::with_capacity(2 * FEW);
                for f in std::mem::take(v) {
                    t.insert_unique(f.hash, f, |f: &Flight<K, V>| f.hash);
                }
                self.held = Held::Many(t);
                let Held::Many(t) = &mut self.held else {
                    unreachable!("just made")
                };
                t
            }
        };
        t.insert_unique(flight.hash, flight, |f: &Flight<K, V>| f.hash);
        self.peak = self.peak.max(t.len());
    }

    /// The flight of `hash` with `id`: no user code runs (a key's `Eq`
    /// may panic, or use the cache).
    pub(super) fn by_id(&self, hash: u64, id: u64) -> Option<&Flight<K, V>> {
        match &self.held {
            Held::Few(v) => v.iter().find(|f| f.id == id),
            Held::Many(t) => t.find(hash, |f| f.id == id),
        }
    }

    /// Takes out the flight of `hash` with `id` (its loader landing it),
    /// running no user code.
    #[inline]
    pub(super) fn take(&mut self, hash: u64, id: u64) -> Option<Flight<K, V>> {
        let flight = match &mut self.held {
            Held::Few(v) => {
                let at = v.iter().position(|f| f.id == id)?;
                v.swap_remove(at)
            }
            Held::Many(t) => {
                let (flight, rest) = t.find_entry(hash, |f| f.id == id).ok()?.remove();
                let t = rest.into_table();
                if t.is_empty() {
                    self.empty_to_list();
                } else {
                    shrink(t, &mut self.peak);
                }
                flight
            }
        };
        Some(flight)
    }

    /// The ids of the flights of `hash` whose key `is_key` accepts
    /// (user code: nothing is changed while it runs).
    pub(super) fn ids_of(&self, hash: u64, mut is_key: impl FnMut(&K) -> bool) -> Vec<u64> {
        let of = |f: &Flight<K, V>| (f.hash == hash && is_key(&f.key)).then_some(f.id);
        match &self.held {
            Held::Few(v) => v.iter().filter_map(of).collect(),
            Held::Many(t) => t.iter_hash(hash).filter_map(of).collect(),
        }
    }

    /// Marks the flights of `hash` with these `ids` invalidated (see
    /// [`Flight::invalidated`]).
    pub(super) fn invalidate(&mut self, hash: u64, ids: &[u64]) {
        let mark = |f: &mut Flight<K, V>| {
            if ids.contains(&f.id) {
                f.invalidated = true;
            }
        };
        match &mut self.held {
            Held::Few(v) => v.iter_mut().for_each(mark),
            Held::Many(t) => t.iter_hash_mut(hash).for_each(mark),
        }
    }

    /// Marks every flight invalidated (a clear or a drain of the shard).
    pub(super) fn invalidate_all(&mut self) {
        let mark = |f: &mut Flight<K, V>| f.invalidated = true;
        match &mut self.held {
            Held::Few(v) => v.iter_mut().for_each(mark),
            Held::Many(t) => t.iter_mut().for_each(mark),
        }
    }

    /// A claim's look for a load of its key: the live (not invalidated)
    /// flight of `hash` whose key `is_key` accepts, unless abandoned; an
    /// abandoned one is taken out into `gone` (for the caller to drop
    /// after the lock: a key's `Drop` may panic). Sweeps the table's other
    /// abandoned flights into `gone` too, every so many claims (see
    /// `swept`).
    #[inline]
    pub(super) fn find_live(
        &mut self,
        hash: u64,
        is_key: impl FnMut(&K) -> bool,
        gone: &mut Vec<Flight<K, V>>,
    ) -> Option<&mut Flight<K, V>> {
        if self.is_empty() {
            return None;
        }
        self.find_live_in(hash, is_key, gone)
    }

    /// Back to an empty list, once the table is empty.
    fn empty_to_list(&mut self) {
        (self.held, self.swept, self.claims, self.peak) = (Held::Few(Vec::new()), 0, 0, 0);
    }

    /// [`find_live`](Self::find_live) where the shard has flights.
    #[inline(never)]
    fn find_live_in(
        &mut self,
        hash: u64,
        mut is_key: impl FnMut(&K) -> bool,
        gone: &mut Vec<Flight<K, V>>,
    ) -> Option<&mut Flight<K, V>> {
        if let Held::Many(t) = &mut self.held {
            self.claims += 1;
            if self.claims >= self.swept.max(FEW) {
                gone.extend(t.extract_if(|f| f.is_abandoned()));
                (self.swept, self.claims) = (t.len(), 0);
                if t.is_empty() {
                    self.empty_to_list();
                } else {
                    shrink(t, &mut self.peak);
                }
            }
        }
        let mut is_live = |f: &Flight<K, V>| f.hash == hash && !f.invalidated && is_key(&f.key);
        let (id, abandoned) = match &self.held {
            Held::Few(v) => v.iter().find(|f| is_live(f)),
            Held::Many(t) => t.find(hash, |f| is_live(f)),
        }
        .map(|f| (f.id, f.is_abandoned()))?;
        if abandoned {
            gone.extend(self.take(hash, id));
            return None;
        }
        // Found again by its id (no user code): a borrow returned on one
        // path and not on the other cannot be kept from the first look.
        match &mut self.held {
            Held::Few(v) => v.iter_mut().find(|f| f.id == id),
            Held::Many(t) => t.find_mut(hash, |f| f.id == id),
        }
    }
}

/// Gives a table down to a quarter of its `peak` (the most it held since
/// made or shrunk, which its room follows: removals leave the room, as
/// `capacity` does not say) back half of it: a sweep walks the table's
/// room, not its flights, and a burst of loads must not leave every later
/// sweep walking the burst's room. (At a half, a shrink costs O(1)
/// amortized over the removals that led to it.)
fn shrink<K, V>(t: &mut HashTable<Flight<K, V>>, peak: &mut usize) {
    let keep = 2 * t.len().max(FEW);
    if *peak > 2 * keep {
        t.shrink_to(keep, |f: &Flight<K, V>| f.hash);
        *peak = t.len();
    }
}

#[cfg(all(test, not(mmbatch_loom)))]
#[path = "flights_tests.rs"]
mod tests;
