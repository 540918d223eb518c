//! The client's per-bookie data plane: one pipelined V2 connection per bookie on tokio,
//! responses matched to requests, per-request timeouts, reconnection on demand.
//! It never decides quorums or ensembles: the ledger engine above it does.
//!
//! As in the Java V2 client, ADD and READ responses are matched by (ledger, entry) and batch
//! reads by request id; several requests with the same key complete in the order sent.
//!
//! Every request completes through a [`Done`] callback, exactly once: with the reply, a
//! bookie's status, a timeout, or the connection's failure. Requests queued for one
//! connection are bounded in bytes (`clientWriteBufferHighWaterMark`): a sender on a plain
//! thread waits for room (up to the request timeout), an async sender awaits it.

mod connection;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

use crate::config::ClientConfig;
use crate::done::{self, Done};
use crate::protocol::v2::{
    encode_request_chunks, AddRequest, BatchReadRequest, PacketHeader, ReadRequest, Request,
};
use crate::protocol::{self, v3, Status};
use crate::runtime::runtime;
use connection::{Conn, Key, Waiter};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The bookie answered with a status other than OK.
    #[error("bookie {bookie} answered {op} with {status}")]
    Bookie {
        bookie: String,
        op: &'static str,
        status: Status,
    },
    #[error("{op} to bookie {bookie} timed out")]
    Timeout { bookie: String, op: &'static str },
    #[error("bookie {bookie} is not available: {why}")]
    Unavailable { bookie: String, why: String },
    /// The request would exceed `nettyMaxFrameSizeBytes`: it was never sent.
    #[error("{op} of {size} bytes to bookie {bookie} exceeds nettyMaxFrameSizeBytes {max}")]
    TooLarge {
        bookie: String,
        op: &'static str,
        size: usize,
        max: usize,
    },
    #[error("bookie client is closed")]
    Closed,
}

impl ClientError {
    /// The bookie's status, for a bookie answer.
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Bookie { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Added,
    Entry(Bytes),
    /// A batch read's entries: consecutive from the start entry (BP-62).
    Entries(Vec<Bytes>),
    /// A strided batch read's entries, as the bookie acknowledged the stride: entry `i` is
    /// `start + i * stride`.
    StridedEntries(Vec<Bytes>),
    /// A long-poll read's answer: the bookie's LAC for the ledger and, when it passed the
    /// asked LAC, the entry after it (if the bookie holds it).
    LastAddConfirmed {
        lac: i64,
        next: Option<Bytes>,
    },
    /// READ_LAC's answer: the explicit LAC as written by WRITE_LAC (digest-packaged, as the
    /// writer sent it) and the bookie's last entry (stored bytes), each when the bookie has it.
    Lac {
        lac_body: Option<Bytes>,
        last_entry: Option<Bytes>,
    },
    /// WRITE_LAC and FORCE_LEDGER succeeded.
    Done,
    /// GET_BOOKIE_INFO's answer, in bytes.
    BookieInfo {
        total_disk_capacity: i64,
        free_disk_space: i64,
    },
    /// GET_LIST_OF_ENTRIES_OF_LEDGER's answer: the entries the bookie holds, as ascending
    /// inclusive runs `(first, last)`.
    EntryRuns(Vec<(i64, i64)>),
}

pub type ReplyResult = Result<Reply, ClientError>;

/// Connections to bookies, shared by all ledgers of a client.
pub struct BookieClient {
    cfg: ClientConfig,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    closed: AtomicBool,
    next_request_id: AtomicI64,
    /// V3 transaction ids (echoed by the bookie; responses are matched by ledger and entry).
    next_txn_id: AtomicU64,
}

/// One request ready to go: where, how it is matched, its frame and when it expires.
pub struct Outgoing {
    bookie: String,
    key: Key,
    chunks: Vec<Bytes>,
    timeout: Duration,
}

impl BookieClient {
    pub fn new(cfg: ClientConfig) -> Self {
        BookieClient {
            cfg,
            conns: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            next_request_id: AtomicI64::new(1),
            next_txn_id: AtomicU64::new(1),
        }
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// Sends a request; `done` gets the outcome. When the connection has no room the calling
    /// thread waits for it (inside the runtime, through `block_in_place`), at most the
    /// request's timeout.
    pub fn send(&self, out: Outgoing, done: Done<ReplyResult>) {
        let (conn, size) = match self.admit(&out) {
            Ok(c) => c,
            Err(e) => return done(Err(e)),
        };
        let deadline = Instant::now() + out.timeout;
        let reserved = if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::block_in_place(|| conn.reserve_blocking(size, deadline))
        } else {
            conn.reserve_blocking(size, deadline)
        };
        if !reserved {
            return done(Err(conn.no_room_error(out.key)));
        }
        conn.enqueue(out.key, out.chunks, size, Waiter::new(done, deadline));
    }

    /// Closes every connection; waiting requests fail with `Closed`. Idempotent.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let conns: Vec<Arc<Conn>> = self.conns.lock().drain().map(|(_, c)| c).collect();
        for c in conns {
            c.fail_all(&ClientError::Closed);
        }
    }

    /// ADD of a packaged entry.
    pub fn add_request(
        &self,
        bookie: &str,
        ledger: i64,
        entry: i64,
        master_key: Bytes,
        body: Bytes,
        flags: u16,
    ) -> Outgoing {
        let chunks = if self.cfg.use_v2_wire_protocol {
            encode_request_chunks(&Request::Add(AddRequest {
                header: PacketHeader::new(protocol::OP_ADD_ENTRY, flags),
                master_key,
                ledger,
                entry,
                body,
            }))
        } else {
            let recovery = flags & protocol::FLAG_RECOVERY_ADD != 0;
            self.v3_chunks(v3::pb::Request {
                header: self.v3_header(v3::OperationType::AddEntry, flags),
                add_request: Some(v3::pb::AddRequest {
                    ledger_id: ledger,
                    entry_id: entry,
                    master_key,
                    body,
                    write_flags: None,
                    flag: recovery.then_some(v3::pb::add_request::Flag::RecoveryAdd as i32),
                }),
                ..Default::default()
            })
        };
        Outgoing {
            bookie: bookie.to_string(),
            key: Key::Add(ledger, entry),
            chunks,
            timeout: self.cfg.add_timeout,
        }
    }

    /// READ (entry -1: the bookie's last entry; fencing needs the master key).
    pub fn read_request(
        &self,
        bookie: &str,
        ledger: i64,
        entry: i64,
        flags: u16,
        master_key: Option<Bytes>,
    ) -> Outgoing {
        let master_key = fencing_key(flags, master_key);
        let chunks = if self.cfg.use_v2_wire_protocol {
            encode_request_chunks(&Request::Read(ReadRequest {
                header: PacketHeader::new(protocol::OP_READ_ENTRY, flags),
                ledger,
                entry,
                master_key,
            }))
        } else {
            let fence = flags & protocol::FLAG_DO_FENCING != 0;
            self.v3_chunks(v3::pb::Request {
                header: self.v3_header(v3::OperationType::ReadEntry, flags),
                read_request: Some(v3::pb::ReadRequest {
                    ledger_id: ledger,
                    entry_id: entry,
                    master_key,
                    previous_lac: None,
                    time_out: None,
                    flag: fence.then_some(v3::pb::read_request::Flag::FenceLedger as i32),
                }),
                ..Default::default()
            })
        };
        Outgoing {
            bookie: bookie.to_string(),
            key: Key::Read(ledger, entry),
            chunks,
            timeout: self.cfg.read_timeout,
        }
    }

    /// A V3 long-poll READ (BookKeeper's `readLacLongPoll` with entry piggy-back): answered
    /// once the bookie's LAC for the ledger passes `previous_lac`, or after `wait`, with
    /// [`Reply::LastAddConfirmed`]. Only for a V3 client (callers check
    /// `config().use_v2_wire_protocol`): a Java bookie reads every frame of a connection as V3
    /// once it saw one, so a V2 connection must never carry it.
    pub fn long_poll_request(
        &self,
        bookie: &str,
        ledger: i64,
        previous_lac: i64,
        wait: Duration,
    ) -> Outgoing {
        let header = self.v3_header(v3::OperationType::ReadEntry, 0);
        let txn = header.txn_id;
        let chunks = self.v3_chunks(v3::pb::Request {
            header,
            read_request: Some(v3::pb::ReadRequest {
                ledger_id: ledger,
                entry_id: -1,
                master_key: None,
                previous_lac: Some(previous_lac),
                time_out: Some(wait.as_millis().min(i64::MAX as u128) as i64),
                flag: Some(v3::pb::read_request::Flag::EntryPiggyback as i32),
            }),
            ..Default::default()
        });
        Outgoing {
            bookie: bookie.to_string(),
            key: Key::Txn(txn, "long-poll read"),
            chunks,
            timeout: self.cfg.read_timeout + wait,
        }
    }

    /// A V3-only request matched by its transaction id. Only for a V3 client (callers check
    /// `config().use_v2_wire_protocol`), as [`Self::long_poll_request`].
    fn txn_request(
        &self,
        bookie: &str,
        op: v3::OperationType,
        fill: impl FnOnce(&mut v3::pb::Request),
        timeout: Duration,
    ) -> Outgoing {
        let header = self.v3_header(op, 0);
        let txn = header.txn_id;
        let mut req = v3::pb::Request {
            header,
            ..Default::default()
        };
        fill(&mut req);
        Outgoing {
            bookie: bookie.to_string(),
            key: Key::Txn(txn, connection::v3_op_name(op as i32)),
            chunks: self.v3_chunks(req),
            timeout,
        }
    }

    /// V3 READ_LAC: the ledger's explicit LAC and last entry on the bookie ([`Reply::Lac`]).
    pub fn read_lac_request(&self, bookie: &str, ledger: i64) -> Outgoing {
        self.txn_request(
            bookie,
            v3::OperationType::ReadLac,
            |r| r.read_lac_request = Some(v3::pb::ReadLacRequest { ledger_id: ledger }),
            self.cfg.read_timeout,
        )
    }

    /// V3 WRITE_LAC: stores `lac` with its digest-packaged `body` ([`Reply::Done`]).
    pub fn write_lac_request(
        &self,
        bookie: &str,
        ledger: i64,
        lac: i64,
        master_key: Bytes,
        body: Bytes,
    ) -> Outgoing {
        self.txn_request(
            bookie,
            v3::OperationType::WriteLac,
            |r| {
                r.write_lac_request = Some(v3::pb::WriteLacRequest {
                    ledger_id: ledger,
                    lac,
                    master_key,
                    body,
                })
            },
            self.cfg.add_timeout,
        )
    }

    /// V3 GET_BOOKIE_INFO asking for total and free disk space ([`Reply::BookieInfo`]).
    pub fn bookie_info_request(&self, bookie: &str) -> Outgoing {
        use v3::pb::get_bookie_info_request::Flags;
        let requested = Flags::TotalDiskCapacity as i64 | Flags::FreeDiskSpace as i64;
        self.txn_request(
            bookie,
            v3::OperationType::GetBookieInfo,
            |r| {
                r.get_bookie_info_request = Some(v3::pb::GetBookieInfoRequest {
                    requested: Some(requested),
                })
            },
            self.cfg.read_timeout,
        )
    }

    /// V3 FORCE_LEDGER: the ledger's entries made durable ([`Reply::Done`]).
    pub fn force_ledger_request(&self, bookie: &str, ledger: i64) -> Outgoing {
        self.txn_request(
            bookie,
            v3::OperationType::ForceLedger,
            |r| r.force_ledger_request = Some(v3::pb::ForceLedgerRequest { ledger_id: ledger }),
            self.cfg.add_timeout,
        )
    }

    /// V3 GET_LIST_OF_ENTRIES_OF_LEDGER: the entries the bookie holds ([`Reply::EntryRuns`]).
    pub fn list_entries_request(&self, bookie: &str, ledger: i64) -> Outgoing {
        self.txn_request(
            bookie,
            v3::OperationType::GetListOfEntriesOfLedger,
            |r| {
                r.get_list_of_entries_of_ledger_request =
                    Some(v3::pb::GetListOfEntriesOfLedgerRequest { ledger_id: ledger })
            },
            self.cfg.read_timeout,
        )
    }

    /// A V3 request header with the next transaction id; V2's high-priority flag becomes the
    /// header's priority.
    fn v3_header(&self, op: v3::OperationType, flags: u16) -> v3::BkPacketHeader {
        v3::BkPacketHeader {
            version: v3::ProtocolVersion::VersionThree as i32,
            operation: op as i32,
            txn_id: self.next_txn_id.fetch_add(1, Ordering::Relaxed),
            priority: (flags & protocol::FLAG_HIGH_PRIORITY != 0).then_some(1),
        }
    }

    fn v3_chunks(&self, req: v3::pb::Request) -> Vec<Bytes> {
        let mut out = BytesMut::with_capacity(4 + prost::Message::encoded_len(&req));
        v3::encode_request(&req, &mut out);
        vec![out.freeze()]
    }

    /// BATCH_READ_ENTRY with the limits as given, as Java's per-bookie client sends it (its
    /// ledger handle, not this layer, caps `max_size` at the frame size it can receive). With
    /// a `stride`, pybkx's extension (flag `FLAG_STRIDED_READ`) for entries `start_entry + i *
    /// stride`: a bookie that honours it answers [`Reply::StridedEntries`]; one that does not
    /// (Java's) answers consecutive entries, [`Reply::Entries`].
    #[allow(clippy::too_many_arguments)]
    pub fn batch_read_request(
        &self,
        bookie: &str,
        ledger: i64,
        start_entry: i64,
        max_count: i32,
        max_size: i64,
        flags: u16,
        master_key: Option<Bytes>,
        stride: Option<i32>,
    ) -> Outgoing {
        let flags = match stride {
            Some(_) => flags | protocol::FLAG_STRIDED_READ,
            None => flags & !protocol::FLAG_STRIDED_READ,
        };
        let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let req = Request::BatchRead(BatchReadRequest {
            header: PacketHeader::new(protocol::OP_BATCH_READ_ENTRY, flags),
            ledger,
            start_entry,
            request_id,
            max_count,
            max_size,
            master_key: fencing_key(flags, master_key),
            stride,
        });
        Outgoing {
            bookie: bookie.to_string(),
            key: Key::Batch(request_id),
            chunks: encode_request_chunks(&req),
            timeout: self.cfg.read_timeout,
        }
    }

    /// Whether the bookie, on the current connection, honours strided batch reads: None until
    /// it answered one (or without a connection).
    pub fn strided_reads(&self, bookie: &str) -> Option<bool> {
        let conns = self.conns.lock();
        conns
            .get(bookie)
            .filter(|c| c.is_alive())
            .and_then(|c| c.strided_reads())
    }

    /// Records that the bookie answered a strided batch read with consecutive entries (it does
    /// not know the extension), until the connection is made again.
    pub fn note_strides_ignored(&self, bookie: &str) {
        if let Some(c) = self.conns.lock().get(bookie) {
            c.set_strided_reads(false);
        }
    }

    /// Checks the request and finds its connection; `Err` carries the outcome to report.
    fn admit(&self, out: &Outgoing) -> Result<(Arc<Conn>, usize), ClientError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ClientError::Closed);
        }
        let size: usize = out.chunks.iter().map(|c| c.len()).sum();
        if size > self.cfg.max_frame_size {
            return Err(ClientError::TooLarge {
                bookie: out.bookie.clone(),
                op: out.key.op(),
                size,
                max: self.cfg.max_frame_size,
            });
        }
        Ok((self.connection(&out.bookie)?, size))
    }

    /// Sends a request from async code: awaits room instead of blocking a thread.
    pub async fn send_async(&self, out: Outgoing) -> ReplyResult {
        let (conn, size) = self.admit(&out)?;
        let deadline = Instant::now() + out.timeout;
        if !conn.reserve(size, deadline).await {
            return Err(conn.no_room_error(out.key));
        }
        let (done, rx) = done::channel();
        conn.enqueue(out.key, out.chunks, size, Waiter::new(done, deadline));
        rx.await.unwrap_or(Err(ClientError::Closed))
    }

    fn connection(&self, bookie: &str) -> Result<Arc<Conn>, ClientError> {
        let mut conns = self.conns.lock();
        if let Some(c) = conns.get(bookie) {
            if c.is_alive() {
                return Ok(c.clone());
            }
        }
        let rt = runtime().map_err(|e| ClientError::Unavailable {
            bookie: bookie.to_string(),
            why: format!("no runtime: {e}"),
        })?;
        let conn = Conn::start(&rt, bookie, &self.cfg);
        conns.insert(bookie.to_string(), conn.clone());
        Ok(conn)
    }
}

impl Drop for BookieClient {
    fn drop(&mut self) {
        self.close();
    }
}

fn fencing_key(flags: u16, key: Option<Bytes>) -> Option<Bytes> {
    if flags & protocol::FLAG_DO_FENCING != 0 {
        Some(key.unwrap_or_else(|| Bytes::from_static(&[0u8; protocol::MASTER_KEY_LEN])))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::{master_key, DigestManager, DigestType};
    use crate::testing::{client_config, test_bookie};

    fn wait(send: impl FnOnce(Done<ReplyResult>)) -> ReplyResult {
        let (done, waiter) = done::blocking();
        send(done);
        waiter.wait().unwrap_or(Err(ClientError::Closed))
    }

    #[test]
    fn a_stopping_server_answers_a_waiting_long_poll_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (_storage, server) = test_bookie(dir.path());
        let addr = server.local_addr().to_string();
        let client = BookieClient::new(ClientConfig {
            use_v2_wire_protocol: false,
            ..client_config()
        });
        let key = Bytes::copy_from_slice(&master_key(b"pw"));
        let dm = DigestManager::new(4, b"pw", DigestType::Crc32c);
        let added = wait(|d| {
            client.send(
                client.add_request(&addr, 4, 0, key, dm.package(0, -1, 5, b"hello"), 0),
                d,
            )
        });
        assert_eq!(added, Ok(Reply::Added));
        // Waits for an entry past 0 that never comes (up to a minute).
        let (tx, rx) = std::sync::mpsc::channel();
        client.send(
            client.long_poll_request(&addr, 4, 0, Duration::from_secs(60)),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(rx.try_recv().is_err(), "answered before the stop");
        let stopping = std::time::Instant::now();
        server.stop(Duration::from_secs(30));
        // Before: the waiting read held its connection until the drain deadline (30 s here).
        assert!(
            stopping.elapsed() < Duration::from_secs(15),
            "stop took {:?}",
            stopping.elapsed()
        );
        let answer = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            matches!(answer, Ok(Reply::LastAddConfirmed { .. })),
            "{answer:?}"
        );
    }

    #[test]
    fn add_read_batch_and_fence_through_a_real_server() {
        round_trips(true);
    }

    #[test]
    fn the_same_over_v3_with_batch_reads_on_a_v2_connection() {
        round_trips(false);
    }

    fn round_trips(use_v2_wire_protocol: bool) {
        let dir = tempfile::tempdir().unwrap();
        let (_storage, server) = test_bookie(dir.path());
        let addr = server.local_addr().to_string();
        let client = BookieClient::new(ClientConfig {
            use_v2_wire_protocol,
            ..client_config()
        });
        // Batch reads are V2 requests, and a bookie reads a connection as V2 for good after
        // its first V2 frame: a V3 client's batches go on a V2 connection of their own.
        let v2_client;
        let batcher = if use_v2_wire_protocol {
            &client
        } else {
            v2_client = BookieClient::new(client_config());
            &v2_client
        };
        let key = Bytes::copy_from_slice(&master_key(b"pw"));
        let dm = DigestManager::new(3, b"pw", DigestType::Crc32c);
        let (tx, rx) = std::sync::mpsc::channel();
        for e in 0..50 {
            let body = dm.package(e, e - 1, (e + 1) * 5, b"hello");
            let tx = tx.clone();
            client.send(
                client.add_request(&addr, 3, e, key.clone(), body, 0),
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            );
        }
        for _ in 0..50 {
            assert_eq!(rx.recv().unwrap(), Ok(Reply::Added));
        }
        let Ok(Reply::Entry(e)) =
            wait(|d| client.send(client.read_request(&addr, 3, 7, 0, None), d))
        else {
            panic!("read failed");
        };
        assert_eq!(
            dm.verify(&e, Some(7)).unwrap().payload,
            Bytes::from_static(b"hello")
        );
        let Ok(Reply::Entry(last)) =
            wait(|d| client.send(client.read_request(&addr, 3, -1, 0, None), d))
        else {
            panic!("read -1 failed");
        };
        assert_eq!(dm.verify(&last, None).unwrap().entry_id, 49);
        let Ok(Reply::Entries(batch)) = wait(|d| {
            batcher.send(
                batcher.batch_read_request(&addr, 3, 10, 5, 1 << 20, 0, None, None),
                d,
            )
        }) else {
            panic!("batch read failed");
        };
        assert_eq!(batch.len(), 5);
        assert_eq!(batcher.strided_reads(&addr), None);
        // Strided (pybkx's extension): every seventh entry from 3 up to the last, 45.
        let strided = |stride: i32, count: i32, flags: u16, key: Option<Bytes>| {
            let req =
                batcher.batch_read_request(&addr, 3, 3, count, 1 << 20, flags, key, Some(stride));
            wait(|d| batcher.send(req, d))
        };
        let Ok(Reply::StridedEntries(every7th)) = strided(7, 100, 0, None) else {
            panic!("strided batch read failed");
        };
        let ids: Vec<i64> = every7th
            .iter()
            .map(|e| dm.verify(e, None).unwrap().entry_id)
            .collect();
        assert_eq!(ids, vec![3, 10, 17, 24, 31, 38, 45]);
        assert_eq!(batcher.strided_reads(&addr), Some(true));
        let bad_stride = strided(0, 100, 0, None).unwrap_err();
        assert_eq!(bad_stride.status(), Some(Status::BadRequest));
        let missing =
            wait(|d| client.send(client.read_request(&addr, 3, 99, 0, None), d)).unwrap_err();
        assert_eq!(missing.status(), Some(Status::NoEntry));
        let no_ledger =
            wait(|d| client.send(client.read_request(&addr, 4, 0, 0, None), d)).unwrap_err();
        assert_eq!(no_ledger.status(), Some(Status::NoLedger));
        // Fencing read, then a normal add is refused and a recovery add accepted.
        let fence = protocol::FLAG_DO_FENCING;
        assert!(wait(|d| client.send(
            client.read_request(&addr, 3, -1, fence, Some(key.clone())),
            d
        ))
        .is_ok());
        let body = dm.package(50, 49, 255, b"hello");
        let refused = wait(|d| {
            client.send(
                client.add_request(&addr, 3, 50, key.clone(), body.clone(), 0),
                d,
            )
        });
        assert_eq!(refused.unwrap_err().status(), Some(Status::Fenced));
        // A fencing strided read carries the key, then the stride.
        let Ok(Reply::StridedEntries(fenced)) = strided(7, 2, fence, Some(key.clone())) else {
            panic!("fencing strided read failed");
        };
        assert_eq!(dm.verify(&fenced[1], None).unwrap().entry_id, 10);
        let recovery = protocol::FLAG_RECOVERY_ADD;
        assert_eq!(
            wait(|d| client.send(
                client.add_request(&addr, 3, 50, key.clone(), body, recovery),
                d
            )),
            Ok(Reply::Added)
        );
        let wrong = Bytes::copy_from_slice(&master_key(b"nope"));
        let unauthorized = wait(|d| {
            client.send(
                client.add_request(&addr, 3, 51, wrong, dm.package(51, 50, 260, b"x"), 0),
                d,
            )
        });
        assert_eq!(
            unauthorized.unwrap_err().status(),
            Some(Status::Unauthorized)
        );
        server.stop(Duration::from_secs(1));
    }

    #[test]
    fn unreachable_bookie_fails_fast_and_requests_time_out() {
        let client = BookieClient::new(ClientConfig {
            connect_timeout: Duration::from_millis(500),
            ..client_config()
        });
        // A port nothing listens on.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        assert!(matches!(
            wait(|d| client.send(client.read_request(&addr, 1, 0, 0, None), d)),
            Err(ClientError::Unavailable { .. })
        ));

        // A listener that never answers: the request times out.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let client = BookieClient::new(ClientConfig {
            read_timeout: Duration::from_millis(300),
            ..client_config()
        });
        assert!(matches!(
            wait(|d| client.send(client.read_request(&addr, 1, 0, 0, None), d)),
            Err(ClientError::Timeout { .. })
        ));
    }

    #[test]
    fn oversized_requests_fail_at_once_and_a_full_queue_makes_senders_wait() {
        // A peer that accepts but never reads: the socket buffers fill, then the queue.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let client = BookieClient::new(ClientConfig {
            add_timeout: Duration::from_millis(100),
            max_frame_size: 64 << 10,
            write_buffer_high_water_mark: 128 << 10,
            ..client_config()
        });
        let key = Bytes::from_static(&[0u8; 20]);
        let too_big = Bytes::from(vec![0u8; 64 << 10]);
        assert!(matches!(
            wait(|d| client.send(client.add_request(&addr, 1, 0, key.clone(), too_big, 0), d)),
            Err(ClientError::TooLarge { .. })
        ));
        // Far more than socket buffers plus the high-water mark: later sends find no room and
        // time out instead of queueing without bound.
        let body = Bytes::from(vec![7u8; 60 << 10]);
        let (tx, rx) = std::sync::mpsc::channel();
        let started = Instant::now();
        for e in 0..150 {
            let tx = tx.clone();
            client.send(
                client.add_request(&addr, 1, e, key.clone(), body.clone(), 0),
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            );
        }
        drop(tx);
        let outcomes: Vec<ReplyResult> = rx.iter().collect();
        assert_eq!(outcomes.len(), 150);
        assert!(outcomes
            .iter()
            .all(|r| matches!(r, Err(ClientError::Timeout { .. }))));
        assert!(*client.connection(&addr).unwrap().queued.lock() <= (128 << 10) + (64 << 10));
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
