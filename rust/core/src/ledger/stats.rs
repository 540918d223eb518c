//! The client's metrics under BookKeeper's names (`BookKeeperClientStats`, scope
//! `bookkeeper_client`): one set per process, shared by every client in it, as a process's
//! metrics registry expects. It owns the fields and their read-out; the writer and the reader
//! record into them.

use std::sync::OnceLock;

use crate::metrics::{Counter, Gauge, OpStats};

/// What the quorum engine measures for every client of the process.
#[derive(Debug)]
pub struct ClientStats {
    /// Appends: handed to the writer -> completed (acknowledged by Qa bookies, in order).
    pub add_entry: OpStats,
    /// Read calls (one entry or a range): started -> every entry verified (or failed).
    pub read_entry: OpStats,
    /// Appends handed to a writer and not completed yet.
    pub pending_adds: Gauge,
    /// Explicit-LAC flushes: one WRITE_LAC sent to a bookie -> its answer.
    pub write_lac: OpStats,
    /// `force()`: started -> every bookie of the ensemble answered FORCE_LEDGER (or one failed).
    /// BookKeeper registers this name and never records it.
    pub force: OpStats,
    /// Read requests sent to another replica because the one asked had not answered within
    /// `speculativeReadTimeout` (single reads and batch requests alike).
    pub speculative_reads: Counter,
}

crate::named_stats!(ClientStats {
    add_entry => "bookkeeper_client_ADD_ENTRY",
    read_entry => "bookkeeper_client_READ_ENTRY",
    pending_adds => "bookkeeper_client_NUM_PENDING_ADD",
    write_lac => "bookkeeper_client_WRITE_LAC",
    force => "bookkeeper_client_FORCE",
    speculative_reads => "bookkeeper_client_SPECULATIVE_READ_COUNT",
});

static STATS: OnceLock<ClientStats> = OnceLock::new();

/// The process's client metrics.
pub fn client_stats() -> &'static ClientStats {
    STATS.get_or_init(|| ClientStats {
        add_entry: OpStats::latency(),
        read_entry: OpStats::latency(),
        pending_adds: Gauge::default(),
        write_lac: OpStats::latency(),
        force: OpStats::latency(),
        speculative_reads: Counter::default(),
    })
}
