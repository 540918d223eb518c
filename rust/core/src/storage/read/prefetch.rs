//! Prefetch windows: after a read from the entry logs, the ledger's next runs are read ahead,
//! hinted to the kernel where logs are read through the page cache, handed to the read-ahead
//! threads where they are read directly. It remembers each scanned ledger's last window so a
//! scan pays the index walk once per window; it never reads entry data itself.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::readahead_cache::ReadAheadCache;
use super::readahead_threads::AheadQueue;
use crate::record;
use crate::storage::entrylog::Location;
use crate::storage::ids::MAX_ID;
use crate::storage::stores::Stores;

/// After a read from the entry logs, the ledger's next entries, up to this many bytes (and four
/// runs), are hinted to the kernel for asynchronous read-ahead (runs read directly are not).
const PREFETCH_BYTES: u64 = 4 << 20;
const PREFETCH_RUNS: usize = 4;
/// The same where the read-ahead threads read the runs (logs read directly, no kernel
/// read-ahead behind them): a window deep enough to keep several reads in flight while the scan
/// takes the middle of it, runs of a ledger written among many others being a few hundred KiB.
const PREFETCH_DIRECT_BYTES: u64 = 8 << 20;
const PREFETCH_DIRECT_RUNS: usize = 32;
/// Ledgers whose prefetch window is remembered (forgotten all at once beyond it).
const PREFETCH_LEDGERS: usize = 4096;

/// The entries of a ledger last hinted for read-ahead.
#[derive(Clone, Copy)]
struct PrefetchWindow {
    /// Where this scan's chain of windows began (a read before it is another scan).
    start: u64,
    /// A read at or past it asks for the next window.
    trigger: u64,
    /// The last entry read ahead.
    upto: u64,
}

/// Where a prefetch continues, and how much it may take.
struct Budget {
    bytes: u64,
    runs: usize,
}

/// The prefetch windows of every scanned ledger, and the read-ahead threads' queue.
pub(super) struct Prefetcher {
    /// Per ledger, the window last hinted for kernel read-ahead (or handed to the read-ahead
    /// threads).
    windows: Mutex<HashMap<u64, PrefetchWindow>>,
    /// The read-ahead threads' queue, where logs are read directly and threads are configured.
    threads: Option<AheadQueue>,
}

impl Prefetcher {
    pub(super) fn new(threads: Option<AheadQueue>) -> Prefetcher {
        Prefetcher {
            windows: Mutex::new(HashMap::new()),
            threads,
        }
    }

    /// Whether read-ahead threads read runs of directly read logs.
    pub(super) fn has_threads(&self) -> bool {
        self.threads.is_some()
    }

    /// Ends the read-ahead threads (they read what is queued first).
    pub(super) fn stop_threads(&self) {
        if let Some(threads) = &self.threads {
            threads.stop();
        }
    }

    /// Reads ahead the ledger's entries after `after` that live in entry logs: up to
    /// `PREFETCH_BYTES` over at most `PREFETCH_RUNS` runs of back-to-back records, found through
    /// the index (a block walk per run, no per-entry search). Runs of logs read through the
    /// page cache are hinted to the kernel; runs of logs read directly are handed to the
    /// read-ahead threads, up to `PREFETCH_DIRECT_BYTES` over `PREFETCH_DIRECT_RUNS` and half
    /// the ledger's share of the read-ahead cache; only for `sequential` reads: a strided read
    /// wants one write set's entries, and the threads would read, check and cache the others
    /// for nothing (measured costlier while healing: see docs/performance.md, "Design figures
    /// behind the code").
    ///
    /// A scan calls this on every read; it reads ahead again only once the reads have passed
    /// the middle of the window taken last, continuing where that window ended, so the index
    /// walk and the system calls are paid once per window, not per read.
    pub(super) fn prefetch(
        &self,
        stores: &Stores,
        cache: &ReadAheadCache,
        ledger: u64,
        after: u64,
        since: u64,
        sequential: bool,
    ) {
        let generation = cache.generation();
        let Some((start, from)) = self.next_window(ledger, after) else {
            return;
        };
        let mut next = from.saturating_add(1);
        let mut last = from;
        // Set by the first run: whether this window goes to the read-ahead threads.
        let mut directly: Option<bool> = None;
        let mut budget = Budget {
            bytes: PREFETCH_BYTES,
            runs: PREFETCH_RUNS,
        };
        let mut run: Vec<(u64, Location)> = Vec::new();
        while budget.runs > 0 {
            budget.runs -= 1;
            if budget.bytes == 0 || next > MAX_ID || stores.cache.get(ledger, next).is_some() {
                break;
            }
            let Ok(Some((at, seg))) = stores.segments.find(ledger, next, since) else {
                break;
            };
            let direct = *directly.get_or_insert_with(|| {
                let direct = sequential && self.reads_ahead_directly(stores, at.log_id());
                if direct {
                    budget.bytes = PREFETCH_DIRECT_BYTES.min(cache.ledger_budget() as u64 / 2);
                    budget.runs = PREFETCH_DIRECT_RUNS - 1;
                }
                direct
            });
            let start = at.offset();
            let Some(end) = next_run(stores, &seg, ledger, next, at, &budget, &mut run) else {
                break;
            };
            if direct {
                let handed = (self.threads.as_ref())
                    .map_or(0, |threads| threads.hand(cache, ledger, generation, &run));
                if handed > 0 {
                    last = run[handed - 1].0;
                }
                if handed < run.len() {
                    break; // the queue is full: the scan reads the rest itself
                }
            } else {
                stores.entrylog.prefetch(at.log_id(), start, end - start);
                last = run[run.len() - 1].0;
            }
            budget.bytes = budget.bytes.saturating_sub(end - start);
            next = last.saturating_add(1);
        }
        if last > from {
            self.remember(ledger, start, from, last);
        }
    }

    /// Where the read-ahead after `after` starts (the chain's start, and the last entry already
    /// read ahead), or None while `after` is before the middle of the ledger's last window.
    fn next_window(&self, ledger: u64, after: u64) -> Option<(u64, u64)> {
        let mut windows = self.windows.lock();
        match windows.get(&ledger) {
            Some(w) if after >= w.start && after < w.trigger => None,
            Some(w) if after >= w.start && after < w.upto => Some((w.start, w.upto)),
            _ => {
                if windows.len() >= PREFETCH_LEDGERS {
                    windows.clear();
                }
                Some((after, after))
            }
        }
    }

    /// Records the window `from..=last` of a scan that began at `start`.
    fn remember(&self, ledger: u64, start: u64, from: u64, last: u64) {
        let window = PrefetchWindow {
            start,
            trigger: from + (last - from) / 2,
            upto: last,
        };
        // Why: a window out of order would make every later read of the scan either skip
        // its read-ahead for good or ask for it again on every read.
        assert!(
            window.start <= window.trigger && window.trigger <= window.upto,
            "read-ahead window out of order"
        );
        self.windows.lock().insert(ledger, window);
    }

    /// Whether runs of log `log_id` go to the read-ahead threads.
    fn reads_ahead_directly(&self, stores: &Stores, log_id: u32) -> bool {
        self.threads.is_some() && stores.entrylog.reads_directly(log_id)
    }
}

/// Fills `run` with the records of `ledger` that lie back to back from entry `next` (at `at`,
/// indexed by `seg`), within the budget's bytes; returns the end offset of the run, or None if
/// the index could not be walked.
fn next_run(
    stores: &Stores,
    seg: &crate::storage::index::segment::Segment,
    ledger: u64,
    next: u64,
    at: Location,
    budget: &Budget,
    run: &mut Vec<(u64, Location)>,
) -> Option<u64> {
    let start = at.offset();
    let mut end = start + (record::RECORD_HEADER_LEN + at.len as usize) as u64;
    run.clear();
    run.push((next, at));
    let scanned = seg.scan_ledger(ledger, next + 1, &stores.segments.cache, &mut |e| {
        if e.at.log_id() != at.log_id() || e.at.offset() != end || end - start >= budget.bytes {
            return false;
        }
        end += (record::RECORD_HEADER_LEN + e.at.len as usize) as u64;
        run.push((e.entry, e.at));
        true
    });
    scanned.ok().map(|_| end)
}
