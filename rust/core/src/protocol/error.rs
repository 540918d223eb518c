//! Why bytes could not be decoded, in either protocol version: the one error of the wire
//! codecs. It never decides what to do about it (the connection closes).

/// Why bytes could not be decoded. Each is a reason to close the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("frame of {len} bytes exceeds nettyMaxFrameSizeBytes {max}")]
    FrameTooLarge { len: usize, max: usize },
    #[error("negative frame length {0}")]
    NegativeLength(i32),
    #[error("{what}: need {need} bytes, frame has {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("unknown V2 opcode {0}")]
    UnknownOpcode(u8),
    #[error("malformed V3 (protobuf) message: {0}")]
    BadV3Message(String),
    #[error("malformed auth message: {0}")]
    BadAuthMessage(&'static str),
    #[error("V2 opcode {0} before the connection was authenticated")]
    Unauthenticated(u8),
    /// The client's authentication (SASL) failed: the connection is not served.
    #[error("authentication failed: {0}")]
    AuthenticationFailed(String),
}

pub type Result<T> = std::result::Result<T, ProtocolError>;
