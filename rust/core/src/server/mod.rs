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
//!   (READ_LAC, WRITE_LAC, GET_BOOKIE_INFO, FORCE_LEDGER, the list of entries, long-poll reads);
//! - [`reads`] runs plain reads on threads of their own, the connections' reads in turn;
//! - [`state`] is what every connection shares, [`stats`] the server's metrics.
//!
//! This file is the front: [`BookieServer`] starts the listener and stops it.

mod auth;
mod connection;
mod dispatch;
mod listener;
mod outbox;
mod reads;
mod state;
mod stats;
mod v2;
mod v3;

pub use stats::ServerStats;

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
use crate::runtime::runtime;
use crate::storage::LedgerStorage;
use state::ServerState;

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
        let reads = match cfg.read_worker_threads {
            0 => None,
            n => Some(reads::ReadPool::start(n, cfg.read_worker_nice).map_err(StartError::Io)?),
        };
        let state = Arc::new(ServerState {
            storage,
            read_only: AtomicBool::new(cfg.read_only),
            high_priority_writes: AtomicBool::new(true),
            cfg,
            stats: ServerStats::default(),
            live: AtomicUsize::new(0),
            drained: tokio::sync::Notify::new(),
            lac_watch: Arc::default(),
            reads,
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

    /// The TLS that answers START_TLS, if the server was started with it.
    pub fn tls(&self) -> Option<&Arc<crate::tls::ServerTls>> {
        self.state.cfg.tls.as_ref()
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
        if let Some(reads) = &self.state.reads {
            reads.stop();
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
