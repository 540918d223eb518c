//! What a request to a bookie comes to: a [`Reply`] or a [`ClientError`]. The outcomes only: it
//! never sends or matches anything.

use bytes::Bytes;

use crate::protocol::Status;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The bookie answered with a status other than OK.
    #[error("bookie {bookie} answered {op} with {status}")]
    Bookie {
        bookie: String,
        op: &'static str,
        status: Status,
    },
    #[error("{op} to bookie {bookie} timed out")]
    Timeout { bookie: String, op: &'static str },
    #[error("bookie {bookie} is not available: {why}")]
    Unavailable { bookie: String, why: String },
    /// The request would exceed `nettyMaxFrameSizeBytes`: it was never sent.
    #[error("{op} of {size} bytes to bookie {bookie} exceeds nettyMaxFrameSizeBytes {max}")]
    TooLarge {
        bookie: String,
        op: &'static str,
        size: usize,
        max: usize,
    },
    #[error("bookie client is closed")]
    Closed,
    /// TLS was asked for and could not be set up (START_TLS refused, a failed or timed-out
    /// handshake): the connection never carries a request in plaintext.
    #[error("TLS to bookie {bookie} failed: {why}")]
    Security { bookie: String, why: String },
}

impl ClientError {
    /// The bookie's status, for a bookie answer.
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Bookie { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Added,
    Entry(Bytes),
    /// A batch read's entries: consecutive from the start entry (BP-62).
    Entries(Vec<Bytes>),
    /// A strided batch read's entries, as the bookie acknowledged the stride: entry `i` is
    /// `start + i * stride`.
    StridedEntries(Vec<Bytes>),
    /// A long-poll read's answer: the bookie's LAC for the ledger and, when it passed the
    /// asked LAC, the entry after it (if the bookie holds it).
    LastAddConfirmed {
        lac: i64,
        next: Option<Bytes>,
    },
    /// READ_LAC's answer: the explicit LAC as written by WRITE_LAC (digest-packaged, as the
    /// writer sent it) and the bookie's last entry (stored bytes), each when the bookie has it.
    Lac {
        lac_body: Option<Bytes>,
        last_entry: Option<Bytes>,
    },
    /// WRITE_LAC and FORCE_LEDGER succeeded.
    Done,
    /// GET_BOOKIE_INFO's answer, in bytes.
    BookieInfo {
        total_disk_capacity: i64,
        free_disk_space: i64,
    },
    /// GET_LIST_OF_ENTRIES_OF_LEDGER's answer: the entries the bookie holds, as ascending
    /// inclusive runs `(first, last)`.
    EntryRuns(Vec<(i64, i64)>),
}

pub type ReplyResult = Result<Reply, ClientError>;
