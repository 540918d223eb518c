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
mod health;
mod reply;
mod sasl_auth;
#[cfg(test)]
mod sasl_tests;
mod start_tls;
#[cfg(test)]
mod tests;

pub use health::{counts_toward_quarantine, HealthFigures};
pub use reply::{ClientError, Reply, ReplyResult};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};

use crate::config::{ClientConfig, ReadPolicy};
use crate::done::{self, Done};
use crate::protocol::v2::{
    encode_request_chunks, AddRequest, BatchReadRequest, PacketHeader, ReadRequest, Request,
};
use crate::protocol::{self, v3};
use crate::runtime::runtime;
use connection::{Conn, Key, Waiter};
use health::BookieHealth;

/// Connections to bookies, shared by all ledgers of a client.
pub struct BookieClient {
    cfg: ClientConfig,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    closed: AtomicBool,
    next_request_id: AtomicI64,
    /// V3 transaction ids (echoed by the bookie; responses are matched by ledger and entry).
    next_txn_id: AtomicU64,
    /// Per-bookie health figures, kept across reconnections; one entry per bookie ever asked
    /// (bounded by the cluster's bookies).
    health: Mutex<HashMap<String, Arc<BookieHealth>>>,
    born: Instant,
    /// How reads race and order replicas (speculative reads, reordering by health).
    read_policy: RwLock<ReadPolicy>,
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
            health: Mutex::new(HashMap::new()),
            born: Instant::now(),
            read_policy: RwLock::new(ReadPolicy::default()),
        }
    }

    /// How reads race and order replicas; BookKeeper's defaults until [`Self::set_read_policy`].
    pub fn read_policy(&self) -> ReadPolicy {
        *self.read_policy.read()
    }

    /// Sets how reads race and order replicas (checked first).
    pub fn set_read_policy(&self, policy: ReadPolicy) -> std::result::Result<(), String> {
        policy.validate()?;
        *self.read_policy.write() = policy;
        Ok(())
    }

    /// The health figures of `bookie` now (all zero for a bookie never asked).
    pub fn bookie_health(&self, bookie: &str) -> HealthFigures {
        self.health
            .lock()
            .get(bookie)
            .map(|h| h.figures())
            .unwrap_or_default()
    }

    /// Records that a read of `bookie` needed a speculative request that another replica
    /// answered first: it counts as slow for `bookieFailureHistoryExpirationMSec`.
    pub fn note_slow(&self, bookie: &str) {
        self.health_of(bookie).note_slow();
    }

    /// Records a failure of `bookie` seen above this layer (a copy that failed its digest).
    pub fn note_failure(&self, bookie: &str) {
        self.health_of(bookie).note_failure();
    }

    fn health_of(&self, bookie: &str) -> Arc<BookieHealth> {
        let mut health = self.health.lock();
        if let Some(h) = health.get(bookie) {
            return h.clone();
        }
        let h = Arc::new(BookieHealth::new(self.born));
        health.insert(bookie.to_string(), h.clone());
        h
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
            Err(e) => return self.fail_unsent(&out.bookie, e, done),
        };
        let deadline = Instant::now() + out.timeout;
        let reserved = if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::block_in_place(|| conn.reserve_blocking(size, deadline))
        } else {
            conn.reserve_blocking(size, deadline)
        };
        if !reserved {
            return self.fail_unsent(&out.bookie, conn.no_room_error(out.key), done);
        }
        let done = conn.health.clone().track(done);
        conn.enqueue(out.key, out.chunks, size, Waiter::new(done, deadline));
    }

    /// Completes a request that was never sent, counting it against its bookie.
    fn fail_unsent(&self, bookie: &str, err: ClientError, done: Done<ReplyResult>) {
        let result = Err(err);
        self.health_of(bookie).record(&result);
        done(result)
    }

    /// Each bookie's requests that failed in a way BookKeeper's client counts toward
    /// quarantine (see [`counts_toward_quarantine`]) since the last call, reset to 0: what the
    /// health check takes once per `bookieHealthCheckIntervalSeconds`. Bookies with none are
    /// left out.
    pub fn take_error_counts(&self) -> Vec<(String, u64)> {
        self.health
            .lock()
            .iter()
            .filter_map(|(bookie, h)| {
                let n = h.take_errors();
                (n > 0).then(|| (bookie.clone(), n))
            })
            .collect()
    }

    /// Every failed request to `bookie` (any cause) since this client started; never reset,
    /// so a reader learns that a bookie failed by comparing it with a value seen before.
    pub fn failure_count(&self, bookie: &str) -> u64 {
        self.health.lock().get(bookie).map_or(0, |h| h.blamed())
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
        self.add_request_with_write_flags(bookie, ledger, entry, master_key, body, flags, 0)
    }

    /// ADD carrying BookKeeper's V3 `writeFlags` (bit 0: DEFERRED_SYNC), set only when non-zero
    /// as the Java client does. V2 has no write flags: callers refuse them over V2 first.
    #[allow(clippy::too_many_arguments)]
    pub fn add_request_with_write_flags(
        &self,
        bookie: &str,
        ledger: i64,
        entry: i64,
        master_key: Bytes,
        body: Bytes,
        flags: u16,
        write_flags: i32,
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
                    write_flags: (write_flags != 0).then_some(write_flags),
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
        let (conn, size) = match self.admit(&out) {
            Ok(c) => c,
            Err(e) => {
                let result = Err(e);
                self.health_of(&out.bookie).record(&result);
                return result;
            }
        };
        let deadline = Instant::now() + out.timeout;
        if !conn.reserve(size, deadline).await {
            let result = Err(conn.no_room_error(out.key));
            self.health_of(&out.bookie).record(&result);
            return result;
        }
        let (done, rx) = done::channel();
        let done = conn.health.clone().track(done);
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
        let conn = Conn::start(&rt, bookie, &self.cfg, self.health_of(bookie));
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
