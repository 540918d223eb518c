//! The read-ahead cache (`dbStorage_readAheadCacheMaxSizeMb`): entries read along with a
//! missed entry or after the last entry of a batch read, in the same I/O, kept for the reads that
//! follow in a sequential scan. Bounded in bytes; the oldest insertions go first. It never reads
//! a file itself.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

const SHARDS: usize = 8;

#[derive(Default)]
struct Shard {
    map: HashMap<(u64, u64), Bytes>,
    order: VecDeque<(u64, u64)>,
    bytes: usize,
}

/// Entries read ahead, by (ledger, entry).
pub struct ReadAheadCache {
    shards: Vec<Mutex<Shard>>,
    shard_budget: usize,
    /// Ledgers forgotten so far: entries read before a deletion are not put in after it.
    forgotten: AtomicU64,
}

impl ReadAheadCache {
    pub fn new(budget_bytes: usize) -> Self {
        ReadAheadCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: (budget_bytes / SHARDS).max(1),
            forgotten: AtomicU64::new(0),
        }
    }

    fn shard(&self, ledger: u64) -> &Mutex<Shard> {
        // One ledger's scan stays in one shard: its entries evict each other in order.
        &self.shards[(ledger.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61) as usize % SHARDS]
    }

    /// Takes an entry out (a scan reads each entry once).
    pub fn take(&self, ledger: u64, entry: u64) -> Option<Bytes> {
        let mut s = self.shard(ledger).lock();
        let data = s.map.remove(&(ledger, entry))?;
        s.bytes -= data.len();
        Some(data)
    }

    /// Read before reading entries to [`put`](Self::put) them.
    pub fn generation(&self) -> u64 {
        self.forgotten.load(Ordering::Acquire)
    }

    /// Keeps entries read when the cache was at `generation`, unless a ledger was forgotten
    /// since (a read racing a deletion must not bring a deleted ledger's entries back).
    pub fn put(
        &self,
        ledger: u64,
        generation: u64,
        entries: impl IntoIterator<Item = (u64, Bytes)>,
    ) {
        let mut s = self.shard(ledger).lock();
        // Under the shard's lock: a deletion counted after this check removes what is put here
        // once it gets the lock.
        if self.forgotten.load(Ordering::Acquire) != generation {
            return;
        }
        for (entry, data) in entries {
            if data.len() > self.shard_budget {
                continue;
            }
            while s.bytes + data.len() > self.shard_budget {
                let Some(old) = s.order.pop_front() else {
                    break;
                };
                if let Some(d) = s.map.remove(&old) {
                    s.bytes -= d.len();
                }
            }
            s.bytes += data.len();
            if let Some(d) = s.map.insert((ledger, entry), data) {
                s.bytes -= d.len();
            }
            s.order.push_back((ledger, entry));
        }
        // Keys of entries already taken linger in `order`; trim them when they dominate.
        if s.order.len() > 2 * s.map.len() + 1024 {
            let Shard { map, order, .. } = &mut *s;
            order.retain(|k| map.contains_key(k));
        }
    }

    /// Drops a deleted ledger's entries.
    pub fn forget_ledger(&self, ledger: u64) {
        self.forgotten.fetch_add(1, Ordering::AcqRel);
        let mut s = self.shard(ledger).lock();
        let Shard { map, order, bytes } = &mut *s;
        map.retain(|k, d| {
            if k.0 == ledger {
                *bytes -= d.len();
                false
            } else {
                true
            }
        });
        order.retain(|k| k.0 != ledger);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_taken_once() {
        let c = ReadAheadCache::new(SHARDS * 100);
        c.put(1, 0, (0..20).map(|e| (e, Bytes::from(vec![0u8; 10]))));
        assert!(c.take(1, 0).is_none(), "oldest evicted");
        assert!(c.take(1, 19).is_some());
        assert!(c.take(1, 19).is_none());
        c.forget_ledger(1);
        assert!(c.take(1, 15).is_none());
    }

    #[test]
    fn entries_read_before_a_deletion_stay_out() {
        let c = ReadAheadCache::new(SHARDS * 100);
        let before = c.generation();
        c.forget_ledger(2);
        c.put(1, before, [(0, Bytes::from_static(b"stale"))]);
        assert!(c.take(1, 0).is_none());
        c.put(1, c.generation(), [(0, Bytes::from_static(b"fresh"))]);
        assert_eq!(c.take(1, 0).as_deref(), Some(&b"fresh"[..]));
    }
}
