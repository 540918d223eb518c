//! BookKeeper's V2 wire protocol: typed requests and responses, encode and decode. Pure byte
//! work: it never touches sockets or storage, and never panics on any input.
//!
//! This file only names the parts: the [`header`] every frame body starts with, the [`auth`]
//! message, then the [`request`] and [`response`] codecs over them.

mod auth;
mod header;
mod request;
mod response;

#[cfg(test)]
pub(crate) mod tests;

pub use auth::AuthMessage;
pub use header::{PacketHeader, CURRENT_PROTOCOL_VERSION, LOWEST_COMPAT_PROTOCOL_VERSION};
pub use request::{
    decode_request, encode_request, encode_request_chunks, AddRequest, AuthRequest,
    BatchReadRequest, ReadRequest, Request,
};
pub use response::{decode_response, encode_response, Response, RESPONSE_HEADER_LEN};
