//! The client's side of START_TLS on a new connection, as BookKeeper's PerChannelBookieClient
//! does it: a V3 START_TLS request in plaintext, the bookie's EOK, then the TLS handshake on the
//! same socket (the bookie's chain verified against the trust store). Any other answer is a
//! failure: a client asked for TLS never carries on in plaintext. It runs before the connection
//! takes requests; it never sees one.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::protocol::v3::{self, pb};
use crate::protocol::{self, Status};
use crate::tls::ClientTls;

/// START_TLS is the connection's first request: no other transaction can be confused with it.
const START_TLS_TXN: u64 = 0;

/// Upgrades `stream` to `bookie` (`host:port`) to TLS; Err says why, for the bookie's error.
pub(super) async fn start_tls(
    mut stream: TcpStream,
    bookie: &str,
    tls: &ClientTls,
    max_frame: usize,
) -> Result<TlsStream<TcpStream>, String> {
    let request = pb::Request {
        header: v3::BkPacketHeader {
            version: v3::ProtocolVersion::VersionThree as i32,
            operation: v3::OperationType::StartTls as i32,
            txn_id: START_TLS_TXN,
            priority: None,
        },
        start_tls_request: Some(pb::StartTlsRequest::default()),
        ..Default::default()
    };
    let mut out = BytesMut::new();
    v3::encode_request(&request, &mut out);
    stream
        .write_all(&out)
        .await
        .map_err(|e| format!("sending START_TLS: {e}"))?;
    let mut buf = BytesMut::with_capacity(256);
    let body = loop {
        match protocol::take_frame(&mut buf, max_frame) {
            Ok(Some(body)) => break body,
            Ok(None) => match stream.read_buf(&mut buf).await {
                Ok(0) => return Err("the bookie closed the connection after START_TLS".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("reading the answer to START_TLS: {e}")),
            },
            Err(e) => return Err(format!("bad answer to START_TLS: {e}")),
        }
    };
    let answer = v3::decode_response(body).map_err(|e| format!("bad answer to START_TLS: {e}"))?;
    let status = Status::from_v3_code(answer.status);
    if status != Status::Ok {
        return Err(format!(
            "the bookie answered START_TLS with {status} (is TLS configured on it?)"
        ));
    }
    if !buf.is_empty() {
        return Err("the bookie sent data after its answer to START_TLS".into());
    }
    let name = ClientTls::server_name(bookie).map_err(|e| e.to_string())?;
    tls.connector()
        .connect(name, stream)
        .await
        .map_err(|e| format!("TLS handshake failed: {e}"))
}
