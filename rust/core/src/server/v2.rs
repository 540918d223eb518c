//! V2 requests on the server: decode, admit (version, in-flight limit, read-only, ids), hand to
//! the version-neutral [`dispatch`](super::dispatch), and answer with V2 responses. It never
//! touches storage itself.

use std::time::Instant;

use bytes::Bytes;

use super::dispatch::{self, Add};
use super::outbox::{Outbox, Reply, Slot, Timed};
use crate::protocol::v2::{
    decode_request, AddRequest, AuthMessage, AuthRequest, BatchReadRequest, PacketHeader,
    ReadRequest, Request, Response, CURRENT_PROTOCOL_VERSION, RESPONSE_HEADER_LEN,
};
use crate::protocol::{
    ProtocolError, Status, AUTH_DISABLED_PLUGIN, FLAG_DO_FENCING, FLAG_HIGH_PRIORITY,
    FLAG_RECOVERY_ADD, FLAG_STRIDED_READ,
};
use crate::storage::RangeLimits;

/// The fixed part of a batch-read response frame, its 4-byte length prefix included; Java
/// counts it against `maxSize`.
const BATCH_RESPONSE_FIXED_LEN: usize = 4 + RESPONSE_HEADER_LEN + 8;

fn send(outbox: &Outbox, r: Response, timed: Timed) {
    outbox.send(Reply::V2(r), timed);
}

/// Admits a request against the connection's in-flight limit (it counts until its response is
/// written, rejected or not) and checks its protocol version: the status to answer it with at
/// once, if it may not run.
fn admit(outbox: &Outbox, slot: Slot, header: PacketHeader) -> Result<(), Status> {
    let admitted = outbox.admit(slot);
    if !header.version_is_compatible() {
        return Err(Status::BadVersion);
    }
    if !admitted {
        return Err(Status::TooManyRequests);
    }
    Ok(())
}

/// Decodes one V2 frame that arrived at `received` (None with metrics off) and runs it. A frame
/// that does not decode closes the connection.
pub(super) fn handle_frame(
    body: Bytes,
    outbox: &Outbox,
    received: Option<Instant>,
) -> Result<(), ProtocolError> {
    let req = decode_request(body)?;
    handle(req, outbox, received);
    Ok(())
}

/// A V2 frame of a connection not authenticated yet, as BookKeeper's AuthHandler answers it:
/// ADD and READ get EUA, an AUTH of the `sasl` plugin (SASL on) is the next step of the
/// exchange (answered with the bookie's token; a failed exchange closes the connection, as
/// BookKeeper's legacy AUTH callback does), an AUTH for `BookieAuthZFactory` is taken
/// unanswered, anything else (a frame that does not decode too) closes the connection.
pub(super) fn unauthenticated(
    body: Bytes,
    outbox: &Outbox,
    sasl: &mut crate::sasl::ServerExchange,
) -> Result<(), ProtocolError> {
    let eua = Status::Unauthorized.v2_code();
    let request = decode_request(body)?;
    // An ADD or READ answer gives back an in-flight slot once written: take the slot it gives
    // back, whatever the limit (the answer is EUA either way).
    match &request {
        Request::Add(_) => {
            outbox.admit(Slot::Add);
        }
        Request::Read(_) => {
            outbox.admit(Slot::Read);
        }
        _ => {}
    }
    match request {
        Request::Add(add) => send(
            outbox,
            Response::Add {
                version: add.header.version,
                rc: eua,
                ledger: add.ledger,
                entry: add.entry,
            },
            Timed::default(),
        ),
        Request::Read(read) => send(
            outbox,
            Response::Read {
                version: read.header.version,
                rc: eua,
                ledger: read.ledger,
                entry: read.entry,
                body: Bytes::new(),
            },
            Timed::default(),
        ),
        Request::Auth(auth) if super::auth::is_sasl(outbox, &auth.message.plugin_name) => {
            let answer = super::auth::sasl_step(sasl, outbox, &auth.message.payload)
                .map_err(ProtocolError::AuthenticationFailed)?;
            send(
                outbox,
                Response::Auth {
                    version: auth.header.version,
                    message: AuthMessage {
                        plugin_name: auth.message.plugin_name,
                        payload: Bytes::from(answer),
                    },
                },
                Timed::default(),
            );
        }
        Request::Auth(auth) if auth.message.plugin_name == super::auth::AUTHZ_PLUGIN => {}
        other => {
            return Err(ProtocolError::Unauthenticated(other.header().opcode));
        }
    }
    Ok(())
}

fn handle(req: Request, outbox: &Outbox, received: Option<Instant>) {
    match req {
        Request::Add(add) => add_entry(add, outbox, received),
        Request::Read(read) => read_entry(read, outbox, received),
        Request::BatchRead(batch) => batch_read(batch, outbox, received),
        Request::Auth(auth) => answer_auth(&auth, outbox),
    }
}

fn add_entry(req: AddRequest, outbox: &Outbox, received: Option<Instant>) {
    let state = outbox.state();
    let AddRequest {
        header,
        master_key,
        ledger,
        entry,
        body,
    } = req;
    let timed = Timed::at(received, false);
    let reply = move |status: Status| Response::Add {
        version: header.version,
        rc: status.v2_code(),
        ledger,
        entry,
    };
    if let Err(status) = admit(outbox, Slot::Add, header) {
        return send(outbox, reply(status), timed);
    }
    if state.refuses_add(header.has(FLAG_HIGH_PRIORITY)) {
        return send(outbox, reply(Status::ReadOnly), timed);
    }
    if ledger < 0 || entry < 0 {
        return send(outbox, reply(Status::BadRequest), timed);
    }
    let add = Add {
        ledger: ledger as u64,
        entry: entry as u64,
        master_key,
        body,
        recovery: header.has(FLAG_RECOVERY_ADD),
        // V2 carries no write flags (BookKeeper's client refuses DEFERRED_SYNC over V2).
        deferred_sync: false,
    };
    dispatch::add_entry(state, add, || {
        let outbox = outbox.clone();
        Box::new(move |status| {
            let stats = &outbox.state().stats;
            stats
                .add_entry
                .record_since(status == Status::Ok, timed.received);
            send(&outbox, reply(status), timed)
        })
    });
}

fn read_entry(req: ReadRequest, outbox: &Outbox, received: Option<Instant>) {
    let state = outbox.state();
    let ReadRequest {
        header,
        ledger,
        entry,
        master_key,
    } = req;
    let timed = Timed::at(received, header.has(FLAG_DO_FENCING));
    let reply = move |r: Result<Bytes, Status>| {
        let (status, body) = match r {
            Ok(body) => (Status::Ok, body),
            Err(status) => (status, Bytes::new()),
        };
        Response::Read {
            version: header.version,
            rc: status.v2_code(),
            ledger,
            entry,
            body,
        }
    };
    if let Err(status) = admit(outbox, Slot::Read, header) {
        return send(outbox, reply(Err(status)), timed);
    }
    let storage = state.storage.clone();
    let out = outbox.clone();
    dispatch::run_read(
        outbox,
        ledger,
        fencing(header, master_key),
        move || dispatch::read_entry(&storage, ledger, entry),
        Box::new(move |r| {
            let stats = &out.state().stats;
            stats.read_entry.record_since(r.is_ok(), timed.received);
            if entry == -1 && matches!(r, Err(Status::NoEntry)) {
                stats.read_last_entry_noentry_error.inc();
            }
            send(&out, reply(r), timed)
        }),
    );
}

fn batch_read(req: BatchReadRequest, outbox: &Outbox, received: Option<Instant>) {
    let state = outbox.state();
    let header = req.header;
    let (ledger, start_entry, request_id) = (req.ledger, req.start_entry, req.request_id);
    let timed = Timed::at(received, header.has(FLAG_DO_FENCING));
    // The pybkx stride extension is acknowledged in the response header, so a client knows its
    // entries are `start + i * stride` (a Java bookie answers with flags 0).
    let flags = if req.stride.is_some() {
        FLAG_STRIDED_READ
    } else {
        0
    };
    let reply = move |r: Result<Vec<Bytes>, Status>| {
        let (status, entries) = match r {
            Ok(entries) => (Status::Ok, entries),
            Err(status) => (status, Vec::new()),
        };
        Response::BatchRead {
            version: header.version,
            flags,
            rc: status.v2_code(),
            ledger,
            start_entry,
            request_id,
            entries,
        }
    };
    if let Err(status) = admit(outbox, Slot::Read, header) {
        return send(outbox, reply(Err(status)), timed);
    }
    let Some(limits) = range_limits(&req, state.cfg.max_batch_read_size) else {
        return send(outbox, reply(Err(Status::BadRequest)), timed);
    };
    let storage = state.storage.clone();
    let out = outbox.clone();
    dispatch::run_read(
        outbox,
        ledger,
        fencing(header, req.master_key),
        move || dispatch::read_range(&storage, ledger, start_entry, limits),
        Box::new(move |r| {
            let stats = &out.state().stats;
            stats.read_entry.record_since(r.is_ok(), timed.received);
            send(&out, reply(r), timed)
        }),
    );
}

/// What a batch read may return: BP-62's count and size (the size capped by the bookie's
/// `maxBatchReadSize`, Java counting the response's fixed part against it) and the stride.
/// None for a stride that is not positive.
fn range_limits(req: &BatchReadRequest, max_batch_read_size: usize) -> Option<RangeLimits> {
    let stride = match req.stride.map(u64::try_from) {
        None => 1,
        Some(Ok(s)) if s > 0 => s,
        Some(_) => return None,
    };
    let max_size = usize::try_from(req.max_size)
        .unwrap_or(0)
        .min(max_batch_read_size);
    Some(RangeLimits {
        max_count: usize::try_from(req.max_count).unwrap_or(0),
        max_bytes: max_size.saturating_sub(BATCH_RESPONSE_FIXED_LEN),
        per_entry_overhead: 4,
        stride,
    })
}

fn answer_auth(req: &AuthRequest, outbox: &Outbox) {
    outbox.state().stats.auth_requests.inc();
    log::debug!(
        "AUTH from plugin {:?}: authentication is disabled",
        req.message.plugin_name
    );
    send(
        outbox,
        // The Java bookie's auth-disabled reply always carries the current version.
        Response::Auth {
            version: CURRENT_PROTOCOL_VERSION,
            message: AuthMessage {
                plugin_name: AUTH_DISABLED_PLUGIN.to_string(),
                payload: Bytes::new(),
            },
        },
        Timed::default(),
    );
}

/// `Some(key)` for a fencing read (the key may be missing: answered EUA), None otherwise.
fn fencing(header: PacketHeader, master_key: Option<Bytes>) -> Option<Option<Bytes>> {
    header.has(FLAG_DO_FENCING).then_some(master_key)
}
