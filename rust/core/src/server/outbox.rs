//! What a connection owes its client: responses on their way to the writer (in the protocol
//! version of their request), and the counts that bound a connection (requests in flight,
//! response bytes queued). Protocol handlers send through an [`Outbox`]; the connection's writer
//! drains it. It never encodes a frame itself.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, Notify};

use super::reads::{ConnReads, ReadingConnection};
use super::state::ServerState;
use crate::protocol::v2::Response as V2Response;
use crate::protocol::v3::Response as V3Response;
use crate::protocol::{self, OutFrames};

/// A response on its way to the writer, in the protocol version of its request.
pub(super) enum Reply {
    V2(V2Response),
    V3(V3Response),
    /// The EOK answer to START_TLS: written in plaintext, after which the writer hands the
    /// socket back for the TLS handshake and writes nothing more on it.
    StartTls(V3Response),
}

/// When a request was decoded (None with metrics off) and whether it fences, so that its
/// response can be timed once written.
#[derive(Clone, Copy, Default)]
pub(super) struct Timed {
    pub(super) received: Option<Instant>,
    pub(super) fencing: bool,
}

impl Timed {
    /// A request that arrived at `received` (None with metrics off).
    pub(super) fn at(received: Option<Instant>, fencing: bool) -> Timed {
        Timed { received, fencing }
    }
}

/// Which in-flight limit a reply releases.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Add,
    Read,
    None,
}

impl Reply {
    pub(super) fn wire_len(&self) -> usize {
        match self {
            Reply::V2(r) => r.wire_len(),
            Reply::V3(r) | Reply::StartTls(r) => r.wire_len(),
        }
    }

    /// Which in-flight limit the reply releases once written.
    pub(super) fn slot(&self) -> Slot {
        match self {
            Reply::V2(V2Response::Add { .. }) => Slot::Add,
            Reply::V2(V2Response::Read { .. } | V2Response::BatchRead { .. }) => Slot::Read,
            Reply::V2(V2Response::Auth { .. }) => Slot::None,
            // Only answers to admitted requests release a slot: reads answer as `Read`, adds
            // with an add response; a bare header (a malformed request) was never admitted.
            Reply::V3(V3Response::Read { .. }) => Slot::Read,
            Reply::V3(V3Response::Message(m)) if m.add_response.is_some() => Slot::Add,
            Reply::V3(V3Response::Message(_)) | Reply::StartTls(_) => Slot::None,
        }
    }

    /// Whether the response reports success (EOK).
    pub(super) fn succeeded(&self) -> bool {
        match self {
            Reply::V2(
                V2Response::Add { rc, .. }
                | V2Response::Read { rc, .. }
                | V2Response::BatchRead { rc, .. },
            ) => *rc == crate::protocol::rc::EOK,
            Reply::V2(V2Response::Auth { .. }) => true,
            Reply::V3(r) | Reply::StartTls(r) => r.succeeded(),
        }
    }

    /// Whether it answers a batch read.
    pub(super) fn is_batch_read(&self) -> bool {
        matches!(self, Reply::V2(V2Response::BatchRead { .. }))
    }

    pub(super) fn encode(&self, out: &mut OutFrames) {
        match self {
            Reply::V2(r) => protocol::v2::encode_response(r, out),
            Reply::V3(r) | Reply::StartTls(r) => protocol::v3::encode_response(r, out),
        }
    }
}

/// What a connection holds now.
#[derive(Default)]
pub(super) struct Usage {
    pub(super) adds: AtomicUsize,
    pub(super) reads: AtomicUsize,
    pub(super) queued_bytes: AtomicUsize,
    /// Signalled when the writer has written (queued bytes fell).
    pub(super) drained: Notify,
    /// START_TLS was accepted: the reader reads no further request in plaintext.
    pub(super) start_tls: AtomicBool,
    /// The connection runs inside TLS (a second START_TLS is refused).
    pub(super) in_tls: AtomicBool,
    /// Whether requests are served (see [`auth`](super::auth)); set when the connection opens
    /// without an authorization provider, else by an authorized TLS handshake.
    pub(super) authenticated: AtomicBool,
    /// The header of the START_TLS being answered: a refused authorization answers it again,
    /// EIO, inside TLS (as BookKeeper's bookie does).
    pub(super) start_tls_header: parking_lot::Mutex<Option<crate::protocol::v3::BkPacketHeader>>,
    /// Reads waiting for the read pool (see [`reads`](super::reads)).
    pub(super) waiting_reads: ConnReads,
}

impl Usage {
    /// Whether the connection's responses wait unread: its queue at `mark`, or the server's
    /// `total` queued bytes at its `budget` while this connection has some waiting.
    pub(super) fn over(&self, mark: usize, total: usize, budget: usize) -> bool {
        let mine = self.queued_bytes.load(Ordering::Acquire);
        mine >= mark.max(1) || (mine > 0 && total >= budget)
    }
}

/// The sending side of a connection, cloned into every pending completion.
#[derive(Clone)]
pub(super) struct Outbox {
    pub(super) tx: mpsc::UnboundedSender<(Reply, Timed)>,
    pub(super) usage: Arc<Usage>,
    pub(super) state: Arc<ServerState>,
    /// The connection as the read pool sees it.
    pub(super) reading: Arc<dyn ReadingConnection>,
}

/// A connection's limits and its server's: what the read pool holds of a connection (never
/// its responses' sender, so that a connection's writer still ends when its requests do).
pub(super) struct Limits {
    pub(super) usage: Arc<Usage>,
    pub(super) state: Arc<ServerState>,
}

impl ReadingConnection for Limits {
    fn waiting_reads(&self) -> &ConnReads {
        &self.usage.waiting_reads
    }

    fn responses_unread(&self) -> bool {
        let total = self.state.stats.response_bytes_queued.get() as usize;
        self.usage.over(
            self.state.cfg.write_buffer_high_water_mark,
            total,
            self.state.cfg.response_buffer_total_bytes,
        )
    }

    fn wake_reader(&self) {
        self.usage.drained.notify_one();
    }
}

impl Outbox {
    pub(super) fn state(&self) -> &Arc<ServerState> {
        &self.state
    }

    /// Counts one more add in flight; false if the connection is past its limit (the request
    /// still counts until its rejection is written).
    pub(super) fn admit(&self, slot: Slot) -> bool {
        let (count, max) = match slot {
            Slot::Add => (&self.usage.adds, self.state.cfg.max_pending_adds),
            Slot::Read => (&self.usage.reads, self.state.cfg.max_pending_reads),
            Slot::None => return true,
        };
        let stats = &self.state.stats;
        let (in_progress, rejected) = match slot {
            Slot::Add => (&stats.add_entry_in_progress, &stats.add_entry_rejected),
            _ => (&stats.read_entry_in_progress, &stats.read_entry_rejected),
        };
        in_progress.inc();
        let admitted = count.fetch_add(1, Ordering::AcqRel) < max;
        if !admitted {
            rejected.inc();
        }
        admitted
    }

    /// Queues a response to a request decoded at `timed`. Fails silently only when the
    /// connection is gone: nothing to answer.
    pub(super) fn send(&self, reply: Reply, timed: Timed) {
        let n = reply.wire_len();
        self.usage.queued_bytes.fetch_add(n, Ordering::AcqRel);
        self.state.stats.response_bytes_queued.add(n as u64);
        let slot = reply.slot();
        if self.tx.send((reply, timed)).is_err() {
            self.usage.queued_bytes.fetch_sub(n, Ordering::AcqRel);
            self.state.stats.response_bytes_queued.sub(n as u64);
            match slot {
                Slot::Add => self.state.stats.add_entry_in_progress.dec(),
                Slot::Read => self.state.stats.read_entry_in_progress.dec(),
                Slot::None => {}
            }
        }
    }

    /// Whether this connection must stop reading: its queue at `mark`, or the server's total
    /// budget spent while it has responses waiting.
    pub(super) fn over(&self, mark: usize) -> bool {
        let total = self.state.stats.response_bytes_queued.get() as usize;
        self.usage
            .over(mark, total, self.state.cfg.response_buffer_total_bytes)
    }
}
