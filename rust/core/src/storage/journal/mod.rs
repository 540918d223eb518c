//! The journal: every mutation is appended here and made durable (group commit, fdatasync)
//! before it is applied to entry logs and index and acknowledged. It never reads entry logs.
//!
//! One journal per journal directory, each with one thread that owns its files. Producers
//! enqueue requests on a bounded channel; the thread batches them into groups following
//! BookKeeper's knobs (`journalMaxGroupWaitMSec`, `journalBufferedWritesThreshold`,
//! `journalBufferedEntriesThreshold`, `journalFlushWhenQueueEmpty`), writes a group with as few
//! syscalls as possible, syncs it once, hands it to the [`Applier`] and then completes callers.

mod file;
mod op;
mod replay;
mod syncer;
mod writer;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::queue::{bounded, Gauge, Sender};
use parking_lot::Mutex;

pub use file::{journal_path, list_journal_ids};
pub use op::{entry_crc, JournalOp};
pub use replay::{replay, scan_file, RecordInfo, ReplayEnd};

use crate::config::JournalConfig;
use crate::done::Done;
use crate::error::{IoContext, Result, StorageError};
use crate::fs;
use crate::metrics::{Counter, Metric, OpStats, Unit};
use file::{JournalFile, OpenJournal};
use syncer::Syncer;
use writer::Writer;

/// A position in a journal directory: everything before it has been applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark {
    pub file_id: u64,
    pub offset: u64,
}

/// Receives every durable group, in journal order, before its callers are completed.
pub trait Applier: Send + Sync + 'static {
    /// Applies `ops`; `mark` is the journal position just after them.
    fn apply(&self, journal: usize, ops: &[JournalOp], mark: Mark) -> Result<()>;
}

/// Called exactly once with the outcome of a request (never called if `submit` returned an error).
pub type Completion = Done<Result<()>>;

/// The metrics of one journal, under BookKeeper's names (`JournalStats`, scope
/// `bookie_journal`; the storage labels them with `journalIndex`) and pybkx's own.
#[derive(Debug)]
pub struct JournalStats {
    /// Entries: enqueued -> durable and applied (or failed).
    pub add_entry: OpStats,
    /// Requests: enqueued -> taken by the journal thread.
    pub queue_latency: OpStats,
    /// Writing one group to the file.
    pub flush_latency: OpStats,
    /// Forming one group: its first request taken -> the group handed to the sync thread.
    pub process_time: OpStats,
    /// A group handed to the sync thread -> taken by it.
    pub force_write_enqueue: OpStats,
    /// One fdatasync.
    pub sync: OpStats,
    /// Creating a journal file.
    pub creation: OpStats,
    /// Entries and bytes of each group.
    pub force_write_batch_entries: OpStats,
    pub force_write_batch_bytes: OpStats,
    /// Entries made durable by one sync.
    pub force_write_grouping: OpStats,
    /// Why groups ended: the group wait passed, the size thresholds, the queue ran empty.
    pub flush_max_wait: Counter,
    pub flush_max_outstanding_bytes: Counter,
    pub flush_empty_queue: Counter,
    /// Entry payload bytes journalled.
    pub write_bytes: Counter,
    pub entries: Counter,
    pub records: Counter,
    pub bytes: Counter,
    pub groups: Counter,
    pub syncs: Counter,
    pub rollovers: Counter,
    /// Writes, syncs or applies that failed (a full disk, say), and recoveries from them.
    pub failures: Counter,
    pub recoveries: Counter,
}

impl Default for JournalStats {
    fn default() -> Self {
        JournalStats {
            add_entry: OpStats::latency(),
            queue_latency: OpStats::latency(),
            flush_latency: OpStats::latency(),
            process_time: OpStats::latency(),
            force_write_enqueue: OpStats::latency(),
            sync: OpStats::latency(),
            creation: OpStats::latency(),
            force_write_batch_entries: OpStats::new(Unit::Count),
            force_write_batch_bytes: OpStats::new(Unit::Bytes),
            force_write_grouping: OpStats::new(Unit::Count),
            flush_max_wait: Counter::default(),
            flush_max_outstanding_bytes: Counter::default(),
            flush_empty_queue: Counter::default(),
            write_bytes: Counter::default(),
            entries: Counter::default(),
            records: Counter::default(),
            bytes: Counter::default(),
            groups: Counter::default(),
            syncs: Counter::default(),
            rollovers: Counter::default(),
            failures: Counter::default(),
            recoveries: Counter::default(),
        }
    }
}

crate::named_stats!(JournalStats {
    add_entry => "bookie_journal_JOURNAL_ADD_ENTRY",
    queue_latency => "bookie_journal_JOURNAL_QUEUE_LATENCY",
    flush_latency => "bookie_journal_JOURNAL_FLUSH_LATENCY",
    process_time => "bookie_journal_JOURNAL_PROCESS_TIME_LATENCY",
    force_write_enqueue => "bookie_journal_JOURNAL_FORCE_WRITE_ENQUEUE",
    sync => "bookie_journal_JOURNAL_SYNC",
    creation => "bookie_journal_JOURNAL_CREATION_LATENCY",
    force_write_batch_entries => "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES",
    force_write_batch_bytes => "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES",
    force_write_grouping => "bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_TOTAL",
    flush_max_wait => "bookie_journal_JOURNAL_NUM_FLUSH_MAX_WAIT",
    flush_max_outstanding_bytes => "bookie_journal_JOURNAL_NUM_FLUSH_MAX_OUTSTANDING_BYTES",
    flush_empty_queue => "bookie_journal_JOURNAL_NUM_FLUSH_EMPTY_QUEUE",
    write_bytes => "bookie_journal_JOURNAL_WRITE_BYTES",
    entries => "pybkx_journal_entries",
    records => "pybkx_journal_records",
    bytes => "pybkx_journal_bytes",
    groups => "pybkx_journal_groups",
    syncs => "pybkx_journal_syncs",
    rollovers => "pybkx_journal_rollovers",
    failures => "pybkx_journal_failures",
    recoveries => "pybkx_journal_recoveries",
});

struct Request {
    op: JournalOp,
    key: Option<Arc<[u8]>>,
    enqueued: Instant,
    done: Completion,
}

enum Msg {
    Req(Request),
    Shutdown,
}

/// Handle of one running journal.
pub struct Journal {
    tx: Sender<Msg>,
    /// The sync thread's queue, only to read its length.
    sync_queue: Gauge<Group>,
    thread: Mutex<Option<JoinHandle<()>>>,
    dir: PathBuf,
    pub stats: Arc<JournalStats>,
    /// Old files being removed in the background, one batch at a time.
    remover: Mutex<Option<JoinHandle<Result<()>>>>,
    /// Set on shutdown: a background removal stops between steps.
    stop_removal: Arc<AtomicBool>,
    /// Which old files the writer may reuse, shared with removal.
    old_files: Arc<Mutex<OldFiles>>,
}

/// The journal files a checkpoint no longer needs, as the writer (reusing one at a rollover,
/// `journalReuseFiles`) and removal (cutting those beyond `journalMaxBackups`) share them.
/// Taken by the writer for the whole reuse of a file and by removal while it picks its files,
/// so that the two never take the same file.
#[derive(Default)]
struct OldFiles {
    /// Files with lower ids are covered by a durable checkpoint: their records are in the
    /// entry logs and the index.
    mark_file_id: u64,
    /// Files a removal has taken and not yet finished with.
    removing: HashSet<u64>,
}

impl OldFiles {
    /// The file the writer should reuse: the oldest covered by the checkpoint, not being
    /// removed, and at most `max_len` bytes long (so the files kept as backups are the pool, as
    /// in BookKeeper). A longer file, written under a larger `journalMaxSizeMB`, would keep its
    /// size for ever: it is left to be removed once newer backups push it out.
    fn reusable(&self, dir: &std::path::Path, ids: &[u64], max_len: u64) -> Option<u64> {
        ids.iter().copied().find(|id| {
            *id < self.mark_file_id
                && !self.removing.contains(id)
                && std::fs::metadata(journal_path(dir, *id)).is_ok_and(|m| m.len() <= max_len)
        })
    }
}

/// A journal's current failure, shared by its writer and sync threads.
///
/// A failed write keeps its group (unacknowledged) in the writer, which retries it in place
/// every [`RETRY_INTERVAL`] until it succeeds (space came back): only then is it synced,
/// applied and acknowledged. A failed sync poisons its file: the groups of that file are
/// answered with the error (never acknowledged) and the writer moves to a new file. While a
/// failure stands, new requests are refused at once with it. A failure of the sync thread
/// itself (`fatal`) is sticky.
#[derive(Default)]
struct Failure(Mutex<FailState>);

#[derive(Default)]
struct FailState {
    error: Option<StorageError>,
    /// The newest journal file a sync failed on: its groups are never acknowledged.
    poisoned_file: Option<u64>,
    fatal: bool,
    /// Bumped on every failure: the writer then journals ledger keys again, since a key record
    /// may have been in a group that never became durable.
    epoch: u64,
}

impl Failure {
    fn get(&self) -> Option<StorageError> {
        self.0.lock().error.clone()
    }
    fn set(&self, e: StorageError) {
        let mut st = self.0.lock();
        st.epoch += 1;
        st.error.get_or_insert(e);
    }
    fn set_fatal(&self, e: StorageError) {
        let mut st = self.0.lock();
        st.fatal = true;
        st.epoch += 1;
        st.error = Some(e);
    }
    fn is_fatal(&self) -> bool {
        self.0.lock().fatal
    }
    /// A sync of `file_id` failed.
    fn set_sync_failed(&self, file_id: u64, e: StorageError) {
        let mut st = self.0.lock();
        st.epoch += 1;
        st.poisoned_file = Some(st.poisoned_file.map_or(file_id, |f| f.max(file_id)));
        st.error.get_or_insert(e);
    }
    fn poisoned_file(&self) -> Option<u64> {
        self.0.lock().poisoned_file
    }
    fn epoch(&self) -> u64 {
        self.0.lock().epoch
    }
    /// Counts a failure that needs no retry (an apply error): keys are journalled again.
    fn bump(&self) {
        self.0.lock().epoch += 1;
    }
    /// The writer recovered; the poisoned file stays poisoned for the sync thread.
    fn clear(&self) {
        let mut st = self.0.lock();
        if !st.fatal {
            st.error = None;
        }
    }
}

/// How often a journal with a failed write or sync tries again.
const RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// A group written to the file, waiting for its sync.
struct Group {
    file: Arc<JournalFile>,
    end: u64,
    /// Direct mode: the group's records, for the sync thread to write before it syncs.
    chunks: Vec<file::Chunk>,
    ops: Vec<JournalOp>,
    dones: Vec<Completion>,
    /// Per completion: when its request was enqueued, and whether it is an entry.
    enqueued: Vec<(Instant, bool)>,
    /// Entries in the group.
    entries: u64,
    /// When the group was handed to the sync thread (None with metrics off).
    handed: Option<Instant>,
}

/// Bounds the groups written but not yet synced; the writer waits when the sync thread lags.
const MAX_GROUPS_IN_FLIGHT: usize = 64;

impl Journal {
    /// Starts a journal over `dir` writing new files from `first_file_id`.
    pub fn start(
        index: usize,
        dir: PathBuf,
        cfg: JournalConfig,
        first_file_id: u64,
        applier: Arc<dyn Applier>,
    ) -> Result<Journal> {
        let mut cfg = cfg;
        if cfg.max_group_wait.is_zero() {
            // As in BookKeeper: with no group wait, the only flush trigger left is an empty queue.
            cfg.flush_when_queue_empty = true;
        }
        let file = OpenJournal::create(
            &dir,
            first_file_id,
            cfg.prealloc_size,
            cfg.direct_io,
            cfg.write_buffer_size,
        )?;
        let old_files = Arc::new(Mutex::new(OldFiles::default()));
        let (tx, rx) = bounded(cfg.queue_size);
        let (to_sync, sync_rx) = bounded(MAX_GROUPS_IN_FLIGHT);
        let stats = Arc::new(JournalStats::default());
        let failure = Arc::new(Failure::default());
        let sync_queue = sync_rx.gauge();
        let syncer = Syncer {
            index,
            sync_data: cfg.sync_data,
            remove_from_page_cache: cfg.remove_from_page_cache,
            page_cache_flush_interval: cfg.page_cache_flush_interval,
            rx: sync_rx,
            applier,
            failure: failure.clone(),
            stats: stats.clone(),
            unsynced: None,
            last_sync: std::time::Instant::now(),
        };
        let syncer = std::thread::Builder::new()
            .name(format!("pybkx-journal-sync-{index}"))
            .spawn(move || syncer.run())
            .ctx(|| "spawning journal sync thread".to_string())?;
        let writer = Writer {
            dir: dir.clone(),
            cfg,
            rx,
            to_sync: Some(to_sync),
            syncer: Some(syncer),
            old_files: old_files.clone(),
            failure,
            stats: stats.clone(),
            file,
            chunks: Vec::new(),
            ops: Vec::new(),
            dones: Vec::new(),
            enqueued: Vec::new(),
            group_started: None,
            clock: None,
            since_clock: 0,
            keyed: HashSet::new(),
            keyed_epoch: 0,
            held: None,
            group_start: 0,
            last_retry: None,
            oldest: None,
            entries_since_flush: 0,
            bytes_since_flush: 0,
            stopping: false,
        };
        let thread = std::thread::Builder::new()
            .name(format!("pybkx-journal-{index}"))
            .spawn(move || writer.run())
            .ctx(|| "spawning journal thread".to_string())?;
        Ok(Journal {
            tx,
            sync_queue,
            thread: Mutex::new(Some(thread)),
            dir,
            stats,
            remover: Mutex::new(None),
            stop_removal: Arc::new(AtomicBool::new(false)),
            old_files,
        })
    }

    /// Enqueues a request; blocks while the queue is full (`journalQueueSize`).
    /// `key` is the ledger's master key, journalled once per ledger before its first record.
    pub fn submit(&self, op: JournalOp, key: Option<Arc<[u8]>>, done: Completion) -> Result<()> {
        let req = Request {
            op,
            key,
            enqueued: Instant::now(),
            done,
        };
        self.tx
            .send(Msg::Req(req))
            .map_err(|_| StorageError::Closed)
    }

    /// Like [`submit`](Self::submit) but never blocks: with the queue full it returns
    /// `QueueFull` and drops `done` uncalled.
    pub fn try_submit(
        &self,
        op: JournalOp,
        key: Option<Arc<[u8]>>,
        done: Completion,
    ) -> Result<()> {
        let req = Request {
            op,
            key,
            enqueued: Instant::now(),
            done,
        };
        self.tx.try_send(Msg::Req(req)).map_err(|e| match e {
            crate::queue::TrySendError::Full(_) => StorageError::QueueFull,
            crate::queue::TrySendError::Disconnected(_) => StorageError::Closed,
        })
    }

    /// This journal's metrics, queue lengths included (BookKeeper types those as counters).
    pub fn export(&self, out: &mut Vec<Metric>) {
        crate::metrics::Export::export(&*self.stats, out);
        out.push(Metric::counter(
            "bookie_journal_JOURNAL_QUEUE_SIZE",
            self.tx.gauge().len() as u64,
        ));
        out.push(Metric::counter(
            "bookie_journal_JOURNAL_FORCE_WRITE_QUEUE_SIZE",
            self.sync_queue.len() as u64,
        ));
    }

    /// Writes, syncs and completes everything queued, then stops the threads. Idempotent.
    pub fn shutdown(&self) {
        let Some(thread) = self.thread.lock().take() else {
            return;
        };
        let _ = self.tx.send(Msg::Shutdown);
        if thread.join().is_err() {
            log::error!("journal thread for {} panicked", self.dir.display());
        }
        self.stop_removal.store(true, Ordering::Release);
        if let Some(remover) = self.remover.lock().take() {
            self.finish_removal(remover);
        }
    }

    /// Removes journal files older than `mark_file_id`, keeping the newest `keep` of them;
    /// returns how many it took. Each is cut down in steps before it is unlinked (a large file
    /// unlinked at once holds up every sync on the file system, the journal's own included).
    /// `mark_file_id` must be durable: with `journalReuseFiles` the files it keeps may be
    /// overwritten from then on.
    ///
    /// With `wait` the removal is done before this returns (explicit checkpoints, close).
    /// Without, a background thread does it (the timed checkpoints: the checkpoint thread also
    /// flushes the write cache, and about 0.7 s per 2 GiB file there would hold up adds);
    /// while an earlier batch is still being removed, none is started (0 is returned) and the
    /// next checkpoint takes these files. Errors of a background batch are logged; its files
    /// stay and a later checkpoint removes them.
    pub fn remove_old_files(&self, mark_file_id: u64, keep: usize, wait: bool) -> Result<usize> {
        let mut remover = self.remover.lock();
        if let Some(running) = remover.take() {
            if !wait && !running.is_finished() {
                *remover = Some(running);
                drop(self.cover(mark_file_id));
                return Ok(0);
            }
            self.finish_removal(running);
        }
        let doomed: Vec<u64> = {
            let mut old_files = self.cover(mark_file_id);
            let old: Vec<u64> = list_journal_ids(&self.dir)?
                .into_iter()
                .filter(|id| *id < old_files.mark_file_id)
                .collect();
            let doomed = old[..old.len().saturating_sub(keep)].to_vec();
            old_files.removing.extend(&doomed);
            doomed
        };
        if doomed.is_empty() {
            return Ok(0);
        }
        let count = doomed.len();
        let (dir, stop, old_files) = (
            self.dir.clone(),
            self.stop_removal.clone(),
            self.old_files.clone(),
        );
        let remove = move |stop: Option<&AtomicBool>| {
            let paths: Vec<PathBuf> = doomed.iter().map(|id| journal_path(&dir, *id)).collect();
            let removed = remove_files(&dir, &paths, stop);
            let mut old_files = old_files.lock();
            for id in &doomed {
                old_files.removing.remove(id);
            }
            removed
        };
        if wait {
            // Under the lock, so that no background batch cuts the same files meanwhile.
            remove(None)?;
            return Ok(count);
        }
        let spawned = std::thread::Builder::new()
            .name("pybkx-journal-removal".to_string())
            .spawn(move || remove(Some(&stop)));
        match spawned {
            Ok(handle) => *remover = Some(handle),
            Err(e) => {
                log::warn!(
                    "journal {}: no thread to remove old files: {e}",
                    self.dir.display()
                );
                // The closure and the ids it held are gone: the files are free to take again.
                self.old_files.lock().removing.clear();
            }
        }
        Ok(count)
    }

    /// Records that files older than `mark_file_id` are covered by a durable checkpoint.
    fn cover(&self, mark_file_id: u64) -> parking_lot::MutexGuard<'_, OldFiles> {
        let mut old_files = self.old_files.lock();
        old_files.mark_file_id = old_files.mark_file_id.max(mark_file_id);
        old_files
    }

    fn finish_removal(&self, remover: JoinHandle<Result<()>>) {
        match remover.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                log::warn!("removing old journal files: {e} (a later checkpoint retries)")
            }
            Err(_) => log::error!("journal file removal for {} panicked", self.dir.display()),
        }
    }
}

/// Removes `paths` (old files of the journal in `dir`) in steps, then syncs `dir`.
fn remove_files(dir: &std::path::Path, paths: &[PathBuf], stop: Option<&AtomicBool>) -> Result<()> {
    for path in paths {
        if !fs::remove_file_in_steps(path, fs::FREE_STEP, fs::FREE_PAUSE, stop)? {
            break;
        }
    }
    fs::sync_dir(dir)
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::sync::mpsc;
    use std::time::Duration;

    #[derive(Default)]
    struct Collect(Mutex<Vec<(usize, Mark)>>);
    impl Applier for Collect {
        fn apply(&self, _journal: usize, ops: &[JournalOp], mark: Mark) -> Result<()> {
            self.0.lock().push((ops.len(), mark));
            Ok(())
        }
    }

    fn cfg() -> JournalConfig {
        crate::testing::journal_config()
    }

    fn add(j: &Journal, ledger: u64, entry: u64, data: &[u8]) -> mpsc::Receiver<Result<()>> {
        let (tx, rx) = mpsc::channel();
        j.submit(
            JournalOp::entry(ledger, entry, Bytes::copy_from_slice(data)),
            Some(Arc::from(&b"key"[..])),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        )
        .unwrap();
        rx
    }

    #[test]
    fn groups_are_acknowledged_and_replayed_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let applier = Arc::new(Collect::default());
        let j = Journal::start(0, dir.path().into(), cfg(), 1, applier.clone()).unwrap();
        let waits: Vec<_> = (0..100).map(|e| add(&j, 7, e, b"data")).collect();
        for w in waits {
            w.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
        }
        j.shutdown();
        // One key record plus 100 entries, in fewer groups than entries.
        let applied = applier.0.lock().clone();
        assert_eq!(applied.iter().map(|(n, _)| n).sum::<usize>(), 101);
        assert!(applied.len() < 100);
        assert_eq!(j.stats.entries.get(), 100);

        let mut seen = Vec::new();
        let end = replay(dir.path(), Mark::default(), false, |ops, _| {
            seen.extend(ops.iter().cloned());
            Ok(())
        })
        .unwrap();
        assert_eq!(end.next_file_id, 2);
        assert!(matches!(seen[0], JournalOp::Key { ledger: 7, .. }));
        for (i, op) in seen[1..].iter().enumerate() {
            assert!(matches!(op, JournalOp::Entry { entry, .. } if *entry == i as u64));
        }
    }

    /// Timed checkpoints remove old files in the background, one batch at a time; explicit
    /// ones before they return; shutdown joins the background batch (the stop between steps
    /// is `fs::remove_file_in_steps`'s test).
    #[test]
    fn old_files_are_removed_in_the_background_one_batch_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let (j, applier) = journal_of_small_files(dir.path(), 40);
        let files = || list_journal_ids(dir.path()).unwrap();
        let mark = applier.0.lock().last().unwrap().1;
        let before = files().len();
        assert!(before > 8, "{before} files");
        // Stand-in for a batch still being cut down: a thread that has not finished.
        let (release, held) = mpsc::channel::<()>();
        *j.remover.lock() = Some(std::thread::spawn(move || {
            let _ = held.recv();
            Ok(())
        }));
        assert_eq!(j.remove_old_files(mark.file_id, 2, false).unwrap(), 0);
        assert_eq!(files().len(), before);
        release.send(()).unwrap();
        while !j.remover.lock().as_ref().unwrap().is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let doomed = j.remove_old_files(mark.file_id, 2, false).unwrap();
        assert_eq!(doomed, (mark.file_id - 1) as usize - 2);
        let deadline = Instant::now() + Duration::from_secs(10);
        while files().len() > before - doomed {
            assert!(Instant::now() < deadline, "still {:?}", files());
            std::thread::sleep(Duration::from_millis(5));
        }
        // Explicit: done on return.
        assert_eq!(j.remove_old_files(mark.file_id, 0, true).unwrap(), 2);
        assert_eq!(files().first(), Some(&mark.file_id));
        j.shutdown();
        assert!(j.remover.lock().is_none());
    }

    /// `journalSyncData=false`: a steady stream of adds (a group every few milliseconds, never
    /// a pause as long as the interval) still has its file synced every
    /// `journalPageCacheFlushIntervalMSec`, not only when the file fills up.
    #[test]
    fn unsynced_journals_are_synced_every_interval_under_steady_adds() {
        let dir = tempfile::tempdir().unwrap();
        let applier = Arc::new(Collect::default());
        let c = JournalConfig {
            sync_data: false,
            page_cache_flush_interval: Duration::from_millis(50),
            ..crate::testing::journal_config()
        };
        let j = Journal::start(0, dir.path().into(), c, 1, applier).unwrap();
        let started = std::time::Instant::now();
        let mut e = 0;
        while started.elapsed() < Duration::from_millis(800) {
            add(&j, 3, e, b"data").recv().unwrap().unwrap();
            e += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        // About 16 intervals went by; a timer restarted by each group would have synced none.
        let syncs = j.stats.syncs.get();
        j.shutdown();
        assert!(
            syncs >= 5,
            "{syncs} syncs in 800 ms of adds at a 50 ms interval"
        );
    }

    /// A journal of 4 KiB files holding `entries` acknowledged 1,000-byte entries of ledger 1.
    fn journal_of_small_files(dir: &std::path::Path, entries: u64) -> (Journal, Arc<Collect>) {
        let applier = Arc::new(Collect::default());
        let c = JournalConfig {
            max_file_size: 4096,
            ..crate::testing::journal_config()
        };
        let j = Journal::start(0, dir.into(), c, 1, applier.clone()).unwrap();
        for e in 0..entries {
            add(&j, 1, e, &[e as u8; 1000]).recv().unwrap().unwrap();
        }
        (j, applier)
    }

    #[test]
    fn replay_starts_at_the_mark_and_rollover_creates_new_files() {
        let dir = tempfile::tempdir().unwrap();
        let (j, applier) = journal_of_small_files(dir.path(), 20);
        j.shutdown();
        let ids = list_journal_ids(dir.path()).unwrap();
        assert!(ids.len() > 3, "expected rollovers, got {ids:?}");
        let mark_after_9 = applier.0.lock()[9].1;
        let mut entries = Vec::new();
        replay(dir.path(), mark_after_9, false, |ops, _| {
            for op in ops {
                if let JournalOp::Entry { entry, .. } = op {
                    entries.push(*entry);
                }
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(entries, (10..20).collect::<Vec<_>>());
        assert_eq!(
            j.remove_old_files(mark_after_9.file_id, 0, true).unwrap(),
            (mark_after_9.file_id - 1) as usize
        );
    }

    /// Entries of sizes that end groups anywhere in a block, with writes that fail (a full
    /// disk) now and then: every acknowledged entry replays with its bytes, in order. Through
    /// the page cache a failed write is held and written again, so every entry is acknowledged;
    /// in direct mode (the sync thread writes, each write rewriting the partial last block) it
    /// fails its groups, as a failed sync does, and the journal goes on in a new file.
    fn acknowledged_entries_replay_after_failed_writes(direct_io: bool) {
        let dir = tempfile::tempdir().unwrap();
        let applier = Arc::new(Collect::default());
        let c = JournalConfig {
            direct_io,
            // In direct mode each failed write moves the journal to a new file; a rollover for
            // size could also race the sync thread's write for the one injected failure.
            max_file_size: if direct_io { 64 << 20 } else { 256 << 10 },
            ..crate::testing::journal_config()
        };
        let j = Journal::start(0, dir.path().into(), c, 1, applier.clone()).unwrap();
        let data = |e: u64| vec![(e % 251) as u8; 1 + (e as usize * 7919) % 20_000];
        let mut acked = Vec::new();
        let mut refused = 0;
        for e in 0..120u64 {
            let fault = (e % 40 == 17).then(|| {
                fs::inject_fault(fs::Fault {
                    path_prefix: dir.path().to_path_buf(),
                    ops: vec![fs::Op::Write],
                    action: fs::FaultAction::Fail(libc::ENOSPC),
                    times: Some(1),
                })
            });
            // A few at once, so groups hold several entries.
            let ids: Vec<u64> = (0..3).map(|k| e * 3 + k).collect();
            let waits: Vec<_> = ids.iter().map(|id| add(&j, 5, *id, &data(*id))).collect();
            let refused_before = refused;
            for (id, w) in ids.into_iter().zip(waits) {
                match w.recv_timeout(Duration::from_secs(10)).unwrap() {
                    Ok(()) => acked.push(id),
                    Err(_) => refused += 1,
                }
            }
            if let Some(id) = fault {
                fs::remove_fault(id);
            }
            if refused > refused_before {
                // Refused while the journal moves to a new file (a retry interval at most).
                std::thread::sleep(RETRY_INTERVAL * 2);
            }
        }
        j.shutdown();
        assert!(
            j.stats.failures.get() >= 3,
            "the injected write failures happened"
        );
        assert!(j.stats.rollovers.get() > 2, "groups crossed journal files");
        if direct_io {
            assert!(refused > 0, "failed direct writes fail their groups");
        } else {
            assert_eq!(refused, 0, "failed page-cache writes are held and retried");
        }
        assert!(acked.len() > 300, "{} acknowledged", acked.len());
        let mut seen = Vec::new();
        replay(dir.path(), Mark::default(), false, |ops, _| {
            for op in ops {
                if let JournalOp::Entry { entry, data: d, .. } = op {
                    assert_eq!(d[..], data(*entry)[..], "entry {entry}");
                    seen.push(*entry);
                }
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, acked);
    }

    #[test]
    fn acknowledged_entries_replay_after_failed_writes_direct() {
        acknowledged_entries_replay_after_failed_writes(true);
    }

    #[test]
    fn acknowledged_entries_replay_after_failed_writes_page_cache() {
        acknowledged_entries_replay_after_failed_writes(false);
    }

    #[test]
    fn torn_tail_of_newest_file_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let j =
            Journal::start(0, dir.path().into(), cfg(), 1, Arc::new(Collect::default())).unwrap();
        for e in 0..5 {
            add(&j, 1, e, b"0123456789").recv().unwrap().unwrap();
        }
        j.shutdown();
        let path = journal_path(dir.path(), 1);
        let (recs, end, _) = scan_file(&path).unwrap();
        let last = recs.last().unwrap().clone();
        assert_eq!(end, last.offset + last.size);
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(last.offset + last.size - 3).unwrap();
        let mut n = 0;
        replay(dir.path(), Mark::default(), false, |ops, _| {
            n += ops
                .iter()
                .filter(|o| matches!(o, JournalOp::Entry { .. }))
                .count();
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 4);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), last.offset);
    }

    /// Entries replayed from `from`, with their bytes.
    fn replayed_entries(dir: &std::path::Path, from: Mark) -> Vec<(u64, Bytes)> {
        let mut entries = Vec::new();
        replay(dir, from, false, |ops, _| {
            for op in ops {
                if let JournalOp::Entry { entry, data, .. } = op {
                    entries.push((*entry, data.clone()));
                }
            }
            Ok(())
        })
        .unwrap();
        entries
    }

    fn inode(path: &std::path::Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().ino()
    }

    /// With `journalReuseFiles`, rollovers after a checkpoint take the files it let go (the
    /// same inodes under new ids) instead of creating files, and everything written to the
    /// reused files replays, nothing of their previous life.
    #[test]
    fn rollovers_reuse_the_files_a_checkpoint_let_go() {
        for direct_io in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let applier = Arc::new(Collect::default());
            let c = JournalConfig {
                max_file_size: 4096,
                direct_io,
                ..cfg()
            };
            let j = Journal::start(0, dir.path().into(), c, 1, applier.clone()).unwrap();
            let data = |e: u64| vec![e as u8; 700 + (e as usize * 37) % 600];
            for e in 0..20 {
                add(&j, 1, e, &data(e)).recv().unwrap().unwrap();
            }
            let mark = applier.0.lock().last().unwrap().1;
            let before: Vec<u64> = list_journal_ids(dir.path()).unwrap();
            assert!(mark.file_id > 4, "expected rollovers, mark at {mark:?}");
            let removed = j.remove_old_files(mark.file_id, 3, true).unwrap();
            assert_eq!(removed, (mark.file_id - 1) as usize - 3);
            let kept: Vec<u64> = before
                .iter()
                .copied()
                .filter(|id| *id < mark.file_id)
                .skip(removed)
                .collect();
            let kept_inodes: HashSet<u64> = kept
                .iter()
                .map(|id| inode(&journal_path(dir.path(), *id)))
                .collect();
            for e in 20..40 {
                add(&j, 1, e, &data(e)).recv().unwrap().unwrap();
            }
            j.shutdown();
            let ids = list_journal_ids(dir.path()).unwrap();
            for id in &kept {
                assert!(!ids.contains(id), "{id} was kept, not reused: {ids:?}");
            }
            let reused: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| kept_inodes.contains(&inode(&journal_path(dir.path(), *id))))
                .collect();
            assert_eq!(reused.len(), kept.len(), "direct {direct_io}: {ids:?}");
            assert!(reused.iter().all(|id| *id > mark.file_id));
            let entries = replayed_entries(dir.path(), mark);
            let numbers: Vec<u64> = entries.iter().map(|(e, _)| *e).collect();
            assert_eq!(numbers, (20..40).collect::<Vec<_>>(), "direct {direct_io}");
            for (e, bytes) in entries {
                assert_eq!(&bytes[..], &data(e)[..]);
            }
        }
    }

    /// A reused file whose end mark was lost (a crash in the middle of a write that had
    /// covered it) still ends where its new records end: the old records after them are whole,
    /// with valid checksums, even at a record boundary, but tagged with the file's old id.
    #[test]
    fn a_reused_file_ends_where_its_new_records_end() {
        let dir = tempfile::tempdir().unwrap();
        let op = |e: u64| JournalOp::entry(5, e, Bytes::from(vec![e as u8; 100]));
        let mut old = OpenJournal::create(dir.path(), 1, 0, false, 1 << 16).unwrap();
        for e in 0..10 {
            old.append(&op(e));
        }
        old.write_pending(0).unwrap();
        let old_bytes = std::fs::read(journal_path(dir.path(), 1)).unwrap();
        drop(old);

        let mut reused = OpenJournal::reuse(dir.path(), 1, 2, false, 1 << 16).unwrap();
        assert!(!journal_path(dir.path(), 1).exists());
        let path = journal_path(dir.path(), 2);
        assert!(replayed_entries(dir.path(), Mark::default()).is_empty());
        for e in 100..103 {
            reused.append(&op(e));
        }
        reused.write_pending(0).unwrap();
        let end = reused.written as usize;
        drop(reused);
        let (recs, scanned_end, why) = scan_file(&path).unwrap();
        assert_eq!((recs.len(), scanned_end as usize), (3, end), "{why}");
        // Through the page cache the write ends with zeros to a page boundary: an end mark,
        // then padding that makes its last page whole (no read of the old page first).
        let after = std::fs::read(&path).unwrap();
        assert!(after[end..end.div_ceil(4096) * 4096]
            .iter()
            .all(|b| *b == 0));
        // The crash: what the write put after the new records (end mark, padding) was lost,
        // and the old file's bytes are there again.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &old_bytes[end..], end as u64).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        let entries = replayed_entries(dir.path(), Mark::default());
        let numbers: Vec<u64> = entries.iter().map(|(e, _)| *e).collect();
        assert_eq!(numbers, vec![100, 101, 102]);
        // Nothing was cut: that end is not damage.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
        let (recs, scanned_end, why) = scan_file(&path).unwrap();
        assert_eq!((recs.len(), scanned_end as usize), (3, end));
        assert!(why.contains("reused"), "{why}");

        // Followed by a newer file, it is not taken for a damaged one either.
        let mut newer = OpenJournal::create(dir.path(), 3, 0, false, 1 << 16).unwrap();
        newer.append(&op(200));
        newer.write_pending(0).unwrap();
        drop(newer);
        let numbers: Vec<u64> = replayed_entries(dir.path(), Mark::default())
            .iter()
            .map(|(e, _)| *e)
            .collect();
        assert_eq!(numbers, vec![100, 101, 102, 200]);
    }

    /// A journal of format 2 (no tags) reused after an upgrade: its old records end with a kind
    /// byte after the entry's data. Entries whose data ends in zeros end like a small id would;
    /// the tag is mixed so that they are not taken for records of the reused file.
    #[test]
    fn a_reused_format_2_file_ends_where_its_new_records_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = crate::record::file_header(file::JOURNAL_MAGIC, 2, 1).to_vec();
        for e in 0..10u64 {
            let mut data = vec![2u8; 97]; // read as format 3, the kind byte is a 2: an entry
            data.extend_from_slice(&[0, 0, 0]);
            crate::record::append_record(
                &mut old,
                &[&5u64.to_be_bytes(), &e.to_be_bytes(), &data, &[2]],
            );
        }
        std::fs::write(journal_path(dir.path(), 1), &old).unwrap();

        let mut reused = OpenJournal::reuse(dir.path(), 1, 2, false, 1 << 16).unwrap();
        // New records as long as the old ones, so that the old ones start where the new end.
        let op = |e: u64| JournalOp::entry(5, e, Bytes::from(vec![9u8; 96]));
        for e in 100..103 {
            reused.append(&op(e));
        }
        reused.write_pending(0).unwrap();
        let end = reused.written as usize;
        drop(reused);
        let record = (end - crate::record::FILE_HEADER_LEN) / 3;
        assert_eq!((old.len() - crate::record::FILE_HEADER_LEN) % record, 0);
        // The crash: the end mark is lost, the old records follow whole.
        let path = journal_path(dir.path(), 2);
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &old[end..], end as u64).unwrap();
        let numbers: Vec<u64> = replayed_entries(dir.path(), Mark::default())
            .iter()
            .map(|(e, _)| *e)
            .collect();
        assert_eq!(numbers, vec![100, 101, 102]);
    }

    /// Files written under a larger `journalMaxSizeMB` are not reused after it was lowered
    /// (each would keep its old size for ever); they wait to be removed as backups.
    #[test]
    fn files_longer_than_the_limit_allows_are_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let start = |max_file_size: u64, first: u64| {
            let c = JournalConfig {
                max_file_size,
                prealloc_size: 0,
                ..cfg()
            };
            let applier = Arc::new(Collect::default());
            let j = Journal::start(0, dir.path().into(), c, first, applier.clone()).unwrap();
            (j, applier)
        };
        let (j, applier) = start(64 << 10, 1);
        for e in 0..100 {
            add(&j, 1, e, &[1u8; 3000]).recv().unwrap().unwrap();
        }
        j.shutdown();
        let big: Vec<u64> = list_journal_ids(dir.path()).unwrap();
        assert!(big.len() >= 4, "{big:?}");
        let big_inodes: HashSet<u64> = big
            .iter()
            .map(|id| inode(&journal_path(dir.path(), *id)))
            .collect();
        let next = applier.0.lock().last().unwrap().1.file_id + 1;

        let (j, _) = start(4096, next);
        j.remove_old_files(next, 10, true).unwrap();
        for e in 100..120 {
            add(&j, 1, e, &[1u8; 3000]).recv().unwrap().unwrap();
        }
        j.shutdown();
        let ids = list_journal_ids(dir.path()).unwrap();
        assert!(ids.len() > big.len() + 3, "expected rollovers: {ids:?}");
        for id in ids.iter().filter(|id| **id >= next) {
            assert!(!big_inodes.contains(&inode(&journal_path(dir.path(), *id))));
        }
    }
}
