//! What a connection owes its client: responses on their way to the writer (in the protocol
//! version of their request), and the counts that bound a connection (requests in flight,
//! response bytes queued). Protocol handlers send through an [`Outbox`]; the connection's writer
//! drains it. It never encodes a frame itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Notify};

use super::Shared;
use crate::protocol::v2::Response as V2Response;
use crate::protocol::{self, OutFrames};

/// A response on its way to the writer, in the protocol version of its request.
pub(super) enum Reply {
    V2(V2Response),
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
        }
    }

    /// Which in-flight limit the reply releases once written.
    pub(super) fn slot(&self) -> Slot {
        match self {
            Reply::V2(V2Response::Add { .. }) => Slot::Add,
            Reply::V2(V2Response::Read { .. } | V2Response::BatchRead { .. }) => Slot::Read,
            Reply::V2(V2Response::Auth { .. }) => Slot::None,
        }
    }

    pub(super) fn encode(&self, out: &mut OutFrames) {
        match self {
            Reply::V2(r) => protocol::v2::encode_response(r, out),
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
}

/// The sending side of a connection, cloned into every pending completion.
#[derive(Clone)]
pub(super) struct Outbox {
    pub(super) tx: mpsc::UnboundedSender<Reply>,
    pub(super) usage: Arc<Usage>,
    pub(super) shared: Arc<Shared>,
}

impl Outbox {
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Counts one more add in flight; false if the connection is past its limit (the request
    /// still counts until its rejection is written).
    pub(super) fn admit(&self, slot: Slot) -> bool {
        let (count, max) = match slot {
            Slot::Add => (&self.usage.adds, self.shared.cfg.max_pending_adds),
            Slot::Read => (&self.usage.reads, self.shared.cfg.max_pending_reads),
            Slot::None => return true,
        };
        let admitted = count.fetch_add(1, Ordering::AcqRel) < max;
        if !admitted {
            self.shared.stats.rejected_requests.inc();
        }
        admitted
    }

    /// Queues a response. Fails silently only when the connection is gone: nothing to answer.
    pub(super) fn send(&self, reply: Reply) {
        let n = reply.wire_len();
        self.usage.queued_bytes.fetch_add(n, Ordering::AcqRel);
        self.shared.stats.response_bytes_queued.add(n as u64);
        if self.tx.send(reply).is_err() {
            self.usage.queued_bytes.fetch_sub(n, Ordering::AcqRel);
            self.shared.stats.response_bytes_queued.sub(n as u64);
        }
    }

    /// Whether this connection must stop reading: its queue at `mark`, or the server's total
    /// budget spent while it has responses waiting.
    pub(super) fn over(&self, mark: usize) -> bool {
        let mine = self.usage.queued_bytes.load(Ordering::Acquire);
        let total = self.shared.stats.response_bytes_queued.get() as usize;
        mine >= mark.max(1) || (mine > 0 && total >= self.shared.cfg.response_buffer_total_bytes)
    }
}
