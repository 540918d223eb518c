//! Journal records: the mutations a journal carries and their byte encoding.
//! It never reads or writes files.

use std::sync::Arc;

use bytes::Bytes;

use crate::record::{append_record, be_u64};

const KIND_KEY: u8 = 1;
const KIND_ENTRY: u8 = 2;
const KIND_FENCE: u8 = 3;
const KIND_LAC: u8 = 4;
const KIND_DELETE: u8 = 5;

/// One journal record.
#[derive(Debug, Clone)]
pub enum JournalOp {
    /// The ledger's master key; written before the first other record of a ledger in a process.
    Key {
        ledger: u64,
        key: Arc<[u8]>,
    },
    Entry {
        ledger: u64,
        entry: u64,
        data: Bytes,
    },
    Fence {
        ledger: u64,
    },
    Lac {
        ledger: u64,
        lac: Bytes,
    },
    Delete {
        ledger: u64,
    },
}

impl JournalOp {
    pub fn ledger(&self) -> u64 {
        match self {
            JournalOp::Key { ledger, .. }
            | JournalOp::Entry { ledger, .. }
            | JournalOp::Fence { ledger }
            | JournalOp::Lac { ledger, .. }
            | JournalOp::Delete { ledger } => *ledger,
        }
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let before = out.len();
        match self {
            JournalOp::Key { ledger, key } => {
                append_record(out, &[&[KIND_KEY], &ledger.to_be_bytes(), key])
            }
            JournalOp::Entry {
                ledger,
                entry,
                data,
            } => append_record(
                out,
                &[
                    &[KIND_ENTRY],
                    &ledger.to_be_bytes(),
                    &entry.to_be_bytes(),
                    data,
                ],
            ),
            JournalOp::Fence { ledger } => {
                append_record(out, &[&[KIND_FENCE], &ledger.to_be_bytes()])
            }
            JournalOp::Lac { ledger, lac } => {
                append_record(out, &[&[KIND_LAC], &ledger.to_be_bytes(), lac])
            }
            JournalOp::Delete { ledger } => {
                append_record(out, &[&[KIND_DELETE], &ledger.to_be_bytes()])
            }
        }
        debug_assert!(out.len() > before);
    }

    pub(super) fn decode(body: &[u8]) -> std::result::Result<JournalOp, String> {
        if body.len() < 9 {
            return Err(format!(
                "journal record of {} bytes is too short",
                body.len()
            ));
        }
        let ledger = be_u64(&body[1..9]);
        let rest = &body[9..];
        Ok(match body[0] {
            KIND_KEY => JournalOp::Key {
                ledger,
                key: Arc::from(rest),
            },
            KIND_ENTRY if rest.len() >= 8 => JournalOp::Entry {
                ledger,
                entry: be_u64(&rest[0..8]),
                data: Bytes::copy_from_slice(&rest[8..]),
            },
            KIND_FENCE => JournalOp::Fence { ledger },
            KIND_LAC => JournalOp::Lac {
                ledger,
                lac: Bytes::copy_from_slice(rest),
            },
            KIND_DELETE => JournalOp::Delete { ledger },
            kind => return Err(format!("unknown journal record kind {kind}")),
        })
    }

    pub(super) fn kind_name(&self) -> &'static str {
        match self {
            JournalOp::Key { .. } => "key",
            JournalOp::Entry { .. } => "entry",
            JournalOp::Fence { .. } => "fence",
            JournalOp::Lac { .. } => "lac",
            JournalOp::Delete { .. } => "delete",
        }
    }
}
