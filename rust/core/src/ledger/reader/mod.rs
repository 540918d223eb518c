//! Reading a ledger: the front. [`read_range`] checks the call and walks the range segment by
//! segment, each read batched ([`batch`]: streams per write-set start, runs, then single reads
//! of what is missing) or, with batching off or refused by the bookies, entry by entry
//! ([`single`]). It never decides which bookies exist: the [`ReadPlan`] says.
//!
//! Layers, each importing only those below it: this front; [`batch`] (the batched read of one
//! segment); [`single`] (single-entry reads with fail-over) and [`window`] (the merge buffer);
//! [`fetch`] (one stream of batch requests); [`race`] (one request raced across replicas:
//! speculative reads); [`order`] (the read order rearranged by bookie health), [`verify`] and
//! [`plan`] at the bottom.

mod batch;
mod fetch;
mod order;
mod plan;
mod race;
mod single;
mod verify;
mod window;

#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use plan::{ReadOptions, ReadPlan, Segment};
pub use verify::ReadEntry;

use crate::bookie_conn::BookieClient;
use crate::ledger::error::LedgerError;
use crate::ledger::stats::client_stats;
use single::{read_singles, INITIAL_CAPACITY};

/// The most entries one read may ask for; larger ranges are read in several calls.
pub const MAX_READ_ENTRIES: i64 = 1 << 20;

/// Checks a read range: `0 <= first <= last` and at most [`MAX_READ_ENTRIES`] entries.
pub fn check_range(first: i64, last: i64) -> Result<(), LedgerError> {
    if first < 0 || last < first {
        return Err(LedgerError::InvalidArgument(format!(
            "bad range {first}..{last}"
        )));
    }
    if last - first >= MAX_READ_ENTRIES {
        return Err(LedgerError::InvalidArgument(format!(
            "range {first}..{last} holds more than {MAX_READ_ENTRIES} entries; read it in parts"
        )));
    }
    Ok(())
}

/// Reads entries `first..=last` (those `opts.held_by` wants): batched where `opts.batch` asks
/// for it, otherwise one READ per entry with up to `opts.window` in flight. Returns the entries
/// in order and whether batch reads still look supported: false once the bookies dropped the
/// connection on every BATCH_READ_ENTRY, as a bookie without BP-62 does (the caller should then
/// stop batching for good).
pub async fn read_range(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    opts: &ReadOptions,
    first: i64,
    last: i64,
) -> Result<(Vec<ReadEntry>, bool), LedgerError> {
    let started = crate::metrics::start();
    let result = read_segments(client, plan, opts, first, last).await;
    client_stats()
        .read_entry
        .record_since(result.is_ok(), started);
    result
}

/// [`read_range`] untimed: each segment batched while the bookies answer batches, the rest of
/// the range singly once they do not.
async fn read_segments(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    opts: &ReadOptions,
    first: i64,
    last: i64,
) -> Result<(Vec<ReadEntry>, bool), LedgerError> {
    check_range(first, last)?;
    plan.check_held_by(&opts.held_by)?;
    let mut out = Vec::with_capacity(((last - first + 1) as usize).min(INITIAL_CAPACITY));
    let mut next = first;
    let mut batch_ok = opts.batch;
    while next <= last && batch_ok {
        let segment_last = plan.segment_end(next).map_or(last, |e| (e - 1).min(last));
        let before = out.len();
        batch_ok = batch::read(client, plan, opts, next, segment_last, &mut out).await?;
        next = if batch_ok {
            segment_last + 1
        } else {
            // A prefix of the wanted entries was read; singles take the rest.
            out[before..].last().map_or(next, |e| e.entry_id + 1)
        };
    }
    if next <= last {
        out.extend(read_singles(client, plan, opts, next, last).await?);
    }
    Ok((out, batch_ok))
}
