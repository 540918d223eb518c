//! The bookie server: a TCP listener on tokio, one task pair per connection, requests of either
//! protocol version dispatched to the ledger storage. It never decides durability itself: an add
//! is answered when the storage reports it durable.
//!
//! - [`listener`] accepts connections and keeps the registry that `stop` drains;
//! - [`connection`] cuts frames, bounds what a connection may hold (in-flight requests, response
//!   bytes) and writes responses back in batches;
//! - [`v2`] decodes V2 requests into the version-neutral operations of [`dispatch`], which runs
//!   them against the storage, and encodes their outcomes as V2 responses;
//! - [`v3`] does the same for V3 (protobuf) requests, and serves the operations only V3 has
//!   (READ_LAC, WRITE_LAC, GET_BOOKIE_INFO, FORCE_LEDGER, the list of entries, long-poll reads).

mod connection;
mod dispatch;
mod listener;
mod outbox;
mod v2;
mod v3;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ServerConfig;
use crate::error::StorageError;
use crate::metrics::{Counter, Gauge, Histogram, OpStats, Unit};
use crate::runtime::runtime;
use crate::storage::LedgerStorage;

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
    protocol_errors => "pybkx_server_protocol_errors",
    response_bytes_queued => "pybkx_server_response_bytes_queued",
    connections_paused => "pybkx_server_connections_paused",
});

/// What every connection of one server shares.
pub(crate) struct ServerState {
    storage: Arc<LedgerStorage>,
    cfg: ServerConfig,
    read_only: AtomicBool,
    /// While read-only: whether high-priority adds (recovery) are still taken. BookKeeper's
    /// `availableForHighPriorityWrites`: false once no directory has
    /// `minUsableSizeForHighPriorityWrites` free.
    high_priority_writes: AtomicBool,
    stats: ServerStats,
    /// Open connections; the server waits for them to drain on stop.
    live: AtomicUsize,
    drained: tokio::sync::Notify,
    /// Wakes long-poll reads when adds complete.
    lac_watch: Arc<LacWatch>,
}

/// Long-poll reads waiting for a ledger's LAC to pass what they asked: each add that completes
/// while some wait wakes them to look again (they also look every `LONG_POLL_TICK`, which
/// covers an add submitted just before a read began to wait). Their number is bounded by the
/// read slots they hold (`maxPendingReadRequestsPerThread`).
#[derive(Default)]
pub(crate) struct LacWatch {
    waiting: AtomicUsize,
    notify: tokio::sync::Notify,
    /// Set by `stop`: waiting reads answer with the LAC they know instead of holding their
    /// connection (and the server's drain) until their deadline.
    stopping: AtomicBool,
}

impl LacWatch {
    /// This watch if some long-poll read waits now (an add completing later wakes them).
    fn if_waited(self: &Arc<Self>) -> Option<Arc<Self>> {
        (self.waiting.load(std::sync::atomic::Ordering::Relaxed) > 0).then(|| self.clone())
    }

    fn advanced(&self) {
        self.notify.notify_waiters();
    }

    /// Wakes every waiting read for good (the server stops).
    fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// A long-poll read counted as waiting while it lives.
pub(crate) struct LacWaiter(Arc<LacWatch>);

impl LacWaiter {
    fn new(watch: &Arc<LacWatch>) -> Self {
        watch
            .waiting
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        LacWaiter(watch.clone())
    }

    fn notify(&self) -> &tokio::sync::Notify {
        &self.0.notify
    }

    /// True once the server stops: answer now.
    fn stopping(&self) -> bool {
        self.0.stopping.load(Ordering::SeqCst)
    }
}

impl Drop for LacWaiter {
    fn drop(&mut self) {
        self.0
            .waiting
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl ServerState {
    /// As BookKeeper's WriteEntryProcessor: a read-only bookie refuses an add unless it is
    /// high-priority and the bookie is still available for high-priority writes.
    pub(crate) fn refuses_add(&self, high_priority: bool) -> bool {
        self.read_only.load(Ordering::Relaxed)
            && !(high_priority && self.high_priority_writes.load(Ordering::Relaxed))
    }
}

/// A running bookie server.
pub struct BookieServer {
    state: Arc<ServerState>,
    local_addr: SocketAddr,
    stop_tx: watch::Sender<bool>,
    accept: Mutex<Option<JoinHandle<()>>>,
    connections: Arc<Mutex<HashMap<u64, JoinHandle<()>>>>,
}

impl BookieServer {
    /// Binds and starts serving on the process's tokio runtime.
    pub fn start(
        storage: Arc<LedgerStorage>,
        cfg: ServerConfig,
    ) -> Result<BookieServer, StartError> {
        cfg.validate().map_err(StartError::Config)?;
        let rt = runtime().map_err(StartError::Io)?;
        let listener = rt
            .block_on(TcpListener::bind((cfg.host.as_str(), cfg.port)))
            .map_err(StartError::Io)?;
        let local_addr = listener.local_addr().map_err(StartError::Io)?;
        let state = Arc::new(ServerState {
            storage,
            read_only: AtomicBool::new(cfg.read_only),
            high_priority_writes: AtomicBool::new(true),
            cfg,
            stats: ServerStats::default(),
            live: AtomicUsize::new(0),
            drained: tokio::sync::Notify::new(),
            lac_watch: Arc::default(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let connections: Arc<Mutex<HashMap<u64, JoinHandle<()>>>> = Arc::default();
        let accept = rt.spawn(listener::accept_loop(
            listener,
            state.clone(),
            stop_rx,
            connections.clone(),
        ));
        log::info!("bookie serving on {local_addr}");
        Ok(BookieServer {
            state,
            local_addr,
            stop_tx,
            accept: Mutex::new(Some(accept)),
            connections,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn set_read_only(&self, read_only: bool) {
        self.state.read_only.store(read_only, Ordering::SeqCst);
    }

    pub fn is_read_only(&self) -> bool {
        self.state.read_only.load(Ordering::SeqCst)
    }

    /// Whether a read-only server still takes high-priority adds (BookKeeper's
    /// `setHighPriorityWritesAvailability`); a writable server takes every add.
    pub fn set_high_priority_writes(&self, available: bool) {
        self.state
            .high_priority_writes
            .store(available, Ordering::SeqCst);
    }

    pub fn high_priority_writes(&self) -> bool {
        self.state.high_priority_writes.load(Ordering::SeqCst)
    }

    pub fn stats(&self) -> &ServerStats {
        &self.state.stats
    }

    /// Every metric of the server, read now.
    pub fn metrics(&self) -> Vec<crate::metrics::Metric> {
        crate::metrics::Export::metrics(&self.state.stats)
    }

    /// Stops accepting, stops reading new requests, lets in-flight requests finish and their
    /// responses go out (up to `drain`), then closes every connection. Idempotent; blocking.
    pub fn stop(&self, drain: Duration) {
        let Some(accept) = self.accept.lock().take() else {
            return;
        };
        let _ = self.stop_tx.send(true);
        self.state.lac_watch.stop();
        let Ok(rt) = runtime() else {
            return;
        };
        let state = self.state.clone();
        rt.block_on(async move {
            let _ = accept.await;
            let all_drained = async {
                while state.live.load(Ordering::SeqCst) > 0 {
                    let notified = state.drained.notified();
                    if state.live.load(Ordering::SeqCst) == 0 {
                        break;
                    }
                    notified.await;
                }
            };
            if tokio::time::timeout(drain, all_drained).await.is_err() {
                log::warn!("bookie stop: connections still busy after {drain:?}; closing them");
            }
        });
        for (_, task) in self.connections.lock().drain() {
            task.abort();
        }
        log::info!("bookie on {} stopped", self.local_addr);
    }
}

impl Drop for BookieServer {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(StorageError),
    #[error("{0}")]
    Io(std::io::Error),
}
