//! Index merges (thread `pybkx-index-merge`): after a checkpoint adds a segment, adjacent
//! segments of one level are merged into one of the next level, dropping the entries of deleted
//! ledgers, until no level is full. It decides what is merged; the checkpointer records the
//! result in `index.log`.

use super::checkpoint::Checkpointer;
use super::stats::StorageStats;
use super::stores::Stores;
use crate::error::Result;

/// Runs one merge if a level has enough segments. Returns whether it merged.
pub(super) fn merge_once(stores: &Stores, checkpointer: &Checkpointer) -> Result<bool> {
    let Some(inputs) = stores.segments.pick_merge() else {
        return Ok(false);
    };
    let seq = stores.next_segment_seq();
    // Entries of deleted ledgers, and of earlier ledgers with a reused id, are dropped.
    let mut last: Option<(u64, u64, bool)> = None;
    let mut keep = |ledger: u64, seg_seq: u64| -> bool {
        if let Some((l, s, k)) = last {
            if l == ledger && s == seg_seq {
                return k;
            }
        }
        let k = stores
            .ledger(ledger, |st| seg_seq >= st.since_seq)
            .unwrap_or(false);
        last = Some((ledger, seg_seq, k));
        k
    };
    let merged = stores.segments.merge(&inputs, seq, &mut keep)?;
    checkpointer.replace_segments(inputs, merged)?;
    Ok(true)
}

/// The merge thread: merges segments after checkpoints until no level is full, until the
/// checkpointer says stop.
pub(super) fn run_merges(stores: &Stores, checkpointer: &Checkpointer, stats: &StorageStats) {
    while checkpointer.wait_for_merges() {
        while !checkpointer.stopping() {
            match merge_once(stores, checkpointer) {
                Ok(true) => stats.index_merges.inc(),
                Ok(false) => break,
                Err(e) => {
                    log::error!("index merge failed: {e}");
                    break;
                }
            }
        }
    }
}
