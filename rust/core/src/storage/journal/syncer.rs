//! The force-write thread: writes the groups handed over for direct writes, syncs (once for all
//! that are ready), applies them to entry logs and index in order, then completes their callers.
//! It never forms groups.

use std::sync::Arc;

use crate::queue::{Receiver, RecvTimeoutError, Sender};

use super::deferred::LostDeferred;
use super::failure::Failure;
use super::file::JournalFile;
use super::stats::JournalStats;
use super::sync_progress::SyncProgress;
use super::{Applier, Group, Mark, Msg, MAX_GROUPS_IN_FLIGHT};
use crate::error::{Result, StorageError};
use crate::metrics;

/// The force-write thread: syncs written groups (once for all that are ready), applies them in
/// order and completes their callers.
pub(super) struct Syncer {
    pub(super) index: usize,
    pub(super) sync_data: bool,
    /// `journalRemoveFromPageCache`: drop synced pages (see `JournalFile::drop_synced_pages`).
    pub(super) remove_from_page_cache: bool,
    pub(super) page_cache_flush_interval: std::time::Duration,
    pub(super) rx: Receiver<Group>,
    pub(super) applier: Arc<dyn Applier>,
    pub(super) failure: Arc<Failure>,
    pub(super) stats: Arc<JournalStats>,
    /// With `journalSyncData=false`: the file written since its last sync.
    pub(super) unsynced: Option<Arc<JournalFile>>,
    /// With `journalSyncData=false`: when `unsynced` was last synced (or the thread started).
    pub(super) last_sync: std::time::Instant,
    /// Adaptive group commit: the syncs in flight, shared with the journal thread.
    pub(super) progress: Arc<SyncProgress>,
    /// Ledgers whose acknowledged deferred-sync records a failure lost (shared with the writer).
    pub(super) lost: Arc<LostDeferred>,
    /// With `journalAdaptiveGroupWrites`: the journal thread's queue, to wake it when the device
    /// goes idle while a formed group waits.
    pub(super) wake: Option<Sender<Msg>>,
}

impl Syncer {
    pub(super) fn run(mut self) {
        loop {
            let first = if self.unsynced.is_some() {
                // Due every interval since the last sync, however busy the queue: a wait
                // restarted by each group would never end under steady adds.
                let due = self.last_sync + self.page_cache_flush_interval;
                let wait = due.saturating_duration_since(std::time::Instant::now());
                if wait.is_zero() {
                    self.sync_unsynced();
                    continue;
                }
                match self.rx.recv_timeout(wait) {
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
            if let Some(picked) = metrics::start() {
                for g in &groups {
                    self.stats
                        .force_write_enqueue
                        .ok
                        .record_between(g.handed, picked);
                }
            }
            self.complete(groups);
        }
        self.sync_unsynced();
    }

    fn complete(&mut self, groups: Vec<Group>) {
        let handed = groups.len();
        // Groups of a file whose sync failed are never acknowledged, even if a later sync of the
        // same file succeeds: after a failed fsync the kernel may have dropped their pages.
        let poisoned = self.failure.poisoned_file();
        let (dead, mut live): (Vec<Group>, Vec<Group>) = groups
            .into_iter()
            .partition(|g| poisoned.is_some_and(|p| g.file.id <= p));
        if !dead.is_empty() {
            let e = self.failure.get().unwrap_or_else(|| StorageError::Io {
                context: "journal file whose sync failed".to_string(),
                source: std::io::Error::other("not durable"),
            });
            self.fail(dead, &e);
        }
        let Some(last) = live.last() else {
            self.device_done(handed);
            return;
        };
        let mark = Mark {
            file_id: last.file.id,
            offset: last.end,
        };
        let newest = live.iter().map(|g| g.file.id).max().unwrap_or(mark.file_id);
        let written = self.write_chunks(&mut live);
        // Deferred-sync records are acknowledged once written, before the sync (direct mode;
        // with page-cache writes the journal thread acknowledged them already).
        for g in &mut live {
            for done in g.written_acks.drain(..) {
                done(written.clone());
            }
            if written.is_err() {
                g.deferred_ledgers.clear(); // not acknowledged: nothing lost
            }
        }
        let made_durable = written.and_then(|_| self.make_durable(&live));
        // The device is free before these groups are applied and acknowledged: the journal
        // thread may write and hand over its next group meanwhile.
        self.device_done(handed);
        if let Err(e) = made_durable {
            log::error!("journal {}: {e}", self.index);
            self.stats.failures.inc();
            self.failure.set_sync_failed(newest, e.clone());
            self.fail(live, &e);
            return;
        }
        let mut ops = Vec::with_capacity(live.iter().map(|g| g.ops.len()).sum());
        let mut dones = Vec::with_capacity(live.iter().map(|g| g.dones.len()).sum());
        let mut enqueued = Vec::with_capacity(dones.capacity());
        let mut deferred_ledgers = Vec::new();
        for g in live {
            ops.extend(g.ops);
            dones.extend(g.dones);
            enqueued.extend(g.enqueued);
            deferred_ledgers.extend(g.deferred_ledgers);
        }
        let applied = self.applier.apply(self.index, &ops, mark);
        if let Err(e) = &applied {
            // Durable but not readable: acknowledged deferred-sync entries may not be read.
            self.lost.mark(&deferred_ledgers);
            // The records are durable but not applied: their callers get the error (nothing
            // is acknowledged) and the mark does not move for them. Later groups may apply once
            // the entry logs have room again.
            log::error!("journal {}: applying records failed: {e}", self.index);
            self.stats.failures.inc();
            self.failure.bump();
        }
        drop(ops);
        let now = self.time_entries(&enqueued, applied.is_ok());
        // Completions (a server's response, say) time themselves with the same clock read as
        // the group.
        metrics::with_now(now, || {
            for done in dones {
                done(applied.clone());
            }
        });
    }

    /// `groups` groups no longer wait for the device; wakes the journal thread if it waits for
    /// that with a group formed.
    fn device_done(&self, groups: usize) {
        if self.progress.synced(groups) {
            if let Some(wake) = &self.wake {
                // Full: the journal thread has requests to take and sees the idle device then.
                let _ = wake.try_send(Msg::Wake);
            }
        }
    }

    fn fail(&self, groups: Vec<Group>, e: &StorageError) {
        for g in groups {
            if g.written_acks.is_empty() {
                // Its deferred-sync records were acknowledged when written: now lost.
                self.lost.mark(&g.deferred_ledgers);
            }
            let now = self.time_entries(&g.enqueued, false);
            metrics::with_now(now, || {
                for done in g.dones.into_iter().chain(g.written_acks) {
                    done(Err(e.clone()));
                }
            });
        }
    }

    /// `JOURNAL_ADD_ENTRY` for the entries just completed: one clock read for all of them,
    /// returned for their completions (None with metrics off).
    fn time_entries(
        &self,
        enqueued: &[(std::time::Instant, bool)],
        ok: bool,
    ) -> Option<std::time::Instant> {
        let now = metrics::start()?;
        for (at, is_entry) in enqueued {
            if *is_entry {
                self.stats.add_entry.record_between(ok, Some(*at), now);
            }
        }
        Some(now)
    }

    /// Direct mode: writes the groups' records, in journal order (a chunk rewrites the partial
    /// block the one before it ended in). A failed write fails like a failed sync: nothing of the
    /// file is acknowledged any more and the journal moves to a new file.
    fn write_chunks(&self, groups: &mut [Group]) -> Result<()> {
        for g in groups {
            if g.chunks.is_empty() {
                continue;
            }
            let writing = metrics::start();
            let mut written = Ok(());
            for chunk in &mut g.chunks {
                written = g.file.write_chunk(chunk);
                if written.is_err() {
                    break;
                }
            }
            self.stats
                .flush_latency
                .record_since(written.is_ok(), writing);
            written?;
            // Freed here, once written: the writer allocates a fresh buffer per group.
            g.chunks.clear();
        }
        Ok(())
    }

    /// One fdatasync per file for all the groups (several files only around a rollover).
    fn make_durable(&mut self, groups: &[Group]) -> Result<()> {
        let mut synced: Option<&Arc<JournalFile>> = None;
        let mut entries = 0u64;
        // The end of the last group written to `synced`.
        let mut synced_end = 0u64;
        for g in groups {
            let changed_file = synced.is_none_or(|f| !Arc::ptr_eq(f, &g.file));
            if self.sync_data {
                if changed_file {
                    if let Some(prev) = synced {
                        self.sync_file(prev, entries)?;
                        self.after_sync(prev, synced_end);
                        entries = 0;
                    }
                    synced = Some(&g.file);
                }
                entries += g.entries;
                synced_end = g.end;
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
            self.sync_file(last, entries)?;
            self.after_sync(last, synced_end);
        }
        Ok(())
    }

    fn after_sync(&self, file: &JournalFile, synced_end: u64) {
        if self.remove_from_page_cache {
            file.drop_synced_pages(synced_end);
        }
    }

    /// One timed fdatasync that made `entries` entries durable.
    fn sync_file(&self, file: &JournalFile, entries: u64) -> Result<()> {
        let syncing = metrics::start();
        let result = file.sync();
        self.stats.sync.record_since(result.is_ok(), syncing);
        if result.is_ok() {
            self.stats.syncs.inc();
            self.stats.force_write_grouping.ok.record(entries);
        }
        result
    }

    fn sync_unsynced(&mut self) {
        let Some(file) = self.unsynced.take() else {
            return;
        };
        self.last_sync = std::time::Instant::now();
        match self.sync_file(&file, 0) {
            Ok(()) => {}
            Err(e) => {
                log::error!("journal {}: {e}", self.index);
                self.stats.failures.inc();
                self.failure.set_sync_failed(file.id, e);
            }
        }
    }
}
