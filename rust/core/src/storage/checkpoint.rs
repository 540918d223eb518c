//! Checkpoints and index merges. A checkpoint flushes the write cache (sorted by ledger and
//! entry) to the entry logs, writes its index segment, records ledger states, journal marks
//! and the manifest in `index.log`, then removes the journals the marks cover. A merge
//! combines adjacent index segments in the background. Both are crash-safe at every step: a
//! file is only referenced once it is durable, and only removed once nothing references it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::apply::{Flusher, Shared};
use super::index::checkpoint_record;
use super::index::segment::{IndexEntry, Segment, SegmentWriter};
use super::journal::Mark;
use super::writecache::Generation;
use super::Inner;
use crate::error::Result;
use crate::fs;

/// A flush that failed after its generation was taken: retried before anything else.
pub(super) struct PendingFlush {
    gen: Option<Arc<Generation>>,
    seq: u64,
    marks: Vec<Mark>,
    records: Vec<u8>,
    snapshot: bool,
}

impl Shared {
    /// Flushes the write cache and records a checkpoint; returns the marks it made durable.
    pub(super) fn flush(&self) -> Result<Vec<Mark>> {
        let mut f = self.flusher.lock();
        if let Some(p) = f.pending.take() {
            self.finish_flush(&mut f, p)?;
        }
        let p = {
            let mut idx = self.index.write();
            let snapshot = f.log.wants_snapshot() || idx.needs_snapshot();
            let gen = self.cache.swap();
            let seq = if gen.is_some() {
                idx.next_seq += 1;
                idx.next_seq - 1
            } else {
                0
            };
            let mut records = Vec::new();
            idx.take_delta(snapshot, &mut records);
            PendingFlush {
                gen,
                seq,
                marks: idx.marks.clone(),
                records,
                snapshot,
            }
        };
        self.finish_flush(&mut f, p)
    }

    fn finish_flush(&self, f: &mut Flusher, mut p: PendingFlush) -> Result<Vec<Mark>> {
        if let Some(gen) = p.gen.clone() {
            match self.write_generation(&gen, p.seq) {
                Ok(seg) => {
                    // Readers find the entries in the segment before they leave the cache.
                    self.segments.push(seg);
                    self.cache.flushed();
                    p.gen = None;
                }
                Err(e) => {
                    f.pending = Some(p);
                    return Err(e);
                }
            }
        }
        let next_seq = self.index.read().next_seq;
        let manifest = self.segments.manifest();
        let mut data = std::mem::take(&mut p.records);
        checkpoint_record(&p.marks, next_seq, &manifest, &mut data);
        let written = if p.snapshot {
            f.log.rewrite(&data)
        } else {
            f.log.append(&data)
        };
        if let Err(e) = written {
            // The delta is lost with the failed write: the next checkpoint writes everything.
            self.index.write().checkpoint_failed();
            return Err(e);
        }
        f.persisted_marks = p.marks.clone();
        self.remove_doomed(f);
        Ok(p.marks)
    }

    /// Writes a generation to the entry logs, sorted, and its index segment; both durable.
    fn write_generation(&self, gen: &Generation, seq: u64) -> Result<Arc<Segment>> {
        let mut locations = Vec::with_capacity(gen.entries());
        self.entrylog
            .append(gen.sorted().map(|(l, e, d)| (l, e, &d[..])), &mut locations)?;
        self.entrylog.flush()?;
        self.entrylog.sync()?;
        let dir = self.segments.dir().to_path_buf();
        let mut w = SegmentWriter::create(&dir, seq)?;
        for ((ledger, entry, _), at) in gen.sorted().zip(locations) {
            w.push(IndexEntry { ledger, entry, at })?;
        }
        w.finish()?;
        fs::sync_dir(&dir)?;
        Segment::open(&dir, seq, 0)
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
        let manifest = self.segments.replace(&inputs, merged);
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
    pub(super) fn checkpoint(&self) -> Result<()> {
        let marks = self.shared.flush()?;
        for (j, journal) in self.journals.iter().enumerate() {
            if let Some(m) = marks.get(j) {
                journal.remove_old_files(m.file_id, self.cfg.journal.max_backups)?;
            }
        }
        self.stats.checkpoints.inc();
        self.merges_wanted.store(true, Ordering::Release);
        self.shared.wake_signal.notify_all();
        Ok(())
    }

    /// The checkpoint thread: a checkpoint every `flushInterval`, or as soon as the write
    /// cache asks for one.
    pub(super) fn run_checkpointer(&self) {
        let mut wake = self.shared.wake.lock();
        while !wake.stop {
            let mut timed_out = false;
            if !wake.flush {
                if self.cfg.flush_interval.is_zero() {
                    self.shared.wake_signal.wait(&mut wake);
                } else {
                    timed_out = self
                        .shared
                        .wake_signal
                        .wait_for(&mut wake, self.cfg.flush_interval)
                        .timed_out();
                }
            }
            if wake.stop {
                break;
            }
            // Woken for another thread's sake (the merge thread shares the signal): wait on.
            if !std::mem::take(&mut wake.flush) && !timed_out {
                continue;
            }
            drop(wake);
            if let Err(e) = self.checkpoint() {
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
