//! One connection to one bookie: its pending requests, its bounded send queue, and the task
//! that connects, writes queued frames in batches, reads responses and expires timed-out
//! requests. It never decides what a request means.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::{Condvar, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, Notify};

use super::health::BookieHealth;
use super::reply::{ClientError, Reply, ReplyResult};
use super::sasl_auth::authenticate;
use super::start_tls::start_tls;
use crate::config::ClientConfig;
use crate::done::Done;
use crate::net::write_all_chunks;
use crate::protocol::v2::{decode_response, Response};
use crate::protocol::{self, v3, Status};

/// How responses are matched to requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Key {
    Add(i64, i64),
    Read(i64, i64),
    Batch(i64),
    /// A V3 request matched by its transaction id (a long-poll read, whose answer may name
    /// another entry, and the V3-only operations), with the operation's name.
    Txn(u64, &'static str),
}

impl Key {
    pub(super) fn op(self) -> &'static str {
        match self {
            Key::Add(..) => "add",
            Key::Read(..) => "read",
            Key::Batch(_) => "batch read",
            Key::Txn(_, op) => op,
        }
    }
}

/// A request waiting for its response.
pub(super) struct Waiter {
    done: Done<ReplyResult>,
    deadline: Instant,
}

impl Waiter {
    pub(super) fn new(done: Done<ReplyResult>, deadline: Instant) -> Self {
        Waiter { done, deadline }
    }
}

/// Most frames coalesced into one write.
const MAX_FRAMES_PER_WRITE: usize = 256;
/// How often pending requests are checked against their deadlines.
const EXPIRY_TICK: Duration = Duration::from_millis(100);

/// A frame on its way to the socket, with the bytes it reserved.
struct Frame {
    chunks: Vec<Bytes>,
    size: usize,
}

/// One connection to one bookie (possibly still connecting).
pub(super) struct Conn {
    bookie: String,
    out: mpsc::UnboundedSender<Frame>,
    pending: Mutex<HashMap<Key, VecDeque<Waiter>>>,
    alive: AtomicBool,
    /// Why the connection ended, once it did: a request that finds it ended fails with this
    /// (a refused authentication stays UnauthorizedAccess, not a bare "closed").
    ended: Mutex<Option<ClientError>>,
    /// Bytes of frames queued and not yet written; bounded by `high_water_mark`.
    pub(super) queued: Mutex<usize>,
    high_water_mark: usize,
    room: Condvar,
    room_async: Notify,
    /// What the peer did with a strided batch read: `STRIDES_*`. Per connection, since a
    /// restarted bookie may be another implementation.
    strides: AtomicU8,
    /// The bookie's health figures (shared by its connections over time).
    pub(super) health: Arc<BookieHealth>,
}

const STRIDES_UNKNOWN: u8 = 0;
const STRIDES_HONOURED: u8 = 1;
const STRIDES_IGNORED: u8 = 2;

impl Conn {
    /// Creates the connection and starts its task on `rt`.
    pub(super) fn start(
        rt: &Runtime,
        bookie: &str,
        cfg: &ClientConfig,
        health: Arc<BookieHealth>,
    ) -> Arc<Conn> {
        // Bounded in bytes rather than frames: a frame is queued only once its bytes are
        // reserved against `clientWriteBufferHighWaterMark` (`queued`), so at most that many
        // bytes wait here, or one larger frame alone.
        let (out, out_rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Conn {
            bookie: bookie.to_string(),
            out,
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
            ended: Mutex::new(None),
            queued: Mutex::new(0),
            high_water_mark: cfg.write_buffer_high_water_mark,
            room: Condvar::new(),
            room_async: Notify::new(),
            strides: AtomicU8::new(STRIDES_UNKNOWN),
            health,
        });
        rt.spawn(run_connection(conn.clone(), out_rx, cfg.clone()));
        conn
    }

    pub(super) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Whether the peer honours strided batch reads: None until it answered one.
    pub(super) fn strided_reads(&self) -> Option<bool> {
        match self.strides.load(Ordering::Relaxed) {
            STRIDES_HONOURED => Some(true),
            STRIDES_IGNORED => Some(false),
            _ => None,
        }
    }

    pub(super) fn set_strided_reads(&self, honoured: bool) {
        let v = if honoured {
            STRIDES_HONOURED
        } else {
            STRIDES_IGNORED
        };
        self.strides.store(v, Ordering::Relaxed);
    }

    fn has_room(&self, queued: usize, size: usize) -> bool {
        // A frame larger than the mark still goes, alone.
        queued == 0 || queued + size <= self.high_water_mark || !self.is_alive()
    }

    /// Reserves `size` queued bytes, waiting on this thread until `deadline`. False on timeout.
    pub(super) fn reserve_blocking(&self, size: usize, deadline: Instant) -> bool {
        let mut queued = self.queued.lock();
        while !self.has_room(*queued, size) {
            if self.room.wait_until(&mut queued, deadline).timed_out()
                && !self.has_room(*queued, size)
            {
                return false;
            }
        }
        *queued += size;
        true
    }

    /// Reserves `size` queued bytes, awaiting room until `deadline`. False on timeout.
    pub(super) async fn reserve(&self, size: usize, deadline: Instant) -> bool {
        loop {
            let notified = self.room_async.notified();
            {
                let mut queued = self.queued.lock();
                if self.has_room(*queued, size) {
                    *queued += size;
                    return true;
                }
            }
            let deadline = tokio::time::Instant::from_std(deadline);
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    fn release(&self, size: usize) {
        let mut queued = self.queued.lock();
        *queued = queued.saturating_sub(size);
        drop(queued);
        self.room.notify_all();
        self.room_async.notify_waiters();
    }

    /// The error of a request that found no room in time.
    pub(super) fn no_room_error(&self, key: Key) -> ClientError {
        ClientError::Timeout {
            bookie: self.bookie.clone(),
            op: key.op(),
        }
    }

    /// Registers the waiter, then queues the frame (its bytes already reserved), so the
    /// response always finds its waiter.
    pub(super) fn enqueue(&self, key: Key, chunks: Vec<Bytes>, size: usize, waiter: Waiter) {
        self.pending
            .lock()
            .entry(key)
            .or_default()
            .push_back(waiter);
        if self.out.send(Frame { chunks, size }).is_err() || !self.is_alive() {
            self.release(size);
            let why = self.ended.lock().clone();
            self.fail_all(&why.unwrap_or_else(|| ClientError::Unavailable {
                bookie: self.bookie.clone(),
                why: "connection closed".into(),
            }));
        }
    }

    /// Fails every waiting request and marks the connection dead.
    pub(super) fn fail_all(&self, err: &ClientError) {
        self.ended.lock().get_or_insert_with(|| err.clone());
        self.alive.store(false, Ordering::SeqCst);
        let pending = std::mem::take(&mut *self.pending.lock());
        self.room.notify_all();
        self.room_async.notify_waiters();
        for (_, waiters) in pending {
            for w in waiters {
                self.finish(w, Err(err.clone()));
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
            self.finish(w, result);
        }
    }

    /// Completes a request (its `done` counts the outcome against the bookie: see
    /// `BookieHealth::track`).
    fn finish(&self, waiter: Waiter, result: ReplyResult) {
        (waiter.done)(result);
    }

    fn expire(&self, now: Instant) {
        let mut expired = Vec::new();
        {
            let mut pending = self.pending.lock();
            pending.retain(|key, queue| {
                // Later requests with the same key may have later deadlines: keep order.
                let mut kept = VecDeque::with_capacity(queue.len());
                for w in queue.drain(..) {
                    if w.deadline <= now {
                        expired.push((*key, w));
                    } else {
                        kept.push_back(w);
                    }
                }
                *queue = kept;
                !queue.is_empty()
            });
        }
        for (key, w) in expired {
            let timeout = ClientError::Timeout {
                bookie: self.bookie.clone(),
                op: key.op(),
            };
            self.finish(w, Err(timeout));
        }
    }

    fn deliver(&self, resp: Response) {
        let failed = |op, rc| ClientError::Bookie {
            bookie: self.bookie.clone(),
            op,
            status: Status::from_v2_code(rc),
        };
        match resp {
            Response::Add {
                rc, ledger, entry, ..
            } => self.complete(
                Key::Add(ledger, entry),
                if rc == protocol::rc::EOK {
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
            } => self.complete(
                Key::Read(ledger, entry),
                if rc == protocol::rc::EOK {
                    Ok(Reply::Entry(body))
                } else {
                    Err(failed("read", rc))
                },
            ),
            Response::BatchRead {
                flags,
                rc,
                request_id,
                entries,
                ..
            } => self.complete(
                Key::Batch(request_id),
                if rc != protocol::rc::EOK {
                    Err(failed("batch read", rc))
                } else if flags & protocol::FLAG_STRIDED_READ != 0 {
                    self.set_strided_reads(true);
                    Ok(Reply::StridedEntries(entries))
                } else {
                    Ok(Reply::Entries(entries))
                },
            ),
            Response::Auth { .. } => {}
        }
    }
}

impl Conn {
    /// A V3 response: adds and reads are matched by ledger and entry, as V2's are.
    fn deliver_v3(&self, resp: v3::pb::Response) {
        let failed = |op, code| ClientError::Bookie {
            bookie: self.bookie.clone(),
            op,
            status: Status::from_v3_code(code),
        };
        let ok = v3::StatusCode::Eok as i32;
        let txn = Key::Txn(resp.header.txn_id, v3_op_name(resp.header.operation));
        if self.pending.lock().contains_key(&txn) {
            let op = v3_op_name(resp.header.operation);
            let result = match txn_reply(resp) {
                Ok(reply) => Ok(reply),
                Err(code) => Err(failed(op, code)),
            };
            return self.complete(txn, result);
        }
        if let Some(add) = resp.add_response {
            let result = if add.status == ok {
                Ok(Reply::Added)
            } else {
                Err(failed("add", add.status))
            };
            self.complete(Key::Add(add.ledger_id, add.entry_id), result);
        } else if let Some(read) = resp.read_response {
            let result = if read.status == ok {
                Ok(Reply::Entry(read.body.unwrap_or_default()))
            } else {
                Err(failed("read", read.status))
            };
            self.complete(Key::Read(read.ledger_id, read.entry_id), result);
        } else if resp.status == v3::StatusCode::Eua as i32 {
            // A bookie that has not authenticated the connection answers with the header and
            // EUA alone (BookKeeper's AuthHandler), naming no entry: nothing sent on this
            // connection will be served, so everything waiting fails now rather than at its
            // timeout, and the connection is dropped.
            let op = match v3::OperationType::try_from(resp.header.operation) {
                Ok(v3::OperationType::AddEntry) => "add",
                Ok(v3::OperationType::ReadEntry) => "read",
                _ => v3_op_name(resp.header.operation),
            };
            self.fail_all(&failed(op, resp.status));
        }
    }
}

async fn run_connection(
    conn: Arc<Conn>,
    mut out_rx: mpsc::UnboundedReceiver<Frame>,
    cfg: ClientConfig,
) {
    let unavailable = |why: String| ClientError::Unavailable {
        bookie: conn.bookie.clone(),
        why,
    };
    let connected =
        tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(&conn.bookie)).await;
    let stream = match connected {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return shut(
                &conn,
                &mut out_rx,
                unavailable(format!("connect failed: {e}")),
            )
        }
        Err(_) => return shut(&conn, &mut out_rx, unavailable("connect timed out".into())),
    };
    let _ = stream.set_nodelay(true);
    let max_frame = cfg.max_frame_size;
    // Writes run in their own task, so a peer that stops reading (a full socket) never stops
    // the expiry of pending requests.
    let (mut reader_task, mut writer_task) = match &cfg.tls {
        None => {
            let mut stream = stream;
            if let Err(refused) = authenticated(&conn, &mut stream, &cfg).await {
                return shut(&conn, &mut out_rx, refused);
            }
            let (reader, writer) = stream.into_split();
            (
                tokio::spawn(read_responses(conn.clone(), reader, max_frame)),
                tokio::spawn(write_frames(conn.clone(), writer, out_rx)),
            )
        }
        Some(tls) => {
            let upgrade = start_tls(stream, &conn.bookie, tls, max_frame);
            match tokio::time::timeout(cfg.start_tls_timeout, upgrade).await {
                Ok(Ok(mut stream)) => {
                    if let Err(refused) = authenticated(&conn, &mut stream, &cfg).await {
                        return shut(&conn, &mut out_rx, refused);
                    }
                    let (reader, writer) = tokio::io::split(stream);
                    (
                        tokio::spawn(read_responses(conn.clone(), reader, max_frame)),
                        tokio::spawn(write_frames(conn.clone(), writer, out_rx)),
                    )
                }
                failed => {
                    let why = match failed {
                        Ok(Err(why)) => why,
                        _ => format!(
                            "no TLS within startTLSTimeoutSecs ({:?})",
                            cfg.start_tls_timeout
                        ),
                    };
                    let security = ClientError::Security {
                        bookie: conn.bookie.clone(),
                        why,
                    };
                    log::warn!("{security}");
                    return shut(&conn, &mut out_rx, security);
                }
            }
        }
    };

    let mut ticker = tokio::time::interval(EXPIRY_TICK);
    let why = loop {
        tokio::select! {
            done = &mut reader_task => {
                break done.unwrap_or_else(|e| format!("reader failed: {e}"));
            }
            done = &mut writer_task => {
                match done {
                    Ok((why, rx)) => {
                        out_rx_back(&conn, rx);
                        break why;
                    }
                    Err(e) => break format!("writer failed: {e}"),
                }
            }
            _ = ticker.tick() => {
                if !conn.is_alive() {
                    break "client closed".to_string();
                }
                conn.expire(Instant::now());
            }
        }
    };
    reader_task.abort();
    writer_task.abort();
    conn.fail_all(&unavailable(why));
}

/// With SASL configured: the connection's DIGEST-MD5 exchange, bounded by
/// `clientConnectTimeoutMillis` (a Java bookie never answers a refused exchange). Err is the
/// bookie's UnauthorizedAccessException: the requests waiting for the connection fail with it
/// and none is sent.
async fn authenticated<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    stream: &mut S,
    cfg: &ClientConfig,
) -> Result<(), ClientError> {
    let Some(credentials) = cfg.sasl.as_ref() else {
        return Ok(());
    };
    let exchange = authenticate(
        stream,
        credentials,
        cfg.use_v2_wire_protocol,
        cfg.max_frame_size,
    );
    let why = match tokio::time::timeout(cfg.connect_timeout, exchange).await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(why)) => why,
        Err(_) => format!(
            "no answer within clientConnectTimeoutMillis ({:?}): the bookie refused the \
             credentials, or does not run SASL",
            cfg.connect_timeout
        ),
    };
    log::warn!(
        "SASL authentication to bookie {} as {:?} failed: {why}",
        conn.bookie,
        credentials.username
    );
    Err(ClientError::Bookie {
        bookie: conn.bookie.clone(),
        op: "authentication",
        status: Status::Unauthorized,
    })
}

/// Cuts the bookie's responses from the socket and completes their requests; why it stopped.
async fn read_responses<R: AsyncRead + Unpin>(
    conn: Arc<Conn>,
    mut reader: R,
    max_frame: usize,
) -> String {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        loop {
            match protocol::take_frame(&mut buf, max_frame) {
                Ok(Some(body)) if protocol::looks_like_v3(&body) => {
                    match v3::decode_response(body) {
                        Ok(resp) => conn.deliver_v3(resp),
                        Err(e) => return format!("bad response: {e}"),
                    }
                }
                Ok(Some(body)) => match decode_response(body) {
                    Ok(resp) => conn.deliver(resp),
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
}

/// Writes queued frames, up to [`MAX_FRAMES_PER_WRITE`] at once, giving their bytes back as
/// they go; why it stopped, and the queue (whose frames' bytes are still reserved).
async fn write_frames<W: AsyncWrite + Unpin>(
    conn: Arc<Conn>,
    mut writer: W,
    mut out_rx: mpsc::UnboundedReceiver<Frame>,
) -> (String, mpsc::UnboundedReceiver<Frame>) {
    let mut chunks: Vec<Bytes> = Vec::new();
    loop {
        let Some(first) = out_rx.recv().await else {
            return ("client closed".to_string(), out_rx);
        };
        chunks.clear();
        let mut size = first.size;
        chunks.extend(first.chunks);
        let mut frames = 1;
        while frames < MAX_FRAMES_PER_WRITE {
            match out_rx.try_recv() {
                Ok(f) => {
                    size += f.size;
                    chunks.extend(f.chunks);
                    frames += 1;
                }
                Err(_) => break,
            }
        }
        let written = match write_all_chunks(&mut writer, &chunks).await {
            // A TLS stream holds records until flushed; a plain socket's flush is free.
            Ok(()) => writer.flush().await,
            Err(e) => Err(e),
        };
        conn.release(size);
        if let Err(e) = written {
            return (format!("write failed: {e}"), out_rx);
        }
    }
}

/// Gives back the bytes of frames the writer never wrote.
fn out_rx_back(conn: &Conn, mut rx: mpsc::UnboundedReceiver<Frame>) {
    rx.close();
    while let Ok(f) = rx.try_recv() {
        conn.release(f.size);
    }
}

/// Ends the connection: fails its waiters and gives back the bytes of frames never written.
fn shut(conn: &Conn, out_rx: &mut mpsc::UnboundedReceiver<Frame>, err: ClientError) {
    conn.fail_all(&err);
    out_rx.close();
    while let Ok(f) = out_rx.try_recv() {
        conn.release(f.size);
    }
}

/// The name of a V3 operation matched by transaction id (errors and timeouts name it).
pub(super) fn v3_op_name(operation: i32) -> &'static str {
    use v3::OperationType as Op;
    match Op::try_from(operation) {
        Ok(Op::ReadEntry) => "long-poll read",
        Ok(Op::WriteLac) => "write LAC",
        Ok(Op::ReadLac) => "read LAC",
        Ok(Op::GetBookieInfo) => "get bookie info",
        Ok(Op::ForceLedger) => "force ledger",
        Ok(Op::GetListOfEntriesOfLedger) => "list entries",
        _ => "V3 request",
    }
}

/// The reply to a request matched by transaction id, or the failing status code (the
/// operation's own status, else the response's).
fn txn_reply(resp: v3::pb::Response) -> Result<Reply, i32> {
    let ok = v3::StatusCode::Eok as i32;
    let check = |status: i32| if status == ok { Ok(()) } else { Err(status) };
    if let Some(read) = resp.read_response {
        check(read.status)?;
        return Ok(Reply::LastAddConfirmed {
            lac: read.max_lac.unwrap_or(-1),
            next: read.body.filter(|b| !b.is_empty()),
        });
    }
    if let Some(r) = resp.read_lac_response {
        check(r.status)?;
        return Ok(Reply::Lac {
            lac_body: r.lac_body.filter(|b| !b.is_empty()),
            last_entry: r.last_entry_body.filter(|b| !b.is_empty()),
        });
    }
    if let Some(r) = resp.write_lac_response {
        check(r.status)?;
        return Ok(Reply::Done);
    }
    if let Some(r) = resp.force_ledger_response {
        check(r.status)?;
        return Ok(Reply::Done);
    }
    if let Some(r) = resp.get_bookie_info_response {
        check(r.status)?;
        return Ok(Reply::BookieInfo {
            total_disk_capacity: r.total_disk_capacity.unwrap_or(0),
            free_disk_space: r.free_disk_space.unwrap_or(0),
        });
    }
    if let Some(r) = resp.get_list_of_entries_of_ledger_response {
        check(r.status)?;
        let bytes = r.availability_of_entries_of_ledger.unwrap_or_default();
        return v3::availability_runs(&bytes)
            .map(Reply::EntryRuns)
            .map_err(|_| v3::StatusCode::Ebadreq as i32);
    }
    check(resp.status)?;
    Err(v3::StatusCode::Ebadreq as i32)
}
