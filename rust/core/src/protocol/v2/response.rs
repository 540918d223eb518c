//! V2 responses: the typed response of each operation, encoded on the server (into frames
//! for vectored writes) and decoded on the client, and the bytes each takes on the wire. Pure
//! byte work: it never touches sockets or storage, and never panics on any input.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::auth::AuthMessage;
use super::header::{need, PacketHeader};
use crate::protocol::error::{ProtocolError, Result};
use crate::protocol::frame::OutFrames;
use crate::protocol::{OP_ADD_ENTRY, OP_AUTH, OP_BATCH_READ_ENTRY, OP_READ_ENTRY};

/// Size of the ADD/READ/BATCH response header after the frame length.
pub const RESPONSE_HEADER_LEN: usize = 24;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Add {
        version: u8,
        rc: i32,
        ledger: i64,
        entry: i64,
    },
    Read {
        version: u8,
        rc: i32,
        ledger: i64,
        entry: i64,
        /// The stored entry; empty unless `rc == EOK`.
        body: Bytes,
    },
    BatchRead {
        version: u8,
        /// `FLAG_STRIDED_READ` when the bookie read with the request's stride; 0 otherwise.
        flags: u16,
        rc: i32,
        ledger: i64,
        start_entry: i64,
        request_id: i64,
        entries: Vec<Bytes>,
    },
    Auth {
        version: u8,
        message: AuthMessage,
    },
}

impl Response {
    /// Bytes the response takes on the wire (frame length included), without encoding it.
    pub fn wire_len(&self) -> usize {
        4 + match self {
            Response::Add { .. } => RESPONSE_HEADER_LEN,
            Response::Read { body, .. } => RESPONSE_HEADER_LEN + body.len(),
            Response::BatchRead { entries, .. } => {
                RESPONSE_HEADER_LEN + 8 + entries.iter().map(|e| 4 + e.len()).sum::<usize>()
            }
            Response::Auth { message, .. } => 4 + message.encoded_len(),
        }
    }
}

/// Appends one response frame to `out`.
pub fn encode_response(resp: &Response, out: &mut OutFrames) {
    match resp {
        Response::Add {
            version,
            rc,
            ledger,
            entry,
        } => {
            let h = out.head();
            h.put_u32(RESPONSE_HEADER_LEN as u32);
            h.put_u32(
                PacketHeader::new(OP_ADD_ENTRY, 0)
                    .with_version(*version)
                    .to_int(),
            );
            h.put_i32(*rc);
            h.put_i64(*ledger);
            h.put_i64(*entry);
        }
        Response::Read {
            version,
            rc,
            ledger,
            entry,
            body,
        } => {
            let h = out.head();
            h.put_u32((RESPONSE_HEADER_LEN + body.len()) as u32);
            h.put_u32(
                PacketHeader::new(OP_READ_ENTRY, 0)
                    .with_version(*version)
                    .to_int(),
            );
            h.put_i32(*rc);
            h.put_i64(*ledger);
            h.put_i64(*entry);
            out.put_payload(body);
        }
        Response::BatchRead {
            version,
            flags,
            rc,
            ledger,
            start_entry,
            request_id,
            entries,
        } => {
            let data: usize = entries.iter().map(|e| 4 + e.len()).sum();
            out.reserve(
                4 + RESPONSE_HEADER_LEN + 8 + 4 * entries.len(),
                entries.iter().map(|e| e.len()),
            );
            let h = out.head();
            h.put_u32((RESPONSE_HEADER_LEN + 8 + data) as u32);
            h.put_u32(
                PacketHeader::new(OP_BATCH_READ_ENTRY, *flags)
                    .with_version(*version)
                    .to_int(),
            );
            h.put_i32(*rc);
            h.put_i64(*ledger);
            h.put_i64(*start_entry);
            h.put_i64(*request_id);
            for e in entries {
                out.head().put_u32(e.len() as u32);
                out.put_payload(e);
            }
        }
        Response::Auth { version, message } => {
            let mut msg = BytesMut::new();
            message.encode(&mut msg);
            let h = out.head();
            h.put_u32((4 + msg.len()) as u32);
            h.put_u32(
                PacketHeader::new(OP_AUTH, 0)
                    .with_version(*version)
                    .to_int(),
            );
            h.extend_from_slice(&msg);
        }
    }
}

/// Decodes a response frame body (client side).
pub fn decode_response(body: Bytes) -> Result<Response> {
    let header = PacketHeader::read(&body)?;
    let version = header.version;
    let common = |what| -> Result<(i32, i64, i64)> {
        need(&body, RESPONSE_HEADER_LEN, what)?;
        let mut b = &body[4..RESPONSE_HEADER_LEN];
        Ok((b.get_i32(), b.get_i64(), b.get_i64()))
    };
    match header.opcode {
        OP_ADD_ENTRY => {
            let (rc, ledger, entry) = common("add response")?;
            Ok(Response::Add {
                version,
                rc,
                ledger,
                entry,
            })
        }
        OP_READ_ENTRY => {
            let (rc, ledger, entry) = common("read response")?;
            Ok(Response::Read {
                version,
                rc,
                ledger,
                entry,
                body: body.slice(RESPONSE_HEADER_LEN..),
            })
        }
        OP_BATCH_READ_ENTRY => {
            let (rc, ledger, start_entry) = common("batch read response")?;
            need(&body, RESPONSE_HEADER_LEN + 8, "batch read request id")?;
            let mut b = &body[RESPONSE_HEADER_LEN..RESPONSE_HEADER_LEN + 8];
            let request_id = b.get_i64();
            let first_entry_at = RESPONSE_HEADER_LEN + 8;
            let entry_len = |at: usize| {
                u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]) as usize
            };
            // Two passes: check and count the entries, then slice them into a vector sized
            // once (thousands of small entries grew it step by step, copying it each time).
            let mut at = first_entry_at;
            let mut count = 0;
            while at < body.len() {
                need(&body, at + 4, "batch entry length")?;
                at += 4 + entry_len(at);
                need(&body, at, "batch entry")?;
                count += 1;
            }
            let mut entries = Vec::with_capacity(count);
            let mut at = first_entry_at;
            while at < body.len() {
                let len = entry_len(at);
                entries.push(body.slice(at + 4..at + 4 + len));
                at += 4 + len;
            }
            Ok(Response::BatchRead {
                version,
                flags: header.flags,
                rc,
                ledger,
                start_entry,
                request_id,
                entries,
            })
        }
        OP_AUTH => Ok(Response::Auth {
            version,
            message: AuthMessage::decode(body.slice(4..))?,
        }),
        op => Err(ProtocolError::UnknownOpcode(op)),
    }
}
