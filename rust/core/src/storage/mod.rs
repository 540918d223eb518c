//! Ledger storage: journal + entry logs + index over a bookie's directories. It owns the
//! ordering that makes an acknowledged entry survive a crash; it never speaks the wire protocol.
//!
//! Write path: check master key and fence, journal the record (group commit), and only once it
//! is durable append it to the entry log and index it, then acknowledge. Checkpoints flush the
//! entry logs, persist the index with the journal marks, and remove journals they cover; on
//! open, the journal after the last checkpoint is replayed.

mod apply;
mod checkpoint;
pub mod dirs;
pub mod entrylog;
pub mod index;
pub mod journal;
mod stats;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::config::StorageConfig;
use crate::done;
use crate::error::{IoContext, Result, StorageError};
use crate::fs;
use crate::metrics::{self, Metric};
use apply::Shared;
use dirs::LedgerDirs;
use entrylog::{EntryLogger, LedgersMap, Location};
use index::IndexLog;
use journal::{Applier, Completion, Journal, JournalOp, Mark};
pub use stats::StorageStats;

/// Entry id that asks for the highest stored entry (BookKeeper's entry id -1).
pub const LAST_ENTRY: u64 = u64::MAX;
/// Ledger and entry ids are non-negative Java longs.
const MAX_ID: u64 = i64::MAX as u64;
/// No range read collects more entries than this, whatever its limits say.
const MAX_RANGE_ENTRIES: usize = 1 << 20;

/// What a directory holds, for the disk checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirKind {
    Ledger,
    Index,
    Journal,
}

impl DirKind {
    pub fn name(self) -> &'static str {
        match self {
            DirKind::Ledger => "ledger",
            DirKind::Index => "index",
            DirKind::Journal => "journal",
        }
    }
}

/// One directory's file-system usage, as [`LedgerStorage::directory_usage`] reports it.
#[derive(Debug, Clone)]
pub struct DirUsage {
    pub kind: DirKind,
    pub path: PathBuf,
    pub usage: fs::DiskUsage,
    /// A ledger directory marked full by the disk checker.
    pub full: bool,
}

/// Limits of a range read, in BookKeeper's batch-read terms.
#[derive(Debug, Clone, Copy)]
pub struct RangeLimits {
    /// At most this many entries; 0 means no count limit.
    pub max_count: usize,
    /// After the first entry (always returned), stop before the total would exceed this.
    pub max_bytes: usize,
    /// Bytes counted per entry on top of its data (e.g. a length prefix on the wire).
    pub per_entry_overhead: usize,
    /// Distance between the entries read: 1 for consecutive entries (BP-62), E for the entries
    /// of one write-set position of a striped ledger (pybkx's strided batch read).
    pub stride: u64,
}

struct Inner {
    cfg: StorageConfig,
    shared: Arc<Shared>,
    journals: Vec<Journal>,
    /// Also serialises checkpoints.
    index_log: Mutex<IndexLog>,
    closed: AtomicBool,
    stats: StorageStats,
    stop: Mutex<bool>,
    stop_signal: Condvar,
    /// Directory locks, released by `close`.
    locks: Mutex<Vec<File>>,
}

/// A bookie's ledger storage. Dropping it closes it.
pub struct LedgerStorage {
    inner: Arc<Inner>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
}

fn check_id(what: &str, id: u64) -> Result<()> {
    if id > MAX_ID {
        return Err(StorageError::InvalidArgument(format!(
            "{what} {id} is out of range"
        )));
    }
    Ok(())
}

impl LedgerStorage {
    /// Opens the storage: locks the directories, loads the index, replays the journals after
    /// the last checkpoint, checkpoints the result and starts the journal threads.
    pub fn open(cfg: StorageConfig) -> Result<LedgerStorage> {
        cfg.validate()?;
        let journal_dirs = cfg
            .journal_dirs
            .iter()
            .map(|d| fs::current_dir(d))
            .collect::<Result<Vec<_>>>()?;
        let ledger_dirs = cfg
            .ledger_dirs
            .iter()
            .map(|d| fs::current_dir(d))
            .collect::<Result<Vec<_>>>()?;
        let index_dir = fs::current_dir(cfg.index_dir())?;
        let mut lock_paths: Vec<PathBuf> = journal_dirs
            .iter()
            .chain(&ledger_dirs)
            .chain(std::iter::once(&index_dir))
            .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.clone()))
            .collect();
        lock_paths.sort();
        lock_paths.dedup();
        let locks = lock_paths
            .iter()
            .map(|d| fs::lock_dir(d))
            .collect::<Result<Vec<_>>>()?;

        let (index_log, mut index) = IndexLog::open(&index_dir)?;
        let n = journal_dirs.len();
        if index.marks.is_empty() {
            index.marks = vec![Mark::default(); n];
        } else if index.marks.len() != n {
            return Err(StorageError::InvalidArgument(format!(
                "the index was checkpointed with {} journal directories but {n} are configured; \
                 restore the original journalDirectories",
                index.marks.len()
            )));
        }
        let marks = index.marks.clone();
        let dirs = Arc::new(LedgerDirs::configured(
            ledger_dirs,
            &cfg.dirs,
            cfg.log_size_limit,
        )?);
        let entrylog = EntryLogger::open(dirs, cfg.log_size_limit, cfg.entry_log_write_buffer)?;
        let shared = Arc::new(Shared {
            entrylog,
            index: RwLock::new(index),
        });
        let mut next_ids = Vec::with_capacity(n);
        for (j, dir) in journal_dirs.iter().enumerate() {
            let end = journal::replay(
                dir,
                marks[j],
                cfg.journal.skip_replay_invalid_record,
                |ops, mark| shared.apply(j, ops, mark),
            )?;
            next_ids.push(end.next_file_id);
        }
        let applier: Arc<dyn Applier> = shared.clone();
        let journals = journal_dirs
            .into_iter()
            .enumerate()
            .map(|(j, dir)| {
                Journal::start(j, dir, cfg.journal.clone(), next_ids[j], applier.clone())
            })
            .collect::<Result<Vec<_>>>()?;
        let inner = Arc::new(Inner {
            cfg,
            shared,
            journals,
            index_log: Mutex::new(index_log),
            closed: AtomicBool::new(false),
            stats: StorageStats::default(),
            stop: Mutex::new(false),
            stop_signal: Condvar::new(),
            locks: Mutex::new(locks),
        });
        // Persist what replay rebuilt, so the replayed journals can go.
        inner.checkpoint()?;
        let checkpointer = if inner.cfg.flush_interval.is_zero() {
            None
        } else {
            let inner = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name("pybkx-checkpoint".into())
                    .spawn(move || inner.run_checkpointer())
                    .ctx(|| "spawning the checkpoint thread".to_string())?,
            )
        };
        Ok(LedgerStorage {
            inner,
            checkpointer: Mutex::new(checkpointer),
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
        self.add(ledger, entry, master_key, data, recovery, done, true)
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
        self.add(ledger, entry, master_key, data, recovery, done, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        ledger: u64,
        entry: u64,
        master_key: &[u8],
        data: Bytes,
        recovery: bool,
        done: Completion,
        wait_for_room: bool,
    ) -> Result<()> {
        self.inner.check_open()?;
        check_id("ledger id", ledger)?;
        check_id("entry id", entry)?;
        let key = self.inner.writable_key(ledger, master_key, recovery)?;
        let journal = self.inner.journal_for(ledger);
        self.inner
            .stats
            .add_entry_bytes
            .ok
            .record(data.len() as u64);
        let op = JournalOp::Entry {
            ledger,
            entry,
            data,
        };
        if wait_for_room {
            journal.submit(op, Some(key), done)
        } else {
            journal.try_submit(op, Some(key), done)
        }
    }

    /// Fences the ledger, creating it with `master_key` if this bookie does not know it yet.
    /// `done` runs once the fence is durable. Returns whether the ledger was already fenced.
    pub fn fence(&self, ledger: u64, master_key: &[u8], done: Completion) -> Result<bool> {
        self.inner.check_open()?;
        check_id("ledger id", ledger)?;
        let (was_fenced, durable, key) = {
            let mut idx = self.inner.shared.index.write();
            let key = Arc::from(master_key);
            let st = idx.get_or_create(ledger, &key);
            if *st.master_key != *master_key {
                return Err(StorageError::Unauthorized(ledger));
            }
            let was = st.fenced;
            st.fenced = true;
            (was, st.fence_durable, st.master_key.clone())
        };
        if durable {
            done(Ok(()));
            return Ok(true);
        }
        // A second fence before the first is durable journals again, so it too waits for
        // durability: journal order puts it after the first.
        self.inner
            .journal_for(ledger)
            .submit(JournalOp::Fence { ledger }, Some(key), done)?;
        Ok(was_fenced)
    }

    /// Records the ledger's explicit LAC blob; `done` runs once it is durable.
    pub fn set_explicit_lac(
        &self,
        ledger: u64,
        master_key: &[u8],
        lac: Bytes,
        done: Completion,
    ) -> Result<()> {
        self.inner.check_open()?;
        check_id("ledger id", ledger)?;
        let key = self.inner.writable_key(ledger, master_key, true)?;
        self.inner
            .journal_for(ledger)
            .submit(JournalOp::Lac { ledger, lac }, Some(key), done)
    }

    /// Deletes the ledger; `done` runs once the deletion is durable.
    pub fn delete_ledger(&self, ledger: u64, done: Completion) -> Result<()> {
        self.inner.check_open()?;
        if !self.inner.shared.index.read().ledgers.contains_key(&ledger) {
            return Err(StorageError::NoLedger(ledger));
        }
        self.inner
            .journal_for(ledger)
            .submit(JournalOp::Delete { ledger }, None, done)
    }

    /// Total and free bytes of the ledger directories' file systems, summed per directory (as
    /// BookKeeper's GET_BOOKIE_INFO reports them).
    pub fn disk_usage(&self) -> Result<crate::fs::DiskUsage> {
        let mut sum = crate::fs::DiskUsage {
            total_bytes: 0,
            free_bytes: 0,
        };
        for state in self.inner.shared.entrylog.dirs().states()? {
            sum.total_bytes += state.usage.total_bytes;
            sum.free_bytes += state.usage.free_bytes;
        }
        Ok(sum)
    }

    /// Every directory the storage writes to, with its file system's usage now, for the disk
    /// checker: ledger directories first (configuration order, each with whether it is marked
    /// full), then the index directory if separate, then the journal directories.
    pub fn directory_usage(&self) -> Result<Vec<DirUsage>> {
        let dirs = self.inner.shared.entrylog.dirs();
        let full = dirs.full_flags();
        let mut out = Vec::new();
        for (i, state) in dirs.states()?.into_iter().enumerate() {
            out.push(DirUsage {
                kind: DirKind::Ledger,
                path: state.path,
                usage: state.usage,
                full: full.get(i).copied().unwrap_or(false),
            });
        }
        let cfg = &self.inner.cfg;
        let mut others: Vec<(DirKind, PathBuf)> = Vec::new();
        if !cfg.index_dirs.is_empty() {
            others.push((DirKind::Index, cfg.index_dir().to_path_buf()));
        }
        others.extend(
            cfg.journal_dirs
                .iter()
                .map(|d| (DirKind::Journal, d.clone())),
        );
        for (kind, path) in others {
            let usage = fs::disk_usage(&path)?;
            out.push(DirUsage {
                kind,
                path,
                usage,
                full: false,
            });
        }
        Ok(out)
    }

    /// Marks the ledger directories the disk checker found full (one flag per ledger directory,
    /// in configuration order): they take no new entry log while another directory can.
    pub fn set_full_ledger_dirs(&self, full: &[bool]) {
        self.inner.shared.entrylog.dirs().set_full(full);
    }

    /// Reads one entry; `LAST_ENTRY` reads the highest stored one.
    pub fn read_entry(&self, ledger: u64, entry: u64) -> Result<Bytes> {
        self.inner.check_open()?;
        let read = self.timed_read(
            || self.locate(ledger, entry),
            |(entry, at)| self.inner.shared.entrylog.read(ledger, entry, at),
        );
        match &read {
            Ok(data) => self.count_read(std::slice::from_ref(data)),
            Err(StorageError::Corruption(what)) => self.inner.stats.note_corruption(what),
            Err(_) => {}
        }
        read
    }

    /// Runs a read in its two steps, finding locations in the index and reading the entry
    /// logs, timed as BookKeeper's `STORAGE_GET_OFFSET`, `STORAGE_GET_ENTRY` and
    /// `BOOKIE_READ_ENTRY` (three clock reads; none with metrics off).
    fn timed_read<L, T>(
        &self,
        locate: impl FnOnce() -> Result<L>,
        read: impl FnOnce(L) -> Result<T>,
    ) -> Result<T> {
        let stats = &self.inner.stats;
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
        let stats = &self.inner.stats;
        let mut bytes = 0u64;
        for e in entries {
            stats.read_entry_bytes.ok.record(e.len() as u64);
            bytes += e.len() as u64;
        }
        stats.read_bytes.add(bytes);
    }

    /// The entry id (`LAST_ENTRY` resolved) and location of an entry.
    fn locate(&self, ledger: u64, entry: u64) -> Result<(u64, Location)> {
        let idx = self.inner.shared.index.read();
        let st = idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?;
        let entry = if entry == LAST_ENTRY {
            st.last_entry()
                .ok_or(StorageError::NoEntry { ledger, entry })?
        } else {
            entry
        };
        let at = st
            .get(entry)
            .ok_or(StorageError::NoEntry { ledger, entry })?;
        Ok((entry, at))
    }

    /// Reads entries `first, first + stride, ...` as a batch read does: the first entry always
    /// (or its error), then more until a limit or a missing entry. A failure after the first
    /// entry ends the batch early instead of failing it.
    pub fn read_range(&self, ledger: u64, first: u64, limits: RangeLimits) -> Result<Vec<Bytes>> {
        self.inner.check_open()?;
        let result = self.timed_read(
            || self.locate_range(ledger, first, limits),
            |items| {
                let (entries, err) = self.inner.shared.entrylog.read_run(ledger, &items);
                if let Some(StorageError::Corruption(what)) = &err {
                    self.inner.stats.note_corruption(what);
                }
                match err {
                    Some(e) if entries.is_empty() => Err(e),
                    Some(e) => {
                        log::warn!("batch read of ledger {ledger} cut short: {e}");
                        Ok(entries)
                    }
                    None => Ok(entries),
                }
            },
        );
        if let Ok(entries) = &result {
            self.count_read(entries);
        }
        result
    }

    /// The entries a range read takes and their locations: the first always (or its error),
    /// then more until a limit or a missing entry.
    fn locate_range(
        &self,
        ledger: u64,
        first: u64,
        limits: RangeLimits,
    ) -> Result<Vec<(u64, Location)>> {
        let idx = self.inner.shared.index.read();
        let st = idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?;
        let max_count = match limits.max_count {
            0 => MAX_RANGE_ENTRIES,
            n => n.min(MAX_RANGE_ENTRIES),
        };
        let mut items: Vec<(u64, Location)> = Vec::new();
        let mut total = 0usize;
        let stride = limits.stride.max(1);
        for i in 0..max_count as u64 {
            let Some(entry) = i
                .checked_mul(stride)
                .and_then(|offset| first.checked_add(offset))
            else {
                break;
            };
            let Some(at) = st.get(entry) else {
                if i == 0 {
                    return Err(StorageError::NoEntry { ledger, entry });
                }
                break;
            };
            total += at.data_len() + limits.per_entry_overhead;
            if i > 0 && total > limits.max_bytes {
                break;
            }
            items.push((entry, at));
        }
        Ok(items)
    }

    /// Highest stored entry id of the ledger.
    pub fn last_entry_id(&self, ledger: u64) -> Result<u64> {
        let idx = self.inner.shared.index.read();
        let st = idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?;
        st.last_entry().ok_or(StorageError::NoEntry {
            ledger,
            entry: LAST_ENTRY,
        })
    }

    pub fn is_fenced(&self, ledger: u64) -> Result<bool> {
        let idx = self.inner.shared.index.read();
        Ok(idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?
            .fenced)
    }

    /// Every entry id of the ledger this bookie stores, ascending (GET_LIST_OF_ENTRIES_OF_LEDGER).
    pub fn entry_ids(&self, ledger: u64) -> Result<Vec<u64>> {
        let idx = self.inner.shared.index.read();
        Ok(idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?
            .entry_ids())
    }

    /// The highest LAC the ledger's entries on this bookie carry (BookKeeper's
    /// `readLastAddConfirmed`): tracked as entries are applied, else the last entry's. Raises
    /// NoLedger, NoEntry (a ledger with no entry here).
    pub fn last_add_confirmed(&self, ledger: u64) -> Result<i64> {
        {
            let idx = self.inner.shared.index.read();
            let st = idx
                .ledgers
                .get(&ledger)
                .ok_or(StorageError::NoLedger(ledger))?;
            if st.max_lac >= 0 {
                return Ok(st.max_lac);
            }
        }
        let last = self.read_entry(ledger, LAST_ENTRY)?;
        let lac = apply::piggybacked_lac(&last).unwrap_or(-1);
        let mut idx = self.inner.shared.index.write();
        if let Some(st) = idx.ledgers.get_mut(&ledger) {
            st.max_lac = st.max_lac.max(lac);
        }
        Ok(lac)
    }

    pub fn explicit_lac(&self, ledger: u64) -> Result<Option<Bytes>> {
        let idx = self.inner.shared.index.read();
        Ok(idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?
            .explicit_lac
            .clone())
    }

    pub fn master_key(&self, ledger: u64) -> Result<Arc<[u8]>> {
        let idx = self.inner.shared.index.read();
        Ok(idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?
            .master_key
            .clone())
    }

    pub fn ledger_exists(&self, ledger: u64) -> bool {
        self.inner.shared.index.read().ledgers.contains_key(&ledger)
    }

    pub fn list_ledgers(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .inner
            .shared
            .index
            .read()
            .ledgers
            .keys()
            .copied()
            .collect();
        v.sort_unstable();
        v
    }

    /// Per journal directory: the position (file id, offset) up to which its records are
    /// durable and applied (BookKeeper's last log mark).
    pub fn journal_marks(&self) -> Vec<Mark> {
        self.inner.shared.index.read().marks.clone()
    }

    /// Per entry log: bytes held for each ledger.
    pub fn entry_log_ledgers(&self) -> Result<HashMap<u32, LedgersMap>> {
        self.inner.shared.entrylog.ledgers_maps()
    }

    /// Flushes entry logs and index and records the journal marks; removes covered journals.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.check_open()?;
        self.inner.checkpoint()
    }

    /// Every metric of the storage and its journals, read now.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut out = Vec::new();
        self.inner.export(&mut out);
        out
    }

    /// Completes queued writes, checkpoints, seals the active entry log and releases the
    /// directories. Idempotent.
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        *self.inner.stop.lock() = true;
        self.inner.stop_signal.notify_all();
        if let Some(t) = self.checkpointer.lock().take() {
            if t.join().is_err() {
                log::error!("checkpoint thread panicked");
            }
        }
        for j in &self.inner.journals {
            j.shutdown();
        }
        let result = self
            .inner
            .checkpoint()
            .and_then(|_| self.inner.shared.entrylog.close());
        self.inner.locks.lock().clear();
        result
    }
}

impl Drop for LedgerStorage {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("closing ledger storage: {e}");
        }
    }
}

impl Inner {
    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed);
        }
        Ok(())
    }

    fn journal_for(&self, ledger: u64) -> &Journal {
        &self.journals[(ledger % self.journals.len() as u64) as usize]
    }

    /// Checks key and fence for a write and returns the ledger's key, creating the ledger with
    /// `master_key` on its first write.
    fn writable_key(&self, ledger: u64, master_key: &[u8], recovery: bool) -> Result<Arc<[u8]>> {
        let check = |st: &index::LedgerState| {
            if *st.master_key != *master_key {
                return Err(StorageError::Unauthorized(ledger));
            }
            if st.fenced && !recovery {
                return Err(StorageError::Fenced(ledger));
            }
            Ok(st.master_key.clone())
        };
        if let Some(st) = self.shared.index.read().ledgers.get(&ledger) {
            return check(st);
        }
        let mut idx = self.shared.index.write();
        let st = idx.get_or_create(ledger, &Arc::from(master_key));
        check(st)
    }
}
