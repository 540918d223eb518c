//! The server's metrics under BookKeeper's names (`RequestStats`, scope `bookkeeper_server`),
//! BP-62's batch-read histograms and pybkx's own, counted next to what they count. Definitions
//! only: the handlers record them.

use crate::metrics::{Counter, Gauge, Histogram, OpStats, Unit};

/// BP-62's proposed buckets for `BATCH_READ_ENTRY_REQUEST`: 5 ms .. 3 s (recorded in µs).
static BATCH_READ_LATENCY_BOUNDS_US: [u64; 9] = [
    5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 3_000_000,
];
/// BP-62's proposed buckets for `BATCH_READ_ENTRY_RESPONSE_SIZE`: 128 B .. 1 MiB.
static BATCH_READ_SIZE_BOUNDS: [u64; 8] = [128, 512, 1024, 2048, 4096, 16384, 131072, 1 << 20];

/// The server's metrics under BookKeeper's names (`RequestStats`, scope `bookkeeper_server`),
/// BP-62's batch-read histograms, and pybkx's own (`pybkx_server_*`). A request is timed from
/// the moment its frame is decoded.
pub struct ServerStats {
    /// Add requests: decoded -> response written (rejected ones count as failed).
    pub add_entry_request: OpStats,
    /// Adds: decoded -> durable (or failed) in the storage.
    pub add_entry: OpStats,
    /// Adds answered ETOOMANYREQUESTS (past `maxPendingAddRequestsPerThread`).
    pub add_entry_rejected: Counter,
    /// Adds admitted whose response is not written yet.
    pub add_entry_in_progress: Gauge,
    /// Adds waiting for room in a full journal queue (`journalQueueSize`).
    pub add_entry_blocked: Gauge,
    pub add_entry_blocked_wait: OpStats,
    /// FORCE_LEDGER: decoded -> the ledger's earlier entries durable (or failed).
    pub force_ledger: OpStats,
    /// Reads (single and batch, fencing or not): decoded -> response written.
    pub read_entry_request: OpStats,
    /// Reads: decoded -> data read (or failed).
    pub read_entry: OpStats,
    pub read_entry_rejected: Counter,
    pub read_entry_in_progress: Gauge,
    /// Fencing reads: decoded -> response written; the fence's wait to be durable; the read.
    pub read_entry_fence_request: OpStats,
    pub read_entry_fence_wait: OpStats,
    pub read_entry_fence_read: OpStats,
    /// Reads of the last entry (-1) of a ledger that holds none.
    pub read_last_entry_noentry_error: Counter,
    /// BP-62: batch reads, decoded -> response written; and the size of their responses.
    pub batch_read_entry_request: Histogram,
    pub batch_read_entry_response_size: Histogram,
    /// One write of a batch of responses to a socket.
    pub channel_write: OpStats,
    pub connections_accepted: Counter,
    pub connections_active: Gauge,
    pub auth_requests: Counter,
    /// Connections upgraded to TLS by START_TLS, and handshakes that failed or timed out.
    pub tls_connections: Counter,
    pub tls_handshake_failures: Counter,
    /// Clients whose certificate's role `authorizedRoles` does not hold (or that had none).
    pub authorization_failures: Counter,
    /// Clients whose SASL exchange failed (wrong password, unknown user, id not allowed).
    pub authentication_failures: Counter,
    pub protocol_errors: Counter,
    /// Response bytes waiting to be written, all connections together.
    pub response_bytes_queued: Gauge,
    /// Times a connection stopped reading because its responses were not being read.
    pub connections_paused: Counter,
}

impl Default for ServerStats {
    fn default() -> Self {
        ServerStats {
            add_entry_request: OpStats::latency(),
            add_entry: OpStats::latency(),
            add_entry_rejected: Counter::default(),
            add_entry_in_progress: Gauge::default(),
            add_entry_blocked: Gauge::default(),
            add_entry_blocked_wait: OpStats::latency(),
            force_ledger: OpStats::latency(),
            read_entry_request: OpStats::latency(),
            read_entry: OpStats::latency(),
            read_entry_rejected: Counter::default(),
            read_entry_in_progress: Gauge::default(),
            read_entry_fence_request: OpStats::latency(),
            read_entry_fence_wait: OpStats::latency(),
            read_entry_fence_read: OpStats::latency(),
            read_last_entry_noentry_error: Counter::default(),
            batch_read_entry_request: Histogram::with_bounds(
                Unit::Micros,
                &BATCH_READ_LATENCY_BOUNDS_US,
            ),
            batch_read_entry_response_size: Histogram::with_bounds(
                Unit::Bytes,
                &BATCH_READ_SIZE_BOUNDS,
            ),
            channel_write: OpStats::latency(),
            connections_accepted: Counter::default(),
            connections_active: Gauge::default(),
            auth_requests: Counter::default(),
            tls_connections: Counter::default(),
            tls_handshake_failures: Counter::default(),
            authorization_failures: Counter::default(),
            authentication_failures: Counter::default(),
            protocol_errors: Counter::default(),
            response_bytes_queued: Gauge::default(),
            connections_paused: Counter::default(),
        }
    }
}

crate::named_stats!(ServerStats {
    add_entry_request => "bookkeeper_server_ADD_ENTRY_REQUEST",
    add_entry => "bookkeeper_server_ADD_ENTRY",
    add_entry_rejected => "bookkeeper_server_ADD_ENTRY_REJECTED",
    add_entry_in_progress => "bookkeeper_server_ADD_ENTRY_IN_PROGRESS",
    add_entry_blocked => "bookkeeper_server_ADD_ENTRY_BLOCKED",
    add_entry_blocked_wait => "bookkeeper_server_ADD_ENTRY_BLOCKED_WAIT",
    force_ledger => "bookkeeper_server_FORCE_LEDGER",
    read_entry_request => "bookkeeper_server_READ_ENTRY_REQUEST",
    read_entry => "bookkeeper_server_READ_ENTRY",
    read_entry_rejected => "bookkeeper_server_READ_ENTRY_REJECTED",
    read_entry_in_progress => "bookkeeper_server_READ_ENTRY_IN_PROGRESS",
    read_entry_fence_request => "bookkeeper_server_READ_ENTRY_FENCE_REQUEST",
    read_entry_fence_wait => "bookkeeper_server_READ_ENTRY_FENCE_WAIT",
    read_entry_fence_read => "bookkeeper_server_READ_ENTRY_FENCE_READ",
    read_last_entry_noentry_error => "bookkeeper_server_READ_LAST_ENTRY_NOENTRY_ERROR",
    batch_read_entry_request => "bookkeeper_server_BATCH_READ_ENTRY_REQUEST",
    batch_read_entry_response_size => "bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE",
    channel_write => "bookkeeper_server_CHANNEL_WRITE",
    connections_accepted => "pybkx_server_connections_accepted",
    connections_active => "pybkx_server_connections_active",
    auth_requests => "pybkx_server_auth_requests",
    tls_connections => "pybkx_server_tls_connections",
    tls_handshake_failures => "pybkx_server_tls_handshake_failures",
    authorization_failures => "pybkx_server_authorization_failures",
    authentication_failures => "pybkx_server_authentication_failures",
    protocol_errors => "pybkx_server_protocol_errors",
    response_bytes_queued => "pybkx_server_response_bytes_queued",
    connections_paused => "pybkx_server_connections_paused",
});
