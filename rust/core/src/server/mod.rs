//! The bookie server: a TCP listener on tokio, one task pair per connection, requests of either
//! protocol version dispatched to the ledger storage. It never decides durability itself: an add
//! is answered when the storage reports it durable.
//!
//! - [`listener`] accepts connections and keeps the registry that `stop` drains;
//! - [`connection`] cuts frames, bounds what a connection may hold (in-flight requests, response
//!   bytes) and writes responses back in batches;
//! - [`v2`] decodes V2 requests into the version-neutral operations of [`dispatch`], which runs
//!   them against the storage, and encodes their outcomes as V2 responses.

mod connection;
mod dispatch;
mod listener;
mod outbox;
mod v2;

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
use crate::metrics::{Counter, Gauge};
use crate::runtime::runtime;
use crate::storage::LedgerStorage;

/// Server counters, named after BookKeeper's request stats where one exists.
#[derive(Default)]
pub struct ServerStats {
    pub connections_accepted: Counter,
    pub connections_active: Gauge,
    pub add_entry_requests: Counter,
    pub read_entry_requests: Counter,
    pub batch_read_entry_requests: Counter,
    pub read_entry_fence_requests: Counter,
    pub auth_requests: Counter,
    pub rejected_requests: Counter,
    pub protocol_errors: Counter,
    /// Response bytes waiting to be written, all connections together.
    pub response_bytes_queued: Gauge,
    /// Times a connection stopped reading because its responses were not being read.
    pub connections_paused: Counter,
}

crate::named_stats!(ServerStats {
    connections_accepted,
    connections_active,
    add_entry_requests,
    read_entry_requests,
    batch_read_entry_requests,
    read_entry_fence_requests,
    auth_requests,
    rejected_requests,
    protocol_errors,
    response_bytes_queued,
    connections_paused,
});

/// What every connection of one server shares.
pub(crate) struct Shared {
    storage: Arc<LedgerStorage>,
    cfg: ServerConfig,
    read_only: AtomicBool,
    stats: ServerStats,
    /// Open connections; the server waits for them to drain on stop.
    live: AtomicUsize,
    drained: tokio::sync::Notify,
}

/// A running bookie server.
pub struct BookieServer {
    shared: Arc<Shared>,
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
        let shared = Arc::new(Shared {
            storage,
            read_only: AtomicBool::new(cfg.read_only),
            cfg,
            stats: ServerStats::default(),
            live: AtomicUsize::new(0),
            drained: tokio::sync::Notify::new(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let connections: Arc<Mutex<HashMap<u64, JoinHandle<()>>>> = Arc::default();
        let accept = rt.spawn(listener::accept_loop(
            listener,
            shared.clone(),
            stop_rx,
            connections.clone(),
        ));
        log::info!("bookie serving on {local_addr}");
        Ok(BookieServer {
            shared,
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
        self.shared.read_only.store(read_only, Ordering::SeqCst);
    }

    pub fn is_read_only(&self) -> bool {
        self.shared.read_only.load(Ordering::SeqCst)
    }

    pub fn stats(&self) -> &ServerStats {
        &self.shared.stats
    }

    /// Stops accepting, stops reading new requests, lets in-flight requests finish and their
    /// responses go out (up to `drain`), then closes every connection. Idempotent; blocking.
    pub fn stop(&self, drain: Duration) {
        let Some(accept) = self.accept.lock().take() else {
            return;
        };
        let _ = self.stop_tx.send(true);
        let Ok(rt) = runtime() else {
            return;
        };
        let shared = self.shared.clone();
        rt.block_on(async move {
            let _ = accept.await;
            let all_drained = async {
                while shared.live.load(Ordering::SeqCst) > 0 {
                    let notified = shared.drained.notified();
                    if shared.live.load(Ordering::SeqCst) == 0 {
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
