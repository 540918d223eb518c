//! V2 requests: the typed request of each operation, decoded on the server and encoded on the
//! client (an add's large body as its own chunk, written without a copy). Pure byte work: it
//! never touches sockets or storage, and never panics on any input.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::auth::AuthMessage;
use super::header::{need, PacketHeader};
use crate::protocol::error::{ProtocolError, Result};
use crate::protocol::{
    FLAG_DO_FENCING, FLAG_STRIDED_READ, MASTER_KEY_LEN, OP_ADD_ENTRY, OP_AUTH, OP_BATCH_READ_ENTRY,
    OP_READ_ENTRY,
};

/// A V2 request of one of the operations V2 has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Add(AddRequest),
    Read(ReadRequest),
    BatchRead(BatchReadRequest),
    Auth(AuthRequest),
}

/// ADD_ENTRY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddRequest {
    pub header: PacketHeader,
    pub master_key: Bytes,
    pub ledger: i64,
    pub entry: i64,
    /// The whole entry as stored: ledger id, entry id, LAC, length, digest, payload.
    pub body: Bytes,
}

/// READ_ENTRY (entry -1: the last entry; with `FLAG_DO_FENCING`, a fencing read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    pub header: PacketHeader,
    pub ledger: i64,
    pub entry: i64,
    pub master_key: Option<Bytes>,
}

/// BATCH_READ_ENTRY (BP-62), with pybkx's stride.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReadRequest {
    pub header: PacketHeader,
    pub ledger: i64,
    pub start_entry: i64,
    pub request_id: i64,
    pub max_count: i32,
    pub max_size: i64,
    pub master_key: Option<Bytes>,
    /// The pybkx stride (present iff the header has `FLAG_STRIDED_READ`).
    pub stride: Option<i32>,
}

/// AUTH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthRequest {
    pub header: PacketHeader,
    pub message: AuthMessage,
}

impl Request {
    pub fn header(&self) -> PacketHeader {
        match self {
            Request::Add(r) => r.header,
            Request::Read(r) => r.header,
            Request::BatchRead(r) => r.header,
            Request::Auth(r) => r.header,
        }
    }
}

/// The master key a fencing request carries after its fixed fields (from version 2 on).
fn optional_key(body: &Bytes, at: usize, header: PacketHeader) -> Result<Option<Bytes>> {
    if header.has(FLAG_DO_FENCING) && header.version >= 2 {
        need(body, at + MASTER_KEY_LEN, "master key")?;
        Ok(Some(body.slice(at..at + MASTER_KEY_LEN)))
    } else {
        Ok(None)
    }
}

/// Decodes a request frame body (server side).
pub fn decode_request(body: Bytes) -> Result<Request> {
    let header = PacketHeader::read(&body)?;
    match header.opcode {
        OP_ADD_ENTRY => {
            need(&body, 4 + MASTER_KEY_LEN + 16, "add request")?;
            let entry_at = 4 + MASTER_KEY_LEN;
            let mut ids = &body[entry_at..entry_at + 16];
            let ledger = ids.get_i64();
            let entry = ids.get_i64();
            Ok(Request::Add(AddRequest {
                header,
                master_key: body.slice(4..entry_at),
                ledger,
                entry,
                body: body.slice(entry_at..),
            }))
        }
        OP_READ_ENTRY => {
            need(&body, 20, "read request")?;
            let mut b = &body[4..20];
            let ledger = b.get_i64();
            let entry = b.get_i64();
            let master_key = optional_key(&body, 20, header)?;
            Ok(Request::Read(ReadRequest {
                header,
                ledger,
                entry,
                master_key,
            }))
        }
        OP_BATCH_READ_ENTRY => decode_batch_read(header, &body).map(Request::BatchRead),
        OP_AUTH => Ok(Request::Auth(AuthRequest {
            header,
            message: AuthMessage::decode(body.slice(4..))?,
        })),
        op => Err(ProtocolError::UnknownOpcode(op)),
    }
}

fn decode_batch_read(header: PacketHeader, body: &Bytes) -> Result<BatchReadRequest> {
    need(body, 40, "batch read request")?;
    let mut b = &body[4..40];
    let ledger = b.get_i64();
    let start_entry = b.get_i64();
    let request_id = b.get_i64();
    let max_count = b.get_i32();
    let max_size = b.get_i64();
    let master_key = optional_key(body, 40, header)?;
    let stride = if header.has(FLAG_STRIDED_READ) {
        let at = 40 + master_key.as_ref().map_or(0, |k| k.len());
        need(body, at + 4, "batch read stride")?;
        Some(i32::from_be_bytes([
            body[at],
            body[at + 1],
            body[at + 2],
            body[at + 3],
        ]))
    } else {
        None
    };
    Ok(BatchReadRequest {
        header,
        ledger,
        start_entry,
        request_id,
        max_count,
        max_size,
        master_key,
        stride,
    })
}

/// Encodes a request as a whole frame (client side).
pub fn encode_request(req: &Request, out: &mut BytesMut) {
    let start = out.len();
    out.put_u32(0); // frame length, patched below
    out.put_u32(req.header().to_int());
    match req {
        Request::Add(add) => {
            put_key(out, &add.master_key);
            out.extend_from_slice(&add.body);
        }
        Request::Read(read) => {
            out.put_i64(read.ledger);
            out.put_i64(read.entry);
            if let Some(k) = &read.master_key {
                put_key(out, k);
            }
        }
        Request::BatchRead(batch) => {
            out.put_i64(batch.ledger);
            out.put_i64(batch.start_entry);
            out.put_i64(batch.request_id);
            out.put_i32(batch.max_count);
            out.put_i64(batch.max_size);
            if let Some(k) = &batch.master_key {
                put_key(out, k);
            }
            if let Some(stride) = batch.stride {
                out.put_i32(stride);
            }
        }
        Request::Auth(auth) => auth.message.encode(out),
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Add bodies at least this large are sent as their own chunk instead of copied into the frame.
const LARGE_BODY: usize = 4096;

/// Encodes a request as the chunks of one frame: small parts copied together, the body of a
/// large add referenced without a copy (written with vectored I/O).
pub fn encode_request_chunks(req: &Request) -> Vec<Bytes> {
    if let Request::Add(add) = req {
        if add.body.len() >= LARGE_BODY {
            let mut head = BytesMut::with_capacity(8 + MASTER_KEY_LEN);
            head.put_u32((4 + MASTER_KEY_LEN + add.body.len()) as u32);
            head.put_u32(add.header.to_int());
            put_key(&mut head, &add.master_key);
            return vec![head.freeze(), add.body.clone()];
        }
    }
    let mut out = BytesMut::new();
    encode_request(req, &mut out);
    vec![out.freeze()]
}

/// Master keys are exactly 20 bytes on the wire; shorter ones are zero-padded.
fn put_key(out: &mut BytesMut, key: &[u8]) {
    let n = key.len().min(MASTER_KEY_LEN);
    out.extend_from_slice(&key[..n]);
    out.put_bytes(0, MASTER_KEY_LEN - n);
}
