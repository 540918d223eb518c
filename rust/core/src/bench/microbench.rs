//! Kernels for the micro benchmarks: tight loops over the per-entry byte work (V2 frame encode
//! and decode, CRC32C, entry packaging), timed in Rust so that one Python call pays for many
//! iterations. It never touches sockets, files or the runtime, and is not used by the bookie.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::digest::{DigestManager, DigestType};
use crate::protocol::v2::{
    decode_request, decode_response, encode_request, encode_response, AddRequest, PacketHeader,
    Request, Response, CURRENT_PROTOCOL_VERSION,
};
use crate::protocol::{self, take_frame, OutFrames};

/// Entries in the batch-read kernels' responses (BATCH_READ_ENTRY(100)).
pub const BATCH_ENTRIES: usize = 100;

/// The kernels `run` knows, with what one iteration does.
pub const KERNELS: &[(&str, &str)] = &[
    ("crc32c", "CRC32C of the payload"),
    (
        "package_crc32c",
        "package one entry (32 B header + CRC32C digest + payload copy)",
    ),
    ("encode_add_request", "encode one ADD request frame"),
    (
        "decode_add_request",
        "split one ADD request frame off a buffer and decode it",
    ),
    ("encode_read_response", "encode one READ response frame"),
    (
        "decode_read_response",
        "decode one READ response frame body",
    ),
    (
        "encode_batch_read_response",
        "encode one BATCH_READ_ENTRY response of 100 entries",
    ),
    (
        "decode_batch_read_response",
        "decode one BATCH_READ_ENTRY response body of 100 entries",
    ),
    (
        "histogram_record",
        "record one value into a latency histogram (the metrics' hot-path cost)",
    ),
    (
        "timing",
        "one timing: a clock read at start and end, recorded into a histogram",
    ),
];

fn add_request(entry: Bytes) -> Request {
    Request::Add(AddRequest {
        header: PacketHeader::new(protocol::OP_ADD_ENTRY, 0),
        master_key: Bytes::from_static(&[7u8; protocol::MASTER_KEY_LEN]),
        ledger: 1,
        entry: 42,
        body: entry,
    })
}

fn read_response(entry: Bytes) -> Response {
    Response::Read {
        version: CURRENT_PROTOCOL_VERSION,
        rc: protocol::rc::EOK,
        ledger: 1,
        entry: 42,
        body: entry,
    }
}

fn batch_response(entry: Bytes) -> Response {
    Response::BatchRead {
        version: CURRENT_PROTOCOL_VERSION,
        flags: 0,
        rc: protocol::rc::EOK,
        ledger: 1,
        start_entry: 0,
        request_id: 9,
        entries: vec![entry; BATCH_ENTRIES],
    }
}

/// One encoded response frame body (without the length prefix).
fn response_body(resp: &Response) -> Bytes {
    let mut frames = OutFrames::default();
    encode_response(resp, &mut frames);
    let mut all = BytesMut::new();
    for chunk in frames.take() {
        all.extend_from_slice(&chunk);
    }
    Bytes::from(all).slice(4..)
}

/// Runs `kernel` `iterations` times over a `payload_size`-byte payload; returns the time the
/// loop took (setup excluded). Unknown kernels are an error naming the known ones.
pub fn run(kernel: &str, payload_size: usize, iterations: u64) -> Result<Duration, String> {
    let payload = vec![b'x'; payload_size];
    let digest = DigestManager::new(1, b"", DigestType::Crc32c);
    let entry = digest.package(42, 41, 43 * payload_size as i64, &payload);
    let started;
    match kernel {
        "crc32c" => {
            started = Instant::now();
            for _ in 0..iterations {
                black_box(crc32c::crc32c(black_box(&payload)));
            }
        }
        "package_crc32c" => {
            let mut out = BytesMut::with_capacity(payload_size + 64);
            started = Instant::now();
            for i in 0..iterations {
                out.clear();
                digest.package_into(i as i64, i as i64 - 1, 0, black_box(&payload), &mut out);
                black_box(&out);
            }
        }
        "encode_add_request" => {
            let req = add_request(entry);
            let mut out = BytesMut::with_capacity(payload_size + 128);
            started = Instant::now();
            for _ in 0..iterations {
                out.clear();
                encode_request(black_box(&req), &mut out);
                black_box(&out);
            }
        }
        "decode_add_request" => {
            let mut frame = BytesMut::new();
            encode_request(&add_request(entry), &mut frame);
            let frame = frame.freeze();
            let mut buf = BytesMut::with_capacity(frame.len());
            started = Instant::now();
            for _ in 0..iterations {
                buf.clear();
                buf.extend_from_slice(black_box(&frame));
                let body = take_frame(&mut buf, protocol::DEFAULT_MAX_FRAME_SIZE);
                if let Ok(Some(body)) = body {
                    black_box(decode_request(body).ok());
                }
            }
        }
        "encode_read_response" | "encode_batch_read_response" => {
            let resp = if kernel == "encode_read_response" {
                read_response(entry)
            } else {
                batch_response(entry)
            };
            let mut frames = OutFrames::default();
            started = Instant::now();
            for _ in 0..iterations {
                encode_response(black_box(&resp), &mut frames);
                black_box(frames.take());
            }
        }
        "decode_read_response" | "decode_batch_read_response" => {
            let body = if kernel == "decode_read_response" {
                response_body(&read_response(entry))
            } else {
                response_body(&batch_response(entry))
            };
            started = Instant::now();
            for _ in 0..iterations {
                black_box(decode_response(black_box(body.clone())).ok());
            }
        }
        "histogram_record" => {
            let h = crate::metrics::Histogram::new(crate::metrics::Unit::Micros);
            started = Instant::now();
            for i in 0..iterations {
                h.record(black_box(i & 0xffff));
            }
            black_box(h.snapshot());
        }
        "timing" => {
            let h = crate::metrics::Histogram::new(crate::metrics::Unit::Micros);
            started = Instant::now();
            for _ in 0..iterations {
                let t = crate::metrics::start();
                h.record_since(black_box(t));
            }
            black_box(h.snapshot());
        }
        other => {
            let known: Vec<&str> = KERNELS.iter().map(|(k, _)| *k).collect();
            return Err(format!(
                "unknown kernel {other:?}; known: {}",
                known.join(", ")
            ));
        }
    }
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_runs() {
        for (kernel, _) in KERNELS {
            run(kernel, 100, 3).unwrap();
        }
        assert!(run("nope", 1, 1).is_err());
    }
}
