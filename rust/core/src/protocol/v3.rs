//! The V3 wire protocol: BookKeeper's protobuf `Request` and `Response` messages in
//! `[i32 length][protobuf]` frames. The message types are generated at build time from
//! `proto/bookkeeper_v3.proto` (see build.rs). Decoding never panics; a read response's entry
//! is written by reference, not copied into the frame.

use bytes::{BufMut, Bytes};
use prost::encoding::{self, WireType};
use prost::Message;

use super::{OutFrames, ProtocolError, Result, Status};

/// The generated messages.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/pybkx.v3.rs"));
}

pub use pb::{BkPacketHeader, OperationType, ProtocolVersion, StatusCode};

/// BookKeeper's `WriteFlag.DEFERRED_SYNC`: bit 0 of an AddRequest's `writeFlags` (the only
/// write flag; a reader ignores the other bits, as `WriteFlag.getWriteFlags` does).
pub const WRITE_FLAG_DEFERRED_SYNC: i32 = 1;

/// Decodes one V3 request frame body (zero-copy: byte fields are slices of `body`).
pub fn decode_request(body: Bytes) -> Result<pb::Request> {
    pb::Request::decode(body).map_err(|e| ProtocolError::BadV3Message(e.to_string()))
}

/// Decodes one V3 response frame body.
pub fn decode_response(body: Bytes) -> Result<pb::Response> {
    pb::Response::decode(body).map_err(|e| ProtocolError::BadV3Message(e.to_string()))
}

impl Status {
    /// The V3 `StatusCode` of this status.
    pub fn v3_code(self) -> StatusCode {
        match self {
            Status::Ok => StatusCode::Eok,
            Status::NoLedger => StatusCode::Enoledger,
            Status::NoEntry => StatusCode::Enoentry,
            Status::BadRequest => StatusCode::Ebadreq,
            Status::Io | Status::Other(_) => StatusCode::Eio,
            Status::Unauthorized => StatusCode::Eua,
            Status::BadVersion => StatusCode::Ebadversion,
            Status::Fenced => StatusCode::Efenced,
            Status::ReadOnly => StatusCode::Ereadonly,
            Status::TooManyRequests => StatusCode::Etoomanyrequests,
            Status::UnknownLedgerState => StatusCode::Eunknownledgerstate,
        }
    }

    /// The status of a V3 status code (as sent: an `i32`).
    pub fn from_v3_code(code: i32) -> Status {
        match StatusCode::try_from(code) {
            Ok(StatusCode::Eok) => Status::Ok,
            Ok(StatusCode::Enoledger) => Status::NoLedger,
            Ok(StatusCode::Enoentry) => Status::NoEntry,
            Ok(StatusCode::Ebadreq) => Status::BadRequest,
            Ok(StatusCode::Eio) => Status::Io,
            Ok(StatusCode::Eua) => Status::Unauthorized,
            Ok(StatusCode::Ebadversion) => Status::BadVersion,
            Ok(StatusCode::Efenced) => Status::Fenced,
            Ok(StatusCode::Ereadonly) => Status::ReadOnly,
            Ok(StatusCode::Etoomanyrequests) => Status::TooManyRequests,
            Ok(StatusCode::Eunknownledgerstate) => Status::UnknownLedgerState,
            Err(_) => Status::Other(code),
        }
    }
}

/// The header of a response to a request with `header`: version three, the request's
/// operation and transaction id (as the Java bookie answers).
pub fn response_header(header: &BkPacketHeader) -> BkPacketHeader {
    BkPacketHeader {
        version: ProtocolVersion::VersionThree as i32,
        operation: header.operation,
        txn_id: header.txn_id,
        priority: None,
    }
}

/// A V3 response on its way out: a read of one entry (its body written by reference) or any
/// other message.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    Read {
        header: BkPacketHeader,
        status: Status,
        ledger: i64,
        entry: i64,
        body: Bytes,
        /// The bookie's LAC for the ledger (BookKeeper sends it with a plain read's entry).
        max_lac: Option<i64>,
    },
    Message(Box<pb::Response>),
}

impl Response {
    /// The response as one protobuf message (copying a read's body).
    pub fn to_message(&self) -> pb::Response {
        match self {
            Response::Message(m) => (**m).clone(),
            Response::Read {
                header,
                status,
                ledger,
                entry,
                body,
                max_lac,
            } => pb::Response {
                header: *header,
                status: status.v3_code() as i32,
                read_response: Some(pb::ReadResponse {
                    status: status.v3_code() as i32,
                    ledger_id: *ledger,
                    entry_id: *entry,
                    body: (!body.is_empty()).then(|| body.clone()),
                    max_lac: *max_lac,
                    lac_update_timestamp: None,
                }),
                ..Default::default()
            },
        }
    }

    /// Bytes of the frame, length prefix included.
    pub fn wire_len(&self) -> usize {
        4 + match self {
            Response::Message(m) => m.encoded_len(),
            Response::Read { .. } => read_parts(self).map_or(0, |p| p.len),
        }
    }

    /// Whether it reports success (EOK).
    pub fn succeeded(&self) -> bool {
        match self {
            Response::Read { status, .. } => *status == Status::Ok,
            Response::Message(m) => m.status == StatusCode::Eok as i32,
        }
    }

    /// The operation it answers.
    pub fn operation(&self) -> i32 {
        match self {
            Response::Read { header, .. } => header.operation,
            Response::Message(m) => m.header.operation,
        }
    }
}

/// A read response cut around its entry: fields 1-3 of the read response, the entry's field
/// (tag and length, then the entry by reference), and the LAC field after it.
struct ReadParts<'a> {
    /// Length of the whole message.
    len: usize,
    head: pb::ReadResponse,
    body: &'a Bytes,
    max_lac: Option<i64>,
    read_len: usize,
}

fn read_parts(r: &Response) -> Option<ReadParts<'_>> {
    let Response::Read {
        header,
        status,
        ledger,
        entry,
        body,
        max_lac,
    } = r
    else {
        return None;
    };
    let head = pb::ReadResponse {
        status: status.v3_code() as i32,
        ledger_id: *ledger,
        entry_id: *entry,
        body: None,
        max_lac: None,
        lac_update_timestamp: None,
    };
    let body_field = if body.is_empty() {
        0
    } else {
        encoding::key_len(4) + encoding::encoded_len_varint(body.len() as u64) + body.len()
    };
    let lac_field = max_lac.map_or(0, |lac| encoding::int64::encoded_len(5, &lac));
    let read_len = head.encoded_len() + body_field + lac_field;
    let len = encoding::message::encoded_len(1, header)
        + encoding::int32::encoded_len(2, &(status.v3_code() as i32))
        + encoding::key_len(100)
        + encoding::encoded_len_varint(read_len as u64)
        + read_len;
    Some(ReadParts {
        len,
        head,
        body,
        max_lac: *max_lac,
        read_len,
    })
}

/// Writes the response as a frame. Fields go in field-number order, as protobuf-java writes
/// them, so the bytes equal the Java bookie's for the same response.
pub fn encode_response(r: &Response, out: &mut OutFrames) {
    match r {
        Response::Message(m) => {
            let h = out.head();
            h.put_u32(m.encoded_len() as u32);
            // Encoding into a BytesMut only fails for lack of capacity, which BytesMut grows.
            let _ = m.encode(h);
        }
        Response::Read { header, status, .. } => {
            let Some(parts) = read_parts(r) else {
                return;
            };
            let h = out.head();
            h.put_u32(parts.len as u32);
            encoding::message::encode(1, header, h);
            encoding::int32::encode(2, &(status.v3_code() as i32), h);
            encoding::encode_key(100, WireType::LengthDelimited, h);
            encoding::encode_varint(parts.read_len as u64, h);
            let _ = parts.head.encode(h);
            if !parts.body.is_empty() {
                encoding::encode_key(4, WireType::LengthDelimited, h);
                encoding::encode_varint(parts.body.len() as u64, h);
                out.put_payload(parts.body);
            }
            if let Some(lac) = parts.max_lac {
                encoding::int64::encode(5, &lac, out.head());
            }
        }
    }
}

/// Writes a request as a frame (the client side).
pub fn encode_request(r: &pb::Request, out: &mut bytes::BytesMut) {
    out.put_u32(r.encoded_len() as u32);
    let _ = r.encode(out);
}

/// Most runs [`availability_runs`] expands an answer into (a bound on what a bookie's answer
/// can make the client allocate).
pub const MAX_AVAILABILITY_RUNS: usize = 1 << 20;

/// Reads BookKeeper's `AvailabilityOfEntriesOfLedger` bytes (see the server's encoder) into
/// ascending inclusive runs of entry ids `(first, last)`. Malformed bytes, or more than
/// [`MAX_AVAILABILITY_RUNS`] runs, are an error.
pub fn availability_runs(bytes: &[u8]) -> Result<Vec<(i64, i64)>> {
    const HEADER_LEN: usize = 64;
    const GROUP_LEN: usize = 24;
    let bad = |why: &str| ProtocolError::BadV3Message(format!("entry availability: {why}"));
    if bytes.len() < HEADER_LEN {
        return Err(ProtocolError::Truncated {
            what: "entry availability header",
            need: HEADER_LEN,
            have: bytes.len(),
        });
    }
    let i32_at =
        |at: usize| i32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let i64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        i64::from_be_bytes(b)
    };
    if i32_at(0) != 0 {
        return Err(bad("unknown format version"));
    }
    let groups = usize::try_from(i32_at(4)).map_err(|_| bad("negative group count"))?;
    if bytes.len() != HEADER_LEN + groups * GROUP_LEN {
        return Err(bad("length does not match the group count"));
    }
    let mut runs: Vec<(i64, i64)> = Vec::new();
    for g in 0..groups {
        let at = HEADER_LEN + g * GROUP_LEN;
        let (first, last) = (i64_at(at), i64_at(at + 8));
        let (size, period) = (i64::from(i32_at(at + 16)), i64::from(i32_at(at + 20)));
        if first < 0 || last < first || size < 1 || period < 0 {
            return Err(bad("malformed sequence group"));
        }
        if (period == 0 && last != first) || (period > 0 && (last - first) % period != 0) {
            return Err(bad("sequence starts do not follow the period"));
        }
        let count = if period == 0 {
            1
        } else {
            (last - first) / period + 1
        };
        if count as u64 > (MAX_AVAILABILITY_RUNS - runs.len()) as u64 {
            return Err(bad("too many runs"));
        }
        for k in 0..count {
            let start = first + k * period;
            let end = start
                .checked_add(size - 1)
                .ok_or_else(|| bad("entry id overflow"))?;
            if runs.last().is_some_and(|&(_, prev)| start <= prev) {
                return Err(bad("runs not ascending"));
            }
            runs.push((start, end));
        }
    }
    Ok(runs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Encoded request frames of several operations: the fuzzer's starting points (crate::fuzz).
    pub(crate) fn fuzz_seeds() -> Vec<Vec<u8>> {
        let reqs = [
            pb::Request {
                header: header(OperationType::ReadEntry, 1),
                read_request: Some(pb::ReadRequest {
                    ledger_id: 1,
                    entry_id: -1,
                    master_key: None,
                    previous_lac: Some(3),
                    time_out: Some(100),
                    flag: None,
                }),
                ..Default::default()
            },
            pb::Request {
                header: header(OperationType::AddEntry, 2),
                add_request: Some(pb::AddRequest {
                    ledger_id: 5,
                    entry_id: 9,
                    master_key: b"key".to_vec().into(),
                    body: b"payload of an entry".to_vec().into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            pb::Request {
                header: header(OperationType::ReadLac, 3),
                read_lac_request: Some(pb::ReadLacRequest { ledger_id: 5 }),
                ..Default::default()
            },
        ];
        reqs.iter()
            .map(|r| {
                let mut out = bytes::BytesMut::new();
                encode_request(r, &mut out);
                out.to_vec()
            })
            .collect()
    }

    fn header(op: OperationType, txn: u64) -> BkPacketHeader {
        BkPacketHeader {
            version: ProtocolVersion::VersionThree as i32,
            operation: op as i32,
            txn_id: txn,
            priority: None,
        }
    }

    fn frame_of(r: &Response) -> Bytes {
        let mut out = OutFrames::default();
        encode_response(r, &mut out);
        let mut all = bytes::BytesMut::new();
        for part in out.take() {
            all.extend_from_slice(&part);
        }
        all.freeze()
    }

    #[test]
    fn a_read_response_written_by_reference_equals_the_whole_message() {
        for body in [
            Bytes::new(),
            Bytes::from_static(b"x"),
            Bytes::from(vec![7u8; 70_000]),
        ] {
            let r = Response::Read {
                header: header(OperationType::ReadEntry, 99),
                status: if body.is_empty() {
                    Status::NoEntry
                } else {
                    Status::Ok
                },
                ledger: 5,
                entry: 1 << 40,
                max_lac: (!body.is_empty()).then_some(1 << 33),
                body,
            };
            let frame = frame_of(&r);
            assert_eq!(frame.len(), r.wire_len());
            let whole = r.to_message().encode_to_vec();
            assert_eq!(&frame[4..], &whole[..]);
            assert_eq!(decode_response(frame.slice(4..)).unwrap(), r.to_message());
        }
    }

    #[test]
    fn requests_round_trip_and_keep_their_bytes() {
        let req = pb::Request {
            header: header(OperationType::AddEntry, 7),
            add_request: Some(pb::AddRequest {
                ledger_id: 3,
                entry_id: 4,
                master_key: Bytes::from_static(&[1; 20]),
                body: Bytes::from_static(b"payload"),
                write_flags: None,
                flag: Some(pb::add_request::Flag::RecoveryAdd as i32),
            }),
            ..Default::default()
        };
        let mut out = bytes::BytesMut::new();
        encode_request(&req, &mut out);
        let body = out.freeze().slice(4..);
        assert!(super::super::looks_like_v3(&body));
        assert_eq!(decode_request(body).unwrap(), req);
    }

    #[test]
    fn statuses_map_both_ways() {
        for s in [
            Status::Ok,
            Status::NoLedger,
            Status::NoEntry,
            Status::BadRequest,
            Status::Io,
            Status::Unauthorized,
            Status::BadVersion,
            Status::Fenced,
            Status::ReadOnly,
            Status::TooManyRequests,
            Status::UnknownLedgerState,
        ] {
            assert_eq!(Status::from_v3_code(s.v3_code() as i32), s);
        }
        assert_eq!(Status::from_v3_code(12345), Status::Other(12345));
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let body = Bytes::from(data);
            let _ = decode_request(body.clone());
            let _ = decode_response(body);
        }

        #[test]
        fn reading_any_entry_availability_never_panics(
            groups in 0i32..4,
            tail in proptest::collection::vec(any::<u8>(), 0..120)
        ) {
            let mut bytes = vec![0u8; 64];
            bytes[4..8].copy_from_slice(&groups.to_be_bytes());
            bytes.extend_from_slice(&tail);
            let _ = availability_runs(&bytes);
            let _ = availability_runs(&tail);
        }

        #[test]
        fn decoding_mutated_requests_never_panics(
            flips in proptest::collection::vec((0usize..64, any::<u8>()), 1..8)
        ) {
            let req = pb::Request {
                header: header(OperationType::ReadEntry, 1),
                read_request: Some(pb::ReadRequest {
                    ledger_id: 1, entry_id: -1, master_key: None, previous_lac: Some(3),
                    time_out: Some(100), flag: None,
                }),
                ..Default::default()
            };
            let mut bytes = req.encode_to_vec();
            for (at, v) in flips {
                if !bytes.is_empty() {
                    let i = at % bytes.len();
                    bytes[i] ^= v;
                }
            }
            if let Ok(decoded) = decode_request(Bytes::from(bytes)) {
                let again = decoded.encode_to_vec();
                prop_assert!(decode_request(Bytes::from(again)).is_ok());
            }
        }
    }
}
