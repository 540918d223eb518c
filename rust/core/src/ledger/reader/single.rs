//! Single-entry reads with replica fail-over: each entry from its replicas in order (raced:
//! a replica slow to answer is joined by the next, see [`race`](super::race)) until one
//! returns a verified copy, up to `window` entries in flight, the error naming what every
//! replica answered (missing, corrupt, unreadable). The fallback of every batched read and the
//! whole read where batching is off. It never batches.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

use super::order::by_health;
use super::plan::{ReadOptions, ReadPlan};
use super::race::Race;
use super::verify::{log_corrupt, verify, ReadEntry};
use crate::bookie_conn::{BookieClient, Reply};
use crate::digest::DigestManager;
use crate::ledger::error::LedgerError;
use crate::protocol::Status;

/// Capacity reserved up front for a read's result, whatever its range (it grows as entries
/// arrive, so a huge range costs nothing before its entries exist).
pub(super) const INITIAL_CAPACITY: usize = 4096;

/// Reads the entries of `first..=last` that `opts.held_by` wants, one READ each.
pub(super) async fn read_singles(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    opts: &ReadOptions,
    first: i64,
    last: i64,
) -> Result<Vec<ReadEntry>, LedgerError> {
    let each = (first..=last)
        .filter(|e| plan.wanted(*e, &opts.held_by))
        .map(|e| {
            let mut replicas = plan.replicas(e, &opts.avoid);
            by_health(client, &mut replicas, &opts.avoid);
            (e, replicas)
        });
    let capacity = ((last - first + 1).max(0) as usize).min(INITIAL_CAPACITY);
    read_each(client, plan, opts, each, capacity).await
}

/// Reads each `(entry, replicas in order)` with single READs, up to `opts.window` in flight;
/// the entries in the order given.
pub(super) async fn read_each(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    opts: &ReadOptions,
    mut each: impl Iterator<Item = (i64, Vec<String>)>,
    capacity: usize,
) -> Result<Vec<ReadEntry>, LedgerError> {
    let window = opts.window.max(1);
    let mut out = Vec::with_capacity(capacity);
    let mut inflight: VecDeque<tokio::task::JoinHandle<Result<ReadEntry, LedgerError>>> =
        VecDeque::new();
    let mut more = true;
    while more || !inflight.is_empty() {
        while more && inflight.len() < window {
            let Some((entry, replicas)) = each.next() else {
                more = false;
                break;
            };
            let one = ReadOne {
                client: client.clone(),
                ledger: plan.ledger,
                entry,
                replicas,
                digest: plan.digest.clone(),
                flags: opts.flags,
                master_key: opts.master_key.clone(),
            };
            inflight.push_back(tokio::spawn(one.run()));
        }
        if let Some(h) = inflight.pop_front() {
            out.push(h.await.map_err(task_failed)??);
        }
    }
    Ok(out)
}

/// The error of a read task that panicked: it fails the read.
pub(super) fn task_failed(e: tokio::task::JoinError) -> LedgerError {
    LedgerError::WriterFailed(format!("read task failed: {e}"))
}

/// One entry to read from its replicas, in order, until one returns a verified copy.
struct ReadOne {
    client: Arc<BookieClient>,
    ledger: i64,
    entry: i64,
    replicas: Vec<String>,
    digest: DigestManager,
    flags: u16,
    master_key: Option<Bytes>,
}

/// What the replicas of one entry answered, for the error when none gave a good copy.
#[derive(Default)]
struct Answers<'a> {
    last: String,
    /// Bookies whose copy failed its digest check.
    corrupt: Vec<&'a str>,
    /// Bookies that answered EIO: they found their stored copy corrupt (or could not read it).
    unreadable: Vec<&'a str>,
    /// Bookies that answered they hold no such entry (or ledger).
    missing: usize,
}

impl ReadOne {
    async fn run(self) -> Result<ReadEntry, LedgerError> {
        let (ledger, entry) = (self.ledger, self.entry);
        let mut answers = Answers {
            last: String::from("no replica"),
            ..Answers::default()
        };
        let request = |bookie: &str| {
            self.client
                .read_request(bookie, ledger, entry, self.flags, self.master_key.clone())
        };
        let mut race = Race::new(self.client.clone(), self.replicas.clone());
        while let Some((at, reply)) = race.next(&request).await {
            let bookie = &self.replicas[at];
            match reply {
                Ok(Reply::Entry(body)) => match verify(&self.digest, body, entry) {
                    Ok(v) => {
                        race.finish(at);
                        return Ok(v);
                    }
                    Err(e) => {
                        log_corrupt(ledger, entry, bookie, &e);
                        self.client.note_failure(bookie);
                        answers.corrupt.push(bookie);
                        answers.last = format!("{bookie}: {e}");
                    }
                },
                Ok(_) => answers.last = format!("{bookie}: unexpected reply"),
                Err(e) => {
                    match e.status() {
                        Some(Status::NoEntry | Status::NoLedger) => answers.missing += 1,
                        Some(Status::Io) => answers.unreadable.push(bookie),
                        _ => {}
                    }
                    answers.last = e.to_string();
                }
            }
        }
        Err(self.failure(answers))
    }

    /// The error once every replica was asked: every copy corrupt (naming the bookies), or
    /// what the last one said, with what the others' copies were.
    fn failure(&self, mut answers: Answers<'_>) -> LedgerError {
        let (ledger, entry, asked) = (self.ledger, self.entry, self.replicas.len());
        if asked > 0 && answers.corrupt.len() == asked {
            return LedgerError::Digest {
                ledger,
                entry,
                bookies: answers.corrupt.join(", "),
            };
        }
        if !answers.unreadable.is_empty()
            && answers.corrupt.len() + answers.unreadable.len() == asked
        {
            let mut parts = Vec::new();
            if !answers.corrupt.is_empty() {
                parts.push(format!(
                    "failed its digest check on {}",
                    answers.corrupt.join(", ")
                ));
            }
            parts.push(format!(
                "answered EIO (the bookie found its copy corrupt or could not read it; see its \
                 log and pybkx_storage_corrupt_entries) from {}",
                answers.unreadable.join(", ")
            ));
            answers.last = format!("every copy is corrupt or unreadable: {}", parts.join("; "));
        }
        LedgerError::ReadFailed {
            ledger,
            entry,
            last: answers.last,
            missing: asked > 0 && answers.missing == asked,
        }
    }
}
