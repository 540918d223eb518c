//! The journal thread: takes requests off the bounded queue, forms groups by BookKeeper's rules,
//! encodes each group and hands it to the sync thread, written (through the page cache, with as
//! few syscalls as possible) or, with `journalDirectIO`, for the sync thread to write.
//! It never syncs, and acknowledges only deferred-sync records (once written, as BookKeeper's
//! `ackBeforeSync`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::queue::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use parking_lot::Mutex;

use super::deferred::LostDeferred;
use super::failure::Failure;
use super::file::{list_journal_ids, Chunk, OpenJournal};
use super::old_files::OldFiles;
use super::stats::JournalStats;
use super::sync_progress::SyncProgress;
use super::{Completion, Group, JournalOp, Msg, Request, RETRY_INTERVAL};
use crate::config::JournalConfig;
use crate::error::StorageError;
use crate::metrics::{self, micros};

/// Requests taken per clock read for queue latencies (an error of at most the time to take
/// this many, a few microseconds, for a tenth of the reads).
const CLOCK_EVERY: usize = 16;

/// Why a group ended, for BookKeeper's `JOURNAL_NUM_FLUSH_*` counters.
#[derive(Clone, Copy)]
enum FlushReason {
    MaxWait,
    OutstandingBytes,
    EmptyQueue,
    /// Adaptive group commit: no sync was in flight.
    SyncIdle,
    Shutdown,
}

/// A group that could not be written (or whose file's sync failed), kept in journal order
/// until a retry writes it.
pub(super) struct Held {
    /// (file id, offset) the group started at in the file it was written to.
    file_id: u64,
    start: u64,
    ops: Vec<JournalOp>,
    dones: Vec<Completion>,
    enqueued: Vec<(Instant, bool)>,
    entries: u64,
}

/// The journal thread: takes requests, forms groups by BookKeeper's rules, writes them.
pub(super) struct Writer {
    pub(super) dir: PathBuf,
    pub(super) cfg: JournalConfig,
    pub(super) rx: Receiver<Msg>,
    pub(super) to_sync: Option<Sender<Group>>,
    pub(super) syncer: Option<JoinHandle<()>>,
    /// Adaptive group commit: whether a sync is in flight (shared with the sync thread).
    pub(super) progress: Arc<SyncProgress>,
    /// Deferred-sync completions of the current group: called once it is written.
    pub(super) written_acks: Vec<Completion>,
    /// The ledgers of the current group's deferred-sync records.
    pub(super) deferred_ledgers: Vec<u64>,
    /// Ledgers whose acknowledged deferred-sync records a failure lost (shared with the sync
    /// thread, which finds most of them).
    pub(super) lost: Arc<LostDeferred>,
    /// The files a checkpoint let go, for a rollover to reuse (`journalReuseFiles`).
    pub(super) old_files: Arc<Mutex<OldFiles>>,
    pub(super) failure: Arc<Failure>,
    pub(super) stats: Arc<JournalStats>,
    pub(super) file: OpenJournal,
    /// Direct mode: the current group's records taken so far for the sync thread to write.
    pub(super) chunks: Vec<Chunk>,
    pub(super) ops: Vec<JournalOp>,
    pub(super) dones: Vec<Completion>,
    /// Per completion of the group: when its request was enqueued, and whether it is an entry.
    pub(super) enqueued: Vec<(Instant, bool)>,
    /// When the group's first request was taken (None with metrics off).
    pub(super) group_started: Option<Instant>,
    /// A recent clock read for queue latencies, and requests taken since: the clock is read
    /// again every `CLOCK_EVERY` requests, not for each.
    pub(super) clock: Option<Instant>,
    pub(super) since_clock: usize,
    /// Ledgers whose key record has been written by this process.
    pub(super) keyed: HashSet<u64>,
    /// The failure epoch `keyed` is valid for: after any failure keys are journalled again.
    pub(super) keyed_epoch: u64,
    /// A group whose write failed, waiting to be written again (never acknowledged before).
    pub(super) held: Option<Held>,
    /// Where the current group starts in the file.
    pub(super) group_start: u64,
    /// The last attempt to leave a failed state.
    pub(super) last_retry: Option<Instant>,
    pub(super) oldest: Option<Instant>,
    pub(super) entries_since_flush: usize,
    pub(super) bytes_since_flush: usize,
    pub(super) stopping: bool,
}

impl Writer {
    pub(super) fn run(mut self) {
        while !self.stopping {
            if self.failure.get().is_some() && !self.failure.is_fatal() {
                self.wait_and_retry();
                continue;
            }
            let msg = match self.rx.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Disconnected) => None,
                Err(TryRecvError::Empty) => {
                    // Whatever comes next arrives after a wait: read the clock again for it.
                    self.clock = None;
                    if self.group_is_empty() {
                        self.rx.recv().ok()
                    } else if self.cfg.flush_when_queue_empty {
                        self.flush(FlushReason::EmptyQueue);
                        continue;
                    } else if self.cfg.adaptive_group_writes && self.progress.start_waiting() {
                        self.flush(FlushReason::SyncIdle);
                        continue;
                    } else {
                        let deadline =
                            self.oldest.unwrap_or_else(Instant::now) + self.cfg.max_group_wait;
                        let next = self.rx.recv_deadline(deadline);
                        self.progress.stop_waiting();
                        match next {
                            Ok(m) => Some(m),
                            Err(RecvTimeoutError::Timeout) => {
                                self.drain_ready();
                                self.flush(FlushReason::MaxWait);
                                continue;
                            }
                            Err(RecvTimeoutError::Disconnected) => None,
                        }
                    }
                }
            };
            match msg {
                Some(Msg::Req(req)) => {
                    self.add(req);
                    if let Some(reason) = self.group_is_due() {
                        // Requests that waited in the queue while the previous group was being
                        // written are already past the group wait: take all that are ready.
                        self.drain_ready();
                        self.flush(reason);
                    }
                }
                Some(Msg::Force(ledger, done, at)) => {
                    self.add_force(ledger, done, at);
                    if let Some(reason) = self.group_is_due() {
                        self.drain_ready();
                        self.flush(reason);
                    }
                }
                // The device went idle: the next turn of the loop ends the group.
                Some(Msg::Wake) => {}
                Some(Msg::Shutdown) | None => self.stopping = true,
            }
        }
        // Whatever was queued before the shutdown is still written and acknowledged; requests
        // sent later find the receiver gone and fail with `Closed`.
        loop {
            match self.rx.try_recv() {
                Ok(Msg::Req(req)) => self.add(req),
                Ok(Msg::Force(ledger, done, at)) => self.add_force(ledger, done, at),
                Ok(Msg::Wake) => {}
                Ok(Msg::Shutdown) | Err(_) => break,
            }
        }
        self.flush(FlushReason::Shutdown);
        if let Some(held) = self.held.take() {
            let e = self.failure.get().unwrap_or(StorageError::Closed);
            log::error!(
                "journal {}: stopping with {} requests never made durable: {e}",
                self.dir.display(),
                held.dones.len()
            );
            for done in held.dones {
                done(Err(e.clone()));
            }
        }
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
                Ok(Msg::Force(ledger, done, at)) => self.add_force(ledger, done, at),
                Ok(Msg::Wake) => {}
                Ok(Msg::Shutdown) => {
                    self.stopping = true;
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Whether the group must end now, and why.
    fn group_is_due(&self) -> Option<FlushReason> {
        let cfg = &self.cfg;
        if (cfg.buffered_entries_threshold > 0
            && self.entries_since_flush >= cfg.buffered_entries_threshold)
            || self.bytes_since_flush >= cfg.buffered_writes_threshold
        {
            return Some(FlushReason::OutstandingBytes);
        }
        if cfg.adaptive_group_writes && self.progress.idle() {
            return Some(FlushReason::SyncIdle);
        }
        self.oldest
            .is_some_and(|t| t.elapsed() >= cfg.max_group_wait)
            .then_some(FlushReason::MaxWait)
    }

    fn add(&mut self, req: Request) {
        if self.failure.get().is_some() && !self.failure.is_fatal() && self.ops.is_empty() {
            // Space may be back: try before refusing (a read-only bookie sends few requests).
            self.last_retry = None;
            self.retry();
        }
        if let Some(err) = self.failure.get() {
            (req.done)(Err(err));
            return;
        }
        if self.clock.is_none() || self.since_clock >= CLOCK_EVERY {
            self.clock = metrics::start();
            self.since_clock = 0;
        }
        self.since_clock += 1;
        if let Some(now) = self.clock {
            let waited = micros(now.saturating_duration_since(req.enqueued));
            self.stats.queue_latency.ok.record(waited);
            self.group_started.get_or_insert(now);
        }
        if self.ops.is_empty() {
            self.group_start = self.file.written;
            let epoch = self.failure.epoch();
            if epoch != self.keyed_epoch {
                self.keyed.clear();
                self.keyed_epoch = epoch;
            }
        }
        let before = self.file.pending();
        let ledger = req.op.ledger();
        if let JournalOp::Delete { .. } = req.op {
            self.keyed.remove(&ledger);
            self.lost.forget(ledger);
        } else if let Some(key) = req.key {
            if self.keyed.insert(ledger) {
                let op = JournalOp::Key { ledger, key };
                self.file.append(&op);
                self.ops.push(op);
            }
        }
        self.file.append(&req.op);
        let is_entry = if let JournalOp::Entry { data, .. } = &req.op {
            self.entries_since_flush += 1;
            self.stats.write_bytes.add(data.len() as u64);
            true
        } else {
            false
        };
        self.bytes_since_flush += self.file.pending() - before;
        self.ops.push(req.op);
        if req.ack_when_written {
            if self.deferred_ledgers.last() != Some(&ledger) {
                self.deferred_ledgers.push(ledger);
            }
            self.written_acks.push(req.done);
        } else {
            self.dones.push(req.done);
            self.enqueued.push((req.enqueued, is_entry));
        }
        self.oldest.get_or_insert(req.enqueued);
        if self.file.pending() >= self.file.write_threshold(self.cfg.write_buffer_size) {
            self.write_out();
        }
    }

    /// Whether the group being formed holds nothing: no record, no force.
    fn group_is_empty(&self) -> bool {
        self.ops.is_empty() && self.dones.is_empty()
    }

    /// A force joins the group being formed (an empty one too) without a record: the sync
    /// thread completes it with the group, after the sync that covers every record before it.
    fn add_force(&mut self, ledger: u64, done: Completion, enqueued: Instant) {
        if self.failure.get().is_some() && !self.failure.is_fatal() && self.group_is_empty() {
            self.last_retry = None;
            self.retry();
        }
        if let Some(err) = self.failure.get() {
            return done(Err(err));
        }
        if self.lost.contains(ledger) {
            return done(Err(super::deferred::lost_error(ledger)));
        }
        // The sync thread marks a loss before it completes any later group: checked then.
        let lost = self.lost.clone();
        let done: Completion = Box::new(move |synced| done(lost.force_outcome(ledger, synced)));
        if self.group_is_empty() {
            self.group_start = self.file.written;
        }
        self.dones.push(done);
        self.enqueued.push((enqueued, false));
        self.oldest.get_or_insert(enqueued);
    }

    /// Deferred-sync completions of a group that was written (`Ok`) or could not be (then
    /// nothing was acknowledged, so nothing can be lost).
    fn complete_written(&mut self, outcome: &Result<(), StorageError>) {
        for done in self.written_acks.drain(..) {
            done(outcome.clone());
        }
        if outcome.is_err() {
            self.deferred_ledgers.clear();
        }
    }

    fn write_out(&mut self) {
        if self.file.pending() == 0 {
            return;
        }
        if self.failure.get().is_some() {
            // The group is held and written again from its ops.
            self.file.discard_pending();
            return;
        }
        if self.file.is_direct() {
            // The sync thread writes it, while the next group forms.
            self.chunks
                .extend(self.file.take_chunk(self.cfg.prealloc_size));
            return;
        }
        if let Err(e) = self.file.write_pending(self.cfg.prealloc_size) {
            log::error!(
                "journal {}: {e}; holding the group and retrying every {RETRY_INTERVAL:?}",
                self.dir.display()
            );
            self.stats.failures.inc();
            self.failure.set(e);
        }
    }

    /// Ends the current group: writes it and hands it to the sync thread.
    fn flush(&mut self, reason: FlushReason) {
        if self.group_is_empty() {
            return;
        }
        let writing = metrics::start();
        let failed_before = self.failure.get().is_some();
        self.write_out();
        let s = &self.stats;
        if !self.file.is_direct() {
            // Direct writes are made and timed by the sync thread.
            s.flush_latency
                .record_since(!failed_before && self.failure.get().is_none(), writing);
        }
        match reason {
            FlushReason::MaxWait => s.flush_max_wait.inc(),
            FlushReason::OutstandingBytes => s.flush_max_outstanding_bytes.inc(),
            FlushReason::EmptyQueue => s.flush_empty_queue.inc(),
            FlushReason::SyncIdle => s.flush_sync_idle.inc(),
            FlushReason::Shutdown => {}
        }
        s.groups.inc();
        s.entries.add(self.entries_since_flush as u64);
        s.records.add(self.ops.len() as u64);
        s.bytes.add(self.bytes_since_flush as u64);
        s.force_write_batch_entries
            .ok
            .record(self.entries_since_flush as u64);
        s.force_write_batch_bytes
            .ok
            .record(self.bytes_since_flush as u64);
        let handed = metrics::start();
        let started = self.group_started.take();
        if let Some(at) = handed {
            s.process_time.ok.record_between(started, at);
        }
        let poisoned = self
            .failure
            .poisoned_file()
            .is_some_and(|p| p >= self.file.file.id);
        let write_failed = self.failure.get();
        if write_failed.is_some() || poisoned {
            // Deferred-sync records not written are not acknowledged: the writer's client
            // handles the error (BookKeeper's client fails such a ledger's adds).
            let e = write_failed.unwrap_or_else(|| StorageError::Io {
                context: format!("journal {}", self.dir.display()),
                source: std::io::Error::other("an earlier journal sync failed"),
            });
            self.complete_written(&Err(e));
        } else if !self.file.is_direct() {
            // Written to the file (the page cache): BookKeeper acknowledges these now.
            self.complete_written(&Ok(()));
        }
        if (self.failure.get().is_some() || poisoned) && !self.failure.is_fatal() {
            // Not written (or written to a file whose sync failed): keep it for a retry.
            self.chunks.clear();
            self.held = Some(Held {
                file_id: self.file.file.id,
                start: self.group_start,
                ops: std::mem::take(&mut self.ops),
                dones: std::mem::take(&mut self.dones),
                enqueued: std::mem::take(&mut self.enqueued),
                entries: self.entries_since_flush as u64,
            });
            self.failure.set(StorageError::Io {
                context: format!("journal {}", self.dir.display()),
                source: std::io::Error::other("an earlier journal write or sync failed"),
            });
            self.oldest = None;
            self.entries_since_flush = 0;
            self.bytes_since_flush = 0;
            return;
        }
        let group = Group {
            file: self.file.file.clone(),
            end: self.file.written,
            chunks: std::mem::take(&mut self.chunks),
            ops: std::mem::take(&mut self.ops),
            dones: std::mem::take(&mut self.dones),
            enqueued: std::mem::take(&mut self.enqueued),
            entries: self.entries_since_flush as u64,
            handed,
            // Direct mode: the sync thread writes the group, then calls these.
            written_acks: std::mem::take(&mut self.written_acks),
            deferred_ledgers: std::mem::take(&mut self.deferred_ledgers),
        };
        self.hand_over(group);
        self.oldest = None;
        self.entries_since_flush = 0;
        self.bytes_since_flush = 0;
        if self.failure.get().is_none() && self.file.written >= self.cfg.max_file_size {
            self.roll_over();
        }
    }

    fn hand_over(&mut self, group: Group) {
        if let Some(to_sync) = &self.to_sync {
            self.progress.handed();
            if let Err(returned) = to_sync.send(group) {
                self.progress.synced(1);
                // The sync thread is gone (it panicked): nothing can be acknowledged any more.
                let e = StorageError::Closed;
                self.failure.set_fatal(e.clone());
                if returned.written_acks.is_empty() {
                    self.lost.mark(&returned.deferred_ledgers);
                }
                for done in returned.dones.into_iter().chain(returned.written_acks) {
                    done(Err(e.clone()));
                }
            }
        }
    }

    /// Starts the next journal file: an old one reused if allowed and there is one, else a new
    /// one. A failure (a full disk) keeps the current file, which stays valid; the next group
    /// tries again.
    fn roll_over(&mut self) -> bool {
        let creating = metrics::start();
        let id = self.file.file.id + 1;
        let created = match self.reuse_old_file(id) {
            Some(file) => Ok(file),
            None => OpenJournal::create(
                &self.dir,
                id,
                self.cfg.prealloc_size,
                self.cfg.direct_io,
                self.cfg.write_buffer_size,
            ),
        };
        self.stats.creation.record_since(created.is_ok(), creating);
        match created {
            Ok(file) => {
                self.file = file;
                self.stats.rollovers.inc();
                true
            }
            Err(e) => {
                log::error!("journal {}: rollover failed: {e}", self.dir.display());
                false
            }
        }
    }

    /// Journal `id` made of the oldest file a checkpoint let go, with `journalReuseFiles`; None
    /// when there is none or reusing it failed (then a new file is created, as without reuse).
    fn reuse_old_file(&self, id: u64) -> Option<OpenJournal> {
        if !self.cfg.reuse_files {
            return None;
        }
        let old_files = self.old_files.lock();
        let ids = list_journal_ids(&self.dir)
            .map_err(|e| log::warn!("journal {}: {e}", self.dir.display()))
            .ok()?;
        // A file written under this limit rolls over after the group that crossed it, and is
        // preallocated a step ahead: twice the limit and a step bound it.
        let max_len = 2 * self.cfg.max_file_size + self.cfg.prealloc_size;
        let old_id = old_files.reusable(&self.dir, &ids, max_len)?;
        match OpenJournal::reuse(
            &self.dir,
            old_id,
            id,
            self.cfg.direct_io,
            self.cfg.write_buffer_size,
        ) {
            Ok(file) => {
                log::debug!(
                    "journal {}: reusing {old_id:x}.txn as {id:x}.txn",
                    self.dir.display()
                );
                Some(file)
            }
            Err(e) => {
                log::warn!(
                    "journal {}: reusing {old_id:x}.txn failed ({e}); creating a new file",
                    self.dir.display()
                );
                None
            }
        }
    }

    /// While failed: refuses new requests (with the failure) and every `RETRY_INTERVAL` tries to
    /// write the held group again (in a new file if its file's sync failed). On success the
    /// group goes to the sync thread as any other and the journal takes requests again.
    fn wait_and_retry(&mut self) {
        if !self.group_is_empty() {
            // A group cut short by the failure: hold it.
            self.flush(FlushReason::MaxWait);
        }
        match self.rx.recv_timeout(RETRY_INTERVAL) {
            Ok(Msg::Req(req)) => {
                self.add(req);
                return;
            }
            Ok(Msg::Force(ledger, done, at)) => {
                self.add_force(ledger, done, at);
                return;
            }
            Ok(Msg::Wake) => return,
            Ok(Msg::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                self.stopping = true;
                return;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        self.retry();
    }

    /// One attempt to leave the failed state, at most every `RETRY_INTERVAL`.
    fn retry(&mut self) {
        let now = Instant::now();
        if self
            .last_retry
            .is_some_and(|at| now.saturating_duration_since(at) < RETRY_INTERVAL)
        {
            return;
        }
        self.last_retry = Some(now);
        let poisoned = self
            .failure
            .poisoned_file()
            .is_some_and(|p| p >= self.file.file.id);
        // In direct mode chunks of the current file may still wait for the sync thread: a
        // rewind into it could read back (and write again) a block before its chunk is written,
        // so the held group goes to a new file (whose only writer is then this retry: no
        // request is taken while a group is held).
        let rewind_here = self.file.is_direct()
            && self
                .held
                .as_ref()
                .is_some_and(|h| h.file_id == self.file.file.id);
        if (poisoned || rewind_here) && !self.roll_over() {
            return;
        }
        let Some(held) = self.held.take() else {
            self.recovered();
            return;
        };
        let start = if held.file_id == self.file.file.id {
            held.start
        } else {
            self.file.written
        };
        let written = self.file.rewind(start).and_then(|_| {
            for op in &held.ops {
                self.file.append(op);
            }
            self.file.write_pending(self.cfg.prealloc_size)
        });
        if let Err(e) = written {
            log::debug!("journal {}: retry failed: {e}", self.dir.display());
            self.held = Some(held);
            return;
        }
        let group = Group {
            file: self.file.file.clone(),
            end: self.file.written,
            chunks: Vec::new(),
            ops: held.ops,
            dones: held.dones,
            enqueued: held.enqueued,
            entries: held.entries,
            handed: metrics::start(),
            written_acks: Vec::new(),
            deferred_ledgers: Vec::new(),
        };
        self.recovered();
        self.hand_over(group);
    }

    fn recovered(&mut self) {
        self.failure.clear();
        self.stats.recoveries.inc();
        log::warn!(
            "journal {}: writing again after a failure",
            self.dir.display()
        );
    }
}
