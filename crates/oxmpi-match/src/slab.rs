//! Generation-checked slab and intrusive index-linked lists.
//!
//! Contract: a [`Slab`] hands out `(index, generation)` pairs; removing an
//! entry bumps its generation so stale handles are detected instead of
//! aliasing a reused slot. Vacant slots form a free list threaded through the
//! slab itself, so once the slab has reached its high-water mark inserting
//! and removing never touches the allocator. [`List`] is a doubly linked list
//! whose links live inside the slab nodes (a node may sit on several lists at
//! once, one [`Link`] per list), so linking and unlinking are O(1) and
//! allocation-free.

/// Sentinel index meaning "no node".
pub(crate) const NIL: u32 = u32::MAX;

/// One slab slot: its generation plus either a value or the next free slot.
#[derive(Debug)]
struct Entry<T> {
    generation: u32,
    state: State<T>,
}

#[derive(Debug)]
enum State<T> {
    Occupied(T),
    Vacant { next_free: u32 },
}

/// Vec-backed slab with an intrusive free list and per-slot generations.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    /// An empty slab with room for `cap` entries before it must grow.
    pub(crate) fn with_capacity(cap: usize) -> Self {
        Slab {
            entries: Vec::with_capacity(cap),
            free_head: NIL,
            len: 0,
        }
    }

    /// Number of occupied slots.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `value`, returning its index and generation.
    pub(crate) fn insert(&mut self, value: T) -> (u32, u32) {
        self.len += 1;
        if self.free_head != NIL {
            let idx = self.free_head;
            let entry = &mut self.entries[idx as usize];
            match entry.state {
                State::Vacant { next_free } => self.free_head = next_free,
                State::Occupied(_) => unreachable!("free list points at an occupied slot"),
            }
            entry.state = State::Occupied(value);
            (idx, entry.generation)
        } else {
            let idx = u32::try_from(self.entries.len()).expect("slab index overflow");
            assert!(idx != NIL, "slab index overflow");
            // Growth only happens past the high-water mark (amortised, rare).
            self.entries.push(Entry {
                generation: 0,
                state: State::Occupied(value),
            });
            (idx, 0)
        }
    }

    /// Removes the value at `idx` (which must be occupied) and bumps the
    /// slot's generation so outstanding handles to it become stale.
    pub(crate) fn remove(&mut self, idx: u32) -> T {
        let entry = &mut self.entries[idx as usize];
        let old = std::mem::replace(
            &mut entry.state,
            State::Vacant {
                next_free: self.free_head,
            },
        );
        let State::Occupied(v) = old else {
            unreachable!("removing a vacant slab slot")
        };
        self.vacated(idx);
        v
    }

    /// Removes the value at `idx` (which must be occupied) as
    /// [`Slab::remove`] does, handing back only what `f` reads of it.
    ///
    /// Moving a whole value out copied it through the stack in pieces of
    /// different widths (a store-forwarding stall on the matching hot path,
    /// seen with perf); reading the fields wanted in place does not.
    #[inline]
    pub(crate) fn remove_with<U>(&mut self, idx: u32, f: impl FnOnce(&T) -> U) -> U {
        let entry = &mut self.entries[idx as usize];
        let State::Occupied(v) = &entry.state else {
            unreachable!("removing a vacant slab slot")
        };
        let out = f(v);
        entry.state = State::Vacant {
            next_free: self.free_head,
        };
        self.vacated(idx);
        out
    }

    /// The bookkeeping of a removal, once slot `idx` holds `Vacant` with
    /// the old free head: a new generation, and the slot heads the free
    /// list.
    #[inline(always)]
    fn vacated(&mut self, idx: u32) {
        let entry = &mut self.entries[idx as usize];
        entry.generation = entry.generation.wrapping_add(1);
        self.free_head = idx;
        self.len -= 1;
    }

    /// Shared access to an occupied slot (internal invariant: it is occupied).
    pub(crate) fn get(&self, idx: u32) -> &T {
        match &self.entries[idx as usize].state {
            State::Occupied(v) => v,
            State::Vacant { .. } => unreachable!("reading a vacant slab slot"),
        }
    }

    /// Mutable access to an occupied slot.
    pub(crate) fn get_mut(&mut self, idx: u32) -> &mut T {
        match &mut self.entries[idx as usize].state {
            State::Occupied(v) => v,
            State::Vacant { .. } => unreachable!("writing a vacant slab slot"),
        }
    }

    /// The value at `idx` if it is occupied and still has generation `generation`.
    pub(crate) fn get_checked(&self, idx: u32, generation: u32) -> Option<&T> {
        let entry = self.entries.get(idx as usize)?;
        match &entry.state {
            State::Occupied(v) if entry.generation == generation => Some(v),
            _ => None,
        }
    }
}

/// Previous/next indices of a node on one intrusive list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Link {
    pub(crate) prev: u32,
    pub(crate) next: u32,
}

impl Link {
    /// A link not on any list.
    pub(crate) const DETACHED: Link = Link {
        prev: NIL,
        next: NIL,
    };
}

/// A slab node that carries `K` intrusive links, selected by list number.
pub(crate) trait Node {
    /// The link used by list number `which`.
    fn link(&self, which: usize) -> Link;
    /// Mutable link used by list number `which`.
    fn link_mut(&mut self, which: usize) -> &mut Link;
}

/// Head and tail of an intrusive list; `which` picks the link field each
/// operation uses, so one node type can be on several lists.
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

impl List {
    /// The empty list.
    pub(crate) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };

    /// Whether the list has no nodes.
    pub(crate) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Appends `idx` (arrival/posting order is kept by always appending).
    pub(crate) fn push_back<T: Node>(&mut self, slab: &mut Slab<T>, which: usize, idx: u32) {
        self.insert_before(slab, which, idx, NIL);
    }

    /// Inserts `idx` before `before`, or at the tail if `before` is `NIL`.
    pub(crate) fn insert_before<T: Node>(
        &mut self,
        slab: &mut Slab<T>,
        which: usize,
        idx: u32,
        before: u32,
    ) {
        let prev = if before == NIL {
            self.tail
        } else {
            slab.get(before).link(which).prev
        };
        *slab.get_mut(idx).link_mut(which) = Link { prev, next: before };
        if prev == NIL {
            self.head = idx;
        } else {
            slab.get_mut(prev).link_mut(which).next = idx;
        }
        if before == NIL {
            self.tail = idx;
        } else {
            slab.get_mut(before).link_mut(which).prev = idx;
        }
    }

    /// Takes the first node off the list.
    pub(crate) fn pop_front<T: Node>(&mut self, slab: &mut Slab<T>, which: usize) -> Option<u32> {
        let idx = self.head;
        if idx == NIL {
            return None;
        }
        let next = slab.get(idx).link(which).next;
        self.head = next;
        if next == NIL {
            self.tail = NIL;
        } else {
            slab.get_mut(next).link_mut(which).prev = NIL;
        }
        *slab.get_mut(idx).link_mut(which) = Link::DETACHED;
        Some(idx)
    }

    /// Removes `idx`, which must be on this list.
    pub(crate) fn unlink<T: Node>(&mut self, slab: &mut Slab<T>, which: usize, idx: u32) {
        let Link { prev, next } = slab.get(idx).link(which);
        if prev == NIL {
            self.head = next;
        } else {
            slab.get_mut(prev).link_mut(which).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            slab.get_mut(next).link_mut(which).prev = prev;
        }
        *slab.get_mut(idx).link_mut(which) = Link::DETACHED;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct N(u32, Link);
    impl Node for N {
        fn link(&self, _: usize) -> Link {
            self.1
        }
        fn link_mut(&mut self, _: usize) -> &mut Link {
            &mut self.1
        }
    }

    fn collect(list: &List, slab: &Slab<N>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut cur = list.head;
        while cur != NIL {
            out.push(slab.get(cur).0);
            cur = slab.get(cur).link(0).next;
        }
        out
    }

    #[test]
    fn slab_reuses_slots_and_bumps_generation() {
        let mut s = Slab::with_capacity(2);
        let (a, ga) = s.insert(N(1, Link::DETACHED));
        let (b, _) = s.insert(N(2, Link::DETACHED));
        assert_eq!(s.len(), 2);
        s.remove(a);
        assert!(s.get_checked(a, ga).is_none());
        let (c, gc) = s.insert(N(3, Link::DETACHED));
        assert_eq!(c, a);
        assert_ne!(gc, ga);
        assert_eq!(s.get_checked(c, gc).map(|n| n.0), Some(3));
        assert_eq!(s.get(b).0, 2);
    }

    #[test]
    fn list_push_insert_unlink() {
        let mut s = Slab::with_capacity(4);
        let mut l = List::EMPTY;
        let ids: Vec<u32> = (0..4).map(|i| s.insert(N(i, Link::DETACHED)).0).collect();
        l.push_back(&mut s, 0, ids[0]);
        l.push_back(&mut s, 0, ids[2]);
        l.insert_before(&mut s, 0, ids[1], ids[2]);
        l.insert_before(&mut s, 0, ids[3], NIL);
        assert_eq!(collect(&l, &s), vec![0, 1, 2, 3]);
        l.unlink(&mut s, 0, ids[0]);
        l.unlink(&mut s, 0, ids[3]);
        assert_eq!(collect(&l, &s), vec![1, 2]);
        l.unlink(&mut s, 0, ids[2]);
        l.unlink(&mut s, 0, ids[1]);
        assert!(l.is_empty());
        assert_eq!(l.tail, NIL);
    }
}
