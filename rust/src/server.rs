//! The bookie's V2 server: TCP connections on tokio, frames decoded, requests run against the
//! ledger storage, responses written back in batches. It never decides durability itself:
//! an add is answered when the storage reports it durable.
//!
//! Per connection: a reader task decodes requests and dispatches them; a writer task encodes
//! responses and writes them with vectored I/O, coalescing whatever is ready. Requests in flight
//! per connection are bounded (`maxPendingAddRequestsPerThread`, `maxPendingReadRequestsPerThread`
//! apply per connection here): beyond them a request is answered ETOOMANYREQUESTS. A request
//! counts as in flight until its response is written, so a client that stops reading cannot make
//! the bookie buffer without bound.

use std::collections::HashMap;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::error::StorageError;
use crate::protocol::{
    self, rc, AuthMessage, OutFrames, PacketHeader, Request, Response, AUTH_DISABLED_PLUGIN,
    FLAG_DO_FENCING, FLAG_HIGH_PRIORITY, FLAG_RECOVERY_ADD,
};
use crate::runtime::runtime;
use crate::storage::{LedgerStorage, RangeLimits, LAST_ENTRY};

/// The fixed part of a batch-read response frame, its 4-byte length prefix included; Java
/// counts it against `maxSize`.
const BATCH_RESPONSE_FIXED_LEN: usize = 4 + protocol::RESPONSE_HEADER_LEN + 8;
/// Stop coalescing responses into one write beyond this many bytes.
const MAX_WRITE_BATCH: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    pub max_frame_size: usize,
    pub max_pending_adds: usize,
    pub max_pending_reads: usize,
    pub max_batch_read_size: usize,
    pub read_only: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "0.0.0.0".into(),
            port: 3181,
            max_frame_size: protocol::DEFAULT_MAX_FRAME_SIZE,
            max_pending_adds: 10_000,
            max_pending_reads: 10_000,
            max_batch_read_size: 5 * 1024 * 1024,
            read_only: false,
        }
    }
}

/// Server counters, named after BookKeeper's request stats where one exists.
#[derive(Default)]
pub struct ServerStats {
    pub connections_accepted: AtomicU64,
    pub connections_active: AtomicU64,
    pub add_entry_requests: AtomicU64,
    pub read_entry_requests: AtomicU64,
    pub batch_read_entry_requests: AtomicU64,
    pub read_entry_fence_requests: AtomicU64,
    pub auth_requests: AtomicU64,
    pub rejected_requests: AtomicU64,
    pub protocol_errors: AtomicU64,
}

struct Shared {
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
    pub fn start(storage: Arc<LedgerStorage>, cfg: ServerConfig) -> std::io::Result<BookieServer> {
        let rt = runtime()?;
        let listener = rt.block_on(TcpListener::bind((cfg.host.as_str(), cfg.port)))?;
        let local_addr = listener.local_addr()?;
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
        let accept = rt.spawn(accept_loop(
            listener,
            shared.clone(),
            stop_rx,
            connections.clone(),
        ));
        log::info!("bookie serving V2 protocol on {local_addr}");
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

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
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
                    shared.stats.connections_accepted.fetch_add(1, Ordering::Relaxed);
                    shared.stats.connections_active.fetch_add(1, Ordering::Relaxed);
                    shared.live.fetch_add(1, Ordering::SeqCst);
                    let conn_shared = shared.clone();
                    let conns = connections.clone();
                    let conn_stop = stop.clone();
                    // Registered before it can finish, so its own removal always finds it.
                    let mut registry = connections.lock();
                    let task = tokio::spawn(async move {
                        serve_connection(stream, peer, conn_shared.clone(), conn_stop).await;
                        conns.lock().remove(&id);
                        conn_shared.stats.connections_active.fetch_sub(1, Ordering::Relaxed);
                        if conn_shared.live.fetch_sub(1, Ordering::SeqCst) == 1 {
                            conn_shared.drained.notify_waiters();
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

/// In-flight requests of one connection, released when their responses are written.
#[derive(Default)]
struct InFlight {
    adds: AtomicUsize,
    reads: AtomicUsize,
}

/// What the writer task receives: a response to encode.
type ResponseTx = mpsc::UnboundedSender<Response>;

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel::<Response>();
    let in_flight = Arc::new(InFlight::default());
    let writer_task = tokio::spawn(write_responses(writer, rx, in_flight.clone(), peer));
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut first_frame = true;
    let mut stopping = false;
    'conn: loop {
        loop {
            match protocol::take_frame(&mut buf, shared.cfg.max_frame_size) {
                Ok(Some(body)) => {
                    if first_frame && protocol::looks_like_v3(&body) {
                        close_for(&shared, peer, &protocol::ProtocolError::V3NotSupported);
                        break 'conn;
                    }
                    first_frame = false;
                    match protocol::decode_request(body) {
                        Ok(req) => handle(req, &shared, &tx, &in_flight),
                        Err(e) => {
                            close_for(&shared, peer, &e);
                            break 'conn;
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    close_for(&shared, peer, &e);
                    break 'conn;
                }
            }
        }
        tokio::select! {
            read = reader.read_buf(&mut buf) => match read {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    log::debug!("connection from {peer}: {e}");
                    break;
                }
            },
            _ = stop.changed() => {
                stopping = true;
                break;
            }
        }
    }
    // No more requests; responses still owed are written once their completions report. The
    // writer ends when the last sender (ours, or a pending completion's) is gone.
    drop(tx);
    let _ = writer_task.await;
    if stopping {
        // Closing a socket with unread input makes the kernel send RST, which destroys the
        // responses still in flight to the client. The writer has sent FIN; clients close on
        // seeing it, so read (and drop) until they do. stop()'s drain deadline bounds this.
        let linger = async {
            loop {
                buf.clear();
                match reader.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(30), linger).await;
    }
}

fn close_for(shared: &Shared, peer: SocketAddr, why: &protocol::ProtocolError) {
    shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
    log::warn!("closing connection from {peer}: {why}");
}

async fn write_responses(
    mut writer: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Response>,
    in_flight: Arc<InFlight>,
    peer: SocketAddr,
) {
    let mut frames = OutFrames::default();
    let mut broken = false;
    while let Some(first) = rx.recv().await {
        let mut released = Released::default();
        released.note(&first);
        frames.encode(&first);
        while frames.len < MAX_WRITE_BATCH {
            match rx.try_recv() {
                Ok(r) => {
                    released.note(&r);
                    frames.encode(&r);
                }
                Err(_) => break,
            }
        }
        let chunks = frames.take();
        if !broken {
            if let Err(e) = write_all_chunks(&mut writer, &chunks).await {
                log::debug!("writing to {peer}: {e}");
                // Keep draining so that completions never block, but stop writing.
                broken = true;
            }
        }
        in_flight.adds.fetch_sub(released.adds, Ordering::AcqRel);
        in_flight.reads.fetch_sub(released.reads, Ordering::AcqRel);
    }
    let _ = writer.shutdown().await;
}

#[derive(Default)]
struct Released {
    adds: usize,
    reads: usize,
}

impl Released {
    fn note(&mut self, r: &Response) {
        match r {
            Response::Add { .. } => self.adds += 1,
            Response::Read { .. } | Response::BatchRead { .. } => self.reads += 1,
            Response::Auth { .. } => {}
        }
    }
}

async fn write_all_chunks(writer: &mut OwnedWriteHalf, chunks: &[Bytes]) -> std::io::Result<()> {
    let mut idx = 0;
    let mut offset = 0;
    while idx < chunks.len() {
        let slices: Vec<IoSlice<'_>> = std::iter::once(&chunks[idx][offset..])
            .chain(chunks[idx + 1..].iter().map(|c| &c[..]))
            .take(64)
            .map(IoSlice::new)
            .collect();
        let mut n = writer.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 && idx < chunks.len() {
            let left = chunks[idx].len() - offset;
            if n >= left {
                n -= left;
                idx += 1;
                offset = 0;
            } else {
                offset += n;
                n = 0;
            }
        }
    }
    Ok(())
}

/// The V2 result code for a storage error, as the Java bookie answers it.
fn rc_of(e: &StorageError) -> i32 {
    match e {
        StorageError::NoLedger(_) => rc::ENOLEDGER,
        StorageError::NoEntry { .. } => rc::ENOENTRY,
        StorageError::Fenced(_) => rc::EFENCED,
        StorageError::Unauthorized(_) => rc::EUA,
        StorageError::QueueFull => rc::ETOOMANYREQUESTS,
        StorageError::InvalidArgument(_) => rc::EBADREQ,
        StorageError::Io { .. }
        | StorageError::Corruption(_)
        | StorageError::Locked(_)
        | StorageError::Closed => rc::EIO,
    }
}

fn send(tx: &ResponseTx, r: Response) {
    // Fails only when the writer is gone, i.e. the connection is closed: nothing to answer.
    let _ = tx.send(r);
}

fn handle(req: Request, shared: &Arc<Shared>, tx: &ResponseTx, in_flight: &Arc<InFlight>) {
    let header = req.header();
    match req {
        Request::Add {
            master_key,
            ledger,
            entry,
            body,
            ..
        } => {
            shared
                .stats
                .add_entry_requests
                .fetch_add(1, Ordering::Relaxed);
            let reply = |rc| Response::Add {
                version: header.version,
                rc,
                ledger,
                entry,
            };
            let busy = in_flight.adds.fetch_add(1, Ordering::AcqRel) >= shared.cfg.max_pending_adds;
            if !header.version_is_compatible() {
                return send(tx, reply(rc::EBADVERSION));
            }
            if busy {
                shared
                    .stats
                    .rejected_requests
                    .fetch_add(1, Ordering::Relaxed);
                return send(tx, reply(rc::ETOOMANYREQUESTS));
            }
            if shared.read_only.load(Ordering::Relaxed) && !header.has(FLAG_HIGH_PRIORITY) {
                return send(tx, reply(rc::EREADONLY));
            }
            if ledger < 0 || entry < 0 {
                return send(tx, reply(rc::EBADREQ));
            }
            add_entry(shared, tx, header, &master_key, ledger, entry, body);
        }
        Request::Read {
            ledger,
            entry,
            master_key,
            ..
        } => {
            shared
                .stats
                .read_entry_requests
                .fetch_add(1, Ordering::Relaxed);
            let reply = move |rc, body| Response::Read {
                version: header.version,
                rc,
                ledger,
                entry,
                body,
            };
            let busy =
                in_flight.reads.fetch_add(1, Ordering::AcqRel) >= shared.cfg.max_pending_reads;
            if !header.version_is_compatible() {
                return send(tx, reply(rc::EBADVERSION, Bytes::new()));
            }
            if busy {
                shared
                    .stats
                    .rejected_requests
                    .fetch_add(1, Ordering::Relaxed);
                return send(tx, reply(rc::ETOOMANYREQUESTS, Bytes::new()));
            }
            let storage = shared.storage.clone();
            let read = move || read_entry(&storage, ledger, entry);
            let respond = move |r: Result<Bytes, i32>| match r {
                Ok(body) => reply(rc::EOK, body),
                Err(code) => reply(code, Bytes::new()),
            };
            run_read(shared, tx, header, ledger, master_key, read, respond);
        }
        Request::BatchRead {
            ledger,
            start_entry,
            request_id,
            max_count,
            max_size,
            master_key,
            ..
        } => {
            shared
                .stats
                .batch_read_entry_requests
                .fetch_add(1, Ordering::Relaxed);
            let reply = move |rc, entries| Response::BatchRead {
                version: header.version,
                rc,
                ledger,
                start_entry,
                request_id,
                entries,
            };
            let busy =
                in_flight.reads.fetch_add(1, Ordering::AcqRel) >= shared.cfg.max_pending_reads;
            if !header.version_is_compatible() {
                return send(tx, reply(rc::EBADVERSION, Vec::new()));
            }
            if busy {
                shared
                    .stats
                    .rejected_requests
                    .fetch_add(1, Ordering::Relaxed);
                return send(tx, reply(rc::ETOOMANYREQUESTS, Vec::new()));
            }
            let max_size = usize::try_from(max_size)
                .unwrap_or(0)
                .min(shared.cfg.max_batch_read_size);
            let limits = RangeLimits {
                max_count: usize::try_from(max_count).unwrap_or(0),
                max_bytes: max_size.saturating_sub(BATCH_RESPONSE_FIXED_LEN),
                per_entry_overhead: 4,
            };
            let storage = shared.storage.clone();
            let read = move || {
                if ledger < 0 {
                    return Err(rc::ENOLEDGER);
                }
                if start_entry < 0 {
                    return Err(rc::ENOENTRY);
                }
                storage
                    .read_range(ledger as u64, start_entry as u64, limits)
                    .map_err(|e| rc_of(&e))
            };
            let respond = move |r: Result<Vec<Bytes>, i32>| match r {
                Ok(entries) => reply(rc::EOK, entries),
                Err(code) => reply(code, Vec::new()),
            };
            run_read(shared, tx, header, ledger, master_key, read, respond);
        }
        Request::Auth { message, .. } => {
            shared.stats.auth_requests.fetch_add(1, Ordering::Relaxed);
            log::debug!(
                "AUTH from plugin {:?}: authentication is disabled",
                message.plugin_name
            );
            send(
                tx,
                // The Java bookie's auth-disabled reply always carries the current version.
                Response::Auth {
                    version: protocol::CURRENT_PROTOCOL_VERSION,
                    message: AuthMessage {
                        plugin_name: AUTH_DISABLED_PLUGIN.to_string(),
                        payload: Bytes::new(),
                    },
                },
            );
        }
    }
}

fn read_entry(storage: &LedgerStorage, ledger: i64, entry: i64) -> Result<Bytes, i32> {
    if ledger < 0 {
        return Err(rc::ENOLEDGER);
    }
    let entry = match entry {
        -1 => LAST_ENTRY,
        e if e < 0 => return Err(rc::ENOENTRY),
        e => e as u64,
    };
    storage
        .read_entry(ledger as u64, entry)
        .map_err(|e| rc_of(&e))
}

fn add_entry(
    shared: &Arc<Shared>,
    tx: &ResponseTx,
    header: PacketHeader,
    master_key: &[u8],
    ledger: i64,
    entry: i64,
    body: Bytes,
) {
    let recovery = header.has(FLAG_RECOVERY_ADD);
    let make_done = || -> crate::journal::Completion {
        let tx = tx.clone();
        Box::new(move |r| {
            send(
                &tx,
                Response::Add {
                    version: header.version,
                    rc: r.map_or_else(|e| rc_of(&e), |_| rc::EOK),
                    ledger,
                    entry,
                },
            )
        })
    };
    let storage = &shared.storage;
    let (l, e) = (ledger as u64, entry as u64);
    let mut result = storage.try_add_entry(l, e, master_key, body.clone(), recovery, make_done());
    if let Err(StorageError::QueueFull) = result {
        // The journal is saturated: wait for room on this thread, which stops this connection
        // from reading more requests (TCP backpressure) while other tasks move elsewhere.
        result = tokio::task::block_in_place(|| {
            storage.add_entry(l, e, master_key, body, recovery, make_done())
        });
    }
    if let Err(err) = result {
        send(
            tx,
            Response::Add {
                version: header.version,
                rc: rc_of(&err),
                ledger,
                entry,
            },
        );
    }
}

/// Runs a read; with FLAG_DO_FENCING, fences first and, if the read succeeds, answers only once
/// the fence is durable (EIO if it cannot be made durable), as the Java bookie does. A failed
/// read is answered at once.
fn run_read<T: Send + 'static>(
    shared: &Arc<Shared>,
    tx: &ResponseTx,
    header: PacketHeader,
    ledger: i64,
    master_key: Option<Bytes>,
    read: impl FnOnce() -> Result<T, i32> + Send + 'static,
    respond: impl FnOnce(Result<T, i32>) -> Response + Send + 'static,
) {
    if !header.has(FLAG_DO_FENCING) {
        return send(tx, respond(read()));
    }
    shared
        .stats
        .read_entry_fence_requests
        .fetch_add(1, Ordering::Relaxed);
    let Some(key) = master_key else {
        return send(tx, respond(Err(rc::EUA)));
    };
    if ledger < 0 {
        return send(tx, respond(Err(rc::ENOLEDGER)));
    }
    let (fenced_tx, fenced_rx) = oneshot::channel();
    let fence = shared.storage.fence(
        ledger as u64,
        &key,
        Box::new(move |r| {
            let _ = fenced_tx.send(r);
        }),
    );
    if let Err(e) = fence {
        return send(tx, respond(Err(rc_of(&e))));
    }
    match read() {
        Err(code) => send(tx, respond(Err(code))),
        Ok(value) => {
            let tx = tx.clone();
            tokio::spawn(async move {
                let durable = matches!(fenced_rx.await, Ok(Ok(())));
                send(&tx, respond(if durable { Ok(value) } else { Err(rc::EIO) }));
            });
        }
    }
}

/// A bookie on a loopback port over fresh directories, for tests of the layers above.
#[cfg(test)]
pub(crate) fn test_bookie(dir: &std::path::Path) -> (Arc<LedgerStorage>, BookieServer) {
    use crate::config::{ConfValue, StorageConfig};
    let cfg = StorageConfig::from_pairs([
        (
            "journalDirectories",
            ConfValue::Str(dir.join("j").display().to_string()),
        ),
        (
            "ledgerDirectories",
            ConfValue::Str(dir.join("l").display().to_string()),
        ),
        ("journalPreAllocSizeMB", ConfValue::Int(1)),
        ("flushInterval", ConfValue::Int(0)),
    ])
    .expect("test configuration");
    let storage = Arc::new(LedgerStorage::open(cfg).expect("test storage"));
    let server = BookieServer::start(
        storage.clone(),
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 0,
            ..ServerConfig::default()
        },
    )
    .expect("test server");
    (storage, server)
}
