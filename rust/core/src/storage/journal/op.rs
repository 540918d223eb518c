//! Journal records: the mutations a journal carries and their byte encoding.
//! It never reads or writes files.

use std::sync::Arc;

use bytes::Bytes;

use crate::record::{append_record, append_record_with_crc, be_u64, entry_body_crc};

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
        /// CRC32C of (ledger, entry, data): the entry-log record's checksum, from which the
        /// journal record's is derived.
        body_crc: u32,
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
                body_crc,
            } => append_record_with_crc(
                out,
                crc32c::crc32c_combine(crc32c::crc32c(&[KIND_ENTRY]), *body_crc, 16 + data.len()),
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
            KIND_ENTRY if rest.len() >= 8 => {
                let entry = be_u64(&rest[0..8]);
                let data = Bytes::copy_from_slice(&rest[8..]);
                JournalOp::Entry {
                    ledger,
                    entry,
                    body_crc: entry_body_crc(ledger, entry, &data),
                    data,
                }
            }
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
