//! The journal: every mutation is appended here and made durable (group commit, fdatasync)
//! before it is applied to entry logs and index and acknowledged. It never reads entry logs.
//!
//! One journal per journal directory, each with one thread that owns its files. Producers
//! enqueue requests on a bounded channel; the thread batches them into groups following
//! BookKeeper's knobs (`journalMaxGroupWaitMSec`, `journalBufferedWritesThreshold`,
//! `journalBufferedEntriesThreshold`, `journalFlushWhenQueueEmpty`), writes a group with as few
//! syscalls as possible, syncs it once, hands it to the [`Applier`] and then completes callers.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use bytes::Bytes;
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::Mutex;

use crate::config::JournalConfig;
use crate::error::{IoContext, Result, StorageError};
use crate::record::{
    append_record, be_u64, check_file_header, file_header, RecordReader, ScanEnd, FILE_HEADER_LEN,
};

const JOURNAL_MAGIC: &[u8; 8] = b"PBKXJRNL";
const JOURNAL_VERSION: u32 = 1;

const KIND_KEY: u8 = 1;
const KIND_ENTRY: u8 = 2;
const KIND_FENCE: u8 = 3;
const KIND_LAC: u8 = 4;
const KIND_DELETE: u8 = 5;

/// A position in a journal directory: everything before it has been applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark {
    pub file_id: u64,
    pub offset: u64,
}

/// One journal record.
#[derive(Debug, Clone)]
pub enum JournalOp {
    /// The ledger's master key; written before the first other record of a ledger in a process.
    Key {
        ledger: u64,
        key: Arc<[u8]>,
    },
    Entry {
        ledger: u64,
        entry: u64,
        data: Bytes,
    },
    Fence {
        ledger: u64,
    },
    Lac {
        ledger: u64,
        lac: Bytes,
    },
    Delete {
        ledger: u64,
    },
}

impl JournalOp {
    pub fn ledger(&self) -> u64 {
        match self {
            JournalOp::Key { ledger, .. }
            | JournalOp::Entry { ledger, .. }
            | JournalOp::Fence { ledger }
            | JournalOp::Lac { ledger, .. }
            | JournalOp::Delete { ledger } => *ledger,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let before = out.len();
        match self {
            JournalOp::Key { ledger, key } => {
                append_record(out, &[&[KIND_KEY], &ledger.to_be_bytes(), key])
            }
            JournalOp::Entry {
                ledger,
                entry,
                data,
            } => append_record(
                out,
                &[
                    &[KIND_ENTRY],
                    &ledger.to_be_bytes(),
                    &entry.to_be_bytes(),
                    data,
                ],
            ),
            JournalOp::Fence { ledger } => {
                append_record(out, &[&[KIND_FENCE], &ledger.to_be_bytes()])
            }
            JournalOp::Lac { ledger, lac } => {
                append_record(out, &[&[KIND_LAC], &ledger.to_be_bytes(), lac])
            }
            JournalOp::Delete { ledger } => {
                append_record(out, &[&[KIND_DELETE], &ledger.to_be_bytes()])
            }
        }
        debug_assert!(out.len() > before);
    }

    fn decode(body: &[u8]) -> std::result::Result<JournalOp, String> {
        if body.len() < 9 {
            return Err(format!(
                "journal record of {} bytes is too short",
                body.len()
            ));
        }
        let ledger = be_u64(&body[1..9]);
        let rest = &body[9..];
        Ok(match body[0] {
            KIND_KEY => JournalOp::Key {
                ledger,
                key: Arc::from(rest),
            },
            KIND_ENTRY if rest.len() >= 8 => JournalOp::Entry {
                ledger,
                entry: be_u64(&rest[0..8]),
                data: Bytes::copy_from_slice(&rest[8..]),
            },
            KIND_FENCE => JournalOp::Fence { ledger },
            KIND_LAC => JournalOp::Lac {
                ledger,
                lac: Bytes::copy_from_slice(rest),
            },
            KIND_DELETE => JournalOp::Delete { ledger },
            kind => return Err(format!("unknown journal record kind {kind}")),
        })
    }

    fn kind_name(&self) -> &'static str {
        match self {
            JournalOp::Key { .. } => "key",
            JournalOp::Entry { .. } => "entry",
            JournalOp::Fence { .. } => "fence",
            JournalOp::Lac { .. } => "lac",
            JournalOp::Delete { .. } => "delete",
        }
    }
}

/// Receives every durable group, in journal order, before its callers are completed.
pub trait Applier: Send + Sync + 'static {
    /// Applies `ops`; `mark` is the journal position just after them.
    fn apply(&self, journal: usize, ops: &[JournalOp], mark: Mark) -> Result<()>;
}

/// Called exactly once with the outcome of a request (never called if `submit` returned an error).
pub type Completion = Box<dyn FnOnce(Result<()>) + Send>;

/// Counters of one journal.
#[derive(Debug, Default)]
pub struct JournalStats {
    pub entries: AtomicU64,
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub groups: AtomicU64,
    pub syncs: AtomicU64,
    pub rollovers: AtomicU64,
}

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
    thread: Mutex<Option<JoinHandle<()>>>,
    dir: PathBuf,
    pub stats: Arc<JournalStats>,
}

/// `<dir>/<hex id>.txn`, as BookKeeper names journal files.
pub fn journal_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:x}.txn"))
}

/// Ids of the journal files in `dir`, ascending.
pub fn list_journal_ids(dir: &Path) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for ent in fs::read_dir(dir).ctx(|| format!("listing {}", dir.display()))? {
        let ent = ent.ctx(|| format!("listing {}", dir.display()))?;
        let name = ent.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".txn")) else {
            continue;
        };
        if let Ok(id) = u64::from_str_radix(stem, 16) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// fsyncs a directory so that files created or removed in it stay so after a crash.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx(|| format!("syncing directory {}", dir.display()))
}

fn fdatasync(file: &File, path: &Path) -> Result<()> {
    file.sync_data()
        .ctx(|| format!("fdatasync {}", path.display()))
}

/// Reserves disk blocks so appends need not allocate them; a no-op where unsupported.
fn preallocate(file: &File, offset: u64, len: u64) {
    // SAFETY: plain syscall on an open descriptor owned by `file`.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), offset as i64, len as i64) };
    if rc != 0 {
        log::debug!("posix_fallocate failed with errno {rc}; continuing without preallocation");
    }
}

/// A journal file shared by the writer (appends) and the sync thread (syncs).
struct JournalFile {
    id: u64,
    path: PathBuf,
    file: File,
}

impl JournalFile {
    fn sync(&self) -> Result<()> {
        fdatasync(&self.file, &self.path)
    }
}

/// The writer's view of its current file.
struct OpenJournal {
    file: Arc<JournalFile>,
    /// Bytes handed to the OS (header included).
    written: u64,
    preallocated: u64,
}

impl OpenJournal {
    fn create(dir: &Path, id: u64, prealloc: u64) -> Result<Self> {
        let path = journal_path(dir, id);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .ctx(|| format!("creating journal {}", path.display()))?;
        file.write_all(&file_header(JOURNAL_MAGIC, JOURNAL_VERSION, id))
            .ctx(|| format!("writing journal header {}", path.display()))?;
        let mut open = OpenJournal {
            file: Arc::new(JournalFile { id, path, file }),
            written: FILE_HEADER_LEN as u64,
            preallocated: 0,
        };
        open.ensure_preallocated(0, prealloc);
        open.file
            .file
            .sync_all()
            .ctx(|| format!("syncing new journal {}", open.file.path.display()))?;
        sync_dir(dir)?;
        Ok(open)
    }

    fn ensure_preallocated(&mut self, extra: u64, step: u64) {
        if step == 0 || self.written + extra <= self.preallocated {
            return;
        }
        let target = (self.written + extra).max(self.preallocated + step);
        preallocate(
            &self.file.file,
            self.preallocated,
            target - self.preallocated,
        );
        self.preallocated = target;
    }

    fn write(&mut self, buf: &[u8], prealloc: u64) -> Result<()> {
        self.ensure_preallocated(buf.len() as u64, prealloc);
        (&self.file.file)
            .write_all(buf)
            .ctx(|| format!("writing journal {}", self.file.path.display()))?;
        self.written += buf.len() as u64;
        Ok(())
    }
}

/// The first failure of a journal. It is sticky: after it nothing more is acknowledged, because
/// a later success would advance the mark past records that never became durable.
#[derive(Default)]
struct Failure(Mutex<Option<StorageError>>);

impl Failure {
    fn get(&self) -> Option<StorageError> {
        self.0.lock().clone()
    }
    fn set(&self, e: StorageError) {
        self.0.lock().get_or_insert(e);
    }
}

/// A group written to the file, waiting for its sync.
struct Group {
    file: Arc<JournalFile>,
    end: u64,
    ops: Vec<JournalOp>,
    dones: Vec<Completion>,
}

/// Bounds the groups written but not yet synced; the writer waits when the sync thread lags.
const MAX_GROUPS_IN_FLIGHT: usize = 64;

/// The journal thread: takes requests, forms groups by BookKeeper's rules, writes them.
struct Writer {
    dir: PathBuf,
    cfg: JournalConfig,
    rx: Receiver<Msg>,
    to_sync: Option<Sender<Group>>,
    syncer: Option<JoinHandle<()>>,
    failure: Arc<Failure>,
    stats: Arc<JournalStats>,
    file: OpenJournal,
    buf: Vec<u8>,
    ops: Vec<JournalOp>,
    dones: Vec<Completion>,
    /// Ledgers whose key record has been written by this process.
    keyed: HashSet<u64>,
    oldest: Option<Instant>,
    entries_since_flush: usize,
    bytes_since_flush: usize,
    stopping: bool,
}

/// The force-write thread: syncs written groups (once for all that are ready), applies them in
/// order and completes their callers.
struct Syncer {
    index: usize,
    sync_data: bool,
    page_cache_flush_interval: std::time::Duration,
    rx: Receiver<Group>,
    applier: Arc<dyn Applier>,
    failure: Arc<Failure>,
    stats: Arc<JournalStats>,
    /// With `journalSyncData=false`: the file written since its last sync.
    unsynced: Option<Arc<JournalFile>>,
}

impl Journal {
    /// Starts a journal over `dir` writing new files from `first_file_id`.
    pub fn start(
        index: usize,
        dir: PathBuf,
        cfg: JournalConfig,
        first_file_id: u64,
        applier: Arc<dyn Applier>,
    ) -> Result<Journal> {
        let file = OpenJournal::create(&dir, first_file_id, cfg.prealloc_size)?;
        let (tx, rx) = bounded(cfg.queue_size);
        let (to_sync, sync_rx) = bounded(MAX_GROUPS_IN_FLIGHT);
        let stats = Arc::new(JournalStats::default());
        let failure = Arc::new(Failure::default());
        let syncer = Syncer {
            index,
            sync_data: cfg.sync_data,
            page_cache_flush_interval: cfg.page_cache_flush_interval,
            rx: sync_rx,
            applier,
            failure: failure.clone(),
            stats: stats.clone(),
            unsynced: None,
        };
        let syncer = std::thread::Builder::new()
            .name(format!("pybkx-journal-sync-{index}"))
            .spawn(move || syncer.run())
            .ctx(|| "spawning journal sync thread".to_string())?;
        let writer = Writer {
            dir: dir.clone(),
            buf: Vec::with_capacity(cfg.write_buffer_size + (64 << 10)),
            cfg,
            rx,
            to_sync: Some(to_sync),
            syncer: Some(syncer),
            failure,
            stats: stats.clone(),
            file,
            ops: Vec::new(),
            dones: Vec::new(),
            keyed: HashSet::new(),
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
            thread: Mutex::new(Some(thread)),
            dir,
            stats,
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
            crossbeam_channel::TrySendError::Full(_) => StorageError::QueueFull,
            crossbeam_channel::TrySendError::Disconnected(_) => StorageError::Closed,
        })
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
    }

    /// Deletes journal files older than `mark_file_id`, keeping the newest `keep` of them.
    pub fn remove_old_files(&self, mark_file_id: u64, keep: usize) -> Result<usize> {
        let old: Vec<u64> = list_journal_ids(&self.dir)?
            .into_iter()
            .filter(|id| *id < mark_file_id)
            .collect();
        let doomed = old.len().saturating_sub(keep);
        for id in &old[..doomed] {
            let path = journal_path(&self.dir, *id);
            fs::remove_file(&path).ctx(|| format!("removing journal {}", path.display()))?;
        }
        if doomed > 0 {
            sync_dir(&self.dir)?;
        }
        Ok(doomed)
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Writer {
    fn run(mut self) {
        while !self.stopping {
            let msg = if self.ops.is_empty() {
                self.rx.recv().ok()
            } else if self.cfg.flush_when_queue_empty {
                match self.rx.try_recv() {
                    Ok(m) => Some(m),
                    Err(TryRecvError::Empty) => {
                        self.flush();
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => None,
                }
            } else {
                let deadline = self.oldest.unwrap_or_else(Instant::now) + self.cfg.max_group_wait;
                match self.rx.recv_deadline(deadline) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => {
                        self.drain_ready();
                        self.flush();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => None,
                }
            };
            match msg {
                Some(Msg::Req(req)) => {
                    self.add(req);
                    if self.group_is_due() {
                        // Requests that waited in the queue while the previous group was being
                        // written are already past the group wait: take all that are ready.
                        self.drain_ready();
                        self.flush();
                    }
                }
                Some(Msg::Shutdown) | None => self.stopping = true,
            }
        }
        // Whatever was queued before the shutdown is still written and acknowledged; requests
        // sent later find the receiver gone and fail with `Closed`.
        while let Ok(Msg::Req(req)) = self.rx.try_recv() {
            self.add(req);
        }
        self.flush();
        drop(self.to_sync.take());
        if let Some(syncer) = self.syncer.take() {
            if syncer.join().is_err() {
                log::error!("journal sync thread for {} panicked", self.dir.display());
            }
        }
    }

    /// Takes the requests already queued, up to the group's size thresholds.
    fn drain_ready(&mut self) {
        let max_entries = match self.cfg.buffered_entries_threshold {
            0 => usize::MAX,
            n => n,
        };
        while self.bytes_since_flush < self.cfg.buffered_writes_threshold.max(1)
            && self.entries_since_flush < max_entries
        {
            match self.rx.try_recv() {
                Ok(Msg::Req(req)) => self.add(req),
                Ok(Msg::Shutdown) => {
                    self.stopping = true;
                    return;
                }
                Err(_) => return,
            }
        }
    }

    fn group_is_due(&self) -> bool {
        let cfg = &self.cfg;
        (cfg.buffered_entries_threshold > 0
            && self.entries_since_flush >= cfg.buffered_entries_threshold)
            || self.bytes_since_flush >= cfg.buffered_writes_threshold
            || self
                .oldest
                .is_some_and(|t| t.elapsed() >= cfg.max_group_wait)
    }

    fn add(&mut self, req: Request) {
        if let Some(err) = self.failure.get() {
            (req.done)(Err(err));
            return;
        }
        let before = self.buf.len();
        let ledger = req.op.ledger();
        if let JournalOp::Delete { .. } = req.op {
            self.keyed.remove(&ledger);
        } else if let Some(key) = req.key {
            if self.keyed.insert(ledger) {
                let op = JournalOp::Key { ledger, key };
                op.encode(&mut self.buf);
                self.ops.push(op);
            }
        }
        req.op.encode(&mut self.buf);
        if let JournalOp::Entry { .. } = req.op {
            self.entries_since_flush += 1;
        }
        self.bytes_since_flush += self.buf.len() - before;
        self.ops.push(req.op);
        self.dones.push(req.done);
        self.oldest.get_or_insert(req.enqueued);
        if self.buf.len() >= self.cfg.write_buffer_size {
            self.write_out();
        }
    }

    fn write_out(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        if self.failure.get().is_none() {
            if let Err(e) = self.file.write(&self.buf, self.cfg.prealloc_size) {
                log::error!("journal {}: {e}", self.dir.display());
                self.failure.set(e);
            }
        }
        self.buf.clear();
    }

    /// Ends the current group: writes it and hands it to the sync thread.
    fn flush(&mut self) {
        if self.ops.is_empty() {
            return;
        }
        self.write_out();
        let s = &self.stats;
        s.groups.fetch_add(1, Ordering::Relaxed);
        s.entries
            .fetch_add(self.entries_since_flush as u64, Ordering::Relaxed);
        s.records
            .fetch_add(self.ops.len() as u64, Ordering::Relaxed);
        s.bytes
            .fetch_add(self.bytes_since_flush as u64, Ordering::Relaxed);
        let group = Group {
            file: self.file.file.clone(),
            end: self.file.written,
            ops: std::mem::take(&mut self.ops),
            dones: std::mem::take(&mut self.dones),
        };
        if let Some(to_sync) = &self.to_sync {
            if let Err(returned) = to_sync.send(group) {
                // The sync thread is gone (it panicked): nothing can be acknowledged any more.
                let e = StorageError::Closed;
                self.failure.set(e.clone());
                for done in returned.0.dones {
                    done(Err(e.clone()));
                }
            }
        }
        self.oldest = None;
        self.entries_since_flush = 0;
        self.bytes_since_flush = 0;
        if self.failure.get().is_none() && self.file.written >= self.cfg.max_file_size {
            self.roll_over();
        }
    }

    fn roll_over(&mut self) {
        match OpenJournal::create(&self.dir, self.file.file.id + 1, self.cfg.prealloc_size) {
            Ok(file) => {
                self.file = file;
                self.stats.rollovers.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                log::error!("journal {}: rollover failed: {e}", self.dir.display());
                self.failure.set(e);
            }
        }
    }
}

impl Syncer {
    fn run(mut self) {
        loop {
            let first = if self.unsynced.is_some() {
                match self.rx.recv_timeout(self.page_cache_flush_interval) {
                    Ok(g) => g,
                    Err(RecvTimeoutError::Timeout) => {
                        self.sync_unsynced();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match self.rx.recv() {
                    Ok(g) => g,
                    Err(_) => break,
                }
            };
            let mut groups = vec![first];
            while groups.len() < MAX_GROUPS_IN_FLIGHT {
                match self.rx.try_recv() {
                    Ok(g) => groups.push(g),
                    Err(_) => break,
                }
            }
            self.complete(groups);
        }
        self.sync_unsynced();
    }

    fn complete(&mut self, groups: Vec<Group>) {
        if self.failure.get().is_none() {
            if let Err(e) = self.make_durable(&groups) {
                log::error!("journal {}: {e}", self.index);
                self.failure.set(e);
            }
        }
        let result = match self.failure.get() {
            Some(e) => Err(e),
            None => {
                let Some(last) = groups.last() else {
                    return;
                };
                let mark = Mark {
                    file_id: last.file.id,
                    offset: last.end,
                };
                let mut ops = Vec::with_capacity(groups.iter().map(|g| g.ops.len()).sum());
                let mut dones = Vec::with_capacity(groups.iter().map(|g| g.dones.len()).sum());
                for g in groups {
                    ops.extend(g.ops);
                    dones.extend(g.dones);
                }
                let applied = self.applier.apply(self.index, &ops, mark);
                if let Err(e) = &applied {
                    log::error!("journal {}: applying records failed: {e}", self.index);
                    self.failure.set(e.clone());
                }
                drop(ops);
                for done in dones {
                    done(applied.clone());
                }
                return;
            }
        };
        for g in groups {
            for done in g.dones {
                done(result.clone());
            }
        }
    }

    /// One fdatasync per file for all the groups (several files only around a rollover).
    fn make_durable(&mut self, groups: &[Group]) -> Result<()> {
        let mut synced: Option<&Arc<JournalFile>> = None;
        for g in groups {
            let changed_file = synced.is_none_or(|f| !Arc::ptr_eq(f, &g.file));
            if self.sync_data {
                if changed_file {
                    if let Some(prev) = synced {
                        prev.sync()?;
                        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
                    }
                    synced = Some(&g.file);
                }
            } else if let Some(prev) = &self.unsynced {
                // Without per-group syncs, a journal is still synced once it is complete.
                if !Arc::ptr_eq(prev, &g.file) {
                    self.sync_unsynced();
                }
            }
            if !self.sync_data {
                self.unsynced = Some(g.file.clone());
            }
        }
        if let Some(last) = synced {
            last.sync()?;
            self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn sync_unsynced(&mut self) {
        let Some(file) = self.unsynced.take() else {
            return;
        };
        match file.sync() {
            Ok(()) => {
                self.stats.syncs.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                log::error!("journal {}: {e}", self.index);
                self.failure.set(e);
            }
        }
    }
}

/// Where replay of one directory ended, and the id the next journal file must take.
pub struct ReplayEnd {
    pub mark: Mark,
    pub next_file_id: u64,
}

/// Replays the records of `dir` from `from`, handing them to `sink` in batches with the mark
/// just after each batch. A torn or corrupt tail of the newest file is cut (truncated) with a
/// warning; damage in an older file is an error unless `skip_invalid`.
pub fn replay(
    dir: &Path,
    from: Mark,
    skip_invalid: bool,
    mut sink: impl FnMut(&[JournalOp], Mark) -> Result<()>,
) -> Result<ReplayEnd> {
    const BATCH_OPS: usize = 4096;
    const BATCH_BYTES: usize = 32 << 20;
    let all = list_journal_ids(dir)?;
    let next_file_id = all.last().map_or(1, |id| id + 1).max(from.file_id + 1);
    let ids: Vec<u64> = all.into_iter().filter(|id| *id >= from.file_id).collect();
    if from.file_id > 0 && ids.first() != Some(&from.file_id) {
        return Err(StorageError::Corruption(format!(
            "journal {} named by the last checkpoint is missing",
            journal_path(dir, from.file_id).display()
        )));
    }
    let mut mark = from;
    for (n, id) in ids.iter().enumerate() {
        let newest = n + 1 == ids.len();
        let path = journal_path(dir, *id);
        let mut file = File::open(&path).ctx(|| format!("opening journal {}", path.display()))?;
        let mut header = [0u8; FILE_HEADER_LEN];
        let header_ok = std::io::Read::read_exact(&mut file, &mut header).is_ok();
        if !header_ok
            || check_file_header(&header, JOURNAL_MAGIC, JOURNAL_VERSION, "journal")? != *id
        {
            if newest && !header_ok {
                // Crashed while creating the file: nothing in it was ever acknowledged.
                log::warn!(
                    "journal {} has no complete header; removing it",
                    path.display()
                );
                fs::remove_file(&path).ctx(|| format!("removing {}", path.display()))?;
                continue;
            }
            return Err(StorageError::Corruption(format!(
                "journal {} has a bad header",
                path.display()
            )));
        }
        let start = if *id == from.file_id {
            from.offset.max(FILE_HEADER_LEN as u64)
        } else {
            FILE_HEADER_LEN as u64
        };
        file.seek(SeekFrom::Start(start))
            .ctx(|| format!("seeking journal {}", path.display()))?;
        let mut reader = RecordReader::new(file, start, path.display().to_string());
        let mut batch: Vec<JournalOp> = Vec::new();
        let mut batch_bytes = 0usize;
        let end = loop {
            match reader.next_record()? {
                Ok(rec) => {
                    let size = rec.size as usize;
                    match JournalOp::decode(rec.body) {
                        Ok(op) => batch.push(op),
                        Err(why) => break ScanEnd::Torn(why),
                    }
                    batch_bytes += size;
                }
                Err(end) => break end,
            }
            if batch.len() >= BATCH_OPS || batch_bytes >= BATCH_BYTES {
                mark = Mark {
                    file_id: *id,
                    offset: reader.offset(),
                };
                sink(&batch, mark)?;
                batch.clear();
                batch_bytes = 0;
            }
        };
        mark = Mark {
            file_id: *id,
            offset: reader.offset(),
        };
        sink(&batch, mark)?;
        if let ScanEnd::Torn(why) = end {
            let at = reader.offset();
            if newest {
                log::warn!(
                    "journal {}: cutting a torn tail at offset {at} ({why})",
                    path.display()
                );
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .ctx(|| format!("opening {} to cut its tail", path.display()))?;
                f.set_len(at)
                    .and_then(|_| f.sync_all())
                    .ctx(|| format!("cutting the tail of {}", path.display()))?;
            } else if skip_invalid {
                log::warn!(
                    "journal {}: skipping the rest after offset {at} ({why})",
                    path.display()
                );
            } else {
                return Err(StorageError::Corruption(format!(
                    "journal {} is damaged at offset {at} ({why}) and newer journals follow it; \
                     set skipReplayJournalInvalidRecord=true to skip the damaged part",
                    path.display()
                )));
            }
        }
    }
    Ok(ReplayEnd { mark, next_file_id })
}

/// One decoded record of a journal file, for tools.
#[derive(Debug, Clone)]
pub struct RecordInfo {
    pub offset: u64,
    pub size: u64,
    pub kind: &'static str,
    pub ledger: u64,
    pub entry: Option<u64>,
}

/// Decodes a whole journal file without changing it: its records, where valid data ends, and why.
pub fn scan_file(path: &Path) -> Result<(Vec<RecordInfo>, u64, String)> {
    let mut file = File::open(path).ctx(|| format!("opening {}", path.display()))?;
    let mut header = [0u8; FILE_HEADER_LEN];
    std::io::Read::read_exact(&mut file, &mut header)
        .ctx(|| format!("reading the header of {}", path.display()))?;
    check_file_header(&header, JOURNAL_MAGIC, JOURNAL_VERSION, "journal")?;
    let mut reader = RecordReader::new(file, FILE_HEADER_LEN as u64, path.display().to_string());
    let mut out = Vec::new();
    let reason = loop {
        match reader.next_record()? {
            Ok(rec) => {
                let (offset, size) = (rec.offset, rec.size);
                match JournalOp::decode(rec.body) {
                    Ok(op) => out.push(RecordInfo {
                        offset,
                        size,
                        kind: op.kind_name(),
                        ledger: op.ledger(),
                        entry: match op {
                            JournalOp::Entry { entry, .. } => Some(entry),
                            _ => None,
                        },
                    }),
                    Err(why) => break why,
                }
            }
            Err(ScanEnd::Clean) => break "end of written data".to_string(),
            Err(ScanEnd::EndOfFile) => break "end of file".to_string(),
            Err(ScanEnd::Torn(why)) => break why,
        }
    };
    Ok((out, reader.offset(), reason))
}

#[cfg(test)]
mod tests {
    use super::*;
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
        JournalConfig {
            prealloc_size: 1 << 20,
            ..JournalConfig::default()
        }
    }

    fn add(j: &Journal, ledger: u64, entry: u64, data: &[u8]) -> mpsc::Receiver<Result<()>> {
        let (tx, rx) = mpsc::channel();
        j.submit(
            JournalOp::Entry {
                ledger,
                entry,
                data: Bytes::copy_from_slice(data),
            },
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
        assert_eq!(j.stats.entries.load(Ordering::Relaxed), 100);

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

    #[test]
    fn replay_starts_at_the_mark_and_rollover_creates_new_files() {
        let dir = tempfile::tempdir().unwrap();
        let applier = Arc::new(Collect::default());
        let c = JournalConfig {
            max_file_size: 4096,
            ..cfg()
        };
        let j = Journal::start(0, dir.path().into(), c, 1, applier.clone()).unwrap();
        for e in 0..20 {
            add(&j, 1, e, &[e as u8; 1000]).recv().unwrap().unwrap();
        }
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
            j.remove_old_files(mark_after_9.file_id, 0).unwrap(),
            (mark_after_9.file_id - 1) as usize
        );
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
        let f = OpenOptions::new().write(true).open(&path).unwrap();
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
        assert_eq!(fs::metadata(&path).unwrap().len(), last.offset);
    }
}
