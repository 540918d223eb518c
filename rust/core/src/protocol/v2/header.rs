//! The packet header every V2 frame body starts with, `version << 24 | opcode << 16 | flags`
//! (version 0: the whole int is the opcode), and the length check every decoder makes before
//! it reads a field. Pure byte work: it never panics on any input.

use bytes::Bytes;

use crate::protocol::error::{ProtocolError, Result};

pub const CURRENT_PROTOCOL_VERSION: u8 = 2;
pub const LOWEST_COMPAT_PROTOCOL_VERSION: u8 = 0;

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

    /// The header a frame body starts with.
    pub(super) fn read(body: &Bytes) -> Result<PacketHeader> {
        need(body, 4, "packet header")?;
        Ok(PacketHeader::from_int(u32::from_be_bytes([
            body[0], body[1], body[2], body[3],
        ])))
    }

    pub fn has(self, flag: u16) -> bool {
        self.flags & flag == flag
    }

    /// Versions the bookie serves; others are answered with EBADVERSION.
    pub fn version_is_compatible(self) -> bool {
        (LOWEST_COMPAT_PROTOCOL_VERSION..=CURRENT_PROTOCOL_VERSION).contains(&self.version)
    }

    pub(super) fn with_version(mut self, version: u8) -> Self {
        self.version = version;
        self
    }
}

/// Checks that `buf` holds at least `n` bytes before `what` is read from it.
pub(super) fn need(buf: &[u8], n: usize, what: &'static str) -> Result<()> {
    if buf.len() < n {
        return Err(ProtocolError::Truncated {
            what,
            need: n,
            have: buf.len(),
        });
    }
    Ok(())
}
