//! Frames on a connection: `[i32 length][body]`, cut from a read buffer with the size limit
//! checked before the body is buffered, and response frames gathered for vectored writes.
//! It never interprets a body beyond telling V2 from V3.

use bytes::{Buf, Bytes, BytesMut};

use super::error::{ProtocolError, Result};

/// Takes one frame body off the front of `buf`, if a whole frame is there. The limit is
/// checked as soon as the length is known, before buffering the body.
pub fn take_frame(buf: &mut BytesMut, max_frame_size: usize) -> Result<Option<Bytes>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if len < 0 {
        return Err(ProtocolError::NegativeLength(len));
    }
    let len = len as usize;
    if len + 4 > max_frame_size {
        return Err(ProtocolError::FrameTooLarge {
            len: len + 4,
            max: max_frame_size,
        });
    }
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len).freeze()))
}

/// Whether a connection's first frame is a protobuf (V3) request rather than V2: a V3
/// `Request` starts with its header field (tag 0x0A); a V2 body starts with a version byte.
pub fn looks_like_v3(body: &[u8]) -> bool {
    body.first() == Some(&0x0A)
}

/// Encoded response frames, with large payloads kept as separate chunks instead of copied
/// (as Java's encoder does above its small-entry threshold). Written with vectored I/O.
#[derive(Default)]
pub struct OutFrames {
    chunks: Vec<Bytes>,
    /// Bytes in `chunks`.
    chunked: usize,
    current: BytesMut,
}

/// Payloads at least this large are sent without copying them into the output buffer.
const COPY_THRESHOLD: usize = 4096;

impl OutFrames {
    /// Appends a payload: copied when small, else referenced as its own chunk.
    pub fn put_payload(&mut self, data: &Bytes) {
        if data.len() >= COPY_THRESHOLD {
            self.seal_current();
            self.chunked += data.len();
            self.chunks.push(data.clone());
        } else {
            self.current.extend_from_slice(data);
        }
    }

    /// Makes room at once for `fields` bytes of small fields and the payloads of `payloads`
    /// lengths that `put_payload` will copy: a batch response of thousands of small entries
    /// is then not grown (and copied again) step by step.
    pub fn reserve(&mut self, fields: usize, payloads: impl Iterator<Item = usize>) {
        let copied: usize = payloads.filter(|&len| len < COPY_THRESHOLD).sum();
        self.current.reserve(fields + copied);
    }

    /// The buffer that small fields (headers, lengths) are written into.
    pub fn head(&mut self) -> &mut BytesMut {
        &mut self.current
    }

    fn seal_current(&mut self) {
        if !self.current.is_empty() {
            let part = self.current.split().freeze();
            self.chunked += part.len();
            self.chunks.push(part);
        }
    }

    /// Everything encoded so far, in order.
    pub fn take(&mut self) -> Vec<Bytes> {
        self.seal_current();
        self.chunked = 0;
        std::mem::take(&mut self.chunks)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes encoded and not yet taken.
    pub fn len(&self) -> usize {
        self.chunked + self.current.len()
    }
}
