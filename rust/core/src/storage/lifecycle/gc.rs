//! Entry-log garbage collection (BookKeeper's removal of fully deleted entry logs): a sealed
//! log none of whose ledgers exists any more is removed. It decides from the ledgers maps and
//! the index alone; it never rewrites an entry (compaction does).

use crate::error::Result;
use crate::storage::checkpoint::Checkpointer;
use crate::storage::entrylog::{self, LedgersMap};
use crate::storage::stats::StorageStats;
use crate::storage::stores::Stores;

/// What one garbage collection did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GcReport {
    /// Entry logs removed.
    pub logs_removed: u64,
    /// Their bytes.
    pub bytes_freed: u64,
}

/// The entry logs a collection (garbage collection or compaction) may take, with their
/// ledgers maps: every log but the active one and the newest on disk.
pub(super) fn collectable_logs(
    stores: &Stores,
    checkpointer: &Checkpointer,
) -> Result<Vec<(u32, LedgersMap)>> {
    let entrylog = &stores.entrylog;
    // Chosen while no flush runs: a log a flush has just sealed holds entries its segment
    // does not index yet (they would look dead). Later flushes only write to the active log
    // (never taken) and newer ones.
    let (active, maps) = checkpointer.without_flush(|| {
        let active = entrylog.active_id();
        entrylog.ledgers_maps().map(|maps| (active, maps))
    })?;
    // The newest log on disk is kept: at the next start new logs are numbered after it, so
    // an id is never reused while old index segments may still name it.
    let newest = maps.keys().max().copied();
    Ok(maps
        .into_iter()
        .filter(|(id, _)| Some(*id) != active && Some(*id) != newest)
        .collect())
}

/// Removes the entry logs of `stores` none of whose ledgers exists any more. Logs a move
/// between tiers holds are left for a later pass.
pub(super) fn remove_dead_logs(
    stores: &Stores,
    checkpointer: &Checkpointer,
    stats: &StorageStats,
) -> Result<GcReport> {
    let entrylog = &stores.entrylog;
    let logs = collectable_logs(stores, checkpointer)?;
    let dead: Vec<u32> = {
        let idx = stores.index.read();
        logs.iter()
            .filter(|(_, map)| map.keys().all(|l| !idx.ledgers.contains_key(l)))
            .map(|(id, _)| *id)
            .collect()
    };
    let mut report = GcReport::default();
    for id in dead {
        // Held by a move between tiers: removed by a later pass.
        let Some(_pin) = entrylog.pin(id) else {
            continue;
        };
        // A deleted ledger is never read again (a new ledger with its id starts from a
        // later index segment), so its entries' logs can go at once.
        let freed = entrylog.remove_log(id)?;
        log::info!(
            "gc: removed entry log {} ({freed} bytes): every ledger in it is deleted",
            entrylog::log_name(id)
        );
        report.logs_removed += 1;
        report.bytes_freed += freed;
    }
    stats.gc_logs_removed.add(report.logs_removed);
    stats.gc_reclaimed_bytes.add(report.bytes_freed);
    Ok(report)
}
