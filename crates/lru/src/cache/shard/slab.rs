//! Removal from the slab (`filemap_remove_folio`): an entry leaves its
//! list and the index, and the last entry moves into its slot so that the
//! slab stays dense.

use super::*;

impl<K, V> Lruvec<K, V> {
    /// Removes entry `i` (`filemap_remove_folio`): unlinks it, and moves
    /// the last entry into its slot so the slab stays dense (`fix` follows
    /// an index that moved).
    pub(in crate::cache) fn remove(&mut self, i: u32, fix: &mut u32) -> Node<K, V> {
        self.detach(i);
        self.free_slot(i, fix)
    }

    /// The first half of [`remove`](Self::remove): unlinks entry `i`,
    /// drops it from the index and stops counting its weight; its slot
    /// stays until [`free_slot`](Self::free_slot) or reuse.
    pub(super) fn detach(&mut self, i: u32) {
        let list = self.list_of(i);
        self.unlink(i, list);
        let (hash, weight) = (self.nodes[i as usize].hash, self.weight_of(i));
        if let Ok(e) = self.table.find_entry(index_hash(hash), |&j| j == i) {
            e.remove();
        }
        self.weight -= weight;
    }

    /// The second half of [`remove`](Self::remove): frees detached slot
    /// `i` by moving the last entry into it, so the slab stays dense
    /// (`fix` follows an index that moved).
    pub(super) fn free_slot(&mut self, i: u32, fix: &mut u32) -> Node<K, V> {
        let last = self.nodes.len() as u32 - 1;
        if i != last {
            // Re-point whatever referred to `last` at `i`.
            let Link { prev, next } = self.links[last as usize];
            let lhash = self.nodes[last as usize].hash;
            let llist = self.list_of(last);
            match prev {
                NIL => self.lists[llist].head = i,
                p => self.links[p as usize].next = i,
            }
            match next {
                NIL => self.lists[llist].tail = i,
                n => self.links[n as usize].prev = i,
            }
            if let Some(slot) = self.table.find_mut(index_hash(lhash), |&j| j == last) {
                *slot = i;
            }
            if *fix == last {
                *fix = i;
            }
        }
        if self.weighted {
            self.weights.swap_remove(i as usize);
        }
        self.links.swap_remove(i as usize);
        self.nodes.swap_remove(i as usize)
    }
}
