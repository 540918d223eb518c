//! Checkpoints: the write cache flushed to the entry logs (sorted by ledger and entry) and
//! indexed in a new segment; at a checkpoint also synced, with the ledger states, journal marks
//! and manifest recorded in `index.log` and the journal files the marks cover let go. Its
//! thread runs them every `flushInterval` and flushes whenever the write cache fills. Crash-safe
//! at every step: a file is referenced only once durable and removed only once unreferenced.
//! It owns `index.log`'s writer, through which merges and compactions record their segments;
//! it never decides which segments are merged or which entry logs are removed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::index::segment::{IndexEntry, Segment};
use super::index::segment_writer::SegmentWriter;
use super::index::{checkpoint_record, IndexLog};
use super::journal::{Journal, Mark};
use super::stats::StorageStats;
use super::stores::Stores;
use super::writecache::Generation;
use crate::error::{Result, StorageError};
use crate::fs;

/// How long an add waits for a running flush to make room in a full write cache.
const FULL_CACHE_WAIT: Duration = Duration::from_secs(120);
/// How long the checkpoint thread waits after a failure before it may try again.
const FAILURE_PAUSE: Duration = Duration::from_millis(100);

/// What wakes the checkpoint and merge threads early.
#[derive(Default)]
struct Wake {
    stop: bool,
    flush: bool,
}

/// A flush that failed after its generation was taken: retried before anything else.
struct PendingFlush {
    gen: Arc<Generation>,
    seq: u64,
}

/// The index log and what a failed flush left to retry; held while a flush, a merge or a
/// compaction records its result, which also serialises them.
pub(super) struct Flusher {
    log: IndexLog,
    pending: Option<PendingFlush>,
    /// Segments flushed since the last checkpoint: not synced, not in the manifest yet.
    unsynced: Vec<Arc<Segment>>,
    /// Ledger-state changes taken by flushes since the last checkpoint.
    records: Vec<u8>,
    /// Whether the next checkpoint rewrites `index.log` as a snapshot.
    snapshot: bool,
    /// The journal marks the flushed segments and `records` cover.
    flushed_marks: Vec<Mark>,
    /// The marks recorded by the last checkpoint record written.
    persisted_marks: Vec<Mark>,
    /// Merged-away segments whose files go once a manifest without them is durable.
    doomed: Vec<Arc<Segment>>,
}

/// Flushes and checkpoints of one storage, and the wake-ups of its checkpoint and merge
/// threads.
pub(super) struct Checkpointer {
    stores: Arc<Stores>,
    stats: Arc<StorageStats>,
    /// `flushInterval`; zero: no timed checkpoints.
    interval: Duration,
    /// `journalMaxBackups`: journal files kept after a checkpoint covers them.
    max_backups: usize,
    flusher: Mutex<Flusher>,
    wake: Mutex<Wake>,
    wake_signal: Condvar,
    /// A checkpoint added a segment: the merge thread looks for work.
    merges_wanted: AtomicBool,
}

impl Checkpointer {
    /// The checkpointer of `stores`, whose `index.log` is `log` and whose last checkpoint
    /// recorded `marks`.
    pub(super) fn new(
        stores: Arc<Stores>,
        stats: Arc<StorageStats>,
        log: IndexLog,
        marks: Vec<Mark>,
        interval: Duration,
        max_backups: usize,
    ) -> Checkpointer {
        Checkpointer {
            stores,
            stats,
            interval,
            max_backups,
            flusher: Mutex::new(Flusher {
                log,
                pending: None,
                unsynced: Vec::new(),
                records: Vec::new(),
                snapshot: false,
                flushed_marks: marks.clone(),
                persisted_marks: marks,
                doomed: Vec::new(),
            }),
            wake: Mutex::new(Wake::default()),
            wake_signal: Condvar::new(),
            merges_wanted: AtomicBool::new(true),
        }
    }

    /// A checkpoint: flush, sync, record, and let the covered journal files of `journals` go;
    /// `wait`: they are removed before it returns (otherwise in the background, see
    /// `Journal::remove_old_files`).
    pub(super) fn checkpoint(&self, journals: &[Journal], wait: bool) -> Result<()> {
        let marks = self.flush(true)?;
        // A full disk (the space reserve given back) keeps no journal backups: the checkpoint
        // covers them, and they may be most of what the disk holds.
        let backups = if self.stores.reserve.is_released() {
            0
        } else {
            self.max_backups
        };
        for (j, journal) in journals.iter().enumerate() {
            if let Some(m) = marks.get(j) {
                journal.remove_old_files(m.file_id, backups, wait)?;
            }
        }
        self.stats.checkpoints.inc();
        self.merges_wanted.store(true, Ordering::Release);
        self.wake_signal.notify_all();
        Ok(())
    }

    /// Flushes the write cache to the entry logs and a new segment. `durable`: then also
    /// sync everything flushed so far and record a checkpoint (ledger states, journal marks,
    /// manifest) in `index.log`; returns the marks it made durable (journals before them may
    /// go). A flush that is not durable (the cache filled up between checkpoints) leaves its
    /// segment out of the manifest until the next checkpoint: after a crash the journal,
    /// still holding those entries, replays them.
    pub(super) fn flush(&self, durable: bool) -> Result<Vec<Mark>> {
        let mut f = self.flusher.lock();
        if let Some(p) = f.pending.take() {
            self.write_pending(&mut f, p)?;
        }
        if let Some(p) = self.take_generation(&mut f, durable) {
            self.write_pending(&mut f, p)?;
        }
        if !durable {
            return Ok(Vec::new());
        }
        self.record_checkpoint(&mut f)
    }

    /// Under the index lock: the write cache's active half becomes the flushing one, and the
    /// ledger-state changes and journal marks it covers are taken.
    fn take_generation(&self, f: &mut Flusher, durable: bool) -> Option<PendingFlush> {
        let mut idx = self.stores.index.write();
        let snapshot = durable && (f.log.wants_snapshot() || idx.needs_snapshot());
        let gen = self.stores.cache.swap();
        if let Some(gen) = &gen {
            for ledger in gen.ledger_ids() {
                idx.touch_meta(ledger); // their last entry moved
            }
        }
        let seq = if gen.is_some() {
            idx.next_seq += 1;
            idx.next_seq - 1
        } else {
            0
        };
        idx.take_delta(snapshot, &mut f.records);
        f.snapshot |= snapshot;
        // Why: a checkpoint must never record marks older than one already recorded, or a
        // replay would apply journal records twice over a newer index.
        assert!(
            idx.marks
                .iter()
                .zip(&f.flushed_marks)
                .all(|(now, before)| now >= before),
            "journal marks moved backwards"
        );
        f.flushed_marks = idx.marks.clone();
        gen.map(|gen| PendingFlush { gen, seq })
    }

    fn write_pending(&self, f: &mut Flusher, p: PendingFlush) -> Result<()> {
        match self.write_generation(&p.gen, p.seq) {
            Ok((seg, kept)) => {
                // Why: the cache may forget the generation only once a live segment indexes
                // every entry of it still readable, or reads between the two would miss them.
                assert_eq!(
                    seg.entries(),
                    kept,
                    "a flush's segment must index its whole generation"
                );
                // Readers find the entries in the segment before they leave the cache.
                self.stores.segments.push(seg.clone());
                self.stores.cache.flushed();
                f.unsynced.push(seg);
                Ok(())
            }
            Err(e) => {
                f.pending = Some(p);
                Err(e)
            }
        }
    }

    /// Syncs the entry logs and the segments flushed since the last checkpoint, then appends
    /// the ledger-state changes and a checkpoint record to `index.log`.
    fn record_checkpoint(&self, f: &mut Flusher) -> Result<Vec<Mark>> {
        let stores = &self.stores;
        stores.entrylog.sync()?;
        for seg in &f.unsynced {
            seg.sync()?;
        }
        if !f.unsynced.is_empty() {
            fs::sync_dir(stores.segments.dir())?;
        }
        // Synced with the entry-log bytes they index: safe to list (merges may take them too).
        for seg in f.unsynced.drain(..) {
            seg.set_durable();
        }
        let next_seq = stores.index.read().next_seq;
        let manifest = stores.segments.manifest();
        let mut data = std::mem::take(&mut f.records);
        checkpoint_record(&f.flushed_marks, next_seq, &manifest, &mut data);
        let written = if std::mem::take(&mut f.snapshot) {
            f.log.rewrite(&data)
        } else {
            f.log.append(&data)
        };
        if let Err(e) = written {
            // The changes are lost with the failed write: the next checkpoint writes a
            // snapshot of every ledger.
            stores.index.write().checkpoint_failed();
            return Err(e);
        }
        f.persisted_marks = f.flushed_marks.clone();
        remove_doomed(stores, f);
        Ok(f.persisted_marks.clone())
    }

    /// Writes a generation to the entry logs, sorted, and its index segment (not synced);
    /// returns the segment and how many entries it indexes. Entries of ledgers deleted since
    /// they were journalled are left out: nothing reads them again (the deletion is durable
    /// before the index forgets the ledger), and on a full disk a flush retried after the
    /// deletions must not need room for them.
    fn write_generation(&self, gen: &Generation, seq: u64) -> Result<(Arc<Segment>, u64)> {
        let stores = &self.stores;
        let gone: HashSet<u64> = {
            let idx = stores.index.read();
            gen.ledger_ids()
                .filter(|l| !idx.ledgers.contains_key(l))
                .collect()
        };
        let kept = || gen.sorted().filter(|(l, _, _, _)| !gone.contains(l));
        let mut locations = Vec::with_capacity(gen.entries());
        stores.entrylog.append_published(
            kept().map(|(l, e, d, crc)| (l, e, &d[..], crc)),
            &mut locations,
        )?;
        let dir = stores.segments.dir().to_path_buf();
        let mut w = SegmentWriter::create(&dir, seq)?;
        let count = locations.len() as u64;
        for ((ledger, entry, _, _), at) in kept().zip(locations) {
            w.push(IndexEntry { ledger, entry, at })?;
        }
        w.finish(false)?;
        let seg = Segment::open(&dir, seq, 0)?;
        seg.set_unsynced();
        Ok((seg, count))
    }

    /// Runs `choose` while no flush runs: a flush in progress may have sealed an entry log
    /// whose entries its segment does not index yet (they would look dead to a collection).
    pub(super) fn without_flush<T>(&self, choose: impl FnOnce() -> T) -> T {
        let _no_flush = self.flusher.lock();
        choose()
    }

    /// Makes `seg` (synced, with the entry-log bytes it indexes) live and records the new
    /// manifest in `index.log`, with the marks of the last checkpoint: a compaction's result.
    pub(super) fn add_segment(&self, seg: Arc<Segment>) -> Result<()> {
        let mut f = self.flusher.lock();
        self.stores.segments.push(seg);
        record_manifest(&self.stores, &mut f, self.stores.segments.manifest())
    }

    /// Puts `merged` in the place of the segments `inputs` and records the new manifest; the
    /// inputs' files go once it is durable: a merge's result.
    pub(super) fn replace_segments(
        &self,
        inputs: Vec<Arc<Segment>>,
        merged: Arc<Segment>,
    ) -> Result<()> {
        let mut f = self.flusher.lock();
        // Segments flushed since the last checkpoint are not in the manifest yet.
        let manifest: Vec<_> = self.stores.segments.replace(&inputs, merged);
        f.doomed.extend(inputs);
        record_manifest(&self.stores, &mut f, manifest)?;
        remove_doomed(&self.stores, &mut f);
        Ok(())
    }

    /// Asks the checkpoint thread for a flush now.
    pub(super) fn request_flush(&self) {
        self.wake.lock().flush = true;
        self.wake_signal.notify_all();
    }

    /// Holds the caller (the journal's sync thread, so new adds queue behind it) while the
    /// write cache is full and a flush runs: memory stays bounded when the disk is slower
    /// than the journal.
    pub(super) fn wait_for_room(&self) -> Result<()> {
        let cache = &self.stores.cache;
        if !cache.is_full() {
            return Ok(());
        }
        let deadline = Instant::now() + FULL_CACHE_WAIT;
        while cache.is_full() {
            if self.wake.lock().stop {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StorageError::Io {
                    context: "the write cache stayed full: flushes to the entry logs are failing \
                              or stalled"
                        .into(),
                    source: std::io::Error::from(std::io::ErrorKind::TimedOut),
                });
            }
            self.request_flush();
            cache.wait_for_room((deadline - now).min(Duration::from_millis(200)));
        }
        Ok(())
    }

    /// Tells the checkpoint and merge threads to stop.
    pub(super) fn stop(&self) {
        self.wake.lock().stop = true;
        self.wake_signal.notify_all();
    }

    /// The checkpoint thread: a checkpoint of `journals` every `flushInterval`, and a flush
    /// (not durable) whenever the write cache asks for one in between.
    pub(super) fn run_checkpoints(&self, journals: &[Journal]) {
        // A deadline, not a wait per pass: under steady adds the cache asks for a flush more
        // often than every interval, and a timer restarted by each of those wake-ups would
        // never fire (journals then grow without end, and index merges never run).
        let mut next_checkpoint = Instant::now() + self.interval;
        while let Some(due) = self.next_job(next_checkpoint) {
            let done = if due {
                next_checkpoint = Instant::now() + self.interval;
                self.checkpoint(journals, false)
            } else {
                self.flush(false).map(|_| ())
            };
            if let Err(e) = done {
                log::error!("checkpoint failed: {e}");
                // The disk filled between two disk checks: the space reserve takes the retry.
                self.stores.reserve.release_on_no_space(&e);
                // Do not spin on a failing disk; a later request or the timer retries.
                std::thread::sleep(FAILURE_PAUSE);
            }
        }
    }

    /// Waits for the checkpoint thread's next job: Some(true) for a checkpoint (the timer),
    /// Some(false) for a flush the write cache asked for, None once told to stop.
    fn next_job(&self, next_checkpoint: Instant) -> Option<bool> {
        let timed = !self.interval.is_zero();
        let mut wake = self.wake.lock();
        loop {
            if wake.stop {
                return None;
            }
            if !wake.flush {
                if timed {
                    self.wake_signal.wait_until(&mut wake, next_checkpoint);
                } else {
                    self.wake_signal.wait(&mut wake);
                }
            }
            if wake.stop {
                return None;
            }
            let asked = std::mem::take(&mut wake.flush);
            let due = timed && Instant::now() >= next_checkpoint;
            // Woken for another thread's sake (the merge thread shares the signal): wait on.
            if asked || due {
                return Some(due);
            }
        }
    }

    /// Waits until a checkpoint asks for merges; false once told to stop.
    pub(super) fn wait_for_merges(&self) -> bool {
        let mut wake = self.wake.lock();
        loop {
            if wake.stop {
                return false;
            }
            if self.merges_wanted.swap(false, Ordering::AcqRel) {
                return true;
            }
            self.wake_signal.wait(&mut wake);
        }
    }

    /// Whether the checkpoint and merge threads were told to stop.
    pub(super) fn stopping(&self) -> bool {
        self.wake.lock().stop
    }
}

/// Appends a checkpoint record listing `manifest` (with the marks of the last checkpoint) to
/// `index.log`: how a merge or a compaction makes its new segment part of the index.
fn record_manifest(
    stores: &Stores,
    f: &mut Flusher,
    manifest: Vec<super::index::SegmentRef>,
) -> Result<()> {
    let next_seq = stores.index.read().next_seq;
    let mut data = Vec::new();
    checkpoint_record(&f.persisted_marks, next_seq, &manifest, &mut data);
    if let Err(e) = f.log.append(&data) {
        stores.index.write().checkpoint_failed();
        return Err(e);
    }
    Ok(())
}

fn remove_doomed(stores: &Stores, f: &mut Flusher) {
    let doomed = std::mem::take(&mut f.doomed);
    stores.segments.remove_files(&doomed);
}
