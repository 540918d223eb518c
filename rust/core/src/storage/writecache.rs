//! The write cache (`dbStorage_writeCacheMaxSizeMb`): journalled entries wait here, readable,
//! until a checkpoint writes them to the entry logs sorted by (ledger, entry), so a ledger's
//! entries lie together on disk. Two generations, as BookKeeper's DbLedgerStorage has: the
//! active one takes adds while the other is being flushed. It never touches a file.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};

/// Memory an entry costs beside its data (map node, key, buffer handle): charged so that a
/// cache of small entries stays within its configured size too.
const ENTRY_OVERHEAD: usize = 64;

use super::ids::IdMap;

/// A cached entry and the checksum of its entry-log record body (computed once, on add).
struct Cached {
    data: Bytes,
    crc: u32,
}

/// One generation of cached entries.
#[derive(Default)]
pub struct Generation {
    ledgers: IdMap<BTreeMap<u64, Cached>>,
    bytes: usize,
    entries: usize,
}

impl Generation {
    fn get(&self, ledger: u64, entry: u64) -> Option<Bytes> {
        self.ledgers
            .get(&ledger)?
            .get(&entry)
            .map(|c| c.data.clone())
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The ledgers with entries here.
    pub fn ledger_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.ledgers.keys().copied()
    }

    pub fn entries(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Every entry with its record checksum, sorted by (ledger, entry).
    pub fn sorted(&self) -> impl Iterator<Item = (u64, u64, &Bytes, u32)> {
        let mut ledgers: Vec<u64> = self.ledgers.keys().copied().collect();
        ledgers.sort_unstable();
        ledgers.into_iter().flat_map(move |l| {
            self.ledgers
                .get(&l)
                .into_iter()
                .flat_map(move |m| m.iter().map(move |(e, c)| (l, *e, &c.data, c.crc)))
        })
    }
}

struct Generations {
    active: Generation,
    /// Being written by a checkpoint; readable until its segment is live.
    flushing: Option<Arc<Generation>>,
}

/// Entries journalled but not yet in an entry log.
pub struct WriteCache {
    gens: RwLock<Generations>,
    /// Bytes the active generation may hold before a flush is due; adds wait beyond twice
    /// this while a flush runs.
    half: usize,
    room: Mutex<()>,
    room_signal: Condvar,
}

impl WriteCache {
    pub fn new(max_bytes: usize) -> WriteCache {
        WriteCache {
            gens: RwLock::new(Generations {
                active: Generation::default(),
                flushing: None,
            }),
            half: (max_bytes / 2).max(1),
            room: Mutex::new(()),
            room_signal: Condvar::new(),
        }
    }

    /// Adds an entry (replacing an earlier copy); `crc` is the checksum of its entry-log record
    /// body (`JournalOp::Entry`'s). Returns the active generation's bytes.
    pub fn put(&self, ledger: u64, entry: u64, data: Bytes, crc: u32) -> usize {
        let mut g = self.gens.write();
        let a = &mut g.active;
        let len = data.len() + ENTRY_OVERHEAD;
        match a
            .ledgers
            .entry(ledger)
            .or_default()
            .insert(entry, Cached { data, crc })
        {
            Some(old) => a.bytes -= old.data.len() + ENTRY_OVERHEAD,
            None => a.entries += 1,
        }
        a.bytes += len;
        a.bytes
    }

    /// Whether the active generation is due for a flush.
    pub fn flush_due(&self, active_bytes: usize) -> bool {
        active_bytes >= self.half
    }

    /// Whether adds must wait for a running flush before adding more.
    pub fn is_full(&self) -> bool {
        let g = self.gens.read();
        g.active.bytes >= self.half * 2 && g.flushing.is_some()
    }

    /// Waits (at most `timeout`) until a running flush ends. Returns whether it ended.
    pub fn wait_for_room(&self, timeout: Duration) -> bool {
        let mut guard = self.room.lock();
        if !self.is_full() {
            return true;
        }
        !self.room_signal.wait_for(&mut guard, timeout).timed_out() || !self.is_full()
    }

    pub fn get(&self, ledger: u64, entry: u64) -> Option<Bytes> {
        let g = self.gens.read();
        g.active
            .get(ledger, entry)
            .or_else(|| g.flushing.as_ref().and_then(|f| f.get(ledger, entry)))
    }

    /// Entry ids of `ledger` held here.
    pub fn entry_ids(&self, ledger: u64) -> Vec<u64> {
        let g = self.gens.read();
        let mut ids: Vec<u64> = Vec::new();
        for gen in std::iter::once(&g.active).chain(g.flushing.as_deref()) {
            if let Some(m) = gen.ledgers.get(&ledger) {
                ids.extend(m.keys());
            }
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Drops the ledger's entries from the active generation (the ledger was deleted: they
    /// must not be flushed as entries of a later ledger with the same id).
    pub fn forget_ledger(&self, ledger: u64) {
        let mut g = self.gens.write();
        if let Some(m) = g.active.ledgers.remove(&ledger) {
            g.active.entries -= m.len();
            g.active.bytes -= m
                .values()
                .map(|c| c.data.len() + ENTRY_OVERHEAD)
                .sum::<usize>();
        }
    }

    /// Starts a flush: the active generation becomes the flushing one. `None` when a previous
    /// flush is still pending (it must be finished first) or nothing is cached.
    pub fn swap(&self) -> Option<Arc<Generation>> {
        let mut g = self.gens.write();
        if g.flushing.is_some() || g.active.is_empty() {
            return None;
        }
        let gen = Arc::new(std::mem::take(&mut g.active));
        g.flushing = Some(gen.clone());
        Some(gen)
    }

    /// The generation whose flush failed and must be retried, if any.
    pub fn pending(&self) -> Option<Arc<Generation>> {
        self.gens.read().flushing.clone()
    }

    /// The flushing generation is in the entry logs and its segment is live: drop it.
    pub fn flushed(&self) {
        self.gens.write().flushing = None;
        let _guard = self.room.lock();
        self.room_signal.notify_all();
    }

    /// Bytes and entries held in both generations.
    pub fn usage(&self) -> (usize, usize) {
        let g = self.gens.read();
        let f = g.flushing.as_ref();
        (
            g.active.bytes + f.map_or(0, |f| f.bytes),
            g.active.entries + f.map_or(0, |f| f.entries),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_swap_flush_and_sort() {
        let c = WriteCache::new(100);
        c.put(2, 1, Bytes::from_static(b"b1"), 0);
        c.put(1, 5, Bytes::from_static(b"a5"), 0);
        c.put(1, 3, Bytes::from_static(b"a3"), 0);
        let gen = c.swap().unwrap();
        assert!(c.swap().is_none(), "one flush at a time");
        c.put(1, 6, Bytes::from_static(b"a6"), 0);
        let order: Vec<(u64, u64)> = gen.sorted().map(|(l, e, _, _)| (l, e)).collect();
        assert_eq!(order, vec![(1, 3), (1, 5), (2, 1)]);
        assert_eq!(c.get(1, 3).as_deref(), Some(&b"a3"[..]));
        assert_eq!(c.entry_ids(1), vec![3, 5, 6]);
        c.flushed();
        assert_eq!(c.get(1, 3), None);
        assert_eq!(c.get(1, 6).as_deref(), Some(&b"a6"[..]));
        c.forget_ledger(1);
        assert_eq!(c.usage(), (0, 0));
    }
}
