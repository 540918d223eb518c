//! The version-neutral operations of a bookie: add, read, batch read and fencing reads run
//! against the ledger storage, their outcomes as [`Status`]es. It never decodes or encodes a
//! frame; the protocol modules turn requests into these calls and outcomes into responses.

use bytes::Bytes;
use tokio::sync::oneshot;

use super::outbox::Outbox;
use super::state::ServerState;
use crate::done::Done;
use crate::error::StorageError;
use crate::protocol::Status;
use crate::storage::{LedgerStorage, RangeLimits, LAST_ENTRY};

/// The status a storage error is answered with, as the Java bookie answers it.
pub(super) fn status_of(e: &StorageError) -> Status {
    match e {
        StorageError::NoLedger(_) => Status::NoLedger,
        StorageError::NoEntry { .. } => Status::NoEntry,
        StorageError::Fenced(_) => Status::Fenced,
        StorageError::Unauthorized(_) => Status::Unauthorized,
        StorageError::QueueFull => Status::TooManyRequests,
        StorageError::InvalidArgument(_) => Status::BadRequest,
        StorageError::Io { .. }
        | StorageError::Corruption(_)
        | StorageError::Locked(_)
        | StorageError::Closed => Status::Io,
    }
}

/// An add, already admitted: ids non-negative, bookie writable (or the add has priority).
pub(super) struct Add {
    pub ledger: u64,
    pub entry: u64,
    pub master_key: Bytes,
    pub body: Bytes,
    pub recovery: bool,
    /// BookKeeper's `WriteFlag.DEFERRED_SYNC`: acknowledged once journalled, before the sync
    /// (ignored for recovery adds, as BookKeeper's `recoveryAddEntry` does).
    pub deferred_sync: bool,
}

/// Journals the entry; a completion from `reply` gets the outcome once it is durable (or
/// failed). `reply` makes one completion per attempt: a full journal queue drops the first.
pub(super) fn add_entry(state: &ServerState, add: Add, reply: impl Fn() -> Done<Status>) {
    let Add {
        ledger,
        entry,
        master_key,
        body,
        recovery,
        deferred_sync,
    } = add;
    let deferred_sync = deferred_sync && !recovery;
    let done = |reply: Done<Status>| -> crate::storage::journal::Completion {
        let watch = state.lac_watch.if_waited();
        Box::new(move |r| {
            let ok = r.is_ok();
            reply(r.map_or_else(|e| status_of(&e), |_| Status::Ok));
            if let (true, Some(w)) = (ok, watch) {
                w.advanced();
            }
        })
    };
    let storage = &state.storage;
    let submit = |blocking: bool, completion| {
        if deferred_sync {
            storage.add_entry_deferred_sync(
                ledger,
                entry,
                &master_key,
                body.clone(),
                blocking,
                completion,
            )
        } else if blocking {
            storage.add_entry(
                ledger,
                entry,
                &master_key,
                body.clone(),
                recovery,
                completion,
            )
        } else {
            storage.try_add_entry(
                ledger,
                entry,
                &master_key,
                body.clone(),
                recovery,
                completion,
            )
        }
    };
    let mut result = submit(false, done(reply()));
    if let Err(StorageError::QueueFull) = result {
        // The journal is saturated: wait for room on this thread, which stops this connection
        // from reading more requests (TCP backpressure) while other tasks move elsewhere.
        let stats = &state.stats;
        stats.add_entry_blocked.inc();
        let blocked = crate::metrics::start();
        result = tokio::task::block_in_place(|| submit(true, done(reply())));
        stats.add_entry_blocked.dec();
        stats
            .add_entry_blocked_wait
            .record_since(result.is_ok(), blocked);
    }
    if let Err(err) = result {
        reply()(status_of(&err));
    }
}

/// Reads one entry (`-1`: the last one the bookie holds).
pub(super) fn read_entry(
    storage: &LedgerStorage,
    ledger: i64,
    entry: i64,
) -> Result<Bytes, Status> {
    if ledger < 0 {
        return Err(Status::NoLedger);
    }
    let entry = match entry {
        -1 => LAST_ENTRY,
        e if e < 0 => return Err(Status::NoEntry),
        e => e as u64,
    };
    storage
        .read_entry(ledger as u64, entry)
        .map_err(|e| status_of(&e))
}

/// Reads consecutive entries as BATCH_READ_ENTRY does (BP-62's loose limits).
pub(super) fn read_range(
    storage: &LedgerStorage,
    ledger: i64,
    start_entry: i64,
    limits: RangeLimits,
) -> Result<Vec<Bytes>, Status> {
    if ledger < 0 {
        return Err(Status::NoLedger);
    }
    if start_entry < 0 {
        return Err(Status::NoEntry);
    }
    storage
        .read_range(ledger as u64, start_entry as u64, limits)
        .map_err(|e| status_of(&e))
}

/// Runs a read of the connection `outbox`: on the read pool if the server has one, else
/// inline. A fencing read fences first and reads once the fence is durable (EIO if it cannot
/// be made durable), as the Java bookie answers only then.
pub(super) fn run_read<T: Send + 'static>(
    outbox: &Outbox,
    ledger: i64,
    fencing: Option<Option<Bytes>>,
    read: impl FnOnce() -> Result<T, Status> + Send + 'static,
    reply: Done<Result<T, Status>>,
) {
    let state = outbox.state();
    let Some(master_key) = fencing else {
        match &state.reads {
            Some(pool) => pool.submit(&outbox.usage.waiting_reads, Box::new(move || reply(read()))),
            None => reply(read()),
        }
        return;
    };
    let Some(key) = master_key else {
        return reply(Err(Status::Unauthorized));
    };
    if ledger < 0 {
        return reply(Err(Status::NoLedger));
    }
    let (fenced_tx, fenced_rx) = oneshot::channel();
    let fence = state.storage.fence(
        ledger as u64,
        &key,
        Box::new(move |r| {
            let _ = fenced_tx.send(r);
        }),
    );
    if let Err(e) = fence {
        return reply(Err(status_of(&e)));
    }
    let state = state.clone();
    let waiting = crate::metrics::start();
    tokio::spawn(async move {
        let durable = matches!(fenced_rx.await, Ok(Ok(())));
        state
            .stats
            .read_entry_fence_wait
            .record_since(durable, waiting);
        if !durable {
            return reply(Err(Status::Io));
        }
        // Read only now. Adds admitted before the fence were journalled before it (one journal
        // per ledger, in order) and are applied, hence readable, by the time the fence is
        // durable: the recovery that sent this read sees every entry its writer could still
        // get acknowledged. Read earlier, it missed entries waiting in a slow journal, closed the
        // ledger short, and those adds were acknowledged after the fence (a nemesis run lost 71
        // acknowledged entries that way).
        let reading = crate::metrics::start();
        let read = read();
        state
            .stats
            .read_entry_fence_read
            .record_since(read.is_ok(), reading);
        reply(read);
    });
}
