//! The check every entry read passes before anyone sees it: the digest and the entry id the
//! read expected, giving a [`ReadEntry`]; a copy that fails it is logged here, as the read
//! engine's. It never retries: the read strategies above decide which replica to ask next.

use bytes::Bytes;

use crate::digest::{DigestError, DigestManager};

/// The read engine logs under one name whichever of its files it logs from:
/// `pybkx.core.ledger.reader` in Python's logging.
pub(super) const LOG_TARGET: &str = "pybkx_core::ledger::reader";

/// A verified entry.
#[derive(Debug, Clone)]
pub struct ReadEntry {
    pub entry_id: i64,
    pub lac: i64,
    pub length: i64,
    pub payload: Bytes,
}

#[cfg(test)]
impl ReadEntry {
    /// An entry as a test needs one: `id` with `payload`, the LAC just before it.
    pub(crate) fn test(id: i64, payload: &'static [u8]) -> ReadEntry {
        ReadEntry {
            entry_id: id,
            lac: id - 1,
            length: 0,
            payload: Bytes::from_static(payload),
        }
    }
}

/// Checks `body`, a stored entry some bookie returned for `entry`, keeping its payload without
/// a copy.
pub(super) fn verify(
    digest: &DigestManager,
    body: Bytes,
    entry: i64,
) -> Result<ReadEntry, DigestError> {
    digest.verify_owned(body, Some(entry)).map(|v| ReadEntry {
        entry_id: v.entry_id,
        lac: v.last_add_confirmed,
        length: v.length,
        payload: v.payload,
    })
}

/// Logs a copy of `entry` from `bookie` that failed its check.
pub(super) fn log_corrupt(ledger: i64, entry: i64, bookie: &str, e: &DigestError) {
    log::warn!(target: LOG_TARGET, "ledger {ledger}: entry {entry} from {bookie}: {e}");
}
