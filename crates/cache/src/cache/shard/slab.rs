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
        let (hash, weight) = (self.links[i as usize].hash, self.weight_of(i));
        self.table.remove(index_hash(hash), i);
        self.weight -= weight;
    }

    /// The second half of [`remove`](Self::remove): frees detached slot
    /// `i` by moving the last entry into it, so the slab stays dense
    /// (`fix` follows an index that moved).
    pub(super) fn free_slot(&mut self, i: u32, fix: &mut u32) -> Node<K, V> {
        let last = self.nodes.len() as u32 - 1;
        // `last`'s neighbours, to re-point at `i` once its link has moved
        // there (either may be `last` itself, in a list of one).
        let mut moved = None;
        if i != last {
            let Link {
                prev,
                next,
                hash: lhash,
            } = self.links[last as usize];
            let l = &mut self.lists[self.list_of(last)];
            if l.head == last {
                l.head = i;
            }
            if l.tail == last {
                l.tail = i;
            }
            self.table.repoint(index_hash(lhash), last, i);
            if *fix == last {
                *fix = i;
            }
            moved = Some((prev, next));
        }
        if self.weighted {
            self.weights.swap_remove(i as usize);
        }
        if self.expiring {
            self.deadlines.swap_remove(i as usize);
            if i < self.recalc_pos && i != last {
                // `last`'s deadline, not yet read by the recomputation of
                // the next expiry, moved where it has read.
                let d = self.deadlines[i as usize].load(Ordering::Relaxed);
                self.note_recalc(d);
            }
        }
        if self.capped {
            self.caps.swap_remove(i as usize);
        }
        if self.stamped {
            self.stamps.swap_remove(i as usize);
        }
        self.links.swap_remove(i as usize);
        self.flags.swap_remove(i as usize);
        if let Some((prev, next)) = moved {
            let at = |j: u32| if j == last { i } else { j };
            let (prev, next) = (at(prev), at(next));
            let link = &mut self.links[i as usize];
            (link.prev, link.next) = (prev, next);
            self.links[prev as usize].next = i;
            self.links[next as usize].prev = i;
        }
        self.nodes.swap_remove(i as usize)
    }
}
