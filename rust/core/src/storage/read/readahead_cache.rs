//! The read-ahead cache (`dbStorage_readAheadCacheMaxSizeMb`): entries read along with a
//! missed entry or after the last entry of a batch read, in the same I/O, or read ahead of a
//! scan by the read-ahead threads, kept for the reads that follow in a sequential scan. Bounded
//! in bytes; the oldest insertions go first. It never reads a file itself, but knows which
//! entries are on their way, so that a read reaching them waits for them instead of reading
//! them a second time.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::metrics::Counter;
use crate::storage::entrylog::Location;

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
    /// Entries being read ahead: (ledger, first entry, last entry) of each read in flight.
    on_the_way: Mutex<Vec<(u64, u64, u64)>>,
    arrived: Condvar,
}

impl ReadAheadCache {
    pub fn new(budget_bytes: usize) -> Self {
        ReadAheadCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: (budget_bytes / SHARDS).max(1),
            forgotten: AtomicU64::new(0),
            on_the_way: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
        }
    }

    /// The bytes one ledger's entries may take here (a scan's entries share one shard): what
    /// is read ahead of a scan beyond it would evict entries before the scan reaches them.
    pub fn ledger_budget(&self) -> usize {
        self.shard_budget
    }

    /// Notes that entries `first..=last` of `ledger` are being read ahead; false (and nothing
    /// noted) when a read in flight already covers some of them.
    pub fn expect(&self, ledger: u64, first: u64, last: u64) -> bool {
        let mut reads = self.on_the_way.lock();
        if reads
            .iter()
            .any(|&(l, f, t)| l == ledger && f <= last && first <= t)
        {
            return false;
        }
        reads.push((ledger, first, last));
        true
    }

    /// The read ahead of `first..=last` of `ledger` ended (its entries were put, or it failed):
    /// wakes the reads waiting for them.
    pub fn arrived(&self, ledger: u64, first: u64, last: u64) {
        let mut reads = self.on_the_way.lock();
        if let Some(at) = reads.iter().position(|&r| r == (ledger, first, last)) {
            reads.swap_remove(at);
        }
        drop(reads);
        self.arrived.notify_all();
    }

    /// Waits, at most `timeout`, while a read ahead covering the entry is in flight; then takes
    /// the entry out if it is here. A read ahead that failed, or did not end in time, leaves the
    /// entry to the caller's own read.
    pub fn take_or_wait(&self, ledger: u64, entry: u64, timeout: Duration) -> Option<Bytes> {
        if let Some(data) = self.take(ledger, entry) {
            return Some(data);
        }
        let deadline = Instant::now() + timeout;
        let mut reads = self.on_the_way.lock();
        let mut waited = false;
        while reads
            .iter()
            .any(|&(l, f, t)| l == ledger && f <= entry && entry <= t)
        {
            waited = true;
            if self.arrived.wait_until(&mut reads, deadline).timed_out() {
                break;
            }
        }
        drop(reads);
        if waited {
            self.take(ledger, entry)
        } else {
            None
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

    /// Keeps entries read ahead (`read`, in the order of `items`; read when the cache was at
    /// `generation`) for the reads to come, counting them in `counted`.
    pub fn keep(
        &self,
        counted: &Counter,
        ledger: u64,
        generation: u64,
        items: &[(u64, Location)],
        read: Vec<Bytes>,
    ) {
        if read.is_empty() {
            return;
        }
        counted.add(read.len() as u64);
        self.put(ledger, generation, items.iter().map(|(e, _)| *e).zip(read));
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

    /// A read reaching entries on their way waits for them, then takes them; entries nobody is
    /// reading are not waited for; overlapping reads ahead are refused.
    #[test]
    fn reads_wait_for_entries_on_their_way() {
        let c = std::sync::Arc::new(ReadAheadCache::new(SHARDS * 1000));
        let long = Duration::from_secs(10);
        assert!(c.expect(1, 10, 19));
        assert!(!c.expect(1, 15, 25), "overlaps the read in flight");
        assert!(c.expect(2, 15, 25), "another ledger");
        assert!(
            c.take_or_wait(1, 30, long).is_none(),
            "not on its way: no wait"
        );
        let reader = {
            let c = c.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                c.put(1, c.generation(), [(12, Bytes::from_static(b"twelve"))]);
                c.arrived(1, 10, 19);
            })
        };
        let started = Instant::now();
        assert_eq!(c.take_or_wait(1, 12, long).as_deref(), Some(&b"twelve"[..]));
        assert!(started.elapsed() < long);
        reader.join().unwrap();
        // A read ahead that failed leaves its entries to the caller.
        assert!(c.take_or_wait(1, 13, long).is_none());
        assert!(c.expect(1, 15, 25), "the first read ended");
        // One that does not end in time is not waited for beyond the timeout.
        let started = Instant::now();
        assert!(c.take_or_wait(2, 20, Duration::from_millis(30)).is_none());
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
