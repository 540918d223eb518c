//! V3 requests on the server: decode the protobuf request, admit it (in-flight limits,
//! read-only), hand it to the version-neutral [`dispatch`](super::dispatch) or the storage's
//! per-ledger state, and answer with a V3 response echoing the request's operation and
//! transaction id. Every operation the 4.17 bookie serves over V3 is answered here.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::dispatch::{self, status_of, Add};
use super::outbox::{Outbox, Reply, Slot, Timed};
use crate::protocol::v3::WRITE_FLAG_DEFERRED_SYNC;
use crate::protocol::v3::{
    decode_request, pb, response_header, BkPacketHeader, OperationType, Response,
};
use crate::protocol::{Status, AUTH_DISABLED_PLUGIN};
use crate::storage::LAST_ENTRY;

/// The longest a long-poll read waits, whatever the request asks (BookKeeper bounds it by the
/// client's timeout; a bound here keeps a misbehaving client from parking requests forever).
const MAX_LONG_POLL: Duration = Duration::from_secs(120);
/// How often a long-poll read looks at the ledger's LAC while it waits, besides when an add
/// completes.
const LONG_POLL_TICK: Duration = Duration::from_millis(50);

fn send(outbox: &Outbox, r: Response, timed: Timed) {
    outbox.send(Reply::V3(r), timed);
}

fn msg(r: pb::Response) -> Response {
    Response::Message(Box::new(r))
}

/// A response carrying only the header and the status (unknown or malformed operations).
fn bare(header: &BkPacketHeader, status: Status) -> Response {
    msg(pb::Response {
        header: response_header(header),
        status: status.v3_code() as i32,
        ..Default::default()
    })
}

/// Runs one frame that arrived at `received` (None with metrics off) as a V3 request, if it
/// parses as one; else gives the frame back (a V2 frame's first byte is never a valid
/// protobuf tag), for the connection to read as V2 from then on, as the Java bookie does.
pub(super) fn try_handle_frame(
    body: Bytes,
    outbox: &Outbox,
    received: Option<Instant>,
) -> Result<(), Bytes> {
    if !crate::protocol::looks_like_v3(&body) {
        return Err(body);
    }
    match decode_request(body.clone()) {
        Ok(req) => {
            handle(req, outbox, received);
            Ok(())
        }
        Err(_) => Err(body),
    }
}

fn handle(req: pb::Request, outbox: &Outbox, received: Option<Instant>) {
    let header = req.header;
    let op = OperationType::try_from(header.operation).ok();
    match op {
        // A request without its operation's message is served with the message's defaults,
        // as protobuf-java's getters give them to the Java bookie.
        Some(OperationType::AddEntry) => add_entry(
            header,
            req.add_request.unwrap_or_default(),
            outbox,
            received,
        ),
        Some(OperationType::ReadEntry) => read_entry(
            header,
            req.read_request.unwrap_or_default(),
            outbox,
            received,
        ),
        Some(OperationType::ReadLac) => {
            let ledger = req.read_lac_request.unwrap_or_default().ledger_id;
            read_lac(header, ledger, outbox)
        }
        Some(OperationType::WriteLac) => {
            write_lac(header, req.write_lac_request.unwrap_or_default(), outbox)
        }
        Some(OperationType::GetBookieInfo) => {
            bookie_info(header, req.get_bookie_info_request, outbox)
        }
        Some(OperationType::ForceLedger) => {
            let ledger = req.force_ledger_request.unwrap_or_default().ledger_id;
            force_ledger(header, ledger, outbox)
        }
        Some(OperationType::GetListOfEntriesOfLedger) => {
            let r = req.get_list_of_entries_of_ledger_request;
            list_entries(header, r.unwrap_or_default().ledger_id, outbox)
        }
        Some(OperationType::Auth) => {
            outbox.state().stats.auth_requests.inc();
            let r = pb::Response {
                header: response_header(&header),
                status: Status::Ok.v3_code() as i32,
                auth_response: Some(pb::AuthMessage {
                    auth_plugin_name: AUTH_DISABLED_PLUGIN.to_string(),
                    payload: Bytes::new(),
                }),
                ..Default::default()
            };
            send(outbox, msg(r), Timed::default());
        }
        Some(OperationType::StartTls) => start_tls(&header, outbox),
        // RANGE_*, BATCH_READ_ENTRY over V3, unknown operations.
        _ => send(outbox, bare(&header, Status::BadRequest), Timed::default()),
    }
}

/// As BookKeeper's processStartTLSRequestV3: without TLS configured EBADREQ; with it EOK,
/// written in plaintext, then the server side of the handshake on the same socket (the
/// connection does it once the answer is out). A connection already in TLS gets EBADREQ.
fn start_tls(header: &BkPacketHeader, outbox: &Outbox) {
    use std::sync::atomic::Ordering;
    let usage = &outbox.usage;
    if outbox.state().cfg.tls.is_none() || usage.in_tls.load(Ordering::Acquire) {
        log::error!("START_TLS requested, but TLS is not configured (or already on)");
        send(outbox, bare(header, Status::BadRequest), Timed::default());
        return;
    }
    usage.start_tls.store(true, Ordering::Release);
    *usage.start_tls_header.lock() = Some(*header);
    let answer = msg(pb::Response {
        header: response_header(header),
        status: Status::Ok.v3_code() as i32,
        start_tls_response: Some(pb::StartTlsResponse::default()),
        ..Default::default()
    });
    outbox.send(Reply::StartTls(answer), Timed::default());
}

/// What became of a V3 frame of a connection not authenticated yet.
pub(super) enum Gated {
    /// START_TLS: to be served.
    Serve(Bytes),
    /// Answered (EUA, the next SASL token) or taken unanswered.
    Answered,
    /// The client's SASL exchange failed: answered EUA, the connection closes.
    Refused(String),
}

/// A frame of a connection not authenticated yet, as BookKeeper's AuthHandler answers it if it
/// is V3: START_TLS is given back to be served; an AUTH of the `sasl` plugin (SASL on) is the
/// next step of the exchange, answered with the bookie's token (EUA and the connection closes
/// when the exchange fails); an AUTH for `BookieAuthZFactory` is taken and never answered;
/// anything else is answered EUA. Err gives back a frame that is not V3.
pub(super) fn unauthenticated(
    body: Bytes,
    outbox: &Outbox,
    sasl: &mut crate::sasl::ServerExchange,
) -> Result<Gated, Bytes> {
    if !crate::protocol::looks_like_v3(&body) {
        return Err(body);
    }
    let Ok(req) = decode_request(body.clone()) else {
        return Err(body);
    };
    let op = OperationType::try_from(req.header.operation).ok();
    match (op, req.auth_request) {
        (Some(OperationType::StartTls), _) if req.start_tls_request.is_some() => {
            Ok(Gated::Serve(body))
        }
        (Some(OperationType::Auth), Some(auth))
            if super::auth::is_sasl(outbox, &auth.auth_plugin_name) =>
        {
            Ok(sasl_step(&req.header, &auth.payload, outbox, sasl))
        }
        (Some(OperationType::Auth), Some(auth))
            if auth.auth_plugin_name == super::auth::AUTHZ_PLUGIN =>
        {
            Ok(Gated::Answered)
        }
        _ => {
            send(
                outbox,
                bare(&req.header, Status::Unauthorized),
                Timed::default(),
            );
            Ok(Gated::Answered)
        }
    }
}

/// One V3 AUTH of the SASL exchange: EOK with the bookie's token (as BookKeeper's
/// AuthResponseCallback), or EUA and a refusal.
fn sasl_step(
    header: &BkPacketHeader,
    token: &[u8],
    outbox: &Outbox,
    sasl: &mut crate::sasl::ServerExchange,
) -> Gated {
    match super::auth::sasl_step(sasl, outbox, token) {
        Ok(answer) => {
            let r = pb::Response {
                header: response_header(header),
                status: Status::Ok.v3_code() as i32,
                auth_response: Some(pb::AuthMessage {
                    auth_plugin_name: crate::sasl::PLUGIN.to_string(),
                    payload: Bytes::from(answer),
                }),
                ..Default::default()
            };
            send(outbox, msg(r), Timed::default());
            Gated::Answered
        }
        Err(why) => {
            send(outbox, bare(header, Status::Unauthorized), Timed::default());
            Gated::Refused(why)
        }
    }
}

/// The answer to a START_TLS whose handshake succeeded but whose client is not authorized:
/// EIO with the START_TLS header, sent inside TLS, as BookKeeper's bookie sends it.
pub(super) fn refuse_after_start_tls(header: &BkPacketHeader, outbox: &Outbox) {
    send(outbox, bare(header, Status::Io), Timed::default());
}

fn add_entry(
    header: BkPacketHeader,
    add: pb::AddRequest,
    outbox: &Outbox,
    received: Option<Instant>,
) {
    let state = outbox.state();
    let timed = Timed::at(received, false);
    let (ledger, entry) = (add.ledger_id, add.entry_id);
    let rh = response_header(&header);
    let reply = move |status: Status| {
        msg(pb::Response {
            header: rh,
            status: status.v3_code() as i32,
            add_response: Some(pb::AddResponse {
                status: status.v3_code() as i32,
                ledger_id: ledger,
                entry_id: entry,
            }),
            ..Default::default()
        })
    };
    if !outbox.admit(Slot::Add) {
        return send(outbox, reply(Status::TooManyRequests), timed);
    }
    let high_priority = header.priority.unwrap_or(0) > 0;
    if state.refuses_add(high_priority) {
        return send(outbox, reply(Status::ReadOnly), timed);
    }
    if ledger < 0 || entry < 0 {
        return send(outbox, reply(Status::BadRequest), timed);
    }
    let recovery = add.flag == Some(pb::add_request::Flag::RecoveryAdd as i32);
    // As BookKeeper's `WriteFlag.getWriteFlags`: only bit 0 (DEFERRED_SYNC) means anything;
    // other bits are ignored, not refused.
    let deferred_sync = add.write_flags.unwrap_or(0) & WRITE_FLAG_DEFERRED_SYNC != 0;
    let add = Add {
        ledger: ledger as u64,
        entry: entry as u64,
        master_key: add.master_key,
        body: add.body,
        recovery,
        deferred_sync,
    };
    dispatch::add_entry(state, add, || {
        let outbox = outbox.clone();
        Box::new(move |status| {
            outbox
                .state()
                .stats
                .add_entry
                .record_since(status == Status::Ok, timed.received);
            send(&outbox, reply(status), timed)
        })
    });
}

fn read_entry(
    header: BkPacketHeader,
    read: pb::ReadRequest,
    outbox: &Outbox,
    received: Option<Instant>,
) {
    let state = outbox.state();
    let fence = read.flag == Some(pb::read_request::Flag::FenceLedger as i32);
    let piggyback = read.flag == Some(pb::read_request::Flag::EntryPiggyback as i32);
    let timed = Timed::at(received, fence);
    let (ledger, entry) = (read.ledger_id, read.entry_id);
    let rh = response_header(&header);
    let failed = {
        move |status: Status| Response::Read {
            header: rh,
            status,
            ledger,
            entry,
            body: Bytes::new(),
            max_lac: None,
        }
    };
    if !outbox.admit(Slot::Read) {
        return send(outbox, failed(Status::TooManyRequests), timed);
    }
    if let Some(previous) = read.previous_lac {
        let wait =
            Duration::from_millis(read.time_out.unwrap_or(0).max(0) as u64).min(MAX_LONG_POLL);
        return long_poll(rh, ledger, entry, previous, piggyback, wait, outbox, timed);
    }
    let storage = state.storage.clone();
    let out = outbox.clone();
    dispatch::run_read(
        outbox,
        ledger,
        fence.then_some(read.master_key),
        move || {
            let body = dispatch::read_entry(&storage, ledger, entry)?;
            // A fencing read answers the entry alone; a plain one adds the bookie's LAC.
            let lac = if fence {
                None
            } else {
                storage.last_add_confirmed(ledger as u64).ok()
            };
            Ok((body, lac))
        },
        Box::new(move |r: Result<(Bytes, Option<i64>), Status>| {
            let stats = &out.state().stats;
            stats.read_entry.record_since(r.is_ok(), timed.received);
            if entry == -1 && matches!(r, Err(Status::NoEntry)) {
                stats.read_last_entry_noentry_error.inc();
            }
            let response = match r {
                Ok((body, max_lac)) => Response::Read {
                    header: rh,
                    status: Status::Ok,
                    ledger,
                    entry,
                    body,
                    max_lac,
                },
                Err(status) => failed(status),
            };
            send(&out, response, timed)
        }),
    );
}

/// A long-poll read (BookKeeper's `readLacLongPoll`): answered once the ledger's LAC on this
/// bookie passes `previous`, or when `wait` ends, with the LAC then known and (with entry
/// piggy-back) the entry after `previous`.
#[allow(clippy::too_many_arguments)]
fn long_poll(
    rh: BkPacketHeader,
    ledger: i64,
    entry: i64,
    previous: i64,
    piggyback: bool,
    wait: Duration,
    outbox: &Outbox,
    timed: Timed,
) {
    if ledger < 0 || (piggyback && entry != -1) {
        let status = if ledger < 0 {
            Status::NoLedger
        } else {
            Status::BadRequest
        };
        return send(
            outbox,
            long_poll_answer(rh, ledger, entry, Err(status)),
            timed,
        );
    }
    let out = outbox.clone();
    tokio::spawn(async move {
        let storage = out.state().storage.clone();
        let deadline = tokio::time::Instant::now() + wait;
        let waiter = super::state::LacWaiter::new(&out.state().lac_watch);
        let known = loop {
            // Registered before the LAC is read, so that an add completing in between wakes it.
            let woken = waiter.notify().notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            // Past the deadline or stopping: answer with what is known now.
            let now = waiter.stopping() || tokio::time::Instant::now() >= deadline;
            match storage.last_add_confirmed(ledger as u64) {
                Ok(lac) if lac > previous || now => break Ok(lac),
                Err(e) if !matches!(status_of(&e), Status::NoEntry) => break Err(status_of(&e)),
                Err(_) if now => break Ok(-1),
                _ => {}
            }
            let tick = (tokio::time::Instant::now() + LONG_POLL_TICK).min(deadline);
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep_until(tick) => {}
            }
        };
        drop(waiter);
        let answer = match known {
            Err(status) => Err(status),
            Ok(lac) if piggyback && lac > previous => {
                let next = previous + 1;
                match dispatch::read_entry(&storage, ledger, next) {
                    Ok(body) => Ok((next, body, lac)),
                    // Best effort, as BookKeeper's: a striped ledger's next entry may be elsewhere.
                    Err(_) => Ok((entry, Bytes::new(), lac)),
                }
            }
            Ok(lac) if piggyback => Ok((entry, Bytes::new(), lac)),
            Ok(lac) => dispatch::read_entry(&storage, ledger, entry).map(|b| (entry, b, lac)),
        };
        let stats = &out.state().stats;
        stats
            .read_entry
            .record_since(answer.is_ok(), timed.received);
        send(&out, long_poll_answer(rh, ledger, entry, answer), timed);
    });
}

fn long_poll_answer(
    rh: BkPacketHeader,
    ledger: i64,
    entry: i64,
    answer: Result<(i64, Bytes, i64), Status>,
) -> Response {
    match answer {
        Ok((entry, body, lac)) => Response::Read {
            header: rh,
            status: Status::Ok,
            ledger,
            entry,
            body,
            max_lac: Some(lac),
        },
        Err(status) => Response::Read {
            header: rh,
            status,
            ledger,
            entry,
            body: Bytes::new(),
            max_lac: None,
        },
    }
}

fn read_lac(header: BkPacketHeader, ledger: i64, outbox: &Outbox) {
    let storage = &outbox.state().storage;
    let mut r = pb::ReadLacResponse {
        status: Status::Ok.v3_code() as i32,
        ledger_id: ledger,
        lac_body: None,
        last_entry_body: None,
    };
    // BookKeeper answers ENOENTRY for a ledger it does not know, as for one without entries.
    let status = if ledger < 0 {
        Status::NoEntry
    } else {
        match storage.explicit_lac(ledger as u64) {
            Err(_) => Status::NoEntry,
            Ok(explicit) => {
                r.lac_body = explicit;
                match storage.read_entry(ledger as u64, LAST_ENTRY) {
                    Ok(last) => {
                        r.last_entry_body = Some(last);
                        Status::Ok
                    }
                    Err(_) if r.lac_body.is_some() => Status::Ok,
                    Err(e) => status_of(&e),
                }
            }
        }
    };
    r.status = status.v3_code() as i32;
    let response = pb::Response {
        header: response_header(&header),
        status: status.v3_code() as i32,
        read_lac_response: Some(r),
        ..Default::default()
    };
    send(outbox, msg(response), Timed::default());
}

fn write_lac(header: BkPacketHeader, req: pb::WriteLacRequest, outbox: &Outbox) {
    let state = outbox.state();
    let ledger = req.ledger_id;
    let rh = response_header(&header);
    let reply = move |status: Status| {
        msg(pb::Response {
            header: rh,
            status: status.v3_code() as i32,
            write_lac_response: Some(pb::WriteLacResponse {
                status: status.v3_code() as i32,
                ledger_id: ledger,
            }),
            ..Default::default()
        })
    };
    if state.read_only.load(std::sync::atomic::Ordering::Relaxed) {
        return send(outbox, reply(Status::ReadOnly), Timed::default());
    }
    // The body is the writer's packaged LAC (ledger id, LAC, digest): BookKeeper reads the LAC
    // out of it and answers EBADREQ when it cannot.
    if ledger < 0 || req.body.len() < 16 {
        return send(outbox, reply(Status::BadRequest), Timed::default());
    }
    let out = outbox.clone();
    let reply2 = reply;
    let done = Box::new(move |r: crate::error::Result<()>| {
        let status = r.map_or_else(|e| status_of(&e), |_| Status::Ok);
        send(&out, reply2(status), Timed::default());
    });
    if let Err(e) = state
        .storage
        .set_explicit_lac(ledger as u64, &req.master_key, req.body, done)
    {
        send(outbox, reply(status_of(&e)), Timed::default());
    }
}

fn bookie_info(header: BkPacketHeader, req: Option<pb::GetBookieInfoRequest>, outbox: &Outbox) {
    let requested = req.and_then(|r| r.requested).unwrap_or(0);
    let total_wanted =
        requested & pb::get_bookie_info_request::Flags::TotalDiskCapacity as i64 != 0;
    let free_wanted = requested & pb::get_bookie_info_request::Flags::FreeDiskSpace as i64 != 0;
    let (status, usage) = match outbox.state().storage.disk_usage() {
        Ok(u) => (Status::Ok, Some(u)),
        Err(e) => {
            log::warn!("GET_BOOKIE_INFO: {e}");
            (Status::Io, None)
        }
    };
    let info = pb::GetBookieInfoResponse {
        status: status.v3_code() as i32,
        total_disk_capacity: usage.filter(|_| total_wanted).map(|u| u.total_bytes as i64),
        free_disk_space: usage.filter(|_| free_wanted).map(|u| u.free_bytes as i64),
    };
    let response = pb::Response {
        header: response_header(&header),
        status: status.v3_code() as i32,
        get_bookie_info_response: Some(info),
        ..Default::default()
    };
    send(outbox, msg(response), Timed::default());
}

/// FORCE_LEDGER: answered once every entry of the ledger this bookie accepted before the request
/// is durable (a force through the ledger's journal, completed after the covering sync), with
/// BookKeeper's statuses: EOK, EIO for a failed sync, EBADREQ for a request it cannot take.
fn force_ledger(header: BkPacketHeader, ledger: i64, outbox: &Outbox) {
    let received = crate::metrics::start();
    let rh = response_header(&header);
    let reply = move |status: Status| {
        msg(pb::Response {
            header: rh,
            status: status.v3_code() as i32,
            force_ledger_response: Some(pb::ForceLedgerResponse {
                status: status.v3_code() as i32,
                ledger_id: ledger,
            }),
            ..Default::default()
        })
    };
    if ledger < 0 {
        return send(outbox, reply(Status::BadRequest), Timed::default());
    }
    let answer = outbox.clone();
    let done: crate::storage::journal::Completion = Box::new(move |synced| {
        let status = match synced {
            Ok(()) => Status::Ok,
            Err(e) => {
                log::warn!("FORCE_LEDGER of ledger {ledger}: {e}");
                Status::Io
            }
        };
        let stats = &answer.state().stats;
        stats
            .force_ledger
            .record_since(status == Status::Ok, received);
        send(&answer, reply(status), Timed::default());
    });
    // Waits only while the journal queue is full (`journalQueueSize`), as an add does.
    let queued =
        tokio::task::block_in_place(|| outbox.state().storage.force_ledger(ledger as u64, done));
    if let Err(e) = queued {
        log::warn!("FORCE_LEDGER of ledger {ledger} refused: {e}");
        send(outbox, reply(status_of(&e)), Timed::default());
    }
}

fn list_entries(header: BkPacketHeader, ledger: i64, outbox: &Outbox) {
    let storage = &outbox.state().storage;
    let (status, bitmap) = if ledger < 0 {
        (Status::NoLedger, None)
    } else {
        match storage.entry_ids(ledger as u64) {
            Ok(ids) => (Status::Ok, Some(Bytes::from(availability_encoding(&ids)))),
            Err(e) => (status_of(&e), None),
        }
    };
    let response = pb::Response {
        header: response_header(&header),
        status: status.v3_code() as i32,
        get_list_of_entries_of_ledger_response: Some(pb::GetListOfEntriesOfLedgerResponse {
            status: status.v3_code() as i32,
            ledger_id: ledger,
            availability_of_entries_of_ledger: bitmap,
        }),
        ..Default::default()
    };
    send(outbox, msg(response), Timed::default());
}

/// BookKeeper's `AvailabilityOfEntriesOfLedger` bytes for ascending entry ids: a 64-byte
/// header (`i32` format version 0, `i32` number of groups, zeros), then per sequence group
/// 24 bytes: first sequence start, last sequence start (`i64`), sequence size, period (`i32`),
/// big-endian. Runs of consecutive ids are sequences; a run joins the open group when it has
/// the group's size and starts one period after the group's last start. (BookKeeper's group
/// starts with period 0, so in practice every run opens a group; the same rule is kept here so
/// that the bytes stay equal.)
pub(crate) fn availability_encoding(ids: &[u64]) -> Vec<u8> {
    const HEADER_LEN: usize = 64;
    struct Group {
        first: i64,
        last: i64,
        size: i32,
        period: i32,
    }
    let mut groups: Vec<Group> = Vec::new();
    let mut open: Option<Group> = None;
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i] as i64;
        let mut size = 1usize;
        while i + size < ids.len() && ids[i + size] == ids[i] + size as u64 {
            size += 1;
        }
        i += size;
        let size = size.min(i32::MAX as usize) as i32;
        open = Some(match open.take() {
            None => Group {
                first: start,
                last: start,
                size,
                period: 0,
            },
            Some(mut g) if g.size == size && start - g.last == i64::from(g.period) => {
                g.last = start;
                if g.period == 0 {
                    g.period = (g.last - g.first) as i32;
                }
                g
            }
            Some(g) => {
                groups.push(g);
                Group {
                    first: start,
                    last: start,
                    size,
                    period: 0,
                }
            }
        });
    }
    groups.extend(open);
    let mut out = vec![0u8; HEADER_LEN];
    out[4..8].copy_from_slice(&(groups.len() as i32).to_be_bytes());
    for g in &groups {
        out.extend_from_slice(&g.first.to_be_bytes());
        out.extend_from_slice(&g.last.to_be_bytes());
        out.extend_from_slice(&g.size.to_be_bytes());
        out.extend_from_slice(&g.period.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod availability_tests {
    use super::availability_encoding;
    use crate::protocol::v3::availability_runs;
    use proptest::prelude::*;

    #[test]
    fn no_entries_and_runs_read_back() {
        assert_eq!(
            availability_runs(&availability_encoding(&[])).unwrap(),
            vec![]
        );
        let ids = [0, 1, 2, 5, 7, 8, 100];
        assert_eq!(
            availability_runs(&availability_encoding(&ids)).unwrap(),
            vec![(0, 2), (5, 5), (7, 8), (100, 100)]
        );
    }

    proptest! {
        #[test]
        fn the_client_reads_the_entries_the_bookie_encodes(
            ids in proptest::collection::btree_set(0u64..5_000, 0..300)
        ) {
            let ids: Vec<u64> = ids.into_iter().collect();
            let runs = availability_runs(&availability_encoding(&ids)).unwrap();
            let back: Vec<u64> = runs
                .iter()
                .flat_map(|&(a, b)| (a as u64)..=(b as u64))
                .collect();
            prop_assert_eq!(back, ids);
        }
    }
}
