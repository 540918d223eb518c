//! The client's per-bookie data plane: one pipelined V2 connection per bookie on tokio,
//! responses matched to requests, per-request timeouts, reconnection on demand.
//! It never decides quorums or ensembles: the ledger client above it does.
//!
//! As in the Java V2 client, ADD and READ responses are matched by (ledger, entry) and batch
//! reads by request id; several requests with the same key complete in the order sent.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::protocol::{self, rc, PacketHeader, Request, Response};
use crate::runtime::runtime;

#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub add_timeout: Duration,
    pub read_timeout: Duration,
    pub connect_timeout: Duration,
    pub max_frame_size: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            add_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            max_frame_size: protocol::DEFAULT_MAX_FRAME_SIZE,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The bookie answered with a V2 result code other than EOK.
    #[error("bookie {bookie} answered {op} with result code {rc}")]
    Bookie {
        bookie: String,
        op: &'static str,
        rc: i32,
    },
    #[error("{op} to bookie {bookie} timed out")]
    Timeout { bookie: String, op: &'static str },
    #[error("bookie {bookie} is not available: {why}")]
    Unavailable { bookie: String, why: String },
    #[error("bookie client is closed")]
    Closed,
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Added,
    Entry(Bytes),
    Entries(Vec<Bytes>),
}

pub type ReplyResult = Result<Reply, ClientError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Add(i64, i64),
    Read(i64, i64),
    Batch(i64),
}

impl Key {
    fn op(self) -> &'static str {
        match self {
            Key::Add(..) => "add",
            Key::Read(..) => "read",
            Key::Batch(_) => "batch read",
        }
    }
}

struct Waiter {
    tx: oneshot::Sender<ReplyResult>,
    deadline: Instant,
}

/// One connection to one bookie (possibly still connecting).
struct Conn {
    bookie: String,
    out: mpsc::UnboundedSender<Bytes>,
    pending: Mutex<HashMap<Key, VecDeque<Waiter>>>,
    alive: AtomicBool,
}

impl Conn {
    /// Fails every waiting request and marks the connection dead.
    fn fail_all(&self, err: &ClientError) {
        self.alive.store(false, Ordering::SeqCst);
        let pending = std::mem::take(&mut *self.pending.lock());
        for (_, waiters) in pending {
            for w in waiters {
                let _ = w.tx.send(Err(err.clone()));
            }
        }
    }

    fn complete(&self, key: Key, result: ReplyResult) {
        let waiter = {
            let mut pending = self.pending.lock();
            let Some(queue) = pending.get_mut(&key) else {
                return; // timed out earlier
            };
            let w = queue.pop_front();
            if queue.is_empty() {
                pending.remove(&key);
            }
            w
        };
        if let Some(w) = waiter {
            let _ = w.tx.send(result);
        }
    }

    fn expire(&self, now: Instant) {
        let mut expired = Vec::new();
        {
            let mut pending = self.pending.lock();
            pending.retain(|key, queue| {
                while queue.front().is_some_and(|w| w.deadline <= now) {
                    if let Some(w) = queue.pop_front() {
                        expired.push((*key, w));
                    }
                }
                // Later requests with the same key may have later deadlines.
                queue.retain(|w| w.deadline > now);
                !queue.is_empty()
            });
        }
        for (key, w) in expired {
            let _ = w.tx.send(Err(ClientError::Timeout {
                bookie: self.bookie.clone(),
                op: key.op(),
            }));
        }
    }
}

/// Connections to bookies, shared by all ledgers of a client.
pub struct BookieClient {
    cfg: ClientConfig,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    closed: AtomicBool,
    next_request_id: AtomicI64,
}

impl BookieClient {
    pub fn new(cfg: ClientConfig) -> Self {
        BookieClient {
            cfg,
            conns: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            next_request_id: AtomicI64::new(1),
        }
    }

    /// Sends ADD of a packaged entry.
    pub fn add(
        &self,
        bookie: &str,
        ledger: i64,
        entry: i64,
        master_key: Bytes,
        body: Bytes,
        flags: u16,
    ) -> oneshot::Receiver<ReplyResult> {
        let req = Request::Add {
            header: PacketHeader::new(protocol::OP_ADD_ENTRY, flags),
            master_key,
            ledger,
            entry,
            body,
        };
        self.send(bookie, Key::Add(ledger, entry), req, self.cfg.add_timeout)
    }

    /// Sends READ (entry -1: the bookie's last entry; fencing needs the master key).
    pub fn read(
        &self,
        bookie: &str,
        ledger: i64,
        entry: i64,
        flags: u16,
        master_key: Option<Bytes>,
    ) -> oneshot::Receiver<ReplyResult> {
        let req = Request::Read {
            header: PacketHeader::new(protocol::OP_READ_ENTRY, flags),
            ledger,
            entry,
            master_key: fencing_key(flags, master_key),
        };
        self.send(bookie, Key::Read(ledger, entry), req, self.cfg.read_timeout)
    }

    /// Sends BATCH_READ_ENTRY with the limits as given, as Java's per-bookie client does (its
    /// ledger handle, not this layer, caps `max_size` at the frame size it can receive).
    #[allow(clippy::too_many_arguments)]
    pub fn batch_read(
        &self,
        bookie: &str,
        ledger: i64,
        start_entry: i64,
        max_count: i32,
        max_size: i64,
        flags: u16,
        master_key: Option<Bytes>,
    ) -> oneshot::Receiver<ReplyResult> {
        let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let req = Request::BatchRead {
            header: PacketHeader::new(protocol::OP_BATCH_READ_ENTRY, flags),
            ledger,
            start_entry,
            request_id,
            max_count,
            max_size,
            master_key: fencing_key(flags, master_key),
        };
        self.send(bookie, Key::Batch(request_id), req, self.cfg.read_timeout)
    }

    /// Closes every connection; waiting requests fail with `Closed`. Idempotent.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let conns: Vec<Arc<Conn>> = self.conns.lock().drain().map(|(_, c)| c).collect();
        for c in conns {
            c.fail_all(&ClientError::Closed);
        }
    }

    fn send(
        &self,
        bookie: &str,
        key: Key,
        req: Request,
        timeout: Duration,
    ) -> oneshot::Receiver<ReplyResult> {
        let (tx, rx) = oneshot::channel();
        if self.closed.load(Ordering::SeqCst) {
            let _ = tx.send(Err(ClientError::Closed));
            return rx;
        }
        let conn = match self.connection(bookie) {
            Ok(c) => c,
            Err(e) => {
                let _ = tx.send(Err(e));
                return rx;
            }
        };
        // Registered before the frame leaves, so the response always finds its waiter.
        conn.pending
            .lock()
            .entry(key)
            .or_default()
            .push_back(Waiter {
                tx,
                deadline: Instant::now() + timeout,
            });
        let mut frame = BytesMut::new();
        protocol::encode_request(&req, &mut frame);
        if conn.out.send(frame.freeze()).is_err() || !conn.alive.load(Ordering::SeqCst) {
            conn.fail_all(&ClientError::Unavailable {
                bookie: bookie.to_string(),
                why: "connection closed".into(),
            });
        }
        rx
    }

    fn connection(&self, bookie: &str) -> Result<Arc<Conn>, ClientError> {
        let mut conns = self.conns.lock();
        if let Some(c) = conns.get(bookie) {
            if c.alive.load(Ordering::SeqCst) {
                return Ok(c.clone());
            }
        }
        let rt = runtime().map_err(|e| ClientError::Unavailable {
            bookie: bookie.to_string(),
            why: format!("no runtime: {e}"),
        })?;
        let (out, out_rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Conn {
            bookie: bookie.to_string(),
            out,
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
        });
        rt.spawn(run_connection(conn.clone(), out_rx, self.cfg.clone()));
        conns.insert(bookie.to_string(), conn.clone());
        Ok(conn)
    }
}

impl Drop for BookieClient {
    fn drop(&mut self) {
        self.close();
    }
}

fn fencing_key(flags: u16, key: Option<Bytes>) -> Option<Bytes> {
    if flags & protocol::FLAG_DO_FENCING != 0 {
        Some(key.unwrap_or_else(|| Bytes::from_static(&[0u8; protocol::MASTER_KEY_LEN])))
    } else {
        None
    }
}

async fn run_connection(
    conn: Arc<Conn>,
    mut out_rx: mpsc::UnboundedReceiver<Bytes>,
    cfg: ClientConfig,
) {
    let unavailable = |why: String| ClientError::Unavailable {
        bookie: conn.bookie.clone(),
        why,
    };
    let stream =
        match tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(&conn.bookie)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return conn.fail_all(&unavailable(format!("connect failed: {e}"))),
            Err(_) => return conn.fail_all(&unavailable("connect timed out".into())),
        };
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();

    let reader_conn = conn.clone();
    let max_frame = cfg.max_frame_size;
    let mut reader_task = tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            loop {
                match protocol::take_frame(&mut buf, max_frame) {
                    Ok(Some(body)) => match protocol::decode_response(body) {
                        Ok(resp) => deliver(&reader_conn, resp),
                        Err(e) => return format!("bad response: {e}"),
                    },
                    Ok(None) => break,
                    Err(e) => return format!("bad response: {e}"),
                }
            }
            match reader.read_buf(&mut buf).await {
                Ok(0) => return "connection closed by the bookie".to_string(),
                Ok(_) => {}
                Err(e) => return format!("read failed: {e}"),
            }
        }
    });

    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    let mut batch = Vec::new();
    let why = loop {
        tokio::select! {
            frame = out_rx.recv() => {
                let Some(first) = frame else {
                    break "client closed".to_string();
                };
                batch.clear();
                batch.push(first);
                while batch.len() < 256 {
                    match out_rx.try_recv() {
                        Ok(f) => batch.push(f),
                        Err(_) => break,
                    }
                }
                let total: usize = batch.iter().map(|b| b.len()).sum();
                let mut joined = BytesMut::with_capacity(total);
                for b in &batch {
                    joined.extend_from_slice(b);
                }
                if let Err(e) = writer.write_all(&joined).await {
                    break format!("write failed: {e}");
                }
            }
            done = &mut reader_task => {
                break done.unwrap_or_else(|e| format!("reader failed: {e}"));
            }
            _ = ticker.tick() => {
                if !conn.alive.load(Ordering::SeqCst) {
                    break "client closed".to_string();
                }
                conn.expire(Instant::now());
            }
        }
    };
    reader_task.abort();
    conn.fail_all(&unavailable(why));
}

fn deliver(conn: &Conn, resp: Response) {
    let failed = |op, rc| ClientError::Bookie {
        bookie: conn.bookie.clone(),
        op,
        rc,
    };
    match resp {
        Response::Add {
            rc, ledger, entry, ..
        } => conn.complete(
            Key::Add(ledger, entry),
            if rc == rc::EOK {
                Ok(Reply::Added)
            } else {
                Err(failed("add", rc))
            },
        ),
        Response::Read {
            rc,
            ledger,
            entry,
            body,
            ..
        } => conn.complete(
            Key::Read(ledger, entry),
            if rc == rc::EOK {
                Ok(Reply::Entry(body))
            } else {
                Err(failed("read", rc))
            },
        ),
        Response::BatchRead {
            rc,
            request_id,
            entries,
            ..
        } => conn.complete(
            Key::Batch(request_id),
            if rc == rc::EOK {
                Ok(Reply::Entries(entries))
            } else {
                Err(failed("batch read", rc))
            },
        ),
        Response::Auth { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::{master_key, DigestManager, DigestType};

    use crate::server::test_bookie as bookie;

    fn wait(rx: oneshot::Receiver<ReplyResult>) -> ReplyResult {
        rx.blocking_recv().unwrap_or(Err(ClientError::Closed))
    }

    #[test]
    fn add_read_batch_and_fence_through_a_real_server() {
        let dir = tempfile::tempdir().unwrap();
        let (_storage, server) = bookie(dir.path());
        let addr = server.local_addr().to_string();
        let client = BookieClient::new(ClientConfig::default());
        let key = Bytes::copy_from_slice(&master_key(b"pw"));
        let dm = DigestManager::new(3, b"pw", DigestType::Crc32c);
        let waits: Vec<_> = (0..50)
            .map(|e| {
                let body = dm.package(e, e - 1, (e + 1) * 5, b"hello");
                client.add(&addr, 3, e, key.clone(), body, 0)
            })
            .collect();
        for w in waits {
            assert_eq!(wait(w), Ok(Reply::Added));
        }
        let Ok(Reply::Entry(e)) = wait(client.read(&addr, 3, 7, 0, None)) else {
            panic!("read failed");
        };
        assert_eq!(
            dm.verify(&e, Some(7)).unwrap().payload,
            Bytes::from_static(b"hello")
        );
        let Ok(Reply::Entry(last)) = wait(client.read(&addr, 3, -1, 0, None)) else {
            panic!("read -1 failed");
        };
        assert_eq!(dm.verify(&last, None).unwrap().entry_id, 49);
        let Ok(Reply::Entries(batch)) = wait(client.batch_read(&addr, 3, 10, 5, 1 << 20, 0, None))
        else {
            panic!("batch read failed");
        };
        assert_eq!(batch.len(), 5);
        assert!(matches!(
            wait(client.read(&addr, 3, 99, 0, None)),
            Err(ClientError::Bookie {
                rc: rc::ENOENTRY,
                ..
            })
        ));
        assert!(matches!(
            wait(client.read(&addr, 4, 0, 0, None)),
            Err(ClientError::Bookie {
                rc: rc::ENOLEDGER,
                ..
            })
        ));
        // Fencing read, then a normal add is refused and a recovery add accepted.
        assert!(
            wait(client.read(&addr, 3, -1, protocol::FLAG_DO_FENCING, Some(key.clone()))).is_ok()
        );
        let body = dm.package(50, 49, 255, b"hello");
        assert!(matches!(
            wait(client.add(&addr, 3, 50, key.clone(), body.clone(), 0)),
            Err(ClientError::Bookie {
                rc: rc::EFENCED,
                ..
            })
        ));
        assert_eq!(
            wait(client.add(&addr, 3, 50, key.clone(), body, protocol::FLAG_RECOVERY_ADD)),
            Ok(Reply::Added)
        );
        let wrong = Bytes::copy_from_slice(&master_key(b"nope"));
        assert!(matches!(
            wait(client.add(&addr, 3, 51, wrong, dm.package(51, 50, 260, b"x"), 0)),
            Err(ClientError::Bookie { rc: rc::EUA, .. })
        ));
        server.stop(Duration::from_secs(1));
    }

    #[test]
    fn unreachable_bookie_fails_fast_and_requests_time_out() {
        let client = BookieClient::new(ClientConfig {
            connect_timeout: Duration::from_millis(500),
            ..ClientConfig::default()
        });
        // A port nothing listens on.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        assert!(matches!(
            wait(client.read(&addr, 1, 0, 0, None)),
            Err(ClientError::Unavailable { .. })
        ));

        // A listener that never answers: the request times out.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let client = BookieClient::new(ClientConfig {
            read_timeout: Duration::from_millis(300),
            ..ClientConfig::default()
        });
        assert!(matches!(
            wait(client.read(&addr, 1, 0, 0, None)),
            Err(ClientError::Timeout { .. })
        ));
    }
}
