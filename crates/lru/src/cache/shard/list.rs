//! The two lists (`folio->lru` on `lruvec->lists`): doubly linked through
//! [`Link`]s kept beside the slab, so that lookups never load them.

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
        let Link { prev, next } = self.links[i as usize];
        match prev {
            NIL => self.lists[list].head = next,
            p => self.links[p as usize].next = next,
        }
        match next {
            NIL => {
                self.lists[list].tail = prev;
                if prev != NIL {
                    // The new tail is the next entry reclaim looks at
                    // (its flags, in its node): its link is loaded now,
                    // its node not, and would be a cache miss then.
                    super::super::prefetch::prefetch_read(&self.nodes[prev as usize]);
                }
            }
            n => self.links[n as usize].prev = prev,
        }
        self.lists[list].len -= 1;
    }

    /// `list_add`: puts entry `i` at `list`'s head, the most recent end.
    pub(super) fn link_head(&mut self, i: u32, list: usize) {
        let head = self.lists[list].head;
        self.links[i as usize] = Link {
            prev: NIL,
            next: head,
        };
        match head {
            NIL => self.lists[list].tail = i,
            h => self.links[h as usize].prev = i,
        }
        self.lists[list].head = i;
        self.lists[list].len += 1;
    }

    /// `list_add_tail`: puts entry `i` at `list`'s tail, the end reclaim
    /// takes next.
    pub(super) fn link_tail(&mut self, i: u32, list: usize) {
        let tail = self.lists[list].tail;
        self.links[i as usize] = Link {
            prev: tail,
            next: NIL,
        };
        match tail {
            NIL => self.lists[list].head = i,
            t => self.links[t as usize].next = i,
        }
        self.lists[list].tail = i;
        self.lists[list].len += 1;
    }
}
