//! Opening and closing the storage: the directories locked, the index loaded (a version-1 index
//! migrated), the stores opened, the journals replayed after the last checkpoint, the result
//! checkpointed and the threads started; and at close the threads stopped, the journals
//! drained, a last checkpoint, the directories released. It composes the parts; it never
//! serves a read or a write itself.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};

use super::admission::Admission;
use super::apply::JournalApplier;
use super::checkpoint::Checkpointer;
use super::dirs::{DirKind, LedgerDirs};
use super::entrylog::EntryLogger;
use super::index::segment::IndexEntry;
use super::index::segment_writer::SegmentWriter;
use super::index::segments::SegmentSet;
use super::index::{self, Index, IndexLog};
use super::journal::{self, Applier, Journal, Mark};
use super::lifecycle::Lifecycle;
use super::merge;
use super::read::{run_read_ahead, AheadJob, ReadAheadCache, Reader};
use super::reserve::{self, ReserveKind, SpaceReserve};
use super::stats::StorageStats;
use super::stores::Stores;
use super::writecache::WriteCache;
use crate::config::StorageConfig;
use crate::error::{IoContext, Result, StorageError};
use crate::fs;

/// An open storage: its parts, its threads and its directory locks.
pub(super) struct Parts {
    pub(super) stores: Arc<Stores>,
    pub(super) journals: Arc<[Journal]>,
    pub(super) admission: Admission,
    pub(super) reader: Reader,
    pub(super) checkpointer: Arc<Checkpointer>,
    pub(super) lifecycle: Arc<Lifecycle>,
    pub(super) stats: Arc<StorageStats>,
    /// The directories beside the ledger directories the disk checker looks at: the index
    /// directory if separate, then the journal directories.
    pub(super) other_dirs: Vec<(DirKind, PathBuf)>,
    closed: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Directory locks, released by `close`.
    locks: Mutex<Vec<File>>,
}

/// The `current/` directories of a configuration.
struct Dirs {
    journals: Vec<PathBuf>,
    ledgers: Vec<PathBuf>,
    index: PathBuf,
}

impl Dirs {
    fn of(cfg: &StorageConfig) -> Result<Dirs> {
        let current = |dirs: &[PathBuf]| {
            dirs.iter()
                .map(|d| fs::current_dir(d))
                .collect::<Result<Vec<_>>>()
        };
        Ok(Dirs {
            journals: current(&cfg.journal_dirs)?,
            ledgers: current(&cfg.ledger_dirs)?,
            index: fs::current_dir(cfg.index_dir())?,
        })
    }
}

/// Opens the storage: locks the directories, loads the index, replays the journals after the
/// last checkpoint, checkpoints the result and starts the threads.
pub(super) fn open(cfg: StorageConfig) -> Result<Parts> {
    cfg.validate()?;
    let dirs = Dirs::of(&cfg)?;
    let locks = lock_dirs(&dirs)?;
    let (index_log, index) = load_index(&dirs.index, dirs.journals.len())?;
    let marks = index.marks.clone();
    let stats = Arc::new(StorageStats::default());
    let stores = Arc::new(open_stores(&cfg, dirs.ledgers, &dirs.index, index)?);
    let checkpointer = Arc::new(Checkpointer::new(
        stores.clone(),
        stats.clone(),
        index_log,
        marks.clone(),
        cfg.flush_interval,
        cfg.journal.max_backups,
    ));
    let read_ahead = Arc::new(ReadAheadCache::new(cfg.read_ahead_cache_bytes));
    let applier = Arc::new(JournalApplier::replaying(
        stores.clone(),
        checkpointer.clone(),
        read_ahead.clone(),
    ));
    let next_ids = replay_journals(
        &dirs.journals,
        &marks,
        cfg.journal.skip_replay_invalid_record,
        &applier,
    )?;
    applier.replayed();
    let journals = start_journals(dirs.journals, &cfg, &next_ids, applier)?;
    let threads = if cfg.entry_log_direct_reads {
        cfg.read_ahead_threads
    } else {
        0
    };
    let (reader, ahead_jobs) = Reader::new(
        stores.clone(),
        read_ahead.clone(),
        cfg.read_ahead_batch,
        threads,
        stats.clone(),
    );
    let lifecycle = Arc::new(Lifecycle::new(
        stores.clone(),
        checkpointer.clone(),
        stats.clone(),
        &cfg,
    ));
    let parts = Parts {
        admission: Admission::new(stores.clone(), journals.clone(), stats.clone()),
        stores,
        journals,
        reader,
        checkpointer,
        lifecycle,
        stats,
        other_dirs: other_dirs(&cfg),
        closed: AtomicBool::new(false),
        threads: Mutex::new(Vec::new()),
        locks: Mutex::new(locks),
    };
    // Persist what replay rebuilt, so the replayed journals can go.
    parts.checkpointer.checkpoint(&parts.journals, true)?;
    if let Err(e) = parts.start_threads(&read_ahead, ahead_jobs, threads) {
        // The threads started so far must not outlive a storage never returned.
        drop(parts.close());
        return Err(e);
    }
    Ok(parts)
}

/// Locks every directory once (a directory named twice, or under two names, is locked once):
/// a second storage on any of them fails with `Locked`.
fn lock_dirs(dirs: &Dirs) -> Result<Vec<File>> {
    let mut lock_paths: Vec<PathBuf> = dirs
        .journals
        .iter()
        .chain(&dirs.ledgers)
        .chain(std::iter::once(&dirs.index))
        .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.clone()))
        .collect();
    lock_paths.sort();
    lock_paths.dedup();
    lock_paths.iter().map(|d| fs::lock_dir(d)).collect()
}

/// Loads `index.log` up to its last checkpoint (a version-1 index has its locations moved into
/// a segment first), with one journal mark per journal directory.
fn load_index(dir: &Path, journals: usize) -> Result<(IndexLog, Index)> {
    let (mut index_log, mut index) = IndexLog::open(dir)?;
    if index.marks.is_empty() {
        index.marks = vec![Mark::default(); journals];
    } else if index.marks.len() != journals {
        return Err(StorageError::InvalidArgument(format!(
            "the index was checkpointed with {} journal directories but {journals} are \
             configured; restore the original journalDirectories",
            index.marks.len()
        )));
    }
    migrate_legacy_locations(dir, &mut index, &mut index_log)?;
    Ok((index_log, index))
}

/// Moves the locations a version-1 `index.log` kept in memory into the first segment and
/// rewrites the log in the current format. Crash-safe: until the rewrite's rename the old
/// log stays authoritative and the segment is an orphan removed at the next open.
fn migrate_legacy_locations(dir: &Path, index: &mut Index, log: &mut IndexLog) -> Result<()> {
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
        "index: migrated {} locations of {} ledgers from index.log version 1 into segment \
         {seq:x}.idx",
        legacy.len(),
        index.ledgers.len()
    );
    index.manifest = manifest;
    let mut data = Vec::new();
    index.take_delta(true, &mut data);
    index::checkpoint_record(&index.marks, index.next_seq, &index.manifest, &mut data);
    log.rewrite(&data)
}

/// The write cache, the entry logs of `ledger_dirs` and the segments `index` lists (in
/// `index_dir`).
fn open_stores(
    cfg: &StorageConfig,
    ledger_dirs: Vec<PathBuf>,
    index_dir: &Path,
    index: Index,
) -> Result<Stores> {
    let segments = SegmentSet::open(index_dir, &index.manifest, cfg.index_cache_bytes)?;
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
    Ok(Stores {
        entrylog,
        index: RwLock::new(index),
        cache: WriteCache::new(cfg.write_cache_bytes),
        segments,
        reserve: open_reserve(cfg)?,
        scrub: Default::default(),
    })
}

/// Makes the space reserve of every directory the storage writes to (`diskReservedSpaceMB`,
/// or its derived size per directory; see `reserve`).
fn open_reserve(cfg: &StorageConfig) -> Result<SpaceReserve> {
    if cfg.disk_reserve_bytes == Some(0) {
        return Ok(SpaceReserve::disabled());
    }
    let ledger_like = cfg.ledger_dirs.iter().chain(&cfg.index_dirs);
    let dirs = ledger_like
        .map(|d| (ReserveKind::Ledger, d))
        .chain(cfg.journal_dirs.iter().map(|d| (ReserveKind::Journal, d)));
    let basis = reserve::ReserveBasis {
        log_size_limit: cfg.log_size_limit,
        write_cache: cfg.write_cache_bytes as u64,
        journal_prealloc: cfg.journal.prealloc_size,
    };
    let mut out = Vec::new();
    for (kind, dir) in dirs {
        let total = fs::disk_usage(dir)?.total_bytes;
        let bytes = match cfg.disk_reserve_bytes {
            // A configured size too is kept to an eighth of the file system: a reserve that
            // fills a small disk would hold the bookie read-only for good.
            Some(bytes) => reserve::capped(bytes, total),
            None => reserve::derived_size(kind, total, basis),
        };
        out.push((kind, dir.clone(), bytes));
    }
    Ok(SpaceReserve::open(out))
}

/// Replays each journal directory from its mark into `applier`; returns, per directory, the
/// id its next journal file takes.
fn replay_journals(
    dirs: &[PathBuf],
    marks: &[Mark],
    skip_invalid: bool,
    applier: &JournalApplier,
) -> Result<Vec<u64>> {
    let mut next_ids = Vec::with_capacity(dirs.len());
    for (j, dir) in dirs.iter().enumerate() {
        let end = journal::replay(dir, marks[j], skip_invalid, |ops, mark| {
            applier.apply(j, ops, mark)
        })?;
        next_ids.push(end.next_file_id);
    }
    Ok(next_ids)
}

/// Starts a journal (its writer and sync threads) on each directory.
fn start_journals(
    dirs: Vec<PathBuf>,
    cfg: &StorageConfig,
    next_ids: &[u64],
    applier: Arc<JournalApplier>,
) -> Result<Arc<[Journal]>> {
    let applier: Arc<dyn Applier> = applier;
    let journals = dirs
        .into_iter()
        .enumerate()
        .map(|(j, dir)| Journal::start(j, dir, cfg.journal.clone(), next_ids[j], applier.clone()))
        .collect::<Result<Vec<_>>>()?;
    Ok(journals.into())
}

/// The index directory if separate from the ledger directories, then the journal directories.
fn other_dirs(cfg: &StorageConfig) -> Vec<(DirKind, PathBuf)> {
    let mut others: Vec<(DirKind, PathBuf)> = Vec::new();
    if !cfg.index_dirs.is_empty() {
        others.push((DirKind::Index, cfg.index_dir().to_path_buf()));
    }
    others.extend(
        cfg.journal_dirs
            .iter()
            .map(|d| (DirKind::Journal, d.clone())),
    );
    others
}

impl Parts {
    /// Starts the checkpoint, merge and lifecycle threads and `threads` read-ahead threads
    /// reading `ahead_jobs` into `read_ahead`.
    fn start_threads(
        &self,
        read_ahead: &Arc<ReadAheadCache>,
        ahead_jobs: Option<crossbeam_channel::Receiver<AheadJob>>,
        threads: usize,
    ) -> Result<()> {
        let (checkpointer, journals) = (self.checkpointer.clone(), self.journals.clone());
        self.spawn("pybkx-checkpoint".into(), move || {
            checkpointer.run_checkpoints(&journals)
        })?;
        let (stores, checkpointer, stats) = (
            self.stores.clone(),
            self.checkpointer.clone(),
            self.stats.clone(),
        );
        self.spawn("pybkx-index-merge".into(), move || {
            merge::run_merges(&stores, &checkpointer, &stats)
        })?;
        if self.lifecycle.has_timed_jobs() {
            let lifecycle = self.lifecycle.clone();
            self.spawn("pybkx-lifecycle".into(), move || lifecycle.run_scheduler())?;
        }
        if self.lifecycle.has_scrubber() {
            let lifecycle = self.lifecycle.clone();
            self.spawn("pybkx-scrub".into(), move || lifecycle.run_scrubber())?;
        }
        if let Some(jobs) = ahead_jobs {
            for i in 0..threads {
                let (stores, cache, stats, jobs) = (
                    self.stores.clone(),
                    read_ahead.clone(),
                    self.stats.clone(),
                    jobs.clone(),
                );
                self.spawn(format!("pybkx-read-ahead-{i}"), move || {
                    run_read_ahead(&stores.entrylog, &cache, &stats.read_ahead_entries, jobs)
                })?;
            }
        }
        Ok(())
    }

    fn spawn(&self, name: String, run: impl FnOnce() + Send + 'static) -> Result<()> {
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(run)
            .ctx(|| format!("spawning the {name} thread"))?;
        self.threads.lock().push(thread);
        Ok(())
    }

    /// Fails with `Closed` once the storage is closing.
    pub(super) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed);
        }
        Ok(())
    }

    /// Completes queued writes, checkpoints, seals the active entry log and releases the
    /// directories. Idempotent.
    pub(super) fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_threads();
        for j in self.journals.iter() {
            j.shutdown();
        }
        let close = || {
            self.checkpointer
                .checkpoint(&self.journals, true)
                .and_then(|_| self.stores.entrylog.close())
        };
        // A full disk: the last checkpoint and seal write into the space reserve.
        let result = match close() {
            Err(e) if self.stores.reserve.release_on_no_space(&e) => close(),
            other => other,
        };
        if result.is_ok() {
            self.stores.reserve.remove_at_close();
        }
        self.locks.lock().clear();
        result
    }

    /// Tells the storage's threads to stop and waits for them (`closed` is already set).
    fn stop_threads(&self) {
        self.checkpointer.stop();
        self.lifecycle.stop();
        self.reader.stop_threads();
        for t in self.threads.lock().drain(..) {
            if t.join().is_err() {
                log::error!("a storage thread panicked");
            }
        }
    }

    /// A crash as far as the files can tell: the threads stop where they are, nothing is
    /// flushed or checkpointed, buffered entry-log bytes are lost, the locks are released.
    #[cfg(test)]
    pub(super) fn crash(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.stop_threads();
        for j in self.journals.iter() {
            j.shutdown();
        }
        self.locks.lock().clear();
    }
}
