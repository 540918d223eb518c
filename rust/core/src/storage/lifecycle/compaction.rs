//! Compaction of entry logs (BookKeeper's minor and major compaction): a sealed log whose live
//! share of bytes fell to a threshold has its live entries written again (sorted, to the active
//! log) and indexed in a new segment, which makes them the newest copies; once both are durable
//! and the manifest lists the segment, the old log is removed. A crash at any point leaves the
//! old log in place (and at worst a second copy of some entries, unreferenced or equal). It
//! decides which logs are compacted; it never removes a log with a live entry not copied.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::gc::collectable_logs;
use crate::error::{Result, StorageError};
use crate::fs;
use crate::storage::checkpoint::Checkpointer;
use crate::storage::entrylog::{self, scan_entries};
use crate::storage::index::segment::{IndexEntry, Segment};
use crate::storage::index::segment_writer::SegmentWriter;
use crate::storage::stats::StorageStats;
use crate::storage::stores::Stores;

/// What one compaction pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CompactionReport {
    pub logs_compacted: u64,
    /// Live bytes written again.
    pub bytes_moved: u64,
    /// Bytes of the removed logs.
    pub bytes_freed: u64,
}

/// Clears the progress gauges when a compaction ends, however it ends.
struct Finish<'a>(&'a crate::storage::stats::CompactionProgress);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// What a compaction works with.
pub(super) struct Compactor<'a> {
    pub(super) stores: &'a Stores,
    pub(super) checkpointer: &'a Checkpointer,
    pub(super) stats: &'a StorageStats,
    /// `compactionRateByBytes`: bytes scanned per second; 0: unpaced.
    pub(super) rate_bytes: u64,
}

impl Compactor<'_> {
    /// Compacts every sealed entry log whose live bytes are at most `threshold` of its bytes
    /// (0 < threshold <= 1), least live first. Logs with nothing live are removed outright.
    /// Between two logs it calls `between` (the scheduler runs a due tier pass there) and
    /// stops once `stop()` says so.
    pub(super) fn compact(
        &self,
        threshold: f64,
        stop: &dyn Fn() -> bool,
        between: &mut dyn FnMut(),
    ) -> Result<CompactionReport> {
        let mut report = CompactionReport::default();
        if !(threshold > 0.0 && threshold <= 1.0) {
            return Ok(report);
        }
        let candidates = self.candidates(threshold)?;
        let progress = &self.stats.compaction;
        progress.start(
            candidates.len() as u64,
            candidates.iter().map(|(_, bytes)| bytes).sum(),
        );
        // Reset however the loop ends (a failed log returns early).
        let _finish = Finish(progress);
        for (id, bytes) in candidates {
            if stop() {
                break;
            }
            // Held by a move between tiers: compacted by a later pass.
            let Some(_pin) = self.stores.entrylog.pin(id) else {
                progress.log_done(bytes);
                continue;
            };
            let (moved, freed) = self.compact_log(id)?;
            report.logs_compacted += 1;
            report.bytes_moved += moved;
            report.bytes_freed += freed;
            progress.log_done(bytes);
            between();
        }
        self.stats.compacted_logs.add(report.logs_compacted);
        self.stats.gc_reclaimed_bytes.add(report.bytes_freed);
        Ok(report)
    }

    /// The logs at most `threshold` live, least live first, with their bytes.
    fn candidates(&self, threshold: f64) -> Result<Vec<(u32, u64)>> {
        Ok(self
            .candidate_logs(threshold)?
            .into_iter()
            .map(|(id, _, total)| (id, total))
            .collect())
    }

    /// The logs at most `threshold` live with their live bytes (by their ledgers maps), least
    /// live first.
    pub(super) fn candidates_with_live(&self, threshold: f64) -> Result<Vec<(u32, u64)>> {
        Ok(self
            .candidate_logs(threshold)?
            .into_iter()
            .map(|(id, live, _)| (id, live))
            .collect())
    }

    /// (id, live bytes, bytes) of the logs at most `threshold` live, least live first.
    fn candidate_logs(&self, threshold: f64) -> Result<Vec<(u32, u64, u64)>> {
        let logs = collectable_logs(self.stores, self.checkpointer)?;
        let mut candidates: Vec<(f64, u32, u64, u64)> = {
            let idx = self.stores.index.read();
            logs.iter()
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
                    (share <= threshold).then_some((share, *id, live, total))
                })
                .collect()
        };
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(candidates
            .into_iter()
            .map(|(_, id, live, total)| (id, live, total))
            .collect())
    }

    /// Rewrites the live entries of log `id` and removes it; returns (bytes moved, freed).
    pub(super) fn compact_log(&self, id: u32) -> Result<(u64, u64)> {
        let stores = self.stores;
        let Some(path) = stores.entrylog.log_path(id) else {
            return Ok((0, 0));
        };
        let live = self.live_entries(id, &path)?;
        let moved: u64 = live.iter().map(|(_, _, d)| d.len() as u64).sum();
        if !live.is_empty() {
            self.rewrite(&live)?;
        }
        let freed = stores.entrylog.remove_log(id)?;
        log::info!(
            "compaction: {} rewritten ({moved} live bytes moved, {freed} bytes freed)",
            entrylog::log_name(id)
        );
        Ok((moved, freed))
    }

    /// The live entries of log `id` (at `path`), sorted: an entry is live if its ledger exists
    /// and the index's newest copy is this record. The scan is paced to the rate.
    fn live_entries(&self, id: u32, path: &std::path::Path) -> Result<Vec<(u64, u64, Bytes)>> {
        let stores = self.stores;
        let mut live: Vec<(u64, u64, Bytes)> = Vec::new();
        let started = Instant::now();
        let mut scanned = 0u64;
        let mut failure: Option<StorageError> = None;
        scan_entries(path, |ledger: u64, entry: u64, offset: u64, data: &[u8]| {
            if failure.is_some() {
                return;
            }
            scanned += data.len() as u64;
            let Ok(since) = stores.ledger(ledger, |st| st.since_seq) else {
                return;
            };
            match stores.segments.get(ledger, entry, since) {
                Ok(Some(at)) if at.log_id() == id && at.offset() == offset => {
                    live.push((ledger, entry, Bytes::copy_from_slice(data)));
                }
                Ok(_) => {}
                Err(e) => failure = Some(e),
            }
            self.pace(started, scanned);
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        live.sort_by_key(|(l, e, _)| (*l, *e));
        Ok(live)
    }

    /// `compactionRateByBytes`: sleeps so the scan leaves the disk to clients.
    fn pace(&self, started: Instant, scanned: u64) {
        if self.rate_bytes > 0 {
            let due = Duration::from_secs_f64(scanned as f64 / self.rate_bytes as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait.min(Duration::from_millis(200)));
            }
        }
    }

    /// Writes `live` (sorted) to the active log and a new segment, both synced, and lists the
    /// segment in the manifest: from then on the index finds these copies.
    fn rewrite(&self, live: &[(u64, u64, Bytes)]) -> Result<()> {
        let stores = self.stores;
        let seq = stores.next_segment_seq();
        let mut locations = Vec::with_capacity(live.len());
        stores.entrylog.append(
            live.iter().map(|(l, e, d)| (*l, *e, &d[..])),
            &mut locations,
        )?;
        stores.entrylog.flush()?;
        stores.entrylog.sync()?;
        let dir = stores.segments.dir().to_path_buf();
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
        self.checkpointer.add_segment(Segment::open(&dir, seq, 0)?)
    }
}
