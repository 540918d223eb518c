//! Ledger storage: journal + entry logs + index over a bookie's directories. It owns the
//! ordering that makes an acknowledged entry survive a crash; it never speaks the wire protocol.
//!
//! Write path: check master key and fence, journal the record (group commit), and only once it
//! is durable put it in the write cache, then acknowledge. Checkpoints write the cache to the
//! entry logs sorted by (ledger, entry), index it in a new segment, persist the ledger states
//! with the journal marks, and remove journals they cover; on open, the journal after the last
//! checkpoint is replayed. Reads look in the write cache, the read-ahead cache, then the index.

mod ahead;
mod apply;
mod checkpoint;
mod compaction;
pub mod dirs;
pub mod entrylog;
mod ids;
pub mod index;
pub mod journal;
mod readahead;
mod release;
mod stats;
#[cfg(test)]
mod tests;
mod tiering;
pub mod writecache;

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
use crate::record;
use ahead::AheadQueue;
use apply::{Flusher, Shared, Wake};
pub use compaction::CompactionReport;
use dirs::LedgerDirs;
pub use dirs::{DirKind, DirUsage};
use entrylog::{EntryLogger, LedgersMap, Location};
use ids::{check_id, MAX_ID};
pub use ids::{IdHasher, IdMap, LAST_ENTRY};
use index::segment::{IndexEntry, SegmentWriter};
use index::segments::SegmentSet;
use index::IndexLog;
use journal::{Applier, Completion, Journal, JournalOp, Mark};
use readahead::ReadAheadCache;
pub use stats::StorageStats;
pub use tiering::MoveReport;
use writecache::WriteCache;

/// No range read collects more entries than this, whatever its limits say.
const MAX_RANGE_ENTRIES: usize = 1 << 20;
/// One read-ahead I/O covers at most this many bytes.
const MAX_READ_AHEAD_BYTES: usize = 1 << 20;
/// After a read from the entry logs, the ledger's next entries, up to this many bytes (and four
/// runs), are hinted to the kernel for asynchronous read-ahead (runs read directly are not).
const PREFETCH_BYTES: u64 = 4 << 20;
const PREFETCH_RUNS: usize = 4;
/// The same where the read-ahead threads read the runs (logs read directly, no kernel
/// read-ahead behind them): a window deep enough to keep several reads in flight while the scan
/// takes the middle of it, runs of a ledger written among many others being a few hundred KiB.
const PREFETCH_DIRECT_BYTES: u64 = 8 << 20;
const PREFETCH_DIRECT_RUNS: usize = 32;
/// A batch read takes the rest of the run it ends in only when that rest is at least this large:
/// the I/O saved is then worth the read-ahead cache's work per entry (for runs of small entries
/// a second, small read costs less than caching each entry; warm 100-byte batch reads ran 30%
/// slower with every rest taken).
const MIN_TAIL_BYTES: u64 = 64 << 10;
/// Ledgers whose prefetch window is remembered (forgotten all at once beyond it).
const PREFETCH_LEDGERS: usize = 4096;

/// The entries of a ledger last hinted for read-ahead.
#[derive(Clone, Copy)]
struct PrefetchWindow {
    start: u64,
    trigger: u64,
    upto: u64,
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
    closed: AtomicBool,
    stats: StorageStats,
    /// A checkpoint added a segment: the merge thread looks for work.
    merges_wanted: AtomicBool,
    /// Per ledger, the window last hinted for kernel read-ahead (or handed to the read-ahead
    /// threads).
    prefetched: Mutex<HashMap<u64, PrefetchWindow>>,
    /// The read-ahead threads' queue, where logs are read directly and threads are configured.
    ahead: Option<AheadQueue>,
    /// One entry-log garbage collection at a time.
    gc_lock: Mutex<()>,
    /// Per ledger (striped): an add's fence check and journal submission, or a fence's flag
    /// and journal submission, happen under it, so journal order matches fence order.
    admission: Vec<Mutex<()>>,
    /// How full the ledger directories are, as the bookie's disk checker last said:
    /// [`DiskPressure`] as a number.
    disk_pressure: std::sync::atomic::AtomicU8,
    /// Directory locks, released by `close`.
    locks: Mutex<Vec<File>>,
    /// The tier mover was asked for a pass.
    mover_wake: Mutex<bool>,
    /// One pass of the tier mover at a time (the thread's or `move_entry_logs`).
    mover_pass: Mutex<()>,
    mover_signal: Condvar,
}

/// Stripes of the admission locks (adds and fences of ledgers in one stripe serialise briefly).
const ADMISSION_STRIPES: usize = 64;

/// How full the ledger directories are, for the garbage collector's choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DiskPressure {
    Normal = 0,
    /// Some ledger directory is past `diskUsageWarnThreshold`.
    AlmostFull = 1,
    /// Some ledger directory is past `diskUsageThreshold`.
    Full = 2,
}

impl DiskPressure {
    fn from_u8(v: u8) -> DiskPressure {
        match v {
            0 => DiskPressure::Normal,
            1 => DiskPressure::AlmostFull,
            _ => DiskPressure::Full,
        }
    }
}

/// A bookie's ledger storage. Dropping it closes it.
pub struct LedgerStorage {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Where a located entry is: already in memory, or in an entry log.
enum Found {
    Cached(Bytes),
    /// In an entry log.
    At(Location),
    /// In an entry log, indexed by this segment (whose following entries read-ahead takes).
    Indexed(Location, Arc<index::segment::Segment>),
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

        let (mut index_log, mut index) = IndexLog::open(&index_dir)?;
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
        migrate_legacy_locations(&index_dir, &mut index, &mut index_log)?;
        let segments = SegmentSet::open(&index_dir, &index.manifest, cfg.index_cache_bytes)?;
        let dirs = Arc::new(LedgerDirs::configured(
            ledger_dirs,
            &cfg.dirs,
            cfg.log_size_limit,
        )?);
        let entrylog = EntryLogger::open(
            dirs,
            cfg.log_size_limit,
            cfg.entry_log_write_buffer,
            cfg.entry_log_direct_io,
        )?
        .with_direct_reads(cfg.entry_log_direct_reads);
        let shared = Arc::new(Shared {
            entrylog,
            index: RwLock::new(index),
            cache: WriteCache::new(cfg.write_cache_bytes),
            segments,
            read_ahead: ReadAheadCache::new(cfg.read_ahead_cache_bytes),
            flusher: Mutex::new(Flusher {
                log: index_log,
                pending: None,
                unsynced: Vec::new(),
                records: Vec::new(),
                snapshot: false,
                flushed_marks: marks.clone(),
                persisted_marks: marks.clone(),
                doomed: Vec::new(),
            }),
            wake: Mutex::new(Wake::default()),
            wake_signal: Condvar::new(),
            replaying: AtomicBool::new(true),
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
        shared.replaying.store(false, Ordering::Release);
        let applier: Arc<dyn Applier> = shared.clone();
        let journals = journal_dirs
            .into_iter()
            .enumerate()
            .map(|(j, dir)| {
                Journal::start(j, dir, cfg.journal.clone(), next_ids[j], applier.clone())
            })
            .collect::<Result<Vec<_>>>()?;
        let (ahead, ahead_jobs) = if cfg.entry_log_direct_reads && cfg.read_ahead_threads > 0 {
            let (queue, jobs) = AheadQueue::new(cfg.read_ahead_threads);
            (Some(queue), Some(jobs))
        } else {
            (None, None)
        };
        let inner = Arc::new(Inner {
            cfg,
            shared,
            journals,
            closed: AtomicBool::new(false),
            stats: StorageStats::default(),
            merges_wanted: AtomicBool::new(true),
            prefetched: Mutex::new(HashMap::new()),
            ahead,
            gc_lock: Mutex::new(()),
            admission: (0..ADMISSION_STRIPES).map(|_| Mutex::new(())).collect(),
            disk_pressure: std::sync::atomic::AtomicU8::new(DiskPressure::Normal as u8),
            locks: Mutex::new(locks),
            mover_wake: Mutex::new(false),
            mover_pass: Mutex::new(()),
            mover_signal: Condvar::new(),
        });
        // Persist what replay rebuilt, so the replayed journals can go.
        inner.checkpoint(true)?;
        let mut threads = Vec::new();
        let spawn = |name: &str, run: fn(&Inner)| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(&inner))
                .ctx(|| format!("spawning the {name} thread"))
        };
        threads.push(spawn("pybkx-checkpoint", Inner::run_checkpointer)?);
        threads.push(spawn("pybkx-index-merge", Inner::run_merger)?);
        if inner.shared.entrylog.dirs().tier_count() > 1 {
            threads.push(spawn("pybkx-tier-mover", Inner::run_mover)?);
        }
        if let Some(jobs) = ahead_jobs {
            for i in 0..inner.cfg.read_ahead_threads {
                let (reader, jobs) = (inner.clone(), jobs.clone());
                let name = format!("pybkx-read-ahead-{i}");
                let thread = std::thread::Builder::new()
                    .name(name.clone())
                    .spawn(move || reader.run_read_ahead(jobs))
                    .ctx(|| format!("spawning the {name} thread"));
                match thread {
                    Ok(t) => threads.push(t),
                    Err(e) => {
                        // The threads started so far must not outlive a storage never returned.
                        let storage = LedgerStorage {
                            inner,
                            threads: Mutex::new(threads),
                        };
                        drop(storage.close());
                        return Err(e);
                    }
                }
            }
        }
        Ok(LedgerStorage {
            inner,
            threads: Mutex::new(threads),
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
        // Held from the fence check to the journal: an add admitted before a fence is journalled
        // before it, so a fence's durability covers every add it did not refuse (see `fence`).
        let _admission = self.inner.admission_lock(ledger);
        let key = self.inner.writable_key(ledger, master_key, recovery)?;
        let journal = self.inner.journal_for(ledger);
        self.inner
            .stats
            .add_entry_bytes
            .ok
            .record(data.len() as u64);
        self.inner.stats.write_bytes.add(data.len() as u64);
        let op = JournalOp::entry(ledger, entry, data);
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
        // No add of this ledger is between its fence check and the journal meanwhile: every
        // add before the fence record in the journal is applied (readable) when it is durable.
        let _admission = self.inner.admission_lock(ledger);
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
        self.inner.shared.entrylog.dirs().summed_usage()
    }

    /// Every directory the storage writes to, with its file system's usage now, for the disk
    /// checker: ledger directories first (configuration order, each with whether it is marked
    /// full), then the index directory if separate, then the journal directories.
    pub fn directory_usage(&self) -> Result<Vec<DirUsage>> {
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
        dirs::directory_usage(self.inner.shared.entrylog.dirs(), &others)
    }

    /// Marks the ledger directories the disk checker found full (one flag per ledger directory,
    /// in configuration order): they take no new entry log while another directory can.
    pub fn set_full_ledger_dirs(&self, full: &[bool]) {
        self.inner.shared.entrylog.dirs().set_full(full);
    }

    /// Reads one entry; `LAST_ENTRY` reads the highest stored one. An entry read from an
    /// entry log brings the ledger's following entries along in the same I/O (read-ahead).
    pub fn read_entry(&self, ledger: u64, entry: u64) -> Result<Bytes> {
        self.inner.check_open()?;
        let read = self.again_if_a_log_was_removed(
            || {
                self.timed_read(
                    || self.locate(ledger, entry),
                    |(entry, found)| match found {
                        Found::Cached(data) => Ok(data),
                        Found::At(at) => self.inner.shared.entrylog.read(ledger, entry, at),
                        Found::Indexed(at, seg) => {
                            self.read_with_read_ahead(ledger, entry, at, &seg)
                        }
                    },
                )
            },
            |read| matches!(read, Err(StorageError::Corruption(_))),
        );
        match &read {
            Ok(data) => self.count_read(std::slice::from_ref(data)),
            Err(StorageError::Corruption(what)) => self.inner.stats.note_corruption(what),
            Err(_) => {}
        }
        read
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
        let entrylog = &self.inner.shared.entrylog;
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

    /// The entry id (`LAST_ENTRY` resolved) and the ledger's first live segment number.
    fn resolve(&self, ledger: u64, entry: u64) -> Result<(u64, u64)> {
        let idx = self.inner.shared.index.read();
        let st = idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?;
        let entry = if entry == LAST_ENTRY {
            st.last_entry
                .ok_or(StorageError::NoEntry { ledger, entry })?
        } else {
            entry
        };
        Ok((entry, st.since_seq))
    }

    /// Where an entry is: the write cache, the read-ahead cache, or an entry log. `sequential`:
    /// the read takes consecutive entries (not a strided read), so the read-ahead threads may
    /// read on ahead of it.
    fn find(&self, ledger: u64, entry: u64, since: u64, sequential: bool) -> Result<Option<Found>> {
        let shared = &self.inner.shared;
        if let Some(data) = shared.cache.get(ledger, entry) {
            return Ok(Some(Found::Cached(data)));
        }
        if let Some(data) = shared
            .read_ahead
            .take_or_wait(ledger, entry, ahead::READ_AHEAD_WAIT)
        {
            if sequential && self.inner.ahead.is_some() {
                // A scan served by the read-ahead threads never misses while they keep up:
                // this is where it asks for the next window once past the middle of the last.
                self.prefetch(ledger, entry, since, true);
            }
            return Ok(Some(Found::Cached(data)));
        }
        Ok(shared
            .segments
            .find(ledger, entry, since)?
            .map(|(at, seg)| Found::Indexed(at, seg)))
    }

    /// The entry id (`LAST_ENTRY` resolved) and where it is.
    fn locate(&self, ledger: u64, entry: u64) -> Result<(u64, Found)> {
        let (entry, since) = self.resolve(ledger, entry)?;
        let found = self
            .find(ledger, entry, since, true)?
            .ok_or(StorageError::NoEntry { ledger, entry })?;
        Ok((entry, found))
    }

    /// Reads an entry from its entry log together with the ledger's entries that follow it
    /// back to back (up to `dbStorage_readAheadCacheBatchSize`), in one I/O; keeps those for
    /// the reads to come.
    fn read_with_read_ahead(
        &self,
        ledger: u64,
        entry: u64,
        at: Location,
        seg: &index::segment::Segment,
    ) -> Result<Bytes> {
        let shared = &self.inner.shared;
        let mut items = vec![(entry, at)];
        let batch = self.inner.cfg.read_ahead_batch;
        items.extend(self.rest_of_run(
            ledger,
            entry,
            at,
            seg,
            batch.saturating_sub(1),
            at.len as usize,
        )?);
        let after = items.last().map_or(entry, |(e, _)| *e);
        self.prefetch(ledger, after, since_of(&self.inner.shared, ledger), true);
        let generation = shared.read_ahead.generation();
        let (mut entries, err) = shared.entrylog.read_run(ledger, &items);
        if entries.is_empty() {
            return Err(err.unwrap_or(StorageError::NoEntry { ledger, entry }));
        }
        let first = entries.remove(0);
        self.inner
            .keep_read_ahead(ledger, generation, &items[1..], entries);
        Ok(first)
    }

    /// The ledger's entries written back to back after `entry` (at `at`) in the same log, at
    /// most `max` of them and `MAX_READ_AHEAD_BYTES` of data counting `counted` bytes already
    /// taken: they were flushed together, so the same segment indexes them and one I/O reads
    /// them with it.
    fn rest_of_run(
        &self,
        ledger: u64,
        entry: u64,
        at: Location,
        seg: &index::segment::Segment,
        max: usize,
        counted: usize,
    ) -> Result<Vec<(u64, Location)>> {
        let mut rest = Vec::new();
        if max == 0 || entry >= MAX_ID {
            return Ok(rest);
        }
        let mut end = at.offset() + (record::RECORD_HEADER_LEN + at.len as usize) as u64;
        let mut bytes = counted;
        seg.scan_ledger(
            ledger,
            entry + 1,
            &self.inner.shared.segments.cache,
            &mut |e| {
                if e.at.log_id() != at.log_id() || e.at.offset() != end {
                    return false;
                }
                bytes += e.at.len as usize;
                if bytes > MAX_READ_AHEAD_BYTES {
                    return false;
                }
                end += (record::RECORD_HEADER_LEN + e.at.len as usize) as u64;
                rest.push((e.entry, e.at));
                rest.len() < max
            },
        )?;
        Ok(rest)
    }

    /// Reads entries `first, first + stride, ...` as a batch read does: the first entry always
    /// (or its error), then more until a limit or a missing entry. A failure after the first
    /// entry ends the batch early instead of failing it.
    pub fn read_range(&self, ledger: u64, first: u64, limits: RangeLimits) -> Result<Vec<Bytes>> {
        self.inner.check_open()?;
        // Ok((entries, the failure that ended them early)); Err when not even the first was read.
        let read = self.again_if_a_log_was_removed(
            || {
                self.timed_read(
                    || self.locate_range(ledger, first, limits),
                    |items| {
                        // A batch that ends inside a run of the ledger's records reads the rest
                        // of the run with it, for the next batch to take from the read-ahead
                        // cache: each run is then one I/O, not two.
                        let batch = self.inner.cfg.read_ahead_batch;
                        let mut tail = match items.last() {
                            // Entries this small could not fill MIN_TAIL_BYTES: skip the walk.
                            Some((last, Found::Indexed(at, seg)))
                                if limits.stride == 1
                                    && at.len as u64 * batch as u64 >= MIN_TAIL_BYTES =>
                            {
                                self.rest_of_run(ledger, *last, *at, seg, batch, 0)
                                    // Read-ahead is a bonus: an index error here is the next
                                    // read's to report.
                                    .unwrap_or_default()
                            }
                            _ => Vec::new(),
                        };
                        if tail.iter().map(|(_, at)| at.len as u64).sum::<u64>() < MIN_TAIL_BYTES {
                            tail.clear();
                        }
                        let last_on_disk = match (tail.last(), items.last()) {
                            (Some((e, _)), _) => Some(*e),
                            (None, Some((e, Found::At(_) | Found::Indexed(..)))) => Some(*e),
                            _ => None,
                        };
                        if let Some(last) = last_on_disk {
                            let since = since_of(&self.inner.shared, ledger);
                            self.prefetch(ledger, last, since, limits.stride <= 1);
                        }
                        match self.read_found(ledger, items, &tail) {
                            (entries, Some(e)) if entries.is_empty() => Err(e),
                            read => Ok(read),
                        }
                    },
                )
            },
            |read| {
                matches!(
                    read,
                    Err(StorageError::Corruption(_)) | Ok((_, Some(StorageError::Corruption(_))))
                )
            },
        );
        let (entries, err) = read.unwrap_or_else(|e| (Vec::new(), Some(e)));
        if let Some(StorageError::Corruption(what)) = &err {
            self.inner.stats.note_corruption(what);
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

    /// Reads ahead the ledger's entries after `after` that live in entry logs: up to
    /// `PREFETCH_BYTES` over at most `PREFETCH_RUNS` runs of back-to-back records, found through
    /// the index (a block walk per run, no per-entry search). Runs of logs read through the
    /// page cache are hinted to the kernel; runs of logs read directly are handed to the
    /// read-ahead threads (`ahead`), up to `PREFETCH_DIRECT_BYTES` over `PREFETCH_DIRECT_RUNS`
    /// and half the ledger's share of the read-ahead cache; only for `sequential` reads: a strided
    /// read wants one write set's entries, and the threads would read, check and cache the
    /// others for nothing (healing a lost bookie beside a client's adds, that cost the source
    /// bookies a fifth more CPU and the client's p99 rose 2.4–2.75× where it rose 1.8–2.0×).
    ///
    /// A scan calls this on every read; it reads ahead again only once the reads have passed
    /// the middle of the window taken last, continuing where that window ended, so the index
    /// walk and the system calls are paid once per window, not per read.
    fn prefetch(&self, ledger: u64, after: u64, since: u64, sequential: bool) {
        let shared = &self.inner.shared;
        let generation = shared.read_ahead.generation();
        // `start`: where this scan's chain of windows began (a read before it is another scan).
        let (start, from) = {
            let mut hinted = self.inner.prefetched.lock();
            match hinted.get(&ledger) {
                Some(w) if after >= w.start && after < w.trigger => return,
                Some(w) if after >= w.start && after < w.upto => (w.start, w.upto),
                _ => {
                    if hinted.len() >= PREFETCH_LEDGERS {
                        hinted.clear();
                    }
                    (after, after)
                }
            }
        };
        let mut next = from.saturating_add(1);
        let mut last = from;
        // Set by the first run: whether this window goes to the read-ahead threads.
        let mut directly: Option<bool> = None;
        let mut budget = PREFETCH_BYTES;
        let mut runs = PREFETCH_RUNS;
        let mut run: Vec<(u64, Location)> = Vec::new();
        while runs > 0 {
            runs -= 1;
            if budget == 0 || next > MAX_ID || shared.cache.get(ledger, next).is_some() {
                break;
            }
            let Ok(Some((at, seg))) = shared.segments.find(ledger, next, since) else {
                break;
            };
            let direct = *directly.get_or_insert_with(|| {
                let direct = sequential && self.inner.reads_ahead_directly(at.log_id());
                if direct {
                    budget =
                        PREFETCH_DIRECT_BYTES.min(shared.read_ahead.ledger_budget() as u64 / 2);
                    runs = PREFETCH_DIRECT_RUNS - 1;
                }
                direct
            });
            let start = at.offset();
            let mut end = start + (record::RECORD_HEADER_LEN + at.len as usize) as u64;
            run.clear();
            run.push((next, at));
            let scanned = seg.scan_ledger(ledger, next + 1, &shared.segments.cache, &mut |e| {
                if e.at.log_id() != at.log_id() || e.at.offset() != end || end - start >= budget {
                    return false;
                }
                end += (record::RECORD_HEADER_LEN + e.at.len as usize) as u64;
                run.push((e.entry, e.at));
                true
            });
            if scanned.is_err() {
                break;
            }
            if direct {
                let handed = self.inner.read_ahead_run(ledger, generation, &run);
                if handed > 0 {
                    last = run[handed - 1].0;
                }
                if handed < run.len() {
                    break; // the queue is full: the scan reads the rest itself
                }
            } else {
                shared.entrylog.prefetch(at.log_id(), start, end - start);
                last = run[run.len() - 1].0;
            }
            budget = budget.saturating_sub(end - start);
            next = last.saturating_add(1);
        }
        if last > from {
            let window = PrefetchWindow {
                start,
                trigger: from + (last - from) / 2,
                upto: last,
            };
            self.inner.prefetched.lock().insert(ledger, window);
        }
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
        let entrylog = &self.inner.shared.entrylog;
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
            let generation = self.inner.shared.read_ahead.generation();
            run.extend_from_slice(tail);
            let (mut got, err) = entrylog.read_run(ledger, &run);
            if got.len() < wanted {
                out.extend(got);
                return (out, err);
            }
            // A failure in the tail only ends the read-ahead.
            let ahead = got.split_off(wanted);
            out.extend(got);
            self.inner
                .keep_read_ahead(ledger, generation, &tail[..ahead.len()], ahead);
        }
        (out, None)
    }

    /// The entries a range read takes and where they are: the first always (or its error),
    /// then more until a limit or a missing entry.
    fn locate_range(
        &self,
        ledger: u64,
        first: u64,
        limits: RangeLimits,
    ) -> Result<Vec<(u64, Found)>> {
        let (_, since) = self.resolve(ledger, first)?;
        let max_count = match limits.max_count {
            0 => MAX_RANGE_ENTRIES,
            n => n.min(MAX_RANGE_ENTRIES),
        };
        let stride = limits.stride.max(1);
        let cache = &self.inner.shared.segments.cache;
        let mut items: Vec<(u64, Found)> = Vec::new();
        let mut total = 0usize;
        let mut next = Some(first);
        // Whether one more entry of `len` bytes fits (the first always does).
        let mut fits = |items: &Vec<(u64, Found)>, len: usize| {
            total += limits.per_entry_overhead + len;
            items.is_empty() || (items.len() < max_count && total <= limits.max_bytes)
        };
        while let Some(entry) = next {
            if items.len() >= max_count {
                break;
            }
            let Some(found) = self.find(ledger, entry, since, stride == 1)? else {
                if items.is_empty() {
                    return Err(StorageError::NoEntry { ledger, entry });
                }
                break;
            };
            let len = match &found {
                Found::Cached(d) => d.len(),
                Found::At(at) | Found::Indexed(at, _) => at.data_len(),
            };
            if !fits(&items, len) {
                break;
            }
            let walk = match &found {
                Found::Indexed(at, seg) => Some((at.log_id(), seg.clone())),
                _ => None,
            };
            items.push((entry, found));
            next = entry.checked_add(stride);
            let Some((log, seg)) = walk else { continue };
            // The entries that follow were most likely flushed with this one: walk its segment
            // instead of searching every segment for each. (An entry's bytes never change, so a
            // copy indexed elsewhere too is the same entry.) Stop where the segment has a gap,
            // and where it moves on to another entry log: a flush can span two logs, and
            // compaction may since have moved the second one's entries and deleted it, leaving
            // this segment's copies there stale (the next search finds where they are now).
            let mut full = false;
            seg.scan_ledger(ledger, entry.saturating_add(1), cache, &mut |e| {
                let Some(want) = next else { return false };
                if e.at.log_id() != log {
                    return false;
                }
                if e.entry < want {
                    return true; // a strided read steps over the other write-set positions
                }
                if e.entry > want {
                    return false;
                }
                if !fits(&items, e.at.data_len()) {
                    full = true;
                    return false;
                }
                items.push((e.entry, Found::At(e.at)));
                next = want.checked_add(stride);
                true
            })?;
            if full {
                // The batch ends inside this segment's run: the last entry keeps the segment,
                // for the read to take the rest of the run ahead.
                if let Some((_, last)) = items.last_mut() {
                    if let Found::At(at) = *last {
                        *last = Found::Indexed(at, seg);
                    }
                }
                break;
            }
        }
        Ok(items)
    }

    /// Whether the entry is stored, answered from the caches and the index alone (no entry
    /// data is read): BookKeeper's `entryExists`.
    pub fn index_lookup(&self, ledger: u64, entry: u64) -> Result<bool> {
        let (entry, since) = match self.resolve(ledger, entry) {
            Ok(found) => found,
            Err(StorageError::NoLedger(_)) | Err(StorageError::NoEntry { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let shared = &self.inner.shared;
        Ok(shared.cache.get(ledger, entry).is_some()
            || shared.segments.get(ledger, entry, since)?.is_some())
    }

    /// Highest stored entry id of the ledger.
    pub fn last_entry_id(&self, ledger: u64) -> Result<u64> {
        let idx = self.inner.shared.index.read();
        let st = idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?;
        st.last_entry.ok_or(StorageError::NoEntry {
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
        let (_, since) = self.resolve(ledger, 0)?;
        let shared = &self.inner.shared;
        let mut ids: Vec<u64> = shared
            .segments
            .scan_ledger(ledger, 0, usize::MAX, since)?
            .iter()
            .map(|e| e.entry)
            .collect();
        ids.extend(shared.cache.entry_ids(ledger));
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
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

    /// Removes the entry logs none of whose ledgers exists any more (BookKeeper's garbage
    /// collection of fully deleted entry logs); returns (logs removed, bytes freed). Runs by
    /// itself every `gcWaitTime`. Logs that still hold a live ledger's entries are kept.
    pub fn gc_entry_logs(&self) -> Result<(u64, u64)> {
        self.inner.check_open()?;
        self.inner.gc_entry_logs()
    }

    /// Tells the storage how full its ledger directories are (the bookie's disk checker, after
    /// each check). As BookKeeper's garbage collector: while any is almost full (past
    /// `diskUsageWarnThreshold`) the timed major compaction is suspended, while any is full the
    /// minor one too, since compaction writes new entry logs before it frees old ones; with
    /// `isForceGCAllowWhenNoSpace` both run at once instead, at every checkpoint, to win space
    /// back. Removing fully deleted logs (`gcWaitTime`) never stops: it only frees.
    pub fn set_disk_pressure(&self, pressure: DiskPressure) {
        let old = self
            .inner
            .disk_pressure
            .swap(pressure as u8, Ordering::AcqRel);
        if old != pressure as u8 {
            log::info!("ledger directories {pressure:?}: compaction follows (isForceGCAllowWhenNoSpace={})", self.inner.cfg.force_gc_when_no_space);
        }
    }

    /// Runs one pass of the tier mover now (it also runs by itself): every tier past its high
    /// watermark has its coldest entry logs moved down a tier until it is below its low
    /// watermark, and logs read below the top tier move up when `tieredStoragePromoteOnRead`
    /// allows it.
    pub fn move_entry_logs(&self) -> Result<MoveReport> {
        self.inner.check_open()?;
        self.inner.move_pass()
    }

    /// Per entry log: the ledger directory (`current/`) holding it.
    pub fn entry_log_dirs(&self) -> HashMap<u32, PathBuf> {
        let el = &self.inner.shared.entrylog;
        el.placed_logs()
            .into_iter()
            .filter_map(|(id, dir, _)| el.dirs().path_of(dir).map(|p| (id, p.to_path_buf())))
            .collect()
    }

    /// Compacts the entry logs whose live share of bytes is at most `threshold`: their live
    /// entries are written again and the logs removed (BookKeeper's minor compaction at
    /// `minorCompactionThreshold`, major at `majorCompactionThreshold`; runs by itself every
    /// `minorCompactionInterval` / `majorCompactionInterval`).
    pub fn compact(&self, threshold: f64) -> Result<CompactionReport> {
        self.inner.check_open()?;
        self.inner.compact(threshold)
    }

    /// Flushes entry logs and index and records the journal marks; removes covered journals.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.check_open()?;
        self.inner.checkpoint(true)
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
        self.stop_threads();
        for j in &self.inner.journals {
            j.shutdown();
        }
        let result = self
            .inner
            .checkpoint(true)
            .and_then(|_| self.inner.shared.entrylog.close());
        self.inner.locks.lock().clear();
        result
    }
}

impl LedgerStorage {
    /// Tells the storage's threads to stop and waits for them (`closed` is already set).
    fn stop_threads(&self) {
        self.inner.shared.wake.lock().stop = true;
        self.inner.shared.wake_signal.notify_all();
        self.inner.wake_mover();
        if let Some(ahead) = &self.inner.ahead {
            for _ in 0..ahead.threads {
                // Each thread takes one and ends; jobs queued before it are read first.
                let _ = ahead.jobs.send(ahead::AheadJob::Stop);
            }
        }
        for t in self.threads.lock().drain(..) {
            if t.join().is_err() {
                log::error!("a storage thread panicked");
            }
        }
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
    /// Keeps entries read ahead (`read`, in the order of `items`; read when the read-ahead
    /// cache was at `generation`) for the reads to come.
    fn keep_read_ahead(
        &self,
        ledger: u64,
        generation: u64,
        items: &[(u64, Location)],
        read: Vec<Bytes>,
    ) {
        if read.is_empty() {
            return;
        }
        self.stats.read_ahead_entries.add(read.len() as u64);
        self.shared
            .read_ahead
            .put(ledger, generation, items.iter().map(|(e, _)| *e).zip(read));
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed);
        }
        Ok(())
    }

    fn journal_for(&self, ledger: u64) -> &Journal {
        &self.journals[(ledger % self.journals.len() as u64) as usize]
    }

    fn gc_entry_logs(&self) -> Result<(u64, u64)> {
        let _one_at_a_time = self.gc_lock.lock();
        // Chosen while no flush runs (see `compact`): a log a flush has just sealed holds
        // entries its segment does not index yet.
        let (active, maps) = {
            let _no_flush = self.shared.flusher.lock();
            (
                self.shared.entrylog.active_id(),
                self.shared.entrylog.ledgers_maps()?,
            )
        };
        // The newest log on disk is kept: at the next start new logs are numbered after it, so
        // an id is never reused while old index segments may still name it.
        let newest = maps.keys().max().copied();
        let dead: Vec<u32> = {
            let idx = self.shared.index.read();
            maps.iter()
                .filter(|(id, map)| {
                    Some(**id) != active
                        && Some(**id) != newest
                        && map.keys().all(|l| !idx.ledgers.contains_key(l))
                })
                .map(|(id, _)| *id)
                .collect()
        };
        let (mut logs, mut bytes) = (0u64, 0u64);
        for id in dead {
            // Held by a move between tiers: removed by a later pass.
            let Some(_pin) = self.shared.entrylog.pin(id) else {
                continue;
            };
            // A deleted ledger is never read again (a new ledger with its id starts from a
            // later index segment), so its entries' logs can go at once.
            let freed = self.shared.entrylog.remove_log(id)?;
            log::info!(
                "gc: removed entry log {} ({freed} bytes): every ledger in it is deleted",
                entrylog::log_name(id)
            );
            logs += 1;
            bytes += freed;
        }
        self.stats.gc_logs_removed.add(logs);
        self.stats.gc_reclaimed_bytes.add(bytes);
        Ok((logs, bytes))
    }

    /// Checks key and fence for a write and returns the ledger's key, creating the ledger with
    /// `master_key` on its first write.
    fn admission_lock(&self, ledger: u64) -> parking_lot::MutexGuard<'_, ()> {
        self.admission[(ledger % ADMISSION_STRIPES as u64) as usize].lock()
    }

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

/// Moves the locations a version-1 `index.log` kept in memory into the first segment and
/// rewrites the log in the current format. Crash-safe: until the rewrite's rename the old
/// log stays authoritative and the segment is an orphan removed at the next open.
fn migrate_legacy_locations(
    dir: &std::path::Path,
    index: &mut index::Index,
    log: &mut IndexLog,
) -> Result<()> {
    if log.version >= 2 {
        return Ok(());
    }
    let legacy = index.legacy.take().unwrap_or_default();
    let seq = index.next_seq.max(1);
    index.next_seq = seq + 1;
    let mut manifest = Vec::new();
    if !legacy.is_empty() {
        let mut w = SegmentWriter::create(dir, seq)?;
        for ((ledger, entry), at) in &legacy {
            w.push(IndexEntry {
                ledger: *ledger,
                entry: *entry,
                at: *at,
            })?;
        }
        w.finish(true)?;
        fs::sync_dir(dir)?;
        manifest.push(index::SegmentRef { seq, level: 0 });
    }
    log::info!(
        "index: migrated {} locations of {} ledgers from index.log version 1 into segment {seq:x}.idx",
        legacy.len(),
        index.ledgers.len()
    );
    index.manifest = manifest;
    let mut data = Vec::new();
    index.take_delta(true, &mut data);
    index::checkpoint_record(&index.marks, index.next_seq, &index.manifest, &mut data);
    log.rewrite(&data)
}

/// The first segment number a ledger's entries may be in (0 when it is unknown now).
fn since_of(shared: &Shared, ledger: u64) -> u64 {
    shared
        .index
        .read()
        .ledgers
        .get(&ledger)
        .map_or(0, |st| st.since_seq)
}
