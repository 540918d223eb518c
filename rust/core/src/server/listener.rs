//! Accepting connections: each gets its own task, registered so that `stop` can drain and then
//! abort them. It never reads a byte of a connection.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::connection::serve_connection;
use super::state::ServerState;

pub(super) async fn accept_loop(
    listener: TcpListener,
    state: Arc<ServerState>,
    mut stop: watch::Receiver<bool>,
    connections: Arc<Mutex<HashMap<u64, JoinHandle<()>>>>,
) {
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    next_id += 1;
                    let id = next_id;
                    state.stats.connections_accepted.inc();
                    state.stats.connections_active.inc();
                    state.live.fetch_add(1, Ordering::SeqCst);
                    let conn_state = state.clone();
                    let conns = connections.clone();
                    let conn_stop = stop.clone();
                    // Registered before it can finish, so its own removal always finds it.
                    let mut registry = connections.lock();
                    let task = tokio::spawn(async move {
                        serve_connection(stream, peer, conn_state.clone(), conn_stop).await;
                        conns.lock().remove(&id);
                        conn_state.stats.connections_active.dec();
                        if conn_state.live.fetch_sub(1, Ordering::SeqCst) == 1 {
                            conn_state.drained.notify_waiters();
                        }
                    });
                    registry.insert(id, task);
                }
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    log::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}
