//! The journal: every mutation is appended here and made durable (group commit, fdatasync)
//! before it is applied to entry logs and index and acknowledged. It never reads entry logs.
//!
//! One journal per journal directory, each with one thread that owns its files. Producers
//! enqueue requests on a bounded channel; the thread batches them into groups following
//! BookKeeper's knobs (`journalMaxGroupWaitMSec`, `journalBufferedWritesThreshold`,
//! `journalBufferedEntriesThreshold`, `journalFlushWhenQueueEmpty`) and, with
//! `journalAdaptiveGroupWrites`, ends a group as soon as no sync is in flight
//! ([`sync_progress`]); it writes a group with as few syscalls as possible, syncs it once, hands
//! it to the [`Applier`] and then completes callers.
//!
//! Deferred sync (BookKeeper's `WriteFlag.DEFERRED_SYNC`, its journal's `ackBeforeSync`): such an
//! entry is acknowledged once its group is written to the file, before the sync; it becomes
//! durable (and is applied) with that group's sync as any other. A force ([`Journal::force`],
//! the bookie's FORCE_LEDGER) joins the group being formed without writing a record and is
//! completed by the sync thread with that group, after the fdatasync that covers every record
//! queued before it.

mod deferred;
mod failure;
mod file;
mod old_files;
mod op;
mod replay;
mod stats;
mod sync_progress;
mod syncer;
mod writer;

use std::collections::HashSet;
use std::path::PathBuf;
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
use crate::metrics::Metric;
use deferred::LostDeferred;
use failure::Failure;
use file::{JournalFile, OpenJournal};
use old_files::{OldFiles, Removal};
pub use stats::JournalStats;
use sync_progress::SyncProgress;
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

struct Request {
    op: JournalOp,
    key: Option<Arc<[u8]>>,
    enqueued: Instant,
    done: Completion,
    /// Deferred sync: `done` is called once the record is written, before its sync.
    ack_when_written: bool,
}

enum Msg {
    Req(Request),
    /// A force of a ledger: completed once everything queued before it is durable.
    Force(u64, Completion, Instant),
    /// From the sync thread: the device went idle while a formed group waited for it.
    Wake,
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
    /// The old files a checkpoint let go: removed in steps, in the background.
    removal: Removal,
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
    /// Deferred-sync completions still to call once the group is written (direct mode: the
    /// sync thread writes it; with page-cache writes the journal thread calls them itself).
    written_acks: Vec<Completion>,
    /// The ledgers of the group's deferred-sync records (each once per run): lost if the group
    /// fails after they were acknowledged (`written_acks` then empty).
    deferred_ledgers: Vec<u64>,
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
        let progress = Arc::new(SyncProgress::default());
        let lost = Arc::new(LostDeferred::default());
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
            progress: progress.clone(),
            lost: lost.clone(),
            // Kept only to wake the journal thread: a full queue drops the wake, and then the
            // journal thread has requests to take and looks at the device again by itself.
            wake: cfg.adaptive_group_writes.then(|| tx.clone()),
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
            progress,
            written_acks: Vec::new(),
            deferred_ledgers: Vec::new(),
            lost: lost.clone(),
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
            removal: Removal::new(dir.clone(), old_files),
            dir,
            stats,
        })
    }

    /// Enqueues a request; blocks while the queue is full (`journalQueueSize`).
    /// `key` is the ledger's master key, journalled once per ledger before its first record.
    pub fn submit(&self, op: JournalOp, key: Option<Arc<[u8]>>, done: Completion) -> Result<()> {
        self.send_request(Self::request(op, key, done, false), true)
    }

    /// Like [`submit`](Self::submit) but never blocks: with the queue full it returns
    /// `QueueFull` and drops `done` uncalled.
    pub fn try_submit(
        &self,
        op: JournalOp,
        key: Option<Arc<[u8]>>,
        done: Completion,
    ) -> Result<()> {
        self.send_request(Self::request(op, key, done, false), false)
    }

    /// Deferred sync (BookKeeper's `ackBeforeSync`): like [`submit`](Self::submit) (or
    /// [`try_submit`](Self::try_submit) when `blocking` is false), but `done` is called once the
    /// record is written to the journal file, before it is synced; it becomes durable with its
    /// group's sync, or by a later [`force`](Self::force).
    pub fn submit_deferred_sync(
        &self,
        op: JournalOp,
        key: Option<Arc<[u8]>>,
        done: Completion,
        blocking: bool,
    ) -> Result<()> {
        self.send_request(Self::request(op, key, done, true), blocking)
    }

    /// Calls `done` once every record queued before this call is durable (BookKeeper's
    /// FORCE_LEDGER journal entry): after the fdatasync that covers them, with its outcome.
    /// Blocks while the queue is full.
    /// Fails if a journal failure lost deferred-sync records of `ledger` that were acknowledged
    /// (then every later force of it fails too, until the ledger is deleted).
    pub fn force(&self, ledger: u64, done: Completion) -> Result<()> {
        self.tx
            .send(Msg::Force(ledger, done, Instant::now()))
            .map_err(|_| StorageError::Closed)
    }

    fn request(
        op: JournalOp,
        key: Option<Arc<[u8]>>,
        done: Completion,
        ack_when_written: bool,
    ) -> Request {
        Request {
            op,
            key,
            enqueued: Instant::now(),
            done,
            ack_when_written,
        }
    }

    fn send_request(&self, req: Request, blocking: bool) -> Result<()> {
        if blocking {
            return self
                .tx
                .send(Msg::Req(req))
                .map_err(|_| StorageError::Closed);
        }
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
        self.removal.shutdown();
    }

    /// Removes journal files older than `mark_file_id`, keeping the newest `keep` of them;
    /// returns how many it took (see [`Removal::remove_old_files`]).
    pub fn remove_old_files(&self, mark_file_id: u64, keep: usize, wait: bool) -> Result<usize> {
        self.removal.remove_old_files(mark_file_id, keep, wait)
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests;
