//! The wire protocols: what is shared by V2 and V3 (operation codes, flags, statuses, errors),
//! frame cutting, and one module per version. Pure byte work: it never touches sockets or
//! storage, and never panics on any input.

mod error;
pub mod frame;
pub mod v2;
pub mod v3;

pub use error::{ProtocolError, Result};
pub use frame::{looks_like_v3, take_frame, OutFrames};

pub const OP_ADD_ENTRY: u8 = 1;
pub const OP_READ_ENTRY: u8 = 2;
pub const OP_AUTH: u8 = 3;
pub const OP_READ_LAC: u8 = 4;
pub const OP_WRITE_LAC: u8 = 5;
pub const OP_GET_BOOKIE_INFO: u8 = 6;
pub const OP_BATCH_READ_ENTRY: u8 = 7;

pub const FLAG_NONE: u16 = 0;
pub const FLAG_DO_FENCING: u16 = 1;
pub const FLAG_RECOVERY_ADD: u16 = 2;
pub const FLAG_HIGH_PRIORITY: u16 = 4;
/// A pybkx extension on BATCH_READ_ENTRY (Apache BookKeeper has no such flag): the request
/// carries an `i32` stride after its fixed fields (and master key), and asks for entries
/// `start, start + stride, start + 2 * stride, ...` under BP-62's other rules. A bookie that
/// honours it sets the flag in its response header; a Java bookie ignores the flag and the
/// trailing field (and answers consecutive entries with flags 0).
pub const FLAG_STRIDED_READ: u16 = 0x4000;

pub const MASTER_KEY_LEN: usize = 20;
/// `nettyMaxFrameSizeBytes` default; the limit applies to length field + 4, as in Netty.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 5 * 1024 * 1024;
/// Plugin name a bookie without authentication answers AUTH requests with.
pub const AUTH_DISABLED_PLUGIN: &str = "AuthDisabledPlugin";

/// V2 result codes (`BookieProtocol.E*`).
pub mod rc {
    pub const EOK: i32 = 0;
    pub const ENOLEDGER: i32 = 1;
    pub const ENOENTRY: i32 = 2;
    pub const EBADREQ: i32 = 100;
    pub const EIO: i32 = 101;
    pub const EUA: i32 = 102;
    pub const EBADVERSION: i32 = 103;
    pub const EFENCED: i32 = 104;
    pub const EREADONLY: i32 = 105;
    pub const ETOOMANYREQUESTS: i32 = 106;
    pub const EUNKNOWNLEDGERSTATE: i32 = 107;
}

/// The outcome of a bookie operation, whatever protocol version carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Ok,
    NoLedger,
    NoEntry,
    BadRequest,
    Io,
    Unauthorized,
    BadVersion,
    Fenced,
    ReadOnly,
    TooManyRequests,
    UnknownLedgerState,
    /// A V2 code this implementation does not know.
    Other(i32),
}

impl Status {
    /// The V2 result code of this status.
    pub fn v2_code(self) -> i32 {
        match self {
            Status::Ok => rc::EOK,
            Status::NoLedger => rc::ENOLEDGER,
            Status::NoEntry => rc::ENOENTRY,
            Status::BadRequest => rc::EBADREQ,
            Status::Io => rc::EIO,
            Status::Unauthorized => rc::EUA,
            Status::BadVersion => rc::EBADVERSION,
            Status::Fenced => rc::EFENCED,
            Status::ReadOnly => rc::EREADONLY,
            Status::TooManyRequests => rc::ETOOMANYREQUESTS,
            Status::UnknownLedgerState => rc::EUNKNOWNLEDGERSTATE,
            Status::Other(code) => code,
        }
    }

    /// The status of a V2 result code.
    pub fn from_v2_code(code: i32) -> Status {
        match code {
            rc::EOK => Status::Ok,
            rc::ENOLEDGER => Status::NoLedger,
            rc::ENOENTRY => Status::NoEntry,
            rc::EBADREQ => Status::BadRequest,
            rc::EIO => Status::Io,
            rc::EUA => Status::Unauthorized,
            rc::EBADVERSION => Status::BadVersion,
            rc::EFENCED => Status::Fenced,
            rc::EREADONLY => Status::ReadOnly,
            rc::ETOOMANYREQUESTS => Status::TooManyRequests,
            rc::EUNKNOWNLEDGERSTATE => Status::UnknownLedgerState,
            other => Status::Other(other),
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Status::Ok => "EOK",
            Status::NoLedger => "ENOLEDGER",
            Status::NoEntry => "ENOENTRY",
            Status::BadRequest => "EBADREQ",
            Status::Io => "EIO",
            Status::Unauthorized => "EUA",
            Status::BadVersion => "EBADVERSION",
            Status::Fenced => "EFENCED",
            Status::ReadOnly => "EREADONLY",
            Status::TooManyRequests => "ETOOMANYREQUESTS",
            Status::UnknownLedgerState => "EUNKNOWNLEDGERSTATE",
            Status::Other(code) => return write!(f, "result code {code}"),
        };
        write!(f, "{name} ({})", self.v2_code())
    }
}
