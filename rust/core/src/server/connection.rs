//! One client connection: a reader task that cuts frames and hands them to the protocol
//! handler, and a writer task that encodes responses and writes them in vectored batches.
//! It owns what a connection may hold; it never interprets a request.
//!
//! Bounds (BookKeeper's keys):
//! - requests in flight (`maxPendingAddRequestsPerThread`, `maxPendingReadRequestsPerThread`,
//!   per connection here): past them a request is answered ETOOMANYREQUESTS; a request counts
//!   until its response is written;
//! - response bytes waiting to be written: past `serverWriteBufferHighWaterMark` the connection
//!   stops reading requests until its queue drains below `serverWriteBufferLowWaterMark`; past
//!   `serverResponseBufferTotalBytes` for all connections together, every connection with
//!   responses waiting stops reading. A client that never reads its replies therefore costs the
//!   bookie at most about one high-water mark (plus one frame), whatever it sends.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;

use super::outbox::{Limits, Outbox, Reply, Slot, Timed, Usage};
use super::reads::ReadingConnection;
use super::state::ServerState;
use super::stats::ServerStats;
use super::{auth, v2, v3};
use crate::net::write_all_chunks;
use crate::protocol::{self, OutFrames, ProtocolError};

/// Stop coalescing responses into one write beyond this many bytes.
const MAX_WRITE_BATCH: usize = 1 << 20;
/// The longest a connection handles requests before it lets the runtime's other tasks run.
/// Reads are served inline: without a turn, a client with hundreds of batch reads buffered
/// keeps a worker thread for all of them while another client's adds wait to be read.
const TURN: Duration = Duration::from_micros(200);
/// A paused reader also re-checks the budgets this often (the total budget has no per-connection
/// wake-up).
const PAUSE_RECHECK: Duration = Duration::from_millis(10);
/// How long a stopping connection waits for its client to close after the server sent FIN.
const LINGER_AFTER_STOP: Duration = Duration::from_secs(30);
/// How long the client may take over its TLS handshake after START_TLS was answered.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The responses' channel: bounded by what the connection reads, one response per request,
/// requests in flight at most `maxPendingAddRequestsPerThread` adds and
/// `maxPendingReadRequestsPerThread` reads (a slot is freed once its response is written), and
/// no request is read while `serverWriteBufferHighWaterMark` response bytes wait in it.
type Responses = mpsc::UnboundedReceiver<(Reply, Timed)>;
/// A writer task: its half of the socket and the responses' channel come back after it wrote
/// the answer to START_TLS (None: it ended).
type WriterTask<W> = JoinHandle<Option<(W, Responses)>>;

/// How the reading of requests ended.
#[derive(PartialEq, Eq)]
enum End {
    /// The client closed, the connection broke, or a frame was bad.
    Closed,
    /// The server stops.
    Stopping,
    /// START_TLS was answered: the TLS handshake comes next.
    StartTls,
}

pub(super) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<ServerState>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel::<(Reply, Timed)>();
    let usage = Arc::new(Usage::default());
    // Without an authentication or authorization provider every connection is authenticated
    // (AuthDisabled).
    let open = state.cfg.authorized_roles.is_none() && state.cfg.sasl.is_none();
    usage.authenticated.store(open, Ordering::Release);
    let reading: Arc<dyn ReadingConnection> = Arc::new(Limits {
        usage: usage.clone(),
        state: state.clone(),
    });
    let outbox = Outbox {
        tx,
        usage: usage.clone(),
        state: state.clone(),
        reading: reading.clone(),
    };
    let writer_task = tokio::spawn(write_responses(writer, rx, usage, state, reading, peer));
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut frames = Frames::default();
    let end = read_requests(&mut reader, &mut buf, &outbox, &mut frames, peer, &mut stop).await;
    if end != End::StartTls {
        return finish(outbox, writer_task, &mut reader, &mut buf, end).await;
    }
    let Some((mut reader, writer_task)) = upgrade(reader, writer_task, &buf, &outbox, peer).await
    else {
        return;
    };
    let end = read_requests(&mut reader, &mut buf, &outbox, &mut frames, peer, &mut stop).await;
    finish(outbox, writer_task, &mut reader, &mut buf, end).await;
}

/// What the reading of frames carries from one socket read to the next.
#[derive(Default)]
struct Frames {
    /// The Java bookie's decoder state: a connection starts reading frames as V3 (protobuf)
    /// and, at the first frame that is not one, reads V2 for the rest of the connection.
    v2_for_good: bool,
    /// When the bytes in the buffer arrived: one clock read per socket read, shared by its
    /// frames.
    received: Option<Instant>,
    /// The SASL exchange of a connection not authenticated yet (it spans a TLS upgrade).
    sasl: crate::sasl::ServerExchange,
}

/// Reads and handles requests until the client closes, the server stops or START_TLS is
/// answered.
async fn read_requests<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    outbox: &Outbox,
    frames: &mut Frames,
    peer: SocketAddr,
    stop: &mut watch::Receiver<bool>,
) -> End {
    let state = outbox.state();
    loop {
        let mut turn = Instant::now();
        loop {
            // Checked before every request, so one read of many requests cannot queue more
            // than one response past the mark (or more reads than the pool lets wait).
            if (outbox.over(state.cfg.write_buffer_high_water_mark)
                || outbox.usage.waiting_reads.backed_up())
                && wait_for_room(outbox, peer, stop).await
            {
                return End::Stopping;
            }
            if turn.elapsed() >= TURN {
                hand_over_reads(outbox);
                tokio::task::yield_now().await;
                turn = Instant::now();
            }
            match protocol::take_frame(buf, state.cfg.max_frame_size) {
                Ok(Some(body)) => {
                    let body = if outbox.usage.authenticated.load(Ordering::Acquire) {
                        body
                    } else {
                        match gate(body, outbox, frames) {
                            Ok(Some(body)) => body,
                            Ok(None) => continue,
                            Err(e) => {
                                close_for(state, peer, &e);
                                return End::Closed;
                            }
                        }
                    };
                    let handled = if frames.v2_for_good {
                        v2::handle_frame(body, outbox, frames.received)
                    } else {
                        match v3::try_handle_frame(body, outbox, frames.received) {
                            Ok(()) if outbox.usage.start_tls.load(Ordering::Acquire) => {
                                hand_over_reads(outbox);
                                return End::StartTls;
                            }
                            Ok(()) => Ok(()),
                            Err(body) => {
                                frames.v2_for_good = true;
                                v2::handle_frame(body, outbox, frames.received)
                            }
                        }
                    };
                    if let Err(e) = handled {
                        close_for(state, peer, &e);
                        return End::Closed;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    close_for(state, peer, &e);
                    return End::Closed;
                }
            }
        }
        hand_over_reads(outbox);
        tokio::select! {
            read = reader.read_buf(buf) => match read {
                Ok(0) => return End::Closed,
                Ok(_) => frames.received = crate::metrics::start(),
                Err(e) => {
                    log::debug!("connection from {peer}: {e}");
                    return End::Closed;
                }
            },
            _ = stop.changed() => return End::Stopping,
        }
    }
}

/// A frame of a connection not authenticated yet: answered as BookKeeper's AuthHandler does
/// (Ok(None)), given back to be served (START_TLS), or a reason to close.
fn gate(body: Bytes, outbox: &Outbox, frames: &mut Frames) -> Result<Option<Bytes>, ProtocolError> {
    if !frames.v2_for_good {
        match v3::unauthenticated(body, outbox, &mut frames.sasl) {
            Ok(v3::Gated::Serve(body)) => return Ok(Some(body)),
            Ok(v3::Gated::Answered) => return Ok(None),
            Ok(v3::Gated::Refused(why)) => return Err(ProtocolError::AuthenticationFailed(why)),
            Err(body) => {
                frames.v2_for_good = true;
                return v2::unauthenticated(body, outbox, &mut frames.sasl).map(|()| None);
            }
        }
    }
    v2::unauthenticated(body, outbox, &mut frames.sasl).map(|()| None)
}

/// Hands the reads queued since the last time to the read pool's workers (see
/// [`ReadPool::hand_over`](super::reads::ReadPool::hand_over)).
fn hand_over_reads(outbox: &Outbox) {
    if let Some(reads) = &outbox.state.reads {
        reads.hand_over(&outbox.reading);
    }
}

/// Waits while the connection's responses are not being read, or while the read pool holds
/// many of its reads; true if the server stops meanwhile.
async fn wait_for_room(
    outbox: &Outbox,
    peer: SocketAddr,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let state = outbox.state();
    hand_over_reads(outbox);
    let mut counted = false;
    loop {
        let unread = outbox.over(state.cfg.write_buffer_low_water_mark);
        if !unread && !outbox.usage.waiting_reads.still_backed_up() {
            return false;
        }
        // A pause for unread responses is what the metric counts, not a deep pipeline of reads
        // waiting for the pool.
        if !counted && outbox.over(state.cfg.write_buffer_high_water_mark) {
            counted = true;
            state.stats.connections_paused.inc();
            log::debug!("connection from {peer}: responses not read; pausing reads");
        }
        let drained = outbox.usage.drained.notified();
        tokio::select! {
            _ = drained => {}
            _ = tokio::time::sleep(PAUSE_RECHECK) => {}
            _ = stop.changed() => return true,
        }
    }
}

/// The server side of the TLS handshake on the socket START_TLS was answered on: the writer
/// hands back its half once the answer is out, the halves are joined, the handshake runs
/// (bounded by [`TLS_HANDSHAKE_TIMEOUT`]) and a writer over TLS takes the same responses'
/// channel. None (the connection closes) when the handshake fails.
async fn upgrade(
    reader: OwnedReadHalf,
    writer_task: WriterTask<OwnedWriteHalf>,
    buf: &BytesMut,
    outbox: &Outbox,
    peer: SocketAddr,
) -> Option<(
    ReadHalf<TlsStream<TcpStream>>,
    WriterTask<WriteHalf<TlsStream<TcpStream>>>,
)> {
    let state = outbox.state();
    let tls = state.cfg.tls.as_ref()?.acceptor();
    let (writer, rx) = writer_task.await.ok().flatten()?;
    if !whole_frames(buf, state.cfg.max_frame_size) {
        // The client must wait for the answer before its handshake: bytes already here that
        // are not whole requests are neither a request nor a ClientHello we could use.
        log::warn!("connection from {peer}: data after START_TLS before the handshake; closing");
        return None;
    }
    let stream = reader.reunite(writer).ok()?;
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
        Ok(Ok(stream)) => {
            let session = stream.get_ref().1;
            log::info!(
                "connection from {peer}: TLS established ({:?}, {:?})",
                session.protocol_version(),
                session.negotiated_cipher_suite().map(|s| s.suite())
            );
            state.stats.tls_connections.inc();
            outbox.usage.in_tls.store(true, Ordering::Release);
            outbox.usage.start_tls.store(false, Ordering::Release);
            let chain: Option<Vec<Vec<u8>>> = session
                .peer_certificates()
                .map(|certs| certs.iter().map(|c| c.to_vec()).collect());
            let (r, w) = tokio::io::split(stream);
            let usage = outbox.usage.clone();
            let reading = outbox.reading.clone();
            let task = tokio::spawn(write_responses(w, rx, usage, state.clone(), reading, peer));
            authorize(chain.as_deref(), outbox, peer);
            Some((r, task))
        }
        Ok(Err(e)) => {
            state.stats.tls_handshake_failures.inc();
            log::warn!("connection from {peer}: TLS handshake failed: {e}");
            None
        }
        Err(_) => {
            state.stats.tls_handshake_failures.inc();
            log::warn!("connection from {peer}: no TLS handshake within {TLS_HANDSHAKE_TIMEOUT:?}");
            None
        }
    }
}

/// Whether `buf` holds only whole requests. Requests that arrived with START_TLS in the same
/// read are served after the handshake, their answers inside TLS, as BookKeeper's bookie (whose
/// TLS handler only sees bytes read after it) serves them: its client sends its first AUTH
/// right behind START_TLS when SASL and TLS are both on.
fn whole_frames(buf: &BytesMut, max_frame: usize) -> bool {
    let mut rest = buf.clone();
    loop {
        match protocol::take_frame(&mut rest, max_frame) {
            Ok(Some(_)) => {}
            Ok(None) => return rest.is_empty(),
            Err(_) => return false,
        }
    }
}

/// With an authorization provider: the connection is authenticated if the client certificate's
/// first role is authorized; if not it stays unauthenticated (every request answered EUA) and
/// the START_TLS is answered again, EIO, as BookKeeper's bookie does.
fn authorize(chain: Option<&[Vec<u8>]>, outbox: &Outbox, peer: SocketAddr) {
    let state = outbox.state();
    let Some(roles) = state.cfg.authorized_roles.as_ref() else {
        return;
    };
    match auth::authorize(chain, roles) {
        Ok(role) => {
            outbox.usage.authenticated.store(true, Ordering::Release);
            log::info!("connection from {peer}: authorized, role {role}");
        }
        Err(why) => {
            state.stats.authorization_failures.inc();
            log::error!("connection from {peer}: AuthZ failed: {why}");
            if let Some(header) = outbox.usage.start_tls_header.lock().take() {
                v3::refuse_after_start_tls(&header, outbox);
            }
        }
    }
}

/// After the last request: the responses still owed are written once their completions report
/// (the writer ends when the last sender, ours or a pending completion's, is gone); a stopping
/// server then waits for the client to close.
async fn finish<R: AsyncRead + Unpin, W>(
    outbox: Outbox,
    writer_task: WriterTask<W>,
    reader: &mut R,
    buf: &mut BytesMut,
    end: End,
) {
    if let Some(reads) = &outbox.state.reads {
        reads.closing(&outbox.reading);
    }
    drop(outbox);
    let _ = writer_task.await;
    if end == End::Stopping {
        // Closing a socket with unread input makes the kernel send RST, which destroys the
        // responses still in flight to the client. The writer has sent FIN; clients close on
        // seeing it, so read (and drop) until they do. stop()'s drain deadline bounds this.
        let linger = async {
            loop {
                buf.clear();
                match reader.read_buf(buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_AFTER_STOP, linger).await;
    }
}

fn close_for(state: &ServerState, peer: SocketAddr, why: &ProtocolError) {
    // A refused authentication is counted as such (authentication_failures), not as a bad frame.
    if !matches!(why, ProtocolError::AuthenticationFailed(_)) {
        state.stats.protocol_errors.inc();
    }
    log::warn!("closing connection from {peer}: {why}");
}

/// Writes the responses in batches until every sender is gone (None), or until it wrote the
/// answer to START_TLS: then it hands back its half of the socket and the channel.
async fn write_responses<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: Responses,
    usage: Arc<Usage>,
    state: Arc<ServerState>,
    reading: Arc<dyn ReadingConnection>,
    peer: SocketAddr,
) -> Option<(W, Responses)> {
    let mut frames = OutFrames::default();
    let mut broken = false;
    let mut written: Vec<Written> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut released = Released::default();
        written.clear();
        let mut hand_over = matches!(first.0, Reply::StartTls(_));
        note(&first, &mut released, &mut written, &mut frames);
        while !hand_over && frames.len() < MAX_WRITE_BATCH {
            match rx.try_recv() {
                Ok(r) => {
                    hand_over = matches!(r.0, Reply::StartTls(_));
                    note(&r, &mut released, &mut written, &mut frames);
                }
                Err(_) => break,
            }
        }
        let chunks = frames.take();
        if !broken {
            let started = crate::metrics::start();
            let result = match write_all_chunks(&mut writer, &chunks).await {
                // A TLS stream holds records until flushed; a plain socket's flush is free.
                Ok(()) => writer.flush().await,
                Err(e) => Err(e),
            };
            state
                .stats
                .channel_write
                .record_since(result.is_ok(), started);
            if let Err(e) = result {
                log::debug!("writing to {peer}: {e}");
                // Keep draining so that completions never block, but stop writing.
                broken = true;
            }
        }
        time_requests(&state.stats, &written, broken);
        release(&usage, &state.stats, &released);
        if let Some(reads) = &state.reads {
            reads.resume(&reading);
        }
        if hand_over {
            return (!broken).then_some((writer, rx));
        }
    }
    let _ = writer.shutdown().await;
    None
}

/// Gives the written batch's slots and bytes back to the connection's limits.
fn release(usage: &Usage, stats: &ServerStats, released: &Released) {
    usage.adds.fetch_sub(released.adds, Ordering::AcqRel);
    usage.reads.fetch_sub(released.reads, Ordering::AcqRel);
    usage
        .queued_bytes
        .fetch_sub(released.bytes, Ordering::AcqRel);
    stats.response_bytes_queued.sub(released.bytes as u64);
    stats.add_entry_in_progress.sub(released.adds as u64);
    stats.read_entry_in_progress.sub(released.reads as u64);
    usage.drained.notify_one();
}

fn note(
    (reply, timed): &(Reply, Timed),
    released: &mut Released,
    written: &mut Vec<Written>,
    frames: &mut OutFrames,
) {
    released.note(reply);
    if let Some(received) = timed.received {
        written.push(Written {
            received,
            slot: reply.slot(),
            batch: reply.is_batch_read(),
            fencing: timed.fencing,
            ok: reply.succeeded(),
            bytes: reply.wire_len() as u64,
        });
    }
    reply.encode(frames);
}

/// A response just written, for its request's latency.
struct Written {
    received: Instant,
    slot: Slot,
    batch: bool,
    fencing: bool,
    ok: bool,
    bytes: u64,
}

/// Records the request latencies of a written batch: one clock read for the whole batch. A
/// response that could not be written (the connection broke) counts as failed.
fn time_requests(stats: &ServerStats, written: &[Written], broken: bool) {
    if written.is_empty() {
        return;
    }
    let now = Instant::now();
    for w in written {
        let ok = w.ok && !broken;
        let at = Some(w.received);
        match w.slot {
            Slot::Add => stats.add_entry_request.record_between(ok, at, now),
            Slot::Read => {
                stats.read_entry_request.record_between(ok, at, now);
                if w.fencing {
                    stats.read_entry_fence_request.record_between(ok, at, now);
                }
                if w.batch {
                    stats.batch_read_entry_request.record_between(at, now);
                    stats.batch_read_entry_response_size.record(w.bytes);
                }
            }
            Slot::None => {}
        }
    }
}

/// What a written batch gives back to the connection's limits.
#[derive(Default)]
struct Released {
    adds: usize,
    reads: usize,
    bytes: usize,
}

impl Released {
    fn note(&mut self, r: &Reply) {
        self.bytes += r.wire_len();
        match r.slot() {
            Slot::Add => self.adds += 1,
            Slot::Read => self.reads += 1,
            Slot::None => {}
        }
    }
}
