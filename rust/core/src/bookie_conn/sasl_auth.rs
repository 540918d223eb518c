//! The client's side of BookKeeper's `sasl` auth plugin on a new connection (DIGEST-MD5), after
//! START_TLS when TLS is on and before any request, as the Java client's AuthHandler runs it:
//! AUTH messages (V2 opcode 3, or V3 AUTH) carry the tokens of [`crate::sasl`]. A bookie that
//! answers with BookKeeper's `AuthDisabledPlugin` has authentication off and takes the client
//! as it is (the Java client does the same). Anything else that is not a successful exchange
//! fails the connection: a client configured for SASL never sends a request unauthenticated.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::protocol::v2::{self, AuthMessage, AuthRequest, PacketHeader};
use crate::protocol::v3::{self, pb};
use crate::protocol::{self, Status, AUTH_DISABLED_PLUGIN, OP_AUTH};
use crate::sasl::{ClientExchange, Credentials, PLUGIN};

/// The V3 AUTH requests' transaction ids: START_TLS took 0 and no other request is sent before
/// the exchange ends, so none can be confused with them.
const FIRST_AUTH_TXN: u64 = 1;

/// What the bookie sent back to one AUTH message.
enum Answer {
    /// The next token of the exchange.
    Token(Bytes),
    /// The bookie runs without authentication.
    Disabled,
}

/// Authenticates the connection `stream` to `bookie`; Err says why not, for the bookie's
/// UnauthorizedAccessException. The caller bounds it in time.
pub(super) async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    credentials: &Credentials,
    use_v2: bool,
    max_frame: usize,
) -> Result<(), String> {
    let mut link = AuthLink {
        stream,
        use_v2,
        max_frame,
        txn: FIRST_AUTH_TXN,
        buf: BytesMut::with_capacity(512),
    };
    let mut exchange = ClientExchange::new(&credentials.username, &credentials.password);
    // DIGEST-MD5 has no initial response: the first token is empty.
    let challenge = match link.round_trip(Bytes::new()).await? {
        Answer::Disabled => return Ok(()),
        Answer::Token(challenge) => challenge,
    };
    let response = exchange.respond(&challenge).map_err(|e| e.to_string())?;
    let rspauth = match link.round_trip(Bytes::from(response)).await? {
        Answer::Disabled => {
            return Err("the bookie turned authentication off in the middle of it".into())
        }
        Answer::Token(rspauth) => rspauth,
    };
    exchange.verify(&rspauth).map_err(|e| e.to_string())?;
    if !link.buf.is_empty() {
        return Err("the bookie sent data after its last AUTH answer".into());
    }
    Ok(())
}

/// The connection while it carries the exchange.
struct AuthLink<'a, S> {
    stream: &'a mut S,
    use_v2: bool,
    max_frame: usize,
    txn: u64,
    buf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> AuthLink<'_, S> {
    /// Sends one token and reads the bookie's answer to it.
    async fn round_trip(&mut self, token: Bytes) -> Result<Answer, String> {
        let mut out = BytesMut::new();
        if self.use_v2 {
            let request = v2::Request::Auth(AuthRequest {
                header: PacketHeader::new(OP_AUTH, 0),
                message: AuthMessage {
                    plugin_name: PLUGIN.to_string(),
                    payload: token,
                },
            });
            v2::encode_request(&request, &mut out);
        } else {
            let request = pb::Request {
                header: v3::BkPacketHeader {
                    version: v3::ProtocolVersion::VersionThree as i32,
                    operation: v3::OperationType::Auth as i32,
                    txn_id: self.txn,
                    priority: None,
                },
                auth_request: Some(pb::AuthMessage {
                    auth_plugin_name: PLUGIN.to_string(),
                    payload: token,
                }),
                ..Default::default()
            };
            self.txn += 1;
            v3::encode_request(&request, &mut out);
        }
        self.stream
            .write_all(&out)
            .await
            .map_err(|e| format!("sending AUTH: {e}"))?;
        self.stream
            .flush()
            .await
            .map_err(|e| format!("sending AUTH: {e}"))?;
        let body = self.next_answer().await?;
        if protocol::looks_like_v3(&body) {
            let answer =
                v3::decode_response(body).map_err(|e| format!("bad answer to AUTH: {e}"))?;
            let status = Status::from_v3_code(answer.status);
            if status != Status::Ok {
                return Err(format!("the bookie answered AUTH with {status}"));
            }
            let message = answer
                .auth_response
                .ok_or("the bookie's answer to AUTH carries no auth message")?;
            Ok(answer_of(&message.auth_plugin_name, message.payload))
        } else {
            match v2::decode_response(body) {
                Ok(v2::Response::Auth { message, .. }) => {
                    Ok(answer_of(&message.plugin_name, message.payload))
                }
                Ok(_) => Err("the bookie answered AUTH with another response".into()),
                Err(e) => Err(format!("bad answer to AUTH: {e}")),
            }
        }
    }

    /// The next frame that is not an answer to START_TLS. A Java bookie with TLS and SASL
    /// answers START_TLS a second time, EIO, once the handshake is done and the connection is
    /// not authenticated yet (SASL comes after); BookKeeper's client drops that answer, and so
    /// does this one.
    async fn next_answer(&mut self) -> Result<Bytes, String> {
        loop {
            let body = self.next_frame().await?;
            if protocol::looks_like_v3(&body) {
                if let Ok(r) = v3::decode_response(body.clone()) {
                    if r.header.operation == v3::OperationType::StartTls as i32 {
                        log::debug!("dropping a START_TLS answer during SASL: {}", r.status);
                        continue;
                    }
                }
            }
            return Ok(body);
        }
    }

    async fn next_frame(&mut self) -> Result<Bytes, String> {
        loop {
            match protocol::take_frame(&mut self.buf, self.max_frame) {
                Ok(Some(body)) => return Ok(body),
                Ok(None) => match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) => {
                        return Err("the bookie closed the connection during authentication \
                                    (wrong credentials, or an id it does not allow?)"
                            .into())
                    }
                    Ok(_) => {}
                    Err(e) => return Err(format!("reading the answer to AUTH: {e}")),
                },
                Err(e) => return Err(format!("bad answer to AUTH: {e}")),
            }
        }
    }
}

fn answer_of(plugin: &str, payload: Bytes) -> Answer {
    if plugin == AUTH_DISABLED_PLUGIN {
        Answer::Disabled
    } else {
        Answer::Token(payload)
    }
}
