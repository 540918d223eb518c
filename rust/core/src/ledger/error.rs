//! Why a ledger write or read failed: the one error type of the ledger engine, which the binding
//! maps to BookKeeper's exception classes. It never decides what a caller does about a failure.

use crate::bookie_conn::ClientError;

/// Why a write or read failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LedgerError {
    /// A bookie error that no other bookie can fix (fenced, unauthorized, request too large).
    #[error("{0}")]
    Bookie(ClientError),
    #[error("ledger {0} is fenced: another client recovered it")]
    Fenced(i64),
    #[error("ledger writer failed: {0}")]
    WriterFailed(String),
    #[error("ledger writer is closed")]
    Closed,
    /// An adv ledger's add named an entry id at or below the LAC, or one already pending
    /// (BookKeeper's `DuplicateEntryIdException`).
    #[error("entry {entry} of ledger {ledger} was already added (or is at or below the LAC)")]
    DuplicateEntryId { ledger: i64, entry: i64 },
    #[error("entry {entry} of ledger {ledger} could not be read from any bookie ({last})")]
    ReadFailed {
        ledger: i64,
        entry: i64,
        last: String,
        /// Every replica answered that it has no such entry (or ledger).
        missing: bool,
    },
    #[error("entry {entry} of ledger {ledger}: every copy is corrupt ({bookies})")]
    Digest {
        ledger: i64,
        entry: i64,
        bookies: String,
    },
    /// A caller's argument the engine cannot work with (quorums, ranges, sizes).
    #[error("{0}")]
    InvalidArgument(String),
    /// The control plane stopped the writer; it keeps the cause (for example "no bookie to
    /// replace a failed one") to hand back to every caller.
    #[error("{0}")]
    Stopped(std::sync::Arc<dyn std::error::Error + Send + Sync>),
    /// A blocking wait was interrupted (a signal); the operation may still complete.
    #[error("interrupted")]
    Interrupted,
}
