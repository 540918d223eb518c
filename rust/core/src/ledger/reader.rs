//! Reading a ledger: a [`ReadPlan`] (segments, read order, digest) built once per metadata
//! version and used for every read, replica failover past missing or corrupt copies, BP-62
//! batch reads where one bookie holds every entry, and batched reads of striped segments
//! ([`striped`]). It never decides which bookies exist.

mod striped;

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use super::{write_set, LedgerError};
use crate::bookie_conn::{BookieClient, ClientError, Reply};
use crate::digest::DigestManager;
use crate::protocol::Status;

/// The most entries one read may ask for; larger ranges are read in several calls.
pub const MAX_READ_ENTRIES: i64 = 1 << 20;
/// Capacity reserved up front for a read's result, whatever its range (it grows as entries
/// arrive, so a huge range costs nothing before its entries exist).
const INITIAL_CAPACITY: usize = 4096;

/// A segment of a ledger: its first entry and its ensemble (bookie addresses).
#[derive(Debug, Clone)]
pub struct Segment {
    pub first_entry: i64,
    pub ensemble: Vec<String>,
}

impl From<(i64, Vec<String>)> for Segment {
    fn from((first_entry, ensemble): (i64, Vec<String>)) -> Segment {
        Segment {
            first_entry,
            ensemble,
        }
    }
}

/// How to read one version of a ledger's metadata: built once, used by every read.
pub struct ReadPlan {
    ledger: i64,
    qw: usize,
    digest: DigestManager,
    segments: Vec<Segment>,
    /// Per segment, per write-set start (`entry % E`): the ensemble indexes to try, in order
    /// (the placement policy's read order). Empty: the write set's own order.
    orders: Vec<Vec<Vec<usize>>>,
    /// Largest response a batch may ask for (`nettyMaxFrameSizeBytes`).
    max_batch_bytes: i64,
}

/// What one read call wants beyond the plan.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Use BATCH_READ_ENTRY: BP-62's where a single bookie holds every entry (E == Qw),
    /// strided ones where entries are striped (E > Qw).
    pub batch: bool,
    /// Bookies to try last (known to be failing).
    pub avoid: HashSet<String>,
    /// Read flags and key (fencing recovery reads).
    pub flags: u16,
    pub master_key: Option<Bytes>,
    /// Single reads (and runs of a striped read) in flight at once.
    pub window: usize,
    /// Only the entries whose write set holds one of these ensemble positions (what a copy of
    /// lost bookies needs); empty: every entry. On a striped segment the other write-set
    /// starts are not read at all.
    pub held_by: Vec<usize>,
}

/// A verified entry.
#[derive(Debug, Clone)]
pub struct ReadEntry {
    pub entry_id: i64,
    pub lac: i64,
    pub length: i64,
    pub payload: Bytes,
}

impl ReadPlan {
    /// Checks the plan: segments start at entry 0 and grow, every ensemble holds at least Qw
    /// bookies, read orders name indexes of their ensembles.
    pub fn new(
        ledger: i64,
        qw: usize,
        digest: DigestManager,
        segments: Vec<Segment>,
        orders: Vec<Vec<Vec<usize>>>,
        max_batch_bytes: i64,
    ) -> Result<ReadPlan, LedgerError> {
        let bad = |why: &str| Err(LedgerError::InvalidArgument(format!("read plan: {why}")));
        if segments.first().map(|s| s.first_entry) != Some(0) {
            return bad("segments must start with one at entry 0");
        }
        if segments
            .windows(2)
            .any(|w| w[1].first_entry <= w[0].first_entry)
        {
            return bad("segment starts must increase");
        }
        if qw == 0 || segments.iter().any(|s| s.ensemble.len() < qw) {
            return bad("every ensemble needs at least the write quorum of bookies");
        }
        if orders.len() > segments.len() {
            return bad("more read orders than segments");
        }
        for (seg, per_start) in segments.iter().zip(&orders) {
            if per_start.iter().flatten().any(|i| *i >= seg.ensemble.len()) {
                return bad("a read order names an index outside its ensemble");
            }
        }
        Ok(ReadPlan {
            ledger,
            qw,
            digest,
            segments,
            orders,
            max_batch_bytes,
        })
    }

    pub fn ledger_id(&self) -> i64 {
        self.ledger
    }

    pub fn digest(&self) -> &DigestManager {
        &self.digest
    }

    fn segment_of(&self, entry: i64) -> (usize, &Segment) {
        let i = self
            .segments
            .iter()
            .rposition(|s| s.first_entry <= entry)
            .unwrap_or(0);
        (i, &self.segments[i])
    }

    /// Replicas of `entry` in the order to try them.
    pub(super) fn replicas(&self, entry: i64, avoid: &HashSet<String>) -> Vec<String> {
        let (n, seg) = self.segment_of(entry);
        let e = seg.ensemble.len();
        let chosen = self
            .orders
            .get(n)
            .and_then(|per_start| per_start.get(entry.rem_euclid(e as i64) as usize));
        let mut order: Vec<String> = match chosen {
            Some(indexes) => indexes
                .iter()
                .filter_map(|i| seg.ensemble.get(*i).cloned())
                .collect(),
            None => write_set(entry, e, self.qw.min(e))
                .map(|i| seg.ensemble[i].clone())
                .collect(),
        };
        order.sort_by_key(|b| avoid.contains(b));
        order
    }

    /// Where the segment of `entry` ends (exclusive), if another follows.
    fn segment_end(&self, entry: i64) -> Option<i64> {
        let (i, _) = self.segment_of(entry);
        self.segments.get(i + 1).map(|s| s.first_entry)
    }

    /// How many consecutive entries from `entry` on, within its segment, `bookie` holds (0:
    /// not `entry`). Round-robin placement gives the bookie at write-set position k of `entry`
    /// the entries `entry ..= entry + k` of that stretch.
    fn held_from(&self, entry: i64, bookie: &str) -> i64 {
        let (_, seg) = self.segment_of(entry);
        let e = seg.ensemble.len() as i64;
        let Some(index) = seg.ensemble.iter().position(|b| b == bookie) else {
            return 0;
        };
        let k = (index as i64 - entry).rem_euclid(e.max(1));
        if k >= (self.qw as i64).min(e) {
            return 0;
        }
        let run = k + 1;
        self.segment_end(entry)
            .map_or(run, |end| run.min(end - entry))
    }

    fn striped(&self, entry: i64) -> bool {
        self.segment_of(entry).1.ensemble.len() != self.qw
    }

    /// Whether `entry` is one the read wants: its write set holds a position of `held_by`
    /// (empty: every entry).
    fn wanted(&self, entry: i64, held_by: &[usize]) -> bool {
        if held_by.is_empty() {
            return true;
        }
        let e = self.segment_of(entry).1.ensemble.len();
        write_set(entry, e, self.qw.min(e)).any(|i| held_by.contains(&i))
    }

    /// Checks that `held_by` names positions of every ensemble of the plan.
    fn check_held_by(&self, held_by: &[usize]) -> Result<(), LedgerError> {
        let smallest = self.segments.iter().map(|s| s.ensemble.len()).min();
        match held_by.iter().find(|i| smallest.is_some_and(|e| **i >= e)) {
            Some(i) => Err(LedgerError::InvalidArgument(format!(
                "ensemble position {i} is outside the ledger's ensembles of {} bookies",
                smallest.unwrap_or(0)
            ))),
            None => Ok(()),
        }
    }
}

/// Checks a read range: `0 <= first <= last` and at most [`MAX_READ_ENTRIES`] entries.
pub fn check_range(first: i64, last: i64) -> Result<(), LedgerError> {
    if first < 0 || last < first {
        return Err(LedgerError::InvalidArgument(format!(
            "bad range {first}..{last}"
        )));
    }
    if last - first >= MAX_READ_ENTRIES {
        return Err(LedgerError::InvalidArgument(format!(
            "range {first}..{last} holds more than {MAX_READ_ENTRIES} entries; read it in parts"
        )));
    }
    Ok(())
}

/// Reads entries `first..=last` (those `opts.held_by` wants): batched where possible (BP-62
/// where a bookie holds a whole segment, [`striped`] reads elsewhere), otherwise one READ per
/// entry with up to `opts.window` in flight. Returns the entries in order and whether batch
/// reads still look supported:
/// false once the bookies dropped the connection on every BATCH_READ_ENTRY, as a bookie without
/// BP-62 does (the caller should then stop batching for good).
pub async fn read_range(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    opts: &ReadOptions,
    first: i64,
    last: i64,
) -> Result<(Vec<ReadEntry>, bool), LedgerError> {
    let started = crate::metrics::start();
    let result = read_range_untimed(client, plan, opts, first, last).await;
    super::stats::client_stats()
        .read_entry
        .record_since(result.is_ok(), started);
    result
}

async fn read_range_untimed(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    opts: &ReadOptions,
    first: i64,
    last: i64,
) -> Result<(Vec<ReadEntry>, bool), LedgerError> {
    check_range(first, last)?;
    plan.check_held_by(&opts.held_by)?;
    let mut out = Vec::with_capacity(((last - first + 1) as usize).min(INITIAL_CAPACITY));
    let mut next = first;
    let mut batch_ok = opts.batch;
    while next <= last {
        let segment_last = plan.segment_end(next).map_or(last, |e| (e - 1).min(last));
        if batch_ok && plan.striped(next) {
            let before = out.len();
            batch_ok = striped::read(client, plan, opts, next, segment_last, &mut out).await?;
            next = if batch_ok {
                segment_last + 1
            } else {
                // A prefix of the wanted entries was read; singles take the rest.
                out[before..].last().map_or(next, |e| e.entry_id + 1)
            };
            continue;
        }
        // Not striped: every write set is the whole ensemble, so every entry is wanted.
        if batch_ok {
            match read_batch(client, plan, opts, next, segment_last).await {
                BatchOutcome::Entries(entries) => {
                    next += entries.len() as i64;
                    if out.is_empty() {
                        // The common case, one batch for the whole range: no copy.
                        out = entries;
                    } else {
                        out.extend(entries);
                    }
                }
                BatchOutcome::Unsupported => batch_ok = false,
                BatchOutcome::Retry => {
                    // Let the single-read path find a good copy or report the precise error.
                    out.extend(read_singles(client, plan, opts, next, next).await?);
                    next += 1;
                }
            }
            continue;
        }
        let end = if batch_ok { segment_last } else { last };
        out.extend(read_singles(client, plan, opts, next, end).await?);
        next = end + 1;
    }
    Ok((out, batch_ok))
}

enum BatchOutcome {
    Entries(Vec<ReadEntry>),
    Unsupported,
    Retry,
}

async fn read_batch(
    client: &BookieClient,
    plan: &ReadPlan,
    opts: &ReadOptions,
    start: i64,
    end: i64,
) -> BatchOutcome {
    let want = (end - start + 1).min(i32::MAX as i64) as i32;
    let mut dropped = 0;
    let replicas = plan.replicas(start, &opts.avoid);
    for bookie in &replicas {
        let request = client.batch_read_request(
            bookie,
            plan.ledger,
            start,
            want,
            plan.max_batch_bytes,
            opts.flags,
            opts.master_key.clone(),
            None,
        );
        let reply = client.send_async(request).await;
        match reply {
            Ok(Reply::Entries(entries)) if !entries.is_empty() => {
                match verify_all(&plan.digest, entries, start) {
                    Ok(v) => return BatchOutcome::Entries(v),
                    // As the 4.17 client: one bad entry rejects the response; try another.
                    Err(e) => log::warn!(
                        "ledger {}: batch read from {bookie} at entry {start}: {e}",
                        plan.ledger
                    ),
                }
            }
            Err(ClientError::Unavailable { .. }) => dropped += 1,
            _ => {}
        }
    }
    if !replicas.is_empty() && dropped == replicas.len() {
        BatchOutcome::Unsupported
    } else {
        BatchOutcome::Retry
    }
}

/// Verifies the entries of one batch response, `start` first, into a vector sized once (a
/// collect through `Result` grew it step by step, copying the entries each time).
fn verify_all(
    digest: &DigestManager,
    bodies: Vec<Bytes>,
    start: i64,
) -> Result<Vec<ReadEntry>, crate::digest::DigestError> {
    let mut verified = Vec::with_capacity(bodies.len());
    for (i, body) in bodies.into_iter().enumerate() {
        verified.push(verify(digest, body, start + i as i64)?);
    }
    Ok(verified)
}

fn verify(
    digest: &DigestManager,
    body: Bytes,
    entry: i64,
) -> Result<ReadEntry, crate::digest::DigestError> {
    digest.verify_owned(body, Some(entry)).map(|v| ReadEntry {
        entry_id: v.entry_id,
        lac: v.last_add_confirmed,
        length: v.length,
        payload: v.payload,
    })
}

async fn read_singles(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    opts: &ReadOptions,
    first: i64,
    last: i64,
) -> Result<Vec<ReadEntry>, LedgerError> {
    let each = (first..=last)
        .filter(|e| plan.wanted(*e, &opts.held_by))
        .map(|e| (e, plan.replicas(e, &opts.avoid)));
    let capacity = ((last - first + 1).max(0) as usize).min(INITIAL_CAPACITY);
    read_each(client, plan, opts, each, capacity).await
}

/// Reads each `(entry, replicas in order)` with single READs, up to `opts.window` in flight;
/// the entries in the order given.
async fn read_each(
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
            out.push(joined(h.await)?);
        }
    }
    Ok(out)
}

/// The outcome of a read task (a task that panicked fails the read).
fn joined<T>(r: Result<Result<T, LedgerError>, tokio::task::JoinError>) -> Result<T, LedgerError> {
    r.map_err(task_failed)?
}

fn task_failed(e: tokio::task::JoinError) -> LedgerError {
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

impl ReadOne {
    async fn run(self) -> Result<ReadEntry, LedgerError> {
        let (ledger, entry) = (self.ledger, self.entry);
        let mut last = String::from("no replica");
        let mut corrupt: Vec<&str> = Vec::new();
        // EIO: the bookie found its stored copy corrupt (or could not read it).
        let mut unreadable: Vec<&str> = Vec::new();
        let mut missing = 0;
        for bookie in &self.replicas {
            let request = self.client.read_request(
                bookie,
                ledger,
                entry,
                self.flags,
                self.master_key.clone(),
            );
            let reply = self.client.send_async(request).await;
            match reply {
                Ok(Reply::Entry(body)) => match verify(&self.digest, body, entry) {
                    Ok(v) => return Ok(v),
                    Err(e) => {
                        log::warn!("ledger {ledger}: entry {entry} from {bookie}: {e}");
                        corrupt.push(bookie);
                        last = format!("{bookie}: {e}");
                    }
                },
                Ok(_) => last = format!("{bookie}: unexpected reply"),
                Err(e) => {
                    match e.status() {
                        Some(Status::NoEntry | Status::NoLedger) => missing += 1,
                        Some(Status::Io) => unreadable.push(bookie),
                        _ => {}
                    }
                    last = e.to_string();
                }
            }
        }
        if !self.replicas.is_empty() && corrupt.len() == self.replicas.len() {
            return Err(LedgerError::Digest {
                ledger,
                entry,
                bookies: corrupt.join(", "),
            });
        }
        if !unreadable.is_empty() && corrupt.len() + unreadable.len() == self.replicas.len() {
            let mut parts = Vec::new();
            if !corrupt.is_empty() {
                parts.push(format!("failed its digest check on {}", corrupt.join(", ")));
            }
            parts.push(format!(
                "answered EIO (the bookie found its copy corrupt or could not read it; see its \
                 log and pybkx_storage_corrupt_entries) from {}",
                unreadable.join(", ")
            ));
            last = format!("every copy is corrupt or unreadable: {}", parts.join("; "));
        }
        Err(LedgerError::ReadFailed {
            ledger,
            entry,
            last,
            missing: !self.replicas.is_empty() && missing == self.replicas.len(),
        })
    }
}
