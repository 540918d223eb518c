//! The V2 codecs against BookKeeper's reference bytes, round trips of any request and
//! response, and decoders fed any bytes (the fuzzer's starting points come from here).

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::protocol::{
    take_frame, OutFrames, ProtocolError, DEFAULT_MAX_FRAME_SIZE, FLAG_DO_FENCING,
    FLAG_RECOVERY_ADD, FLAG_STRIDED_READ, MASTER_KEY_LEN, OP_ADD_ENTRY, OP_AUTH,
    OP_BATCH_READ_ENTRY, OP_GET_BOOKIE_INFO, OP_READ_ENTRY, OP_READ_LAC, OP_WRITE_LAC,
};

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
        &Request::Read(ReadRequest {
            header: PacketHeader::new(OP_READ_ENTRY, 0),
            ledger: 1,
            entry: 0,
            master_key: None,
        }),
        &mut out,
    );
    assert_eq!(
        &out[..],
        &hex("00000014 02020000 0000000000000001 0000000000000000")[..]
    );

    let mut out = BytesMut::new();
    encode_request(
        &Request::Read(ReadRequest {
            header: PacketHeader::new(OP_READ_ENTRY, FLAG_DO_FENCING),
            ledger: 1,
            entry: -1,
            master_key: Some(Bytes::from(hex(EMPTY_KEY))),
        }),
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
        &Request::BatchRead(BatchReadRequest {
            header: PacketHeader::new(OP_BATCH_READ_ENTRY, 0),
            ledger: 1,
            start_entry: 0,
            request_id: 42,
            max_count: 100,
            max_size: 5 << 20,
            master_key: None,
            stride: None,
        }),
        &mut out,
    );
    assert_eq!(
        &out[..],
        &hex("00000028 02070000 0000000000000001 0000000000000000 000000000000002a 00000064 0000000000500000")[..]
    );

    // The pybkx stride goes after the BP-62 fields, where a Java bookie stops reading.
    let mut out = BytesMut::new();
    encode_request(
        &Request::BatchRead(BatchReadRequest {
            header: PacketHeader::new(OP_BATCH_READ_ENTRY, FLAG_STRIDED_READ),
            ledger: 1,
            start_entry: 2,
            request_id: 42,
            max_count: 100,
            max_size: 5 << 20,
            master_key: None,
            stride: Some(3),
        }),
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
    let req = Request::Add(AddRequest {
        header: PacketHeader::new(OP_ADD_ENTRY, FLAG_RECOVERY_ADD),
        master_key: Bytes::from(hex(EMPTY_KEY)),
        ledger: 7,
        entry: 3,
        body: Bytes::from(entry.clone()),
    });
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
                Request::Add(AddRequest {
                    header,
                    master_key,
                    ledger,
                    entry,
                    body: body.freeze(),
                })
            }),
        (
            arb_header(OP_READ_ENTRY),
            any::<i64>(),
            any::<i64>(),
            arb_key()
        )
            .prop_map(|(header, ledger, entry, key)| Request::Read(ReadRequest {
                header,
                ledger,
                entry,
                master_key: (header.has(FLAG_DO_FENCING) && header.version >= 2).then_some(key),
            })),
        (
            arb_header(OP_BATCH_READ_ENTRY),
            any::<(i64, i64, i64, i32, i64)>(),
            arb_key()
        )
            .prop_map(
                |(header, (ledger, start_entry, request_id, max_count, max_size), key)| {
                    Request::BatchRead(BatchReadRequest {
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
                    })
                }
            ),
        ("[a-zA-Z]{0,20}", arb_bytes(50)).prop_map(|(plugin_name, payload)| Request::Auth(
            AuthRequest {
                header: PacketHeader {
                    version: 2,
                    opcode: OP_AUTH,
                    flags: 0
                },
                message: AuthMessage {
                    plugin_name,
                    payload
                },
            }
        )),
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
