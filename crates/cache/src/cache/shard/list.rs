//! The two lists (`folio->lru` on `lruvec->lists`): circular and doubly
//! linked through [`Link`]s kept beside the slab, so that lookups never
//! load them. Circular, so that the tail's next turn at the head — a
//! referenced entry's second chance, reclaim's most common step — moves
//! the list's ends and writes no link, as a CLOCK hand passes over a
//! referenced page (measured: `docs/cache.md#layout-measurements`).

use super::*;

impl<K, V> Lruvec<K, V> {
    /// Which list entry `i` is on (`folio_lru_list`, by `PG_active`).
    pub(super) fn list_of(&self, i: u32) -> usize {
        if self.flags(i) & ACTIVE_FLAG != 0 {
            ACTIVE
        } else {
            INACTIVE
        }
    }

    /// `list_del`: takes entry `i` off `list`.
    pub(super) fn unlink(&mut self, i: u32, list: usize) {
        let l = &mut self.lists[list];
        l.len -= 1;
        if l.len == 0 {
            l.head = NIL;
            l.tail = NIL;
            return;
        }
        let Link { prev, next, .. } = self.links[i as usize];
        self.links[prev as usize].next = next;
        self.links[next as usize].prev = prev;
        if l.head == i {
            l.head = next;
        }
        if l.tail == i {
            l.tail = prev;
            self.prefetch_tail(prev);
        }
    }

    /// The new tail is the next entry reclaim looks at (its flags, and its
    /// link for its hash or its next turn) and, evicted, the slot the next
    /// new entry's key and value overwrite: none is loaded yet, and each
    /// would be a cache miss then. Prefetches each (and, with expiry on,
    /// its deadline, which the new entry's overwrites), so that those
    /// misses overlap the work in between (the flags and the node as well
    /// as the link: `docs/cache.md#layout-measurements`).
    fn prefetch_tail(&self, t: u32) {
        super::super::prefetch::prefetch_read(&self.links[t as usize]);
        super::super::prefetch::prefetch_read(&self.flags[t as usize]);
        super::super::prefetch::prefetch_read(&self.nodes[t as usize]);
        // Evicted, its deadline is overwritten by the last entry's.
        if let Some(d) = self.deadlines.get(t as usize) {
            super::super::prefetch::prefetch_read(d);
        }
    }

    /// Puts entry `i` between `list`'s tail and head (the same place in a
    /// circle); returns whether the list was empty.
    fn link_between(&mut self, i: u32, list: usize) -> bool {
        let l = &mut self.lists[list];
        l.len += 1;
        if l.head == NIL {
            l.head = i;
            l.tail = i;
            let link = &mut self.links[i as usize];
            (link.prev, link.next) = (i, i);
            return true;
        }
        let (head, tail) = (l.head, l.tail);
        let link = &mut self.links[i as usize];
        (link.prev, link.next) = (tail, head);
        self.links[head as usize].prev = i;
        self.links[tail as usize].next = i;
        false
    }

    /// Puts entry `i` at `list`'s tail if `tail`, else at its head.
    pub(super) fn link_at(&mut self, i: u32, list: usize, tail: bool) {
        if !self.link_between(i, list) {
            let l = &mut self.lists[list];
            *if tail { &mut l.tail } else { &mut l.head } = i;
        }
    }

    /// `list_add`: puts entry `i` at `list`'s head, the most recent end.
    pub(super) fn link_head(&mut self, i: u32, list: usize) {
        self.link_at(i, list, false);
    }

    /// `list_add_tail`: puts entry `i` at `list`'s tail, the end reclaim
    /// takes next.
    pub(super) fn link_tail(&mut self, i: u32, list: usize) {
        self.link_at(i, list, true);
    }

    /// `list_move` of the tail to the head (`list_rotate_left` the other
    /// way round): the tail's entry takes another turn. In a circle that is
    /// the ends moving back by one entry; no link is written.
    pub(super) fn rotate(&mut self, list: usize) {
        let l = &mut self.lists[list];
        if l.tail == NIL {
            return;
        }
        l.head = l.tail;
        l.tail = self.links[l.tail as usize].prev;
        let t = l.tail;
        self.prefetch_tail(t);
    }
}
