//! The read path: single entries and range (batch) reads, from the write cache, the read-ahead
//! cache or the entry logs, with the read-ahead that keeps a scan's next entries coming. It
//! owns the read-ahead cache, the prefetch windows and the read-ahead threads' queue; it never
//! writes a file.
//!
//! A read finds its entries (`locate`), reads those in entry logs with one positional read per
//! run of back-to-back records, keeps what it read along for the reads that follow, and asks
//! for the ledger's next window ahead (`prefetch`, `readahead_threads`).

mod locate;
mod prefetch;
mod readahead_cache;
mod readahead_threads;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use bytes::Bytes;
use crossbeam_channel::Receiver;

pub use locate::RangeLimits;
pub(super) use readahead_cache::ReadAheadCache;
pub(super) use readahead_threads::{run_read_ahead, AheadJob};

use super::entrylog::Location;
use super::index::segment::Segment;
use super::stats::StorageStats;
use super::stores::Stores;
use crate::error::{Result, StorageError};
use crate::metrics;
use locate::{Found, Lookup};
use prefetch::Prefetcher;
use readahead_threads::AheadQueue;

/// A batch read takes the rest of the run it ends in only when that rest is at least this large:
/// the I/O saved is then worth the read-ahead cache's work per entry (for runs of small entries
/// a second, small read costs less than caching each entry: measured slower with every rest
/// taken, see docs/performance.md, "Design figures behind the code").
const MIN_TAIL_BYTES: u64 = 64 << 10;

/// The read path of one storage.
pub(super) struct Reader {
    stores: Arc<Stores>,
    read_ahead: Arc<ReadAheadCache>,
    prefetcher: Prefetcher,
    /// `dbStorage_readAheadCacheBatchSize`: entries a missed read brings along.
    batch: usize,
    stats: Arc<StorageStats>,
}

impl Reader {
    /// The read path over `stores`, with `threads` read-ahead threads (0: none) whose end of
    /// the queue is returned beside it.
    pub(super) fn new(
        stores: Arc<Stores>,
        read_ahead: Arc<ReadAheadCache>,
        batch: usize,
        threads: usize,
        stats: Arc<StorageStats>,
    ) -> (Reader, Option<Receiver<AheadJob>>) {
        let (queue, jobs) = if threads > 0 {
            let (queue, jobs) = AheadQueue::new(threads);
            (Some(queue), Some(jobs))
        } else {
            (None, None)
        };
        let reader = Reader {
            stores,
            read_ahead,
            prefetcher: Prefetcher::new(queue),
            batch,
            stats,
        };
        (reader, jobs)
    }

    /// Ends the read-ahead threads once the reads queued for them are done.
    pub(super) fn stop_threads(&self) {
        self.prefetcher.stop_threads();
    }

    fn lookup(&self) -> Lookup<'_> {
        Lookup {
            stores: &self.stores,
            read_ahead: &self.read_ahead,
            prefetcher: &self.prefetcher,
        }
    }

    /// Reads one entry; `LAST_ENTRY` reads the highest stored one. An entry read from an
    /// entry log brings the ledger's following entries along in the same I/O (read-ahead).
    pub(super) fn read_entry(&self, ledger: u64, entry: u64) -> Result<Bytes> {
        let read = self.again_if_a_log_was_removed(
            || {
                self.timed_read(
                    || self.lookup().locate(ledger, entry),
                    |(entry, found)| match found {
                        Found::Cached(data) => Ok(data),
                        Found::At(at) => self.stores.entrylog.read(ledger, entry, at),
                        Found::Indexed(at, seg) => {
                            self.read_with_read_ahead(ledger, entry, at, &seg)
                        }
                    },
                )
            },
            |read| matches!(read, Err(StorageError::Corruption(_))),
        );
        let read = read.and_then(|data| self.unless_refused(ledger, entry, data));
        match &read {
            Ok(data) => self.count_read(std::slice::from_ref(data)),
            Err(StorageError::Corruption(what)) => self.stats.note_corruption(what),
            Err(_) => {}
        }
        read
    }

    /// `data` unless the scrubber found this entry's digest bad (its record is whole, so the
    /// read itself cannot tell): the reader then tries another replica.
    fn unless_refused(&self, ledger: u64, entry: u64, data: Bytes) -> Result<Bytes> {
        if self.stores.scrub.refuses(ledger, entry) {
            return Err(StorageError::Corruption(format!(
                "entry {entry} of ledger {ledger}: its digest failed the scrub (not repaired yet)"
            )));
        }
        Ok(data)
    }

    /// Ends a batch read before the first entry the scrubber refuses (see `unless_refused`).
    fn cut_at_refused(
        &self,
        ledger: u64,
        first: u64,
        limits: RangeLimits,
        entries: &mut Vec<Bytes>,
        err: &mut Option<StorageError>,
    ) {
        let stride = limits.stride.max(1);
        let refused = (0..entries.len() as u64)
            .find(|i| self.stores.scrub.refuses(ledger, first + i * stride));
        if let Some(i) = refused {
            entries.truncate(i as usize);
            *err = Some(StorageError::Corruption(format!(
                "entry {} of ledger {ledger}: its digest failed the scrub (not repaired yet)",
                first + i * stride
            )));
        }
    }

    /// Reads entries `first, first + stride, ...` as a batch read does: the first entry always
    /// (or its error), then more until a limit or a missing entry. A failure after the first
    /// entry ends the batch early instead of failing it.
    pub(super) fn read_range(
        &self,
        ledger: u64,
        first: u64,
        limits: RangeLimits,
    ) -> Result<Vec<Bytes>> {
        // Ok((entries, the failure that ended them early)); Err when not even the first was read.
        let read = self.again_if_a_log_was_removed(
            || {
                self.timed_read(
                    || self.lookup().locate_range(ledger, first, limits),
                    |items| self.read_located_range(ledger, items, limits),
                )
            },
            |read| {
                matches!(
                    read,
                    Err(StorageError::Corruption(_)) | Ok((_, Some(StorageError::Corruption(_))))
                )
            },
        );
        let (mut entries, mut err) = read.unwrap_or_else(|e| (Vec::new(), Some(e)));
        self.cut_at_refused(ledger, first, limits, &mut entries, &mut err);
        if let Some(StorageError::Corruption(what)) = &err {
            self.stats.note_corruption(what);
        }
        let result = match err {
            Some(e) if entries.is_empty() => Err(e),
            Some(e) => {
                log::warn!("batch read of ledger {ledger} cut short: {e}");
                Ok(entries)
            }
            None => Ok(entries),
        };
        if let Ok(entries) = &result {
            self.count_read(entries);
        }
        result
    }

    /// Reads a range's located entries, the rest of the run it ends in along, and asks for
    /// the window after; returns the entries read and the failure that ended them early.
    fn read_located_range(
        &self,
        ledger: u64,
        items: Vec<(u64, Found)>,
        limits: RangeLimits,
    ) -> Result<(Vec<Bytes>, Option<StorageError>)> {
        let tail = self.tail_of(ledger, &items, limits);
        let last_on_disk = match (tail.last(), items.last()) {
            (Some((e, _)), _) => Some(*e),
            (None, Some((e, found))) if found.on_disk() => Some(*e),
            _ => None,
        };
        if let Some(last) = last_on_disk {
            let since = self.stores.since_of(ledger);
            self.prefetcher.prefetch(
                &self.stores,
                &self.read_ahead,
                ledger,
                last,
                since,
                limits.stride <= 1,
            );
        }
        match self.read_found(ledger, items, &tail) {
            (entries, Some(e)) if entries.is_empty() => Err(e),
            read => Ok(read),
        }
    }

    /// A batch that ends inside a run of the ledger's records reads the rest of the run with
    /// it, for the next batch to take from the read-ahead cache: each run is then one I/O, not
    /// two. Only a rest of `MIN_TAIL_BYTES` or more, and never for strided reads.
    fn tail_of(
        &self,
        ledger: u64,
        items: &[(u64, Found)],
        limits: RangeLimits,
    ) -> Vec<(u64, Location)> {
        let batch = self.batch;
        let mut tail = match items.last() {
            // Entries this small could not fill MIN_TAIL_BYTES: skip the walk.
            Some((last, Found::Indexed(at, seg)))
                if limits.stride == 1 && at.len as u64 * batch as u64 >= MIN_TAIL_BYTES =>
            {
                self.lookup()
                    .rest_of_run(ledger, *last, *at, seg, batch, 0)
                    // Read-ahead is a bonus: an index error here is the next read's to report.
                    .unwrap_or_default()
            }
            _ => Vec::new(),
        };
        if tail.iter().map(|(_, at)| at.len as u64).sum::<u64>() < MIN_TAIL_BYTES {
            tail.clear();
        }
        tail
    }

    /// Reads an entry from its entry log together with the ledger's entries that follow it
    /// back to back (up to `dbStorage_readAheadCacheBatchSize`), in one I/O; keeps those for
    /// the reads to come.
    fn read_with_read_ahead(
        &self,
        ledger: u64,
        entry: u64,
        at: Location,
        seg: &Segment,
    ) -> Result<Bytes> {
        let mut items = vec![(entry, at)];
        items.extend(self.lookup().rest_of_run(
            ledger,
            entry,
            at,
            seg,
            self.batch.saturating_sub(1),
            at.len as usize,
        )?);
        let after = items.last().map_or(entry, |(e, _)| *e);
        let since = self.stores.since_of(ledger);
        self.prefetcher
            .prefetch(&self.stores, &self.read_ahead, ledger, after, since, true);
        let generation = self.read_ahead.generation();
        let (mut entries, err) = self.stores.entrylog.read_run(ledger, &items);
        if entries.is_empty() {
            if items.len() > 1 && !matches!(err, Some(StorageError::Corruption(_))) {
                // The run with the entries read ahead failed as a whole (the segment's later
                // locations reach past the end of a truncated log, say): the wanted entry alone
                // may still be whole, and a read-ahead must never fail it.
                return self.stores.entrylog.read(ledger, entry, at);
            }
            return Err(err.unwrap_or(StorageError::NoEntry { ledger, entry }));
        }
        let first = entries.remove(0);
        self.keep_read_ahead(ledger, generation, &items[1..], entries);
        Ok(first)
    }

    /// Reads located entries in order: cached ones as they are, the others with one
    /// positional read per run of back-to-back records. `tail` (entries after the last item,
    /// back to back with it on disk) is read with the last run and kept for the reads to come.
    /// Returns the entries read before the first failure, and that failure.
    fn read_found(
        &self,
        ledger: u64,
        items: Vec<(u64, Found)>,
        tail: &[(u64, Location)],
    ) -> (Vec<Bytes>, Option<StorageError>) {
        let mut out = Vec::with_capacity(items.len());
        let mut run: Vec<(u64, Location)> = Vec::new();
        let entrylog = &self.stores.entrylog;
        for (entry, found) in items {
            match found {
                Found::At(at) | Found::Indexed(at, _) => run.push((entry, at)),
                Found::Cached(data) => {
                    if !run.is_empty() {
                        let (got, err) = entrylog.read_run(ledger, &run);
                        out.extend(got);
                        if err.is_some() {
                            return (out, err);
                        }
                        run.clear();
                    }
                    out.push(data);
                }
            }
        }
        if !run.is_empty() {
            let wanted = run.len();
            let generation = self.read_ahead.generation();
            run.extend_from_slice(tail);
            let (mut got, err) = entrylog.read_run(ledger, &run);
            if got.len() < wanted {
                out.extend(got);
                return (out, err);
            }
            // A failure in the tail only ends the read-ahead.
            let ahead = got.split_off(wanted);
            out.extend(got);
            self.keep_read_ahead(ledger, generation, &tail[..ahead.len()], ahead);
        }
        (out, None)
    }

    fn keep_read_ahead(
        &self,
        ledger: u64,
        generation: u64,
        items: &[(u64, Location)],
        read: Vec<Bytes>,
    ) {
        self.read_ahead.keep(
            &self.stats.read_ahead_entries,
            ledger,
            generation,
            items,
            read,
        );
    }

    /// Runs `read` again (up to twice more) while it fails as `failed` says and an entry log was
    /// removed meanwhile: compaction moves a log's entries, points the index at the copies and
    /// removes the log, so a read that found an entry in the index just before can find its log
    /// gone. Looking again finds the copy; a failure with no log removed is the read's answer.
    fn again_if_a_log_was_removed<T>(
        &self,
        read: impl Fn() -> T,
        failed: impl Fn(&T) -> bool,
    ) -> T {
        let entrylog = &self.stores.entrylog;
        let mut attempts = 0;
        loop {
            let removals = entrylog.removals();
            let result = read();
            attempts += 1;
            if attempts == 3 || !failed(&result) || entrylog.removals() == removals {
                return result;
            }
        }
    }

    /// Runs a read in its two steps, finding locations in the index and reading the entry
    /// logs, timed as BookKeeper's `STORAGE_GET_OFFSET`, `STORAGE_GET_ENTRY` and
    /// `BOOKIE_READ_ENTRY` (three clock reads; none with metrics off).
    fn timed_read<L, T>(
        &self,
        locate: impl FnOnce() -> Result<L>,
        read: impl FnOnce(L) -> Result<T>,
    ) -> Result<T> {
        let stats = &self.stats;
        let started = metrics::start();
        let found = locate();
        let located = started.map(|_| std::time::Instant::now());
        if let Some(at) = located {
            stats.get_offset.record_between(found.is_ok(), started, at);
        }
        let result = found.and_then(read);
        if let Some(at) = located {
            let now = std::time::Instant::now();
            stats
                .get_entry
                .record_between(result.is_ok(), Some(at), now);
            stats
                .read_entry
                .record_between(result.is_ok(), started, now);
        }
        result
    }

    fn count_read(&self, entries: &[Bytes]) {
        let stats = &self.stats;
        let mut bytes = 0u64;
        for e in entries {
            stats.read_entry_bytes.ok.record(e.len() as u64);
            bytes += e.len() as u64;
        }
        stats.read_bytes.add(bytes);
    }

    /// Whether the entry is stored, answered from the caches and the index alone (no entry
    /// data is read): BookKeeper's `entryExists`.
    pub(super) fn index_lookup(&self, ledger: u64, entry: u64) -> Result<bool> {
        let (entry, since) = match self.stores.resolve(ledger, entry) {
            Ok(found) => found,
            Err(StorageError::NoLedger(_)) | Err(StorageError::NoEntry { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let stores = &self.stores;
        Ok(stores.cache.get(ledger, entry).is_some()
            || stores.segments.get(ledger, entry, since)?.is_some())
    }

    /// Every entry id of the ledger this bookie stores, ascending (GET_LIST_OF_ENTRIES_OF_LEDGER).
    pub(super) fn entry_ids(&self, ledger: u64) -> Result<Vec<u64>> {
        let (_, since) = self.stores.resolve(ledger, 0)?;
        let stores = &self.stores;
        let mut ids: Vec<u64> = stores
            .segments
            .scan_ledger(ledger, 0, usize::MAX, since)?
            .iter()
            .map(|e| e.entry)
            .collect();
        ids.extend(stores.cache.entry_ids(ledger));
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }
}
