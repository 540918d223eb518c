//! Reclaiming a full disk: while the disk checker says a directory is full and the space
//! reserve is given back, the entry logs with the most garbage are compacted, least live first,
//! each only if its live bytes fit the reserve's budget and the room the ledger directories
//! have now, whatever `isForceGCAllowWhenNoSpace` says (BookKeeper leaves a full bookie to the
//! operator's key; compaction is what frees a disk whose logs mix deleted and live ledgers).
//! It decides which logs go and how much may be written; the compactor rewrites them.

use super::compaction::{CompactionReport, Compactor};
use crate::error::Result;
use crate::storage::entrylog;

/// Room kept free beside a reclaimed log's live bytes (its index segment and records).
const REWRITE_MARGIN: u64 = 512 << 10;

/// Logs at most this live are reclaimed when `majorCompactionThreshold` is 0 (compaction
/// turned off): BookKeeper's default major threshold.
pub(super) const DEFAULT_RECLAIM_THRESHOLD: f64 = 0.8;

/// Compacts the logs at most `threshold` live, least live first, each whose live bytes are at
/// most `budget` and fit (with [`REWRITE_MARGIN`]) in the ledger directories' free bytes now;
/// stops once `stop()` says so. A budget of 0 (no reserve) reclaims nothing.
pub(super) fn reclaim(
    compactor: &Compactor<'_>,
    threshold: f64,
    budget: u64,
    stop: &dyn Fn() -> bool,
) -> Result<CompactionReport> {
    let mut report = CompactionReport::default();
    if budget == 0 {
        return Ok(report);
    }
    let dirs = compactor.stores.entrylog.dirs();
    for (id, live) in compactor.candidates_with_live(threshold)? {
        if stop() {
            break;
        }
        if live > budget {
            continue;
        }
        let free = dirs.summed_usage()?.free_bytes;
        if live.saturating_add(REWRITE_MARGIN) > free {
            log::warn!(
                "reclaim: {} holds {live} live bytes, more than the {free} bytes free now",
                entrylog::log_name(id)
            );
            continue;
        }
        // Held by a move between tiers: a later pass takes it.
        let Some(_pin) = compactor.stores.entrylog.pin(id) else {
            continue;
        };
        let (moved, freed) = compactor.compact_log(id)?;
        report.logs_compacted += 1;
        report.bytes_moved += moved;
        report.bytes_freed += freed;
    }
    if report.logs_compacted > 0 {
        log::info!(
            "reclaim on a full disk: {} entry logs compacted, {} live bytes moved, {} bytes freed",
            report.logs_compacted,
            report.bytes_moved,
            report.bytes_freed
        );
    }
    compactor.stats.compacted_logs.add(report.logs_compacted);
    compactor.stats.gc_reclaimed_bytes.add(report.bytes_freed);
    Ok(report)
}
