//! Per-context state found by context id: by index for the small ids the
//! PML uses, by hash for the rest.

use crate::hash::FxHashMap;

/// Context ids below this are found by index (the PML's are 16-bit);
/// larger ones by hash.
const DENSE_CONTEXTS: u32 = 1 << 16;

/// The contexts by id: a vector indexed by id for ids below
/// [`DENSE_CONTEXTS`] (one bounds check per message, no hashing), a map for
/// the rest.
#[derive(Debug)]
pub(crate) struct ContextMap<T> {
    dense: Vec<Option<T>>,
    sparse: FxHashMap<u32, T>,
    len: usize,
}

impl<T> Default for ContextMap<T> {
    fn default() -> Self {
        ContextMap {
            dense: Vec::new(),
            sparse: FxHashMap::default(),
            len: 0,
        }
    }
}

impl<T> ContextMap<T> {
    #[inline]
    pub(crate) fn get(&self, id: &u32) -> Option<&T> {
        if *id < DENSE_CONTEXTS {
            self.dense.get(*id as usize)?.as_ref()
        } else {
            self.sparse.get(id)
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: &u32) -> Option<&mut T> {
        if *id < DENSE_CONTEXTS {
            self.dense.get_mut(*id as usize)?.as_mut()
        } else {
            self.sparse.get_mut(id)
        }
    }

    pub(crate) fn contains_key(&self, id: &u32) -> bool {
        self.get(id).is_some()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every context, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.dense.iter().flatten().chain(self.sparse.values())
    }

    /// Adds `c` under `id` (the caller checked that `id` is free).
    pub(crate) fn insert(&mut self, id: u32, c: T) {
        if id < DENSE_CONTEXTS {
            let i = id as usize;
            if self.dense.len() <= i {
                self.dense.resize_with(i + 1, || None);
            }
            self.dense[i] = Some(c);
        } else {
            self.sparse.insert(id, c);
        }
        self.len += 1;
    }

    pub(crate) fn remove(&mut self, id: &u32) -> Option<T> {
        let c = if *id < DENSE_CONTEXTS {
            self.dense.get_mut(*id as usize)?.take()
        } else {
            self.sparse.remove(id)
        }?;
        self.len -= 1;
        Some(c)
    }
}
