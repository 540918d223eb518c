//! BookKeeper's V2 wire protocol: typed requests and responses, encode and decode.
//! Pure byte work: it never touches sockets or storage, and never panics on any input.
//!
//! Every frame body starts with a packet header
//! `version << 24 | opcode << 16 | flags` (version 0: the whole int is the opcode).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::{
    frame::OutFrames, ProtocolError, Result, FLAG_DO_FENCING, FLAG_STRIDED_READ, MASTER_KEY_LEN,
    OP_ADD_ENTRY, OP_AUTH, OP_BATCH_READ_ENTRY, OP_READ_ENTRY,
};

pub const CURRENT_PROTOCOL_VERSION: u8 = 2;
pub const LOWEST_COMPAT_PROTOCOL_VERSION: u8 = 0;
/// Size of the ADD/READ/BATCH response header after the frame length.
pub const RESPONSE_HEADER_LEN: usize = 24;

/// The first int of every V2 body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHeader {
    pub version: u8,
    pub opcode: u8,
    pub flags: u16,
}

impl PacketHeader {
    pub fn new(opcode: u8, flags: u16) -> Self {
        PacketHeader {
            version: CURRENT_PROTOCOL_VERSION,
            opcode,
            flags,
        }
    }

    pub fn to_int(self) -> u32 {
        if self.version == 0 {
            self.opcode as u32
        } else {
            (self.version as u32) << 24 | (self.opcode as u32) << 16 | self.flags as u32
        }
    }

    pub fn from_int(v: u32) -> Self {
        let version = (v >> 24) as u8;
        if version == 0 {
            PacketHeader {
                version,
                opcode: v as u8,
                flags: 0,
            }
        } else {
            PacketHeader {
                version,
                opcode: (v >> 16) as u8,
                flags: v as u16,
            }
        }
    }

    pub fn has(self, flag: u16) -> bool {
        self.flags & flag == flag
    }

    /// Versions the bookie serves; others are answered with EBADVERSION.
    pub fn version_is_compatible(self) -> bool {
        (LOWEST_COMPAT_PROTOCOL_VERSION..=CURRENT_PROTOCOL_VERSION).contains(&self.version)
    }
}

/// `AuthMessage { required string authPluginName = 1; required bytes payload = 2; }`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthMessage {
    pub plugin_name: String,
    pub payload: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Add {
        header: PacketHeader,
        master_key: Bytes,
        ledger: i64,
        entry: i64,
        /// The whole entry as stored: ledger id, entry id, LAC, length, digest, payload.
        body: Bytes,
    },
    Read {
        header: PacketHeader,
        ledger: i64,
        entry: i64,
        master_key: Option<Bytes>,
    },
    BatchRead {
        header: PacketHeader,
        ledger: i64,
        start_entry: i64,
        request_id: i64,
        max_count: i32,
        max_size: i64,
        master_key: Option<Bytes>,
        /// The pybkx stride (present iff the header has `FLAG_STRIDED_READ`).
        stride: Option<i32>,
    },
    Auth {
        header: PacketHeader,
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
            Response::Auth { message, .. } => {
                let name = message.plugin_name.len();
                let payload = message.payload.len();
                4 + 2 + varint_len(name as u64) + name + varint_len(payload as u64) + payload
            }
        }
    }
}

/// Bytes of `v` as a protobuf varint.
fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

impl Request {
    pub fn header(&self) -> PacketHeader {
        match self {
            Request::Add { header, .. }
            | Request::Read { header, .. }
            | Request::BatchRead { header, .. }
            | Request::Auth { header, .. } => *header,
        }
    }
}

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

fn need(buf: &[u8], n: usize, what: &'static str) -> Result<()> {
    if buf.len() < n {
        return Err(ProtocolError::Truncated {
            what,
            need: n,
            have: buf.len(),
        });
    }
    Ok(())
}

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
    need(&body, 4, "packet header")?;
    let header = PacketHeader::from_int(u32::from_be_bytes([body[0], body[1], body[2], body[3]]));
    match header.opcode {
        OP_ADD_ENTRY => {
            need(&body, 4 + MASTER_KEY_LEN + 16, "add request")?;
            let entry_at = 4 + MASTER_KEY_LEN;
            let mut ids = &body[entry_at..entry_at + 16];
            let ledger = ids.get_i64();
            let entry = ids.get_i64();
            Ok(Request::Add {
                header,
                master_key: body.slice(4..entry_at),
                ledger,
                entry,
                body: body.slice(entry_at..),
            })
        }
        OP_READ_ENTRY => {
            need(&body, 20, "read request")?;
            let mut b = &body[4..20];
            let ledger = b.get_i64();
            let entry = b.get_i64();
            let master_key = optional_key(&body, 20, header)?;
            Ok(Request::Read {
                header,
                ledger,
                entry,
                master_key,
            })
        }
        OP_BATCH_READ_ENTRY => {
            need(&body, 40, "batch read request")?;
            let mut b = &body[4..40];
            let ledger = b.get_i64();
            let start_entry = b.get_i64();
            let request_id = b.get_i64();
            let max_count = b.get_i32();
            let max_size = b.get_i64();
            let master_key = optional_key(&body, 40, header)?;
            let stride = if header.has(FLAG_STRIDED_READ) {
                let at = 40 + master_key.as_ref().map_or(0, |k| k.len());
                need(&body, at + 4, "batch read stride")?;
                Some(i32::from_be_bytes([
                    body[at],
                    body[at + 1],
                    body[at + 2],
                    body[at + 3],
                ]))
            } else {
                None
            };
            Ok(Request::BatchRead {
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
        OP_AUTH => Ok(Request::Auth {
            header,
            message: decode_auth_message(body.slice(4..))?,
        }),
        op => Err(ProtocolError::UnknownOpcode(op)),
    }
}

/// Encodes a request as a whole frame (client side).
pub fn encode_request(req: &Request, out: &mut BytesMut) {
    let start = out.len();
    out.put_u32(0); // frame length, patched below
    out.put_u32(req.header().to_int());
    match req {
        Request::Add {
            master_key, body, ..
        } => {
            put_key(out, master_key);
            out.extend_from_slice(body);
        }
        Request::Read {
            ledger,
            entry,
            master_key,
            ..
        } => {
            out.put_i64(*ledger);
            out.put_i64(*entry);
            if let Some(k) = master_key {
                put_key(out, k);
            }
        }
        Request::BatchRead {
            ledger,
            start_entry,
            request_id,
            max_count,
            max_size,
            master_key,
            stride,
            ..
        } => {
            out.put_i64(*ledger);
            out.put_i64(*start_entry);
            out.put_i64(*request_id);
            out.put_i32(*max_count);
            out.put_i64(*max_size);
            if let Some(k) = master_key {
                put_key(out, k);
            }
            if let Some(stride) = stride {
                out.put_i32(*stride);
            }
        }
        Request::Auth { message, .. } => encode_auth_message(message, out),
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Add bodies at least this large are sent as their own chunk instead of copied into the frame.
const LARGE_BODY: usize = 4096;

/// Encodes a request as the chunks of one frame: small parts copied together, the body of a
/// large add referenced without a copy (written with vectored I/O).
pub fn encode_request_chunks(req: &Request) -> Vec<Bytes> {
    if let Request::Add {
        master_key, body, ..
    } = req
    {
        if body.len() >= LARGE_BODY {
            let mut head = BytesMut::with_capacity(8 + MASTER_KEY_LEN);
            head.put_u32((4 + MASTER_KEY_LEN + body.len()) as u32);
            head.put_u32(req.header().to_int());
            put_key(&mut head, master_key);
            return vec![head.freeze(), body.clone()];
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
            encode_auth_message(message, &mut msg);
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

impl PacketHeader {
    fn with_version(mut self, version: u8) -> Self {
        self.version = version;
        self
    }
}

/// Decodes a response frame body (client side).
pub fn decode_response(body: Bytes) -> Result<Response> {
    need(&body, 4, "packet header")?;
    let header = PacketHeader::from_int(u32::from_be_bytes([body[0], body[1], body[2], body[3]]));
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
            message: decode_auth_message(body.slice(4..))?,
        }),
        op => Err(ProtocolError::UnknownOpcode(op)),
    }
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

fn get_varint(b: &mut &[u8]) -> Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let Some((&byte, rest)) = b.split_first() else {
            return Err(ProtocolError::BadAuthMessage("truncated varint"));
        };
        *b = rest;
        v |= ((byte & 0x7F) as u64) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(ProtocolError::BadAuthMessage("varint too long"))
}

fn encode_auth_message(m: &AuthMessage, out: &mut BytesMut) {
    out.put_u8(0x0A);
    put_varint(out, m.plugin_name.len() as u64);
    out.extend_from_slice(m.plugin_name.as_bytes());
    out.put_u8(0x12);
    put_varint(out, m.payload.len() as u64);
    out.extend_from_slice(&m.payload);
}

/// A minimal proto2 reader for `AuthMessage`: both fields required, unknown fields skipped.
fn decode_auth_message(data: Bytes) -> Result<AuthMessage> {
    let mut b: &[u8] = &data;
    let mut name = None;
    let mut payload = None;
    while !b.is_empty() {
        let key = get_varint(&mut b)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                get_varint(&mut b)?;
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if b.len() < n {
                    return Err(ProtocolError::BadAuthMessage("truncated fixed field"));
                }
                b = &b[n..];
            }
            2 => {
                let len = get_varint(&mut b)? as usize;
                if b.len() < len {
                    return Err(ProtocolError::BadAuthMessage("truncated field"));
                }
                let start = data.len() - b.len();
                let value = data.slice(start..start + len);
                b = &b[len..];
                match field {
                    1 => {
                        name =
                            Some(String::from_utf8(value.to_vec()).map_err(|_| {
                                ProtocolError::BadAuthMessage("plugin name not UTF-8")
                            })?)
                    }
                    2 => payload = Some(value),
                    _ => {}
                }
            }
            _ => return Err(ProtocolError::BadAuthMessage("unsupported wire type")),
        }
    }
    match (name, payload) {
        (Some(plugin_name), Some(payload)) => Ok(AuthMessage {
            plugin_name,
            payload,
        }),
        _ => Err(ProtocolError::BadAuthMessage("missing required field")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::{
        take_frame, DEFAULT_MAX_FRAME_SIZE, FLAG_RECOVERY_ADD, OP_GET_BOOKIE_INFO, OP_READ_LAC,
        OP_WRITE_LAC,
    };
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const EMPTY_KEY: &str = "850bf1071c5e3d8c24235676f8816ae0cbe2f14f";

    #[test]
    fn reference_byte_examples() {
        // Worked examples of the reference (§1.15): ledger 1, entry 0.
        let mut out = BytesMut::new();
        encode_request(
            &Request::Read {
                header: PacketHeader::new(OP_READ_ENTRY, 0),
                ledger: 1,
                entry: 0,
                master_key: None,
            },
            &mut out,
        );
        assert_eq!(
            &out[..],
            &hex("00000014 02020000 0000000000000001 0000000000000000")[..]
        );

        let mut out = BytesMut::new();
        encode_request(
            &Request::Read {
                header: PacketHeader::new(OP_READ_ENTRY, FLAG_DO_FENCING),
                ledger: 1,
                entry: -1,
                master_key: Some(Bytes::from(hex(EMPTY_KEY))),
            },
            &mut out,
        );
        assert_eq!(
            &out[..],
            &hex(&format!(
                "00000028 02020001 0000000000000001 ffffffffffffffff {EMPTY_KEY}"
            ))[..]
        );

        let mut out = BytesMut::new();
        encode_request(
            &Request::BatchRead {
                header: PacketHeader::new(OP_BATCH_READ_ENTRY, 0),
                ledger: 1,
                start_entry: 0,
                request_id: 42,
                max_count: 100,
                max_size: 5 << 20,
                master_key: None,
                stride: None,
            },
            &mut out,
        );
        assert_eq!(
            &out[..],
            &hex("00000028 02070000 0000000000000001 0000000000000000 000000000000002a 00000064 0000000000500000")[..]
        );

        // The pybkx stride goes after the BP-62 fields, where a Java bookie stops reading.
        let mut out = BytesMut::new();
        encode_request(
            &Request::BatchRead {
                header: PacketHeader::new(OP_BATCH_READ_ENTRY, FLAG_STRIDED_READ),
                ledger: 1,
                start_entry: 2,
                request_id: 42,
                max_count: 100,
                max_size: 5 << 20,
                master_key: None,
                stride: Some(3),
            },
            &mut out,
        );
        assert_eq!(
            &out[..],
            &hex("0000002c 02074000 0000000000000001 0000000000000002 000000000000002a 00000064 0000000000500000 00000003")[..]
        );

        let mut frames = OutFrames::default();
        encode_response(
            &Response::Add {
                version: 2,
                rc: 0,
                ledger: 1,
                entry: 0,
            },
            &mut frames,
        );
        let chunks = frames.take();
        assert_eq!(
            &chunks[0][..],
            &hex("00000018 02010000 00000000 0000000000000001 0000000000000000")[..]
        );
    }

    #[test]
    fn add_request_keeps_the_entry_bytes_and_peeks_ids() {
        let entry = hex("0000000000000007 0000000000000003 ffffffffffffffff 0000000000000005 0000000030a56872 68656c6c6f");
        let mut out = BytesMut::new();
        let req = Request::Add {
            header: PacketHeader::new(OP_ADD_ENTRY, FLAG_RECOVERY_ADD),
            master_key: Bytes::from(hex(EMPTY_KEY)),
            ledger: 7,
            entry: 3,
            body: Bytes::from(entry.clone()),
        };
        encode_request(&req, &mut out);
        let body = take_frame(&mut out, DEFAULT_MAX_FRAME_SIZE)
            .unwrap()
            .unwrap();
        assert_eq!(decode_request(body).unwrap(), req);
    }

    #[test]
    fn frames_over_the_limit_are_refused_before_buffering() {
        let mut buf = BytesMut::from(&(DEFAULT_MAX_FRAME_SIZE as u32 - 3).to_be_bytes()[..]);
        assert!(matches!(
            take_frame(&mut buf, DEFAULT_MAX_FRAME_SIZE),
            Err(ProtocolError::FrameTooLarge { .. })
        ));
        let mut buf = BytesMut::from(&(DEFAULT_MAX_FRAME_SIZE as u32 - 4).to_be_bytes()[..]);
        assert_eq!(take_frame(&mut buf, DEFAULT_MAX_FRAME_SIZE), Ok(None));
        let mut buf = BytesMut::from(&(-1i32).to_be_bytes()[..]);
        assert!(take_frame(&mut buf, DEFAULT_MAX_FRAME_SIZE).is_err());
    }

    #[test]
    fn version_zero_headers_carry_only_the_opcode() {
        let h = PacketHeader::from_int(2);
        assert_eq!((h.version, h.opcode, h.flags), (0, 2, 0));
        assert_eq!(h.to_int(), 2);
        assert!(PacketHeader::from_int(0x0302_0000).version == 3);
        assert!(!PacketHeader::from_int(0x0302_0000).version_is_compatible());
    }

    #[test]
    fn unknown_opcodes_and_short_frames_are_errors() {
        for op in [OP_READ_LAC, OP_WRITE_LAC, OP_GET_BOOKIE_INFO, 9] {
            let body = Bytes::from(PacketHeader::new(op, 0).to_int().to_be_bytes().to_vec());
            assert_eq!(decode_request(body), Err(ProtocolError::UnknownOpcode(op)));
        }
        let body = Bytes::from(
            PacketHeader::new(OP_READ_ENTRY, FLAG_DO_FENCING)
                .to_int()
                .to_be_bytes()
                .to_vec(),
        );
        assert!(matches!(
            decode_request(body),
            Err(ProtocolError::Truncated { .. })
        ));
    }

    fn arb_bytes(max: usize) -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
    }

    fn arb_header(op: u8) -> impl Strategy<Value = PacketHeader> {
        (1u8..=2, any::<u16>()).prop_map(move |(version, flags)| PacketHeader {
            version,
            opcode: op,
            flags,
        })
    }

    fn arb_key() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), MASTER_KEY_LEN).prop_map(Bytes::from)
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        prop_oneof![
            (
                arb_header(OP_ADD_ENTRY),
                arb_key(),
                any::<i64>(),
                any::<i64>(),
                arb_bytes(200)
            )
                .prop_map(|(header, master_key, ledger, entry, tail)| {
                    let mut body = BytesMut::new();
                    body.put_i64(ledger);
                    body.put_i64(entry);
                    body.extend_from_slice(&tail);
                    Request::Add {
                        header,
                        master_key,
                        ledger,
                        entry,
                        body: body.freeze(),
                    }
                }),
            (
                arb_header(OP_READ_ENTRY),
                any::<i64>(),
                any::<i64>(),
                arb_key()
            )
                .prop_map(|(header, ledger, entry, key)| Request::Read {
                    header,
                    ledger,
                    entry,
                    master_key: (header.has(FLAG_DO_FENCING) && header.version >= 2).then_some(key),
                }),
            (
                arb_header(OP_BATCH_READ_ENTRY),
                any::<(i64, i64, i64, i32, i64)>(),
                arb_key()
            )
                .prop_map(
                    |(header, (ledger, start_entry, request_id, max_count, max_size), key)| {
                        Request::BatchRead {
                            header,
                            ledger,
                            start_entry,
                            request_id,
                            max_count,
                            max_size,
                            master_key: (header.has(FLAG_DO_FENCING) && header.version >= 2)
                                .then_some(key),
                            stride: header
                                .has(FLAG_STRIDED_READ)
                                .then_some(start_entry as i32 ^ max_count),
                        }
                    }
                ),
            ("[a-zA-Z]{0,20}", arb_bytes(50)).prop_map(|(plugin_name, payload)| Request::Auth {
                header: PacketHeader {
                    version: 2,
                    opcode: OP_AUTH,
                    flags: 0
                },
                message: AuthMessage {
                    plugin_name,
                    payload
                },
            }),
        ]
    }

    /// Encoded frames of requests and responses, made by the round-trip strategies with a fixed
    /// seed: the fuzzer's starting points (crate::fuzz).
    pub(crate) fn fuzz_seeds() -> Vec<Vec<u8>> {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7u8; 32]);
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        let mut seeds = Vec::new();
        for _ in 0..24 {
            let mut out = BytesMut::new();
            encode_request(
                &arb_request().new_tree(&mut runner).unwrap().current(),
                &mut out,
            );
            seeds.push(out.to_vec());
            let mut frames = OutFrames::default();
            encode_response(
                &arb_response().new_tree(&mut runner).unwrap().current(),
                &mut frames,
            );
            seeds.push(
                frames
                    .take()
                    .iter()
                    .flat_map(|c| c.iter().copied())
                    .collect(),
            );
        }
        seeds
    }

    fn arb_response() -> impl Strategy<Value = Response> {
        prop_oneof![
            (any::<i32>(), any::<i64>(), any::<i64>()).prop_map(|(rc, ledger, entry)| {
                Response::Add {
                    version: 2,
                    rc,
                    ledger,
                    entry,
                }
            }),
            (any::<i32>(), any::<i64>(), any::<i64>(), arb_bytes(6000)).prop_map(
                |(rc, ledger, entry, body)| Response::Read {
                    version: 2,
                    rc,
                    ledger,
                    entry,
                    body
                }
            ),
            (
                any::<(i32, i64, i64, i64)>(),
                any::<bool>(),
                proptest::collection::vec(arb_bytes(5000), 0..5)
            )
                .prop_map(
                    |((rc, ledger, start_entry, request_id), strided, entries)| {
                        Response::BatchRead {
                            version: 2,
                            flags: if strided { FLAG_STRIDED_READ } else { 0 },
                            rc,
                            ledger,
                            start_entry,
                            request_id,
                            entries,
                        }
                    }
                ),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn requests_round_trip(req in arb_request()) {
            let mut out = BytesMut::new();
            encode_request(&req, &mut out);
            let body = take_frame(&mut out, DEFAULT_MAX_FRAME_SIZE).unwrap().unwrap();
            prop_assert!(out.is_empty());
            prop_assert_eq!(decode_request(body).unwrap(), req);
        }

        #[test]
        fn responses_round_trip(resp in arb_response()) {
            let mut frames = OutFrames::default();
            encode_response(&resp, &mut frames);
            let mut wire = BytesMut::new();
            for c in frames.take() {
                wire.extend_from_slice(&c);
            }
            // The size the server accounts for a queued response is what it writes.
            prop_assert_eq!(resp.wire_len(), wire.len());
            let body = take_frame(&mut wire, usize::MAX).unwrap().unwrap();
            prop_assert!(wire.is_empty());
            prop_assert_eq!(decode_response(body).unwrap(), resp);
        }
    }

    proptest! {
        // The fuzz target: any bytes, any split into reads, never a panic.
        #![proptest_config(ProptestConfig::with_cases(20000))]

        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..300) {
            let mut buf = BytesMut::from(&data[..cut.min(data.len())]);
            while let Ok(Some(body)) = take_frame(&mut buf, 1 << 12) {
                let _ = decode_request(body.clone());
                let _ = decode_response(body);
            }
            let body = Bytes::from(data);
            let _ = decode_request(body.clone());
            let _ = decode_response(body);
        }

        /// Bodies behind plausible headers reach every opcode's field decoding.
        #[test]
        fn decoders_never_panic_behind_valid_headers(
            version in 0u8..4,
            opcode in 0u8..9,
            flags in any::<u16>(),
            tail in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut body = PacketHeader { version, opcode, flags }.to_int().to_be_bytes().to_vec();
            body.extend_from_slice(&tail);
            let body = Bytes::from(body);
            if let Ok(req) = decode_request(body.clone()) {
                // Whatever decodes must encode to a frame that decodes to the same request.
                let mut out = BytesMut::new();
                encode_request(&req, &mut out);
                let again = take_frame(&mut out, usize::MAX).unwrap().unwrap();
                prop_assert_eq!(decode_request(again).unwrap(), req);
            }
            let _ = decode_response(body);
        }
    }
}
