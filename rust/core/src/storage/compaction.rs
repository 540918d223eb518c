//! Compaction of entry logs (BookKeeper's minor and major compaction): a sealed log whose live
//! share of bytes fell to a threshold has its live entries written again (sorted, to the active
//! log) and indexed in a new segment, which makes them the newest copies; once both are durable
//! and the manifest lists the segment, the old log is removed. A crash at any point leaves the
//! old log in place (and at worst a second copy of some entries, unreferenced or equal).

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::entrylog::{self, scan_entries};
use super::index::checkpoint_record;
use super::index::segment::{IndexEntry, Segment, SegmentWriter};
use super::Inner;
use crate::error::{Result, StorageError};
use crate::fs;

/// What one compaction pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CompactionReport {
    pub logs_compacted: u64,
    /// Live bytes written again.
    pub bytes_moved: u64,
    /// Bytes of the removed logs.
    pub bytes_freed: u64,
}

impl Inner {
    /// Compacts every sealed entry log whose live bytes are at most `threshold` of its bytes
    /// (0 < threshold <= 1), least live first. Logs with nothing live are removed outright.
    pub(super) fn compact(&self, threshold: f64) -> Result<CompactionReport> {
        let _one_at_a_time = self.gc_lock.lock();
        let mut report = CompactionReport::default();
        if !(threshold > 0.0 && threshold <= 1.0) {
            return Ok(report);
        }
        // Chosen while no flush runs: a flush in progress may have sealed a log whose entries
        // its segment does not index yet (they would look dead). Later flushes only write to
        // the active log (never chosen) and newer ones.
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
        let mut candidates: Vec<(f64, u32, u64)> = {
            let idx = self.shared.index.read();
            maps.iter()
                .filter(|(id, _)| Some(**id) != active && Some(**id) != newest)
                .filter_map(|(id, map)| {
                    let total: u64 = map.values().sum();
                    let live: u64 = map
                        .iter()
                        .filter(|(l, _)| idx.ledgers.contains_key(l))
                        .map(|(_, b)| *b)
                        .sum();
                    let share = if total == 0 {
                        0.0
                    } else {
                        live as f64 / total as f64
                    };
                    (share <= threshold).then_some((share, *id, total))
                })
                .collect()
        };
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, id, _) in candidates {
            if self.shared.wake.lock().stop {
                break;
            }
            // Held by a move between tiers: compacted by a later pass.
            let Some(_pin) = self.shared.entrylog.pin(id) else {
                continue;
            };
            let (moved, freed) = self.compact_log(id)?;
            report.logs_compacted += 1;
            report.bytes_moved += moved;
            report.bytes_freed += freed;
        }
        self.stats.compacted_logs.add(report.logs_compacted);
        self.stats.gc_reclaimed_bytes.add(report.bytes_freed);
        Ok(report)
    }

    /// Rewrites the live entries of log `id` and removes it; returns (bytes moved, freed).
    fn compact_log(&self, id: u32) -> Result<(u64, u64)> {
        let shared = &self.shared;
        let Some(path) = shared.entrylog.log_path(id) else {
            return Ok((0, 0));
        };
        // An entry is live if its ledger exists and the index's newest copy is this record.
        let mut live: Vec<(u64, u64, Bytes)> = Vec::new();
        let mut moved = 0u64;
        let rate = self.cfg.compaction_rate_bytes;
        let started = Instant::now();
        let mut scanned = 0u64;
        let mut failure: Option<StorageError> = None;
        scan_entries(
            &path,
            |ledger: u64, entry: u64, offset: u64, data: &[u8]| {
                if failure.is_some() {
                    return;
                }
                scanned += data.len() as u64;
                let since = match shared.index.read().ledgers.get(&ledger) {
                    Some(st) => st.since_seq,
                    None => return,
                };
                match shared.segments.get(ledger, entry, since) {
                    Ok(Some(at)) if at.log_id() == id && at.offset() == offset => {
                        moved += data.len() as u64;
                        live.push((ledger, entry, Bytes::copy_from_slice(data)));
                    }
                    Ok(_) => {}
                    Err(e) => failure = Some(e),
                }
                // compactionRateByBytes: pace the scan so compaction leaves the disk to clients.
                if rate > 0 {
                    let due = Duration::from_secs_f64(scanned as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait.min(Duration::from_millis(200)));
                    }
                }
            },
        )?;
        if let Some(e) = failure {
            return Err(e);
        }
        if !live.is_empty() {
            live.sort_by_key(|(l, e, _)| (*l, *e));
            let seq = {
                let mut idx = shared.index.write();
                idx.next_seq += 1;
                idx.next_seq - 1
            };
            let mut locations = Vec::with_capacity(live.len());
            shared.entrylog.append(
                live.iter().map(|(l, e, d)| (*l, *e, &d[..])),
                &mut locations,
            )?;
            shared.entrylog.flush()?;
            shared.entrylog.sync()?;
            let dir = shared.segments.dir().to_path_buf();
            let mut w = SegmentWriter::create(&dir, seq)?;
            for ((ledger, entry, _), at) in live.iter().zip(locations) {
                w.push(IndexEntry {
                    ledger: *ledger,
                    entry: *entry,
                    at,
                })?;
            }
            w.finish(true)?;
            fs::sync_dir(&dir)?;
            let seg = Segment::open(&dir, seq, 0)?;
            let mut f = shared.flusher.lock();
            shared.segments.push(seg);
            let next_seq = shared.index.read().next_seq;
            let mut data = Vec::new();
            checkpoint_record(
                &f.persisted_marks,
                next_seq,
                &shared.segments.manifest(),
                &mut data,
            );
            if let Err(e) = f.log.append(&data) {
                shared.index.write().checkpoint_failed();
                return Err(e);
            }
        }
        let freed = shared.entrylog.remove_log(id)?;
        log::info!(
            "compaction: {} rewritten ({moved} live bytes moved, {freed} bytes freed)",
            entrylog::log_name(id)
        );
        Ok((moved, freed))
    }
}
