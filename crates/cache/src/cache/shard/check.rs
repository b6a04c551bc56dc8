//! A shard's structure checked ([`LruCache::check_invariants`](crate::LruCache::check_invariants)).

use super::*;

impl<K, V> Lruvec<K, V> {
    /// The shard's structure, checked: lists and index cover the slab
    /// exactly, flags match lists, weight and bounds hold.
    pub(in crate::cache) fn check(&self) -> Result<(), String> {
        let mut seen = vec![false; self.nodes.len()];
        let mut weight = 0;
        for list in [INACTIVE, ACTIVE] {
            let l = self.lists[list];
            let (mut at, mut prev, mut n) = (l.head, l.tail, 0);
            if (l.head == NIL) != (l.len == 0) || (l.tail == NIL) != (l.len == 0) {
                return Err(format!(
                    "list {list}: ends {}/{} for {} entries",
                    l.head, l.tail, l.len
                ));
            }
            while n < l.len {
                let i = at as usize;
                if i >= self.nodes.len() || seen[i] {
                    return Err(format!("list {list}: entry {i} out of range or seen twice"));
                }
                seen[i] = true;
                let link = self.links[i];
                if link.prev != prev {
                    return Err(format!("list {list}: entry {i}'s prev is {}", link.prev));
                }
                if (self.flags(at) & ACTIVE_FLAG != 0) != (list == ACTIVE) {
                    return Err(format!(
                        "entry {i}'s ACTIVE flag disagrees with list {list}"
                    ));
                }
                if !self.table.contains(super::index_hash(link.hash), at) {
                    return Err(format!("entry {i} missing from the index"));
                }
                weight += self.weight_of(at);
                prev = at;
                at = link.next;
                n += 1;
            }
            if l.len > 0 && (l.tail != prev || at != l.head) {
                return Err(format!(
                    "list {list}: not a circle from head to tail ({n} walked)"
                ));
            }
        }
        if seen.iter().any(|s| !s) || self.table.len() != self.nodes.len() {
            return Err(format!(
                "{} entries, {} indexed, {} on lists",
                self.nodes.len(),
                self.table.len(),
                seen.iter().filter(|s| **s).count()
            ));
        }
        if self.links.len() != self.nodes.len() || self.flags.len() != self.nodes.len() {
            return Err(format!(
                "{} links and {} flags for {} entries",
                self.links.len(),
                self.flags.len(),
                self.nodes.len()
            ));
        }
        if self.deadlines.len() != if self.expiring { self.nodes.len() } else { 0 } {
            return Err(format!(
                "{} deadlines kept for {} entries (expiring: {})",
                self.deadlines.len(),
                self.nodes.len(),
                self.expiring
            ));
        }
        let next = self.next_expiry.load(Ordering::Relaxed);
        if let Some(early) = self
            .deadlines
            .iter()
            .map(|d| d.load(Ordering::Relaxed))
            .find(|&d| d < next)
        {
            return Err(format!(
                "a deadline at {early} before the shard's next expiry, {next}"
            ));
        }
        if self.stamps.len() != if self.stamped { self.nodes.len() } else { 0 } {
            return Err(format!(
                "{} stamps kept for {} entries (stamped: {})",
                self.stamps.len(),
                self.nodes.len(),
                self.stamped
            ));
        }
        if self.lirs != (self.policy == Policy::Lirs) || (self.stamped && !self.lirs) {
            return Err(format!(
                "policy {:?}, LIRS {}, stamped {}",
                self.policy, self.lirs, self.stamped
            ));
        }
        // Admission is LIRS's, and its sketch is kept while it runs.
        if (self.admits && !self.lirs) || self.sketch.is_some() != self.admits {
            return Err(format!(
                "LIRS {}, admits {}, sketch kept {}",
                self.lirs,
                self.admits,
                self.sketch.is_some()
            ));
        }
        // A shard's reference bound follows the policy it runs (`adopt`).
        if self.max_refs != max_refs_of(self.policy) {
            return Err(format!(
                "policy {:?} with a reference bound of {}",
                self.policy, self.max_refs
            ));
        }
        if self.caps.len() != if self.capped { self.nodes.len() } else { 0 } {
            return Err(format!(
                "{} deadline caps kept for {} entries (capped: {})",
                self.caps.len(),
                self.nodes.len(),
                self.capped
            ));
        }
        if self.weights.len() != if self.weighted { self.nodes.len() } else { 0 } {
            return Err(format!(
                "{} weights kept for {} entries (weighted: {})",
                self.weights.len(),
                self.nodes.len(),
                self.weighted
            ));
        }
        if weight != self.weight {
            return Err(format!("weight {} recorded, {weight} summed", self.weight));
        }
        // Pinned entries may hold a shard over a capacity made smaller.
        if (self.weight > self.capacity || self.nodes.len() > self.max_entries) && !self.pins() {
            return Err(format!(
                "{} entries of weight {} over the shard's {} / {}",
                self.nodes.len(),
                self.weight,
                self.max_entries,
                self.capacity
            ));
        }
        self.shadows.check()
    }
}
