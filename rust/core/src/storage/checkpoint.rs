//! Checkpoints and index merges. A checkpoint flushes the write cache (sorted by ledger and
//! entry) to the entry logs, writes its index segment, records ledger states, journal marks
//! and the manifest in `index.log`, then removes the journals the marks cover. A merge
//! combines adjacent index segments in the background. Both are crash-safe at every step: a
//! file is only referenced once it is durable, and only removed once nothing references it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::apply::{Flusher, PendingFlush, Shared};
use super::index::checkpoint_record;
use super::index::segment::{IndexEntry, Segment, SegmentWriter};
use super::journal::Mark;
use super::writecache::Generation;
use super::DiskPressure;
use super::Inner;
use crate::error::Result;
use crate::fs;

impl Shared {
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
        let pending = {
            let mut idx = self.index.write();
            let snapshot = durable && (f.log.wants_snapshot() || idx.needs_snapshot());
            let gen = self.cache.swap();
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
            f.flushed_marks = idx.marks.clone();
            gen.map(|gen| PendingFlush { gen, seq })
        };
        if let Some(p) = pending {
            self.write_pending(&mut f, p)?;
        }
        if !durable {
            return Ok(Vec::new());
        }
        self.record_checkpoint(&mut f)
    }

    fn write_pending(&self, f: &mut Flusher, p: PendingFlush) -> Result<()> {
        match self.write_generation(&p.gen, p.seq) {
            Ok(seg) => {
                // Readers find the entries in the segment before they leave the cache.
                self.segments.push(seg.clone());
                self.cache.flushed();
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
        self.entrylog.sync()?;
        for seg in &f.unsynced {
            seg.sync()?;
        }
        if !f.unsynced.is_empty() {
            fs::sync_dir(self.segments.dir())?;
        }
        // Synced with the entry-log bytes they index: safe to list (merges may take them too).
        for seg in f.unsynced.drain(..) {
            seg.set_durable();
        }
        let next_seq = self.index.read().next_seq;
        let manifest = self.segments.manifest();
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
            self.index.write().checkpoint_failed();
            return Err(e);
        }
        f.persisted_marks = f.flushed_marks.clone();
        self.remove_doomed(f);
        Ok(f.persisted_marks.clone())
    }

    /// Writes a generation to the entry logs, sorted, and its index segment (not synced).
    fn write_generation(&self, gen: &Generation, seq: u64) -> Result<Arc<Segment>> {
        let mut locations = Vec::with_capacity(gen.entries());
        self.entrylog.append_checked(
            gen.sorted().map(|(l, e, d, crc)| (l, e, &d[..], crc)),
            &mut locations,
        )?;
        self.entrylog.flush()?;
        let dir = self.segments.dir().to_path_buf();
        let mut w = SegmentWriter::create(&dir, seq)?;
        for ((ledger, entry, _, _), at) in gen.sorted().zip(locations) {
            w.push(IndexEntry { ledger, entry, at })?;
        }
        w.finish(false)?;
        let seg = Segment::open(&dir, seq, 0)?;
        seg.set_unsynced();
        Ok(seg)
    }

    fn remove_doomed(&self, f: &mut Flusher) {
        let doomed = std::mem::take(&mut f.doomed);
        self.segments.remove_files(&doomed);
    }

    /// Runs one merge if a level has enough segments. Returns whether it merged.
    pub(super) fn merge_once(&self) -> Result<bool> {
        let Some(inputs) = self.segments.pick_merge() else {
            return Ok(false);
        };
        let seq = {
            let mut idx = self.index.write();
            idx.next_seq += 1;
            idx.next_seq - 1
        };
        // Entries of deleted ledgers, and of earlier ledgers with a reused id, are dropped.
        let mut last: Option<(u64, u64, bool)> = None;
        let mut keep = |ledger: u64, seg_seq: u64| -> bool {
            if let Some((l, s, k)) = last {
                if l == ledger && s == seg_seq {
                    return k;
                }
            }
            let k = self
                .index
                .read()
                .ledgers
                .get(&ledger)
                .is_some_and(|st| seg_seq >= st.since_seq);
            last = Some((ledger, seg_seq, k));
            k
        };
        let merged = self.segments.merge(&inputs, seq, &mut keep)?;
        let mut f = self.flusher.lock();
        // Segments flushed since the last checkpoint are not in the manifest yet.
        let manifest: Vec<_> = self.segments.replace(&inputs, merged);
        f.doomed.extend(inputs);
        let next_seq = self.index.read().next_seq;
        let mut data = Vec::new();
        checkpoint_record(&f.persisted_marks, next_seq, &manifest, &mut data);
        if let Err(e) = f.log.append(&data) {
            self.index.write().checkpoint_failed();
            return Err(e);
        }
        self.remove_doomed(&mut f);
        Ok(true)
    }
}

impl Inner {
    /// A checkpoint; `wait`: the journal files it lets go are removed before it returns
    /// (otherwise in the background, see `Journal::remove_old_files`).
    pub(super) fn checkpoint(&self, wait: bool) -> Result<()> {
        let marks = self.shared.flush(true)?;
        for (j, journal) in self.journals.iter().enumerate() {
            if let Some(m) = marks.get(j) {
                journal.remove_old_files(m.file_id, self.cfg.journal.max_backups, wait)?;
            }
        }
        self.stats.checkpoints.inc();
        self.merges_wanted.store(true, Ordering::Release);
        self.shared.wake_signal.notify_all();
        Ok(())
    }

    /// The checkpoint thread: a checkpoint every `flushInterval`, and a flush (not durable)
    /// whenever the write cache asks for one in between.
    pub(super) fn run_checkpointer(&self) {
        let mut last_gc = std::time::Instant::now();
        let (mut last_minor, mut last_major) = (last_gc, last_gc);
        let interval = self.cfg.flush_interval;
        // A deadline, not a wait per pass: under steady adds the cache asks for a flush more
        // often than every interval, and a timer restarted by each of those wake-ups would
        // never fire (journals then grow without end, and GC, compaction and index merges
        // never run).
        let mut next_checkpoint = std::time::Instant::now() + interval;
        let mut wake = self.shared.wake.lock();
        while !wake.stop {
            if !wake.flush {
                if interval.is_zero() {
                    self.shared.wake_signal.wait(&mut wake);
                } else {
                    self.shared
                        .wake_signal
                        .wait_until(&mut wake, next_checkpoint);
                }
            }
            if wake.stop {
                break;
            }
            let asked = std::mem::take(&mut wake.flush);
            let due = !interval.is_zero() && std::time::Instant::now() >= next_checkpoint;
            // Woken for another thread's sake (the merge thread shares the signal): wait on.
            if !asked && !due {
                continue;
            }
            drop(wake);
            // The cache filled up: flush it; the timer: a checkpoint, which flushes the cache
            // too (and, every gcWaitTime, removal of entry logs whose ledgers are all deleted).
            let done = if due {
                next_checkpoint = std::time::Instant::now() + interval;
                self.checkpoint(false).and_then(|_| {
                    let gc = &self.cfg.gc_wait;
                    if !gc.is_zero() && last_gc.elapsed() >= *gc {
                        last_gc = std::time::Instant::now();
                        self.gc_entry_logs()?;
                    }
                    let cfg = &self.cfg;
                    let pressure =
                        DiskPressure::from_u8(self.disk_pressure.load(Ordering::Acquire));
                    let forced = cfg.force_gc_when_no_space && pressure != DiskPressure::Normal;
                    if forced {
                        // Space is short: everything deleted goes now (BookKeeper's forced GC).
                        last_gc = std::time::Instant::now();
                        self.gc_entry_logs()?;
                    }
                    for (interval, threshold, last, suspended) in [
                        (
                            cfg.major_compaction_interval,
                            cfg.major_compaction_threshold,
                            &mut last_major,
                            pressure != DiskPressure::Normal,
                        ),
                        (
                            cfg.minor_compaction_interval,
                            cfg.minor_compaction_threshold,
                            &mut last_minor,
                            pressure == DiskPressure::Full,
                        ),
                    ] {
                        let due = !interval.is_zero() && last.elapsed() >= interval;
                        if (forced && threshold > 0.0) || (due && !suspended) {
                            *last = std::time::Instant::now();
                            self.compact(threshold)?;
                        }
                    }
                    Ok(())
                })
            } else {
                self.shared.flush(false).map(|_| ())
            };
            if let Err(e) = done {
                log::error!("checkpoint failed: {e}");
                // Do not spin on a failing disk; a later request or the timer retries.
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            wake = self.shared.wake.lock();
        }
    }

    /// The merge thread: merges segments after checkpoints until no level is full.
    pub(super) fn run_merger(&self) {
        let mut wake = self.shared.wake.lock();
        while !wake.stop {
            if !self.merges_wanted.swap(false, Ordering::AcqRel) {
                self.shared.wake_signal.wait(&mut wake);
                continue;
            }
            drop(wake);
            loop {
                if self.shared.wake.lock().stop {
                    break;
                }
                match self.shared.merge_once() {
                    Ok(true) => self.stats.index_merges.inc(),
                    Ok(false) => break,
                    Err(e) => {
                        log::error!("index merge failed: {e}");
                        break;
                    }
                }
            }
            wake = self.shared.wake.lock();
        }
    }
}
