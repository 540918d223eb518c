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

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use super::outbox::{Outbox, Reply, Slot, Timed, Usage};
use super::state::ServerState;
use super::stats::ServerStats;
use super::{v2, v3};
use crate::net::write_all_chunks;
use crate::protocol::{self, OutFrames, ProtocolError};

/// Stop coalescing responses into one write beyond this many bytes.
const MAX_WRITE_BATCH: usize = 1 << 20;
/// A paused reader also re-checks the budgets this often (the total budget has no per-connection
/// wake-up).
const PAUSE_RECHECK: Duration = Duration::from_millis(10);
/// How long a stopping connection waits for its client to close after the server sent FIN.
const LINGER_AFTER_STOP: Duration = Duration::from_secs(30);

pub(super) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<ServerState>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    // Bounded by what the connection reads: one response per request, requests in flight at
    // most `maxPendingAddRequestsPerThread` adds and `maxPendingReadRequestsPerThread` reads
    // (a slot is freed once its response is written), and no request is read while
    // `serverWriteBufferHighWaterMark` response bytes wait here.
    let (tx, rx) = mpsc::unbounded_channel::<(Reply, Timed)>();
    let usage = Arc::new(Usage::default());
    let outbox = Outbox {
        tx,
        usage: usage.clone(),
        state: state.clone(),
    };
    let writer_task = tokio::spawn(write_responses(
        writer,
        rx,
        usage.clone(),
        state.clone(),
        peer,
    ));
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut stopping = false;
    // The Java bookie's decoder state: a connection starts reading frames as V3 (protobuf) and,
    // at the first frame that is not one, reads V2 for the rest of the connection.
    let mut v2_for_good = false;
    // When the bytes in `buf` arrived: one clock read per socket read, shared by its frames.
    let mut received = None;
    'conn: loop {
        loop {
            // Checked before every request, so one read of many requests cannot queue more
            // than one response past the mark.
            if outbox.over(state.cfg.write_buffer_high_water_mark) {
                state.stats.connections_paused.inc();
                log::debug!("connection from {peer}: responses not read; pausing reads");
                while outbox.over(state.cfg.write_buffer_low_water_mark) {
                    let drained = usage.drained.notified();
                    tokio::select! {
                        _ = drained => {}
                        _ = tokio::time::sleep(PAUSE_RECHECK) => {}
                        _ = stop.changed() => {
                            stopping = true;
                            break 'conn;
                        }
                    }
                }
            }
            match protocol::take_frame(&mut buf, state.cfg.max_frame_size) {
                Ok(Some(body)) => {
                    let handled = if v2_for_good {
                        v2::handle_frame(body, &outbox, received)
                    } else {
                        match v3::try_handle_frame(body, &outbox, received) {
                            Ok(()) => Ok(()),
                            Err(body) => {
                                v2_for_good = true;
                                v2::handle_frame(body, &outbox, received)
                            }
                        }
                    };
                    if let Err(e) = handled {
                        close_for(&state, peer, &e);
                        break 'conn;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    close_for(&state, peer, &e);
                    break 'conn;
                }
            }
        }
        tokio::select! {
            read = reader.read_buf(&mut buf) => match read {
                Ok(0) => break,
                Ok(_) => received = crate::metrics::start(),
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
    drop(outbox);
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
        let _ = tokio::time::timeout(LINGER_AFTER_STOP, linger).await;
    }
}

fn close_for(state: &ServerState, peer: SocketAddr, why: &ProtocolError) {
    state.stats.protocol_errors.inc();
    log::warn!("closing connection from {peer}: {why}");
}

async fn write_responses(
    mut writer: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<(Reply, Timed)>,
    usage: Arc<Usage>,
    state: Arc<ServerState>,
    peer: SocketAddr,
) {
    let mut frames = OutFrames::default();
    let mut broken = false;
    let mut written: Vec<Written> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut released = Released::default();
        written.clear();
        note(&first, &mut released, &mut written, &mut frames);
        while frames.len() < MAX_WRITE_BATCH {
            match rx.try_recv() {
                Ok(r) => note(&r, &mut released, &mut written, &mut frames),
                Err(_) => break,
            }
        }
        let chunks = frames.take();
        if !broken {
            let started = crate::metrics::start();
            let result = write_all_chunks(&mut writer, &chunks).await;
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
        usage.adds.fetch_sub(released.adds, Ordering::AcqRel);
        usage.reads.fetch_sub(released.reads, Ordering::AcqRel);
        usage
            .queued_bytes
            .fetch_sub(released.bytes, Ordering::AcqRel);
        let stats = &state.stats;
        stats.response_bytes_queued.sub(released.bytes as u64);
        stats.add_entry_in_progress.sub(released.adds as u64);
        stats.read_entry_in_progress.sub(released.reads as u64);
        usage.drained.notify_one();
    }
    let _ = writer.shutdown().await;
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
