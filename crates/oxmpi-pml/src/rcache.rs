//! The registration cache (seed 001's mpool + rcache, "leave pinned").
//!
//! With `mpi_leave_pinned` on, a registration outlives the transfer that
//! made it: the next transfer from or into the same memory (or any part of
//! it) reuses it, with a key for just its part ([`Btl::sub_key`]). Each BTL
//! has its own cache, an interval structure (a `BTreeMap` by start address;
//! a lookup scans back at most the longest entry's length) with use counts.
//!
//! A cache holds at most `pml_ob1_rcache_max_entries` entries. Entries no
//! transfer uses sit in an idle list ordered by last use (a `BTreeMap` by
//! use tick), so making room evicts the least recently used idle entry in
//! O(log n), never scanning entries in flight. When every entry is in use
//! and the cache is full, a new registration is made for its transfer
//! alone (as with `mpi_leave_pinned` off): thousands of outstanding
//! rendezvous sends cost O(log n) each, and the cache never grows past its
//! cap.
//!
//! A cached registration dies with its memory: every entry's pages are
//! watched ([`MemWatch`]); before each lookup the cache applies the releases
//! the kernel reported (munmap, a moving mremap, madvise(DONTNEED), heap
//! trim): an unused entry over released memory is deregistered at once, one
//! in use (the user freed a buffer under a transfer) is marked stale and
//! deregistered when its transfer ends. Memory that cannot be watched (or a
//! process without `userfaultfd`) is registered per transfer, as with
//! `mpi_leave_pinned` off.
//!
//! Entries register exactly the memory a transfer named (never whole
//! pages): a registration grants no access beyond what the user handed to
//! MPI.

use std::collections::BTreeMap;

use oxmpi_btl::btl::{Access, Btl, BtlError, RegId, Registration, RemoteKey};
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::memwatch::{page_size, MemWatch};

/// Counters of the cache, readable by programs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RcacheStats {
    /// Transfers that reused a cached registration.
    pub hits: u64,
    /// Transfers that registered (and cached) their memory.
    pub misses: u64,
    /// Registrations made for one transfer only (cache off, or memory that
    /// cannot be watched).
    pub uncached: u64,
    /// Entries dropped because their memory was released.
    pub invalidated: u64,
    /// Unused entries dropped to stay within the entry limit.
    pub evicted: u64,
    /// Entries cached now.
    pub entries: u64,
}

/// A registration held by a transfer, given back with [`Rcache::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RegRef {
    b: usize,
    id: RegId,
    /// The cache entry (start address, sequence), or `None` when the
    /// registration is this transfer's alone.
    entry: Option<(usize, u64)>,
}

#[derive(Debug)]
struct Entry {
    end: usize,
    access: Access,
    reg: Registration,
    /// Watched page range.
    pages: (usize, usize),
    refs: u32,
    /// The tick of its last use: its key in `Cache::idle` while `refs` is 0.
    last_use: u64,
    stale: bool,
}

#[derive(Debug, Default)]
struct Cache {
    entries: BTreeMap<(usize, u64), Entry>,
    /// The entries with no transfer (`refs == 0`), by last use: the
    /// eviction order. Invariant: exactly the entries with `refs == 0`,
    /// each under its `last_use` (ticks are unique).
    idle: BTreeMap<u64, (usize, u64)>,
    max_len: usize,
}

/// One registration cache per PML (one [`Cache`] per BTL).
#[derive(Debug)]
pub(crate) struct Rcache {
    /// Caching is wanted (`mpi_leave_pinned` and a non-zero entry limit).
    wanted: bool,
    /// The watcher, started by the first registration worth caching (a
    /// process that never registers memory starts no thread).
    watch: Option<MemWatch>,
    seen: u64,
    max_entries: usize,
    tick: u64,
    seq: u64,
    caches: Vec<Cache>,
    /// The counters.
    pub(crate) stats: RcacheStats,
}

impl Rcache {
    /// A cache for `nbtls` BTLs; `leave_pinned` off (or no watcher) means
    /// every registration is per transfer.
    pub(crate) fn new(nbtls: usize, leave_pinned: bool, max_entries: usize) -> Rcache {
        Rcache {
            wanted: leave_pinned && max_entries > 0,
            watch: None,
            seen: 0,
            max_entries,
            tick: 0,
            seq: 0,
            caches: (0..nbtls).map(|_| Cache::default()).collect(),
            stats: RcacheStats::default(),
        }
    }

    /// Whether registrations are cached (starts the watcher if wanted).
    pub(crate) fn caching(&mut self) -> bool {
        self.watcher().is_some()
    }

    /// The watcher, started on first use when caching is wanted; `None`
    /// (and caching off from then on, with one message) when the kernel
    /// cannot report released memory.
    fn watcher(&mut self) -> Option<MemWatch> {
        if self.watch.is_none() && self.wanted {
            match MemWatch::get() {
                Ok(w) => {
                    self.seen = w.cursor();
                    self.watch = Some(w);
                }
                Err(e) => {
                    self.wanted = false;
                    tracing::info!(
                        "mpi_leave_pinned: registrations are not cached ({e}: released memory \
                         could not be noticed)"
                    );
                }
            }
        }
        self.watch.clone()
    }

    /// A registration of `region` with BTL `b` allowing `access`, and the
    /// key for exactly `region`. Deregistrations it decides on go to
    /// `dereg` (run by the caller with the BTLs at hand).
    pub(crate) fn acquire<B: ?Sized + Btl>(
        &mut self,
        btl: &mut B,
        b: usize,
        region: MemRegion,
        access: Access,
        dereg: &mut Vec<(usize, RegId)>,
    ) -> Result<(RegRef, RemoteKey), BtlError> {
        if region.is_empty() {
            return self.uncached(btl, b, region, access);
        }
        let Some(watch) = self.watcher() else {
            return self.uncached(btl, b, region, access);
        };
        self.apply_releases(&watch, dereg);
        self.tick += 1;
        let (addr, end) = (region.addr(), region.addr() + region.len());
        let cache = &mut self.caches[b];
        let lo = addr.saturating_sub(cache.max_len);
        let hit = cache
            .entries
            .range((lo, 0)..=(addr, u64::MAX))
            .rev()
            .find(|(_, e)| !e.stale && e.end >= end && e.access.contains(access))
            .map(|(&k, _)| k);
        if let Some(k) = hit {
            let e = cache.entries.get_mut(&k).expect("found above");
            let key = btl.sub_key(&e.reg, addr - k.0, region.len())?;
            if e.refs == 0 {
                cache.idle.remove(&e.last_use);
            }
            e.refs += 1;
            e.last_use = self.tick;
            self.stats.hits += 1;
            return Ok((
                RegRef {
                    b,
                    id: e.reg.id,
                    entry: Some(k),
                },
                key,
            ));
        }
        // Room for one more entry: evict the least recently used idle one;
        // with none idle (every entry under a transfer), this transfer's
        // registration is its own and the cache stays within its cap.
        if !self.make_room(b, dereg) {
            return self.uncached(btl, b, region, access);
        }
        let page = page_size();
        let pages = (addr & !(page - 1), (end + page - 1) & !(page - 1));
        if !watch.watch(pages.0, pages.1 - pages.0) {
            return self.uncached(btl, b, region, access);
        }
        let reg = match btl.register_mem(region, access) {
            Ok(r) => r,
            Err(e) => {
                watch.unwatch(pages.0, pages.1 - pages.0);
                return Err(e);
            }
        };
        self.seq += 1;
        let k = (addr, self.seq);
        let cache = &mut self.caches[b];
        cache.max_len = cache.max_len.max(region.len());
        cache.entries.insert(
            k,
            Entry {
                end,
                access,
                reg,
                pages,
                refs: 1,
                last_use: self.tick,
                stale: false,
            },
        );
        self.stats.misses += 1;
        self.stats.entries += 1;
        Ok((
            RegRef {
                b,
                id: reg.id,
                entry: Some(k),
            },
            reg.key,
        ))
    }

    fn uncached<B: ?Sized + Btl>(
        &mut self,
        btl: &mut B,
        b: usize,
        region: MemRegion,
        access: Access,
    ) -> Result<(RegRef, RemoteKey), BtlError> {
        let reg = btl.register_mem(region, access)?;
        self.stats.uncached += 1;
        Ok((
            RegRef {
                b,
                id: reg.id,
                entry: None,
            },
            reg.key,
        ))
    }

    /// Gives a registration back: a per-transfer one (or a stale cached
    /// one no longer used) is deregistered; a cached one stays.
    pub(crate) fn release(&mut self, r: RegRef, dereg: &mut Vec<(usize, RegId)>) {
        let Some(k) = r.entry else {
            dereg.push((r.b, r.id));
            return;
        };
        let cache = &mut self.caches[r.b];
        let Some(e) = cache.entries.get_mut(&k) else {
            return;
        };
        if e.refs == 0 {
            return;
        }
        e.refs -= 1;
        if e.refs == 0 {
            if e.stale {
                self.drop_entry(r.b, k, dereg);
            } else {
                self.tick += 1;
                e.last_use = self.tick;
                cache.idle.insert(self.tick, k);
            }
        }
    }

    /// Applies the releases the kernel reported since the last look.
    fn apply_releases(&mut self, watch: &MemWatch, dereg: &mut Vec<(usize, RegId)>) {
        if !watch.dirty(self.seen) {
            return;
        }
        let mut hit = Vec::new();
        let caches = &self.caches;
        let page = page_size();
        let r = watch.changes(&mut self.seen, |start, end| {
            for (b, c) in caches.iter().enumerate() {
                // Overlap of the watched pages (a page shared with the
                // region counts: the kernel releases whole pages).
                let lo = start.saturating_sub(c.max_len + page);
                let hi = end.saturating_add(page);
                for (&k, e) in c.entries.range((lo, 0)..(hi, 0)) {
                    if e.pages.0 < end && e.pages.1 > start {
                        hit.push((b, k));
                    }
                }
            }
        });
        if r.is_err() {
            // Records were lost: nothing cached can be trusted.
            hit = self.all_keys();
        }
        for (b, k) in hit {
            let Some(e) = self.caches[b].entries.get_mut(&k) else {
                continue;
            };
            if e.stale {
                continue;
            }
            self.stats.invalidated += 1;
            if e.refs == 0 {
                self.drop_entry(b, k, dereg);
            } else {
                e.stale = true;
            }
        }
    }

    fn drop_entry(&mut self, b: usize, k: (usize, u64), dereg: &mut Vec<(usize, RegId)>) {
        if let Some(e) = self.caches[b].entries.remove(&k) {
            if e.refs == 0 {
                self.caches[b].idle.remove(&e.last_use);
            }
            dereg.push((b, e.reg.id));
            if let Some(w) = &self.watch {
                w.unwatch(e.pages.0, e.pages.1 - e.pages.0);
            }
            self.stats.entries -= 1;
        }
    }

    /// Makes room for one more entry of BTL `b`: evicts least recently
    /// used idle entries until fewer than the limit remain. `false` when
    /// the cache is full of entries in use (nothing can be evicted).
    fn make_room(&mut self, b: usize, dereg: &mut Vec<(usize, RegId)>) -> bool {
        while self.caches[b].entries.len() >= self.max_entries {
            let Some((_, k)) = self.caches[b].idle.pop_first() else {
                return false;
            };
            self.drop_entry(b, k, dereg);
            self.stats.evicted += 1;
        }
        true
    }

    /// Every entry, as `(btl, key)`.
    fn all_keys(&self) -> Vec<(usize, (usize, u64))> {
        self.caches
            .iter()
            .enumerate()
            .flat_map(|(b, c)| c.entries.keys().map(move |&k| (b, k)))
            .collect()
    }

    /// Ends caching (finalize): every entry is dropped (their
    /// deregistrations go to `dereg`) and the watcher handle released, so
    /// its thread and descriptors end with the last PML.
    pub(crate) fn close(&mut self, dereg: &mut Vec<(usize, RegId)>) {
        for (b, k) in self.all_keys() {
            self.drop_entry(b, k, dereg);
        }
        self.watch = None;
        self.wanted = false;
    }
}

impl Drop for Rcache {
    fn drop(&mut self) {
        if let Some(w) = &self.watch {
            for c in &self.caches {
                for e in c.entries.values() {
                    w.unwatch(e.pages.0, e.pages.1 - e.pages.0);
                }
            }
        }
    }
}
