//! The client's per-ledger quorum engine: a [`writer`] that sends each entry to its write set
//! and releases completions in entry-id order once Qa bookies acknowledged, and a [`reader`]
//! that fetches ranges with replica fail-over, digest checks and batch reads. It never decides
//! which bookies to use: bookie failures are reported as events, and the control plane answers
//! with `change_ensemble` after updating the metadata.
//!
//! This file only names the parts: [`error`] and [`quorum`] at the bottom, [`stats`], then the
//! [`writer`] and the [`reader`], and [`columns`] over what the reader returns.

pub mod columns;
mod error;
mod quorum;
pub mod reader;
pub mod stats;
pub mod writer;

#[cfg(test)]
mod deferred_sync_tests;

#[cfg(test)]
mod tests;

pub use error::LedgerError;
pub use quorum::{check_quorums, write_set};
pub use reader::{
    check_range, read_range, ReadEntry, ReadOptions, ReadPlan, Segment, MAX_READ_ENTRIES,
};
pub use stats::{client_stats, ClientStats};
pub use writer::{
    AppendDone, BookieFailure, FailureSink, LedgerWriter, WriterSpec, RECOVERY_ADD_FLAGS,
};
