//! Ledger storage: journal + entry logs + index over a bookie's directories. It owns the
//! ordering that makes an acknowledged entry survive a crash; it never speaks the wire protocol.
//!
//! This file is the public front, [`LedgerStorage`]: each call goes to the part that does the
//! job. Write path: `admission` checks master key and fence and journals the record (group
//! commit); once it is durable `apply` puts it in the write cache, then the caller is
//! acknowledged. `checkpoint` writes the cache to the entry logs sorted by (ledger, entry),
//! indexes it in a new segment, persists the ledger states with the journal marks, and removes
//! journals they cover. `read` looks in the write cache, the read-ahead cache, then the index.
//! `lifecycle` collects, compacts and moves entry logs; `open` opens, replays and closes.

mod admission;
mod apply;
mod checkpoint;
pub mod dirs;
pub mod entrylog;
mod ids;
pub mod index;
pub mod journal;
mod lifecycle;
mod merge;
mod open;
mod read;
mod release;
pub mod reserve;
mod stats;
mod stores;
#[cfg(test)]
mod tests;
pub mod writecache;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use crate::done;
use crate::error::{Result, StorageError};
use crate::metrics::Metric;
use journal::{Completion, Mark};

pub use dirs::{DirKind, DirUsage};
use entrylog::LedgersMap;
pub use ids::{IdHasher, IdMap, LAST_ENTRY};
pub use lifecycle::{
    CollectReport, Compaction, CompactionReport, DigestRange, DiskPressure, GcReport, MoveReport,
    ReplicaDigest, ScrubCheck, ScrubFinding, ScrubReport, REPLICA_DIGEST_LEN,
};
pub use read::RangeLimits;
pub use stats::StorageStats;

/// A bookie's ledger storage. Dropping it closes it.
pub struct LedgerStorage {
    parts: open::Parts,
}

impl LedgerStorage {
    /// Opens the storage: locks the directories, loads the index, replays the journals after
    /// the last checkpoint, checkpoints the result and starts the journal threads.
    pub fn open(cfg: crate::config::StorageConfig) -> Result<LedgerStorage> {
        Ok(LedgerStorage {
            parts: open::open(cfg)?,
        })
    }

    /// Stores an entry; `done` is called once it is durable (or failed). Errors found before
    /// journalling (fenced, wrong key, closed, bad ids) are returned and `done` is not called.
    pub fn add_entry(
        &self,
        ledger: u64,
        entry: u64,
        master_key: &[u8],
        data: Bytes,
        recovery: bool,
        done: Completion,
    ) -> Result<()> {
        self.parts.check_open()?;
        let admitted = (self.parts.admission).admit(ledger, entry, master_key, recovery, &data)?;
        admitted.submit(data, done)
    }

    /// As [`add_entry`](Self::add_entry), but fails with `QueueFull` (dropping `done` uncalled)
    /// instead of waiting for room in the journal queue: for callers that must not block.
    pub fn try_add_entry(
        &self,
        ledger: u64,
        entry: u64,
        master_key: &[u8],
        data: Bytes,
        recovery: bool,
        done: Completion,
    ) -> Result<()> {
        self.parts.check_open()?;
        let admitted = (self.parts.admission).admit(ledger, entry, master_key, recovery, &data)?;
        admitted.try_submit(data, done)
    }

    /// Stores an entry with BookKeeper's `WriteFlag.DEFERRED_SYNC`: `done` is called once it is
    /// written to the journal file, before the fdatasync that makes it durable (its group's, or
    /// a [`force_ledger`](Self::force_ledger)'s). It is readable once that sync returned. With
    /// `blocking` false a full journal queue fails with `QueueFull` (dropping `done` uncalled).
    /// Never a recovery add: BookKeeper journals those with a sync.
    pub fn add_entry_deferred_sync(
        &self,
        ledger: u64,
        entry: u64,
        master_key: &[u8],
        data: Bytes,
        blocking: bool,
        done: Completion,
    ) -> Result<()> {
        self.parts.check_open()?;
        let admitted = (self.parts.admission).admit(ledger, entry, master_key, false, &data)?;
        admitted.submit_deferred_sync(data, blocking, done)
    }

    /// FORCE_LEDGER: `done` gets `Ok` once every entry of `ledger` accepted before this call is
    /// durable on the journal's disk (and readable), or the error of the sync that failed.
    pub fn force_ledger(&self, ledger: u64, done: Completion) -> Result<()> {
        self.parts.check_open()?;
        self.parts.admission.force_ledger(ledger, done)
    }

    /// Stores several entries of one ledger and waits until all are durable (or one failed):
    /// they are journalled together, so they share group commits. Returns the first error.
    pub fn add_entries_blocking(
        &self,
        ledger: u64,
        entries: impl IntoIterator<Item = (u64, Bytes)>,
        master_key: &[u8],
        recovery: bool,
    ) -> Result<()> {
        // Bounded by `entries`: each submitted add sends at most one outcome, and this call
        // receives them all before it returns.
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut submitted = 0usize;
        let mut failure = None;
        for (entry, data) in entries {
            let tx = tx.clone();
            let done: Completion = Box::new(move |r| {
                let _ = tx.send(r);
            });
            match self.add_entry(ledger, entry, master_key, data, recovery, done) {
                Ok(()) => submitted += 1,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        drop(tx);
        // At most `submitted` outcomes arrive; a completion dropped unsent means the journal
        // stopped before taking the request.
        for _ in 0..submitted {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    failure.get_or_insert(e);
                }
                Err(_) => {
                    failure.get_or_insert(StorageError::Closed);
                    break;
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Runs `submit` (an operation taking a completion) and waits for its outcome.
    pub fn wait_for(submit: impl FnOnce(Completion) -> Result<()>) -> Result<()> {
        let (done, waiter) = done::blocking();
        submit(done)?;
        waiter.wait().unwrap_or(Err(StorageError::Closed))
    }

    /// Fences the ledger, creating it with `master_key` if this bookie does not know it yet.
    /// `done` runs once the fence is durable. Returns whether the ledger was already fenced.
    pub fn fence(&self, ledger: u64, master_key: &[u8], done: Completion) -> Result<bool> {
        self.parts.check_open()?;
        self.parts.admission.fence(ledger, master_key, done)
    }

    /// Records the ledger's explicit LAC blob; `done` runs once it is durable.
    pub fn set_explicit_lac(
        &self,
        ledger: u64,
        master_key: &[u8],
        lac: Bytes,
        done: Completion,
    ) -> Result<()> {
        self.parts.check_open()?;
        self.parts
            .admission
            .set_explicit_lac(ledger, master_key, lac, done)
    }

    /// Deletes the ledger; `done` runs once the deletion is durable.
    pub fn delete_ledger(&self, ledger: u64, done: Completion) -> Result<()> {
        self.parts.check_open()?;
        self.parts.admission.delete_ledger(ledger, done)
    }

    /// Total and free bytes of the ledger directories' file systems, summed per directory (as
    /// BookKeeper's GET_BOOKIE_INFO reports them).
    pub fn disk_usage(&self) -> Result<crate::fs::DiskUsage> {
        self.parts.stores.entrylog.dirs().summed_usage()
    }

    /// Every directory the storage writes to, with its file system's usage now, for the disk
    /// checker: ledger directories first (configuration order, each with whether it is marked
    /// full), then the index directory if separate, then the journal directories. A released
    /// space reserve still counts as used (its bytes are not free), so giving it back to
    /// collection never turns a full disk writable.
    pub fn directory_usage(&self) -> Result<Vec<DirUsage>> {
        let mut rows =
            dirs::directory_usage(self.parts.stores.entrylog.dirs(), &self.parts.other_dirs)?;
        let reserve = &self.parts.stores.reserve;
        if reserve.is_released() {
            for row in &mut rows {
                let held_back = reserve.held_back_on(&row.path);
                row.usage.free_bytes = row.usage.free_bytes.saturating_sub(held_back);
            }
        }
        Ok(rows)
    }

    /// Makes the space reserves released while the disk was full again (the disk checker,
    /// once usage is below the low-water mark, before it turns the bookie writable): Ok(false)
    /// while one does not fit yet (ENOSPC); one refused otherwise is logged and stays counted
    /// as used.
    pub fn restore_space_reserve(&self) -> Result<bool> {
        self.parts.stores.reserve.restore()
    }

    /// Every space reserve file with its size and whether it is held now.
    pub fn space_reserve(&self) -> Vec<(PathBuf, u64, bool)> {
        self.parts.stores.reserve.files()
    }

    /// Marks the ledger directories the disk checker found full (one flag per ledger directory,
    /// in configuration order): they take no new entry log while another directory can.
    pub fn set_full_ledger_dirs(&self, full: &[bool]) {
        self.parts.stores.entrylog.dirs().set_full(full);
    }

    /// Reads one entry; `LAST_ENTRY` reads the highest stored one. An entry read from an
    /// entry log brings the ledger's following entries along in the same I/O (read-ahead).
    pub fn read_entry(&self, ledger: u64, entry: u64) -> Result<Bytes> {
        self.parts.check_open()?;
        self.parts.reader.read_entry(ledger, entry)
    }

    /// Reads entries `first, first + stride, ...` as a batch read does: the first entry always
    /// (or its error), then more until a limit or a missing entry. A failure after the first
    /// entry ends the batch early instead of failing it.
    pub fn read_range(&self, ledger: u64, first: u64, limits: RangeLimits) -> Result<Vec<Bytes>> {
        self.parts.check_open()?;
        self.parts.reader.read_range(ledger, first, limits)
    }

    /// The cross-replica check's digest of what this storage holds of `ledger` in `range`
    /// (`lifecycle::replica_digest`): hashed as read, no payload handed out.
    pub fn replica_digest(
        &self,
        ledger: u64,
        range: DigestRange,
        list: bool,
    ) -> Result<ReplicaDigest> {
        self.parts.check_open()?;
        let reader = &self.parts.reader;
        lifecycle::replica_digest(range, list, |first, limits| {
            reader.read_range(ledger, first, limits)
        })
    }

    /// Whether the entry is stored, answered from the caches and the index alone (no entry
    /// data is read): BookKeeper's `entryExists`.
    pub fn index_lookup(&self, ledger: u64, entry: u64) -> Result<bool> {
        self.parts.reader.index_lookup(ledger, entry)
    }

    /// Highest stored entry id of the ledger.
    pub fn last_entry_id(&self, ledger: u64) -> Result<u64> {
        self.parts.stores.last_entry_id(ledger)
    }

    pub fn is_fenced(&self, ledger: u64) -> Result<bool> {
        self.parts.stores.is_fenced(ledger)
    }

    /// Every entry id of the ledger this bookie stores, ascending (GET_LIST_OF_ENTRIES_OF_LEDGER).
    pub fn entry_ids(&self, ledger: u64) -> Result<Vec<u64>> {
        self.parts.reader.entry_ids(ledger)
    }

    /// The highest LAC the ledger's entries on this bookie carry (BookKeeper's
    /// `readLastAddConfirmed`): tracked as entries are applied, else the last entry's. Raises
    /// NoLedger, NoEntry (a ledger with no entry here).
    pub fn last_add_confirmed(&self, ledger: u64) -> Result<i64> {
        let known = self.parts.stores.max_lac(ledger)?;
        if known >= 0 {
            return Ok(known);
        }
        let last = self.read_entry(ledger, LAST_ENTRY)?;
        let lac = apply::piggybacked_lac(&last).unwrap_or(-1);
        self.parts.stores.note_lac(ledger, lac);
        Ok(lac)
    }

    pub fn explicit_lac(&self, ledger: u64) -> Result<Option<Bytes>> {
        self.parts.stores.explicit_lac(ledger)
    }

    pub fn master_key(&self, ledger: u64) -> Result<Arc<[u8]>> {
        self.parts.stores.master_key(ledger)
    }

    pub fn ledger_exists(&self, ledger: u64) -> bool {
        self.parts.stores.ledger_exists(ledger)
    }

    pub fn list_ledgers(&self) -> Vec<u64> {
        self.parts.stores.list_ledgers()
    }

    /// Per journal directory: the position (file id, offset) up to which its records are
    /// durable and applied (BookKeeper's last log mark).
    pub fn journal_marks(&self) -> Vec<Mark> {
        self.parts.stores.journal_marks()
    }

    /// Per entry log: bytes held for each ledger.
    pub fn entry_log_ledgers(&self) -> Result<HashMap<u32, LedgersMap>> {
        self.parts.stores.entrylog.ledgers_maps()
    }

    /// Per entry log: the ledger directory (`current/`) holding it.
    pub fn entry_log_dirs(&self) -> HashMap<u32, PathBuf> {
        self.parts.stores.entry_log_dirs()
    }

    /// Removes the entry logs none of whose ledgers exists any more (BookKeeper's garbage
    /// collection of fully deleted entry logs). Runs by itself every `gcWaitTime`. Logs that
    /// still hold a live ledger's entries are kept.
    pub fn gc_entry_logs(&self) -> Result<GcReport> {
        self.parts.check_open()?;
        self.parts.lifecycle.gc_entry_logs()
    }

    /// Compacts the entry logs whose live share of bytes is at most `threshold`: their live
    /// entries are written again and the logs removed (BookKeeper's minor compaction at
    /// `minorCompactionThreshold`, major at `majorCompactionThreshold`; runs by itself every
    /// `minorCompactionInterval` / `majorCompactionInterval`).
    pub fn compact(&self, threshold: f64) -> Result<CompactionReport> {
        self.parts.check_open()?;
        self.parts.lifecycle.compact(threshold)
    }

    /// Reads every sealed entry log back now and checks each indexed entry (record CRC, ids,
    /// the client's CRC32C/CRC32 digest), at `rate_bytes` per second (0: unpaced), on the
    /// caller's thread (BookKeeper's `localConsistencyCheck`; the background scrubber runs the
    /// same every `scrubIntervalSeconds`). Damaged entries are logged once and queued for
    /// [`take_scrub_findings`](Self::take_scrub_findings).
    pub fn scrub(&self, rate_bytes: u64) -> Result<ScrubReport> {
        self.parts.check_open()?;
        self.parts.lifecycle.scrub(rate_bytes)
    }

    /// The damaged entries the scrubber found that the bookie has not taken yet (taking them).
    pub fn take_scrub_findings(&self) -> Vec<ScrubFinding> {
        self.parts.stores.scrub.take_findings()
    }

    /// The bookie rewrote this entry from another replica: reads serve it again.
    pub fn scrub_repaired(&self, ledger: u64, entry: u64) {
        self.parts.stores.scrub.repaired(ledger, entry);
    }

    /// The last finished scrub run, and the current run's progress (bytes read, bytes to read).
    pub fn scrub_status(&self) -> (Option<ScrubReport>, u64, u64) {
        let scrub = &self.parts.stores.scrub;
        (
            scrub.last(),
            scrub
                .run_done_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            scrub
                .run_total_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Collects garbage now and, if asked, runs a minor or major compaction at its configured
    /// threshold: the lifecycle's run-now call, for the bookie's metadata GC once it deleted
    /// the ledgers whose metadata is gone, and for an operator's forced pass.
    pub fn collect(&self, compaction: Option<Compaction>) -> Result<CollectReport> {
        self.parts.check_open()?;
        self.parts.lifecycle.collect(compaction)
    }

    /// Runs one pass of the tier mover now (it also runs by itself): every tier past its high
    /// watermark has its coldest entry logs moved down a tier until it is below its low
    /// watermark, and logs read below the top tier move up when `tieredStoragePromoteOnRead`
    /// allows it.
    pub fn move_entry_logs(&self) -> Result<MoveReport> {
        self.parts.check_open()?;
        self.parts.lifecycle.move_entry_logs()
    }

    /// Tells the storage how full its ledger directories are (the bookie's disk checker, after
    /// each check). As BookKeeper's garbage collector: while any is almost full (past
    /// `diskUsageWarnThreshold`) the timed major compaction is suspended, while any is full the
    /// minor one too, since compaction writes new entry logs before it frees old ones; with
    /// `isForceGCAllowWhenNoSpace` garbage collection and both compactions run instead, every
    /// `flushInterval`, to win space back. Removing fully deleted logs (`gcWaitTime`) never
    /// stops: it only frees.
    ///
    /// Full also gives the space reserves back (`diskReservedSpaceMB`): checkpoints, index
    /// records and a compaction of the logs with the most garbage (at most the reserve's worth
    /// of live bytes, whatever `isForceGCAllowWhenNoSpace` says) write into them, and they are
    /// made again by [`restore_space_reserve`](Self::restore_space_reserve).
    pub fn set_disk_pressure(&self, pressure: DiskPressure) {
        if pressure == DiskPressure::Full {
            self.parts
                .stores
                .reserve
                .release("the disk checker found a directory full");
        }
        self.parts.lifecycle.set_disk_pressure(pressure);
    }

    /// Flushes entry logs and index and records the journal marks; removes covered journals.
    pub fn checkpoint(&self) -> Result<()> {
        self.parts.check_open()?;
        self.parts
            .checkpointer
            .checkpoint(&self.parts.journals, true)
    }

    /// Every metric of the storage and its journals, read now.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut out = Vec::new();
        let parts = &self.parts;
        stats::export(&parts.stats, &parts.journals, &parts.stores, &mut out);
        out
    }

    /// Completes queued writes, checkpoints, seals the active entry log and releases the
    /// directories. Idempotent.
    pub fn close(&self) -> Result<()> {
        self.parts.close()
    }
}

impl Drop for LedgerStorage {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("closing ledger storage: {e}");
        }
    }
}
