//! The AUTH message of both directions, `AuthMessage { required string authPluginName = 1;
//! required bytes payload = 2; }`: a minimal proto2 codec and its varints. Pure byte work: it
//! never authenticates anyone (a bookie answers that authentication is disabled).

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::error::{ProtocolError, Result};

/// `AuthMessage { required string authPluginName = 1; required bytes payload = 2; }`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthMessage {
    pub plugin_name: String,
    pub payload: Bytes,
}

impl AuthMessage {
    /// Bytes of the encoded message.
    pub(super) fn encoded_len(&self) -> usize {
        let name = self.plugin_name.len();
        let payload = self.payload.len();
        2 + varint_len(name as u64) + name + varint_len(payload as u64) + payload
    }

    pub(super) fn encode(&self, out: &mut BytesMut) {
        out.put_u8(0x0A);
        put_varint(out, self.plugin_name.len() as u64);
        out.extend_from_slice(self.plugin_name.as_bytes());
        out.put_u8(0x12);
        put_varint(out, self.payload.len() as u64);
        out.extend_from_slice(&self.payload);
    }

    /// Reads the message: both fields required, unknown fields skipped.
    pub(super) fn decode(data: Bytes) -> Result<AuthMessage> {
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
                        1 => name = Some(plugin_name(&value)?),
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
}

fn plugin_name(value: &Bytes) -> Result<String> {
    String::from_utf8(value.to_vec())
        .map_err(|_| ProtocolError::BadAuthMessage("plugin name not UTF-8"))
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
