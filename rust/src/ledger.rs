//! The client's per-ledger quorum engine: a writer that sends each entry to its write set and
//! releases completions in entry-id order once Qa bookies acknowledged, and a reader that fetches
//! ranges with replica failover, digest checks and BP-62 batch reads. It never decides which
//! bookies to use: bookie failures are reported as events, and the control plane answers with
//! `change_ensemble` after updating the metadata.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use tokio::sync::{mpsc, oneshot};

use crate::client::{BookieClient, ClientError, Reply};
use crate::digest::DigestManager;
use crate::protocol::{self, rc};

/// Why a write or read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// A bookie error that no other bookie can fix (fenced, unauthorized).
    #[error("{0}")]
    Bookie(ClientError),
    #[error("ledger {0} is fenced: another client recovered it")]
    Fenced(i64),
    #[error("ledger writer failed: {0}")]
    WriterFailed(String),
    #[error("ledger writer is closed")]
    Closed,
    #[error("entry {entry} of ledger {ledger} could not be read from any bookie: {last}")]
    ReadFailed {
        ledger: i64,
        entry: i64,
        last: String,
        /// Every replica answered that it has no such entry (or ledger).
        missing: bool,
    },
    /// Raised by the control plane (e.g. LedgerClosedException, NotEnoughBookiesException).
    #[error("{message}")]
    Raised { exception: String, message: String },
    #[error("entry {entry} of ledger {ledger} failed its digest check on every bookie")]
    Digest { ledger: i64, entry: i64 },
}

/// What the writer asks the control plane to do.
#[derive(Debug, Clone)]
pub struct BookieFailure {
    pub index: usize,
    pub bookie: String,
    pub error: String,
}

struct PendingAdd {
    entry: i64,
    body: Bytes,
    length: i64,
    /// Which ensemble indexes acknowledged (write-set members only).
    acked: Vec<bool>,
    done: Option<oneshot::Sender<Result<i64, LedgerError>>>,
}

struct WriterState {
    ensemble: Vec<String>,
    /// Bumped when a slot is (re)filled: answers to sends of an older generation are stale.
    generations: Vec<u64>,
    next_entry: i64,
    length: i64,
    lac: i64,
    lac_length: i64,
    pending: VecDeque<PendingAdd>,
    /// Ensemble indexes that failed and await replacement; releases stop meanwhile.
    failed: HashSet<usize>,
    fatal: Option<LedgerError>,
    closed: bool,
    /// Completion waiters for "everything pending has been released".
    drained: Vec<oneshot::Sender<()>>,
}

/// Writes the entries of one open ledger. Thread-safe.
pub struct LedgerWriter {
    ledger: i64,
    e: usize,
    qw: usize,
    qa: usize,
    master_key: Bytes,
    digest: DigestManager,
    client: Arc<BookieClient>,
    state: Mutex<WriterState>,
    /// Signalled when pending adds complete (or the writer fails), for `wait_for_room`.
    room: Condvar,
    events_tx: mpsc::UnboundedSender<BookieFailure>,
    events_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<BookieFailure>>,
    flags: u16,
    me: std::sync::Weak<LedgerWriter>,
}

/// Write set of `entry` in an ensemble of `e` with write quorum `qw`.
pub fn write_set(entry: i64, e: usize, qw: usize) -> impl Iterator<Item = usize> {
    let e64 = e as i64;
    (0..qw as i64).map(move |i| (entry + i).rem_euclid(e64) as usize)
}

impl LedgerWriter {
    /// A writer appending from `next_entry` (with the ledger's `length` so far) to `ensemble`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Arc<BookieClient>,
        ledger: i64,
        qw: usize,
        qa: usize,
        master_key: Bytes,
        digest: DigestManager,
        ensemble: Vec<String>,
        next_entry: i64,
        length: i64,
        flags: u16,
    ) -> Arc<LedgerWriter> {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        Arc::new_cyclic(|me| LedgerWriter {
            ledger,
            e: ensemble.len(),
            qw,
            qa,
            master_key,
            digest,
            client,
            state: Mutex::new(WriterState {
                generations: vec![0; ensemble.len()],
                ensemble,
                next_entry,
                length,
                lac: next_entry - 1,
                lac_length: length,
                pending: VecDeque::new(),
                failed: HashSet::new(),
                fatal: None,
                closed: false,
                drained: Vec::new(),
            }),
            room: Condvar::new(),
            events_tx,
            events_rx: tokio::sync::Mutex::new(events_rx),
            flags,
            me: me.clone(),
        })
    }

    pub fn ledger_id(&self) -> i64 {
        self.ledger
    }

    /// (LAC, ledger length at the LAC, next entry id).
    pub fn positions(&self) -> (i64, i64, i64) {
        let st = self.state.lock();
        (st.lac, st.lac_length, st.next_entry)
    }

    pub fn ensemble(&self) -> Vec<String> {
        self.state.lock().ensemble.clone()
    }

    /// Appends one payload; the receiver yields its entry id once it and every earlier entry
    /// are acknowledged by Qa bookies.
    pub fn append(&self, payload: &[u8]) -> oneshot::Receiver<Result<i64, LedgerError>> {
        self.append_with_id(None, payload)
    }

    /// Appends with a given entry id (recovery rewrites entries at known ids, in order).
    pub fn append_with_id(
        &self,
        entry_id: Option<i64>,
        payload: &[u8],
    ) -> oneshot::Receiver<Result<i64, LedgerError>> {
        let (tx, rx) = oneshot::channel();
        let sends = {
            let mut st = self.state.lock();
            if let Some(err) = &st.fatal {
                let _ = tx.send(Err(err.clone()));
                return rx;
            }
            if st.closed {
                let _ = tx.send(Err(LedgerError::Closed));
                return rx;
            }
            let entry = entry_id.unwrap_or(st.next_entry);
            if entry != st.next_entry {
                let _ = tx.send(Err(LedgerError::WriterFailed(format!(
                    "entry {entry} is not the next entry {}",
                    st.next_entry
                ))));
                return rx;
            }
            st.next_entry += 1;
            st.length += payload.len() as i64;
            let body = self.digest.package(entry, st.lac, st.length, payload);
            let length = st.length;
            st.pending.push_back(PendingAdd {
                entry,
                body: body.clone(),
                length,
                acked: vec![false; self.e],
                done: Some(tx),
            });
            write_set(entry, self.e, self.qw)
                .filter(|i| !st.failed.contains(i))
                .map(|i| {
                    (
                        i,
                        st.generations[i],
                        st.ensemble[i].clone(),
                        entry,
                        body.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        for (index, generation, bookie, entry, body) in sends {
            self.send(index, generation, bookie, entry, body);
        }
        rx
    }

    fn send(&self, index: usize, generation: u64, bookie: String, entry: i64, body: Bytes) {
        let rx = self.client.add(
            &bookie,
            self.ledger,
            entry,
            self.master_key.clone(),
            body,
            self.flags,
        );
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let Ok(rt) = crate::runtime::runtime() else {
            return;
        };
        rt.spawn(async move {
            let result = rx.await.unwrap_or(Err(ClientError::Closed));
            me.on_response(index, generation, bookie, entry, result);
        });
    }

    fn on_response(
        &self,
        index: usize,
        generation: u64,
        bookie: String,
        entry: i64,
        result: Result<Reply, ClientError>,
    ) {
        let mut st = self.state.lock();
        if st.generations.get(index) != Some(&generation) {
            return; // an answer for a slot refilled meanwhile: it no longer counts
        }
        match result {
            Ok(_) => {
                // Pending adds hold consecutive entry ids, so the position is an offset.
                let position = st
                    .pending
                    .front()
                    .and_then(|front| usize::try_from(entry - front.entry).ok());
                if let Some(p) = position.and_then(|i| st.pending.get_mut(i)) {
                    debug_assert_eq!(p.entry, entry);
                    p.acked[index] = true;
                }
            }
            Err(err) => {
                let fatal = match &err {
                    ClientError::Bookie {
                        rc: rc::EFENCED, ..
                    } => Some(LedgerError::Fenced(self.ledger)),
                    ClientError::Bookie { rc: rc::EUA, .. } => {
                        Some(LedgerError::Bookie(err.clone()))
                    }
                    ClientError::Closed => Some(LedgerError::Closed),
                    _ => None,
                };
                if let Some(f) = fatal {
                    fail_all(&mut st, f);
                    self.room.notify_all();
                    return;
                }
                if st.failed.insert(index) {
                    let _ = self.events_tx.send(BookieFailure {
                        index,
                        bookie,
                        error: err.to_string(),
                    });
                }
            }
        }
        self.release(&mut st);
    }

    /// Releases completed entries at the head of the queue, in order.
    fn release(&self, st: &mut WriterState) {
        if !st.failed.is_empty() {
            return; // an ensemble change is due: nothing completes until it is done
        }
        while let Some(front) = st.pending.front() {
            if front.acked.iter().filter(|a| **a).count() < self.qa {
                break;
            }
            let Some(mut p) = st.pending.pop_front() else {
                break;
            };
            st.lac = p.entry;
            st.lac_length = p.length;
            if let Some(done) = p.done.take() {
                let _ = done.send(Ok(p.entry));
            }
        }
        if st.pending.is_empty() {
            for d in st.drained.drain(..) {
                let _ = d.send(());
            }
        }
        self.room.notify_all();
    }

    /// Blocks while `max_pending` appends are outstanding (BookKeeper's `throttle`), so one
    /// client cannot push a bookie past its own in-flight limit (which would answer
    /// ETOOMANYREQUESTS and cost an ensemble change). Returns at once if the writer failed.
    pub fn wait_for_room(&self, max_pending: usize) {
        let mut st = self.state.lock();
        while st.pending.len() >= max_pending.max(1) && st.fatal.is_none() {
            self.room.wait_for(&mut st, Duration::from_millis(100));
        }
    }

    /// The next bookie failure needing an ensemble change (None after `timeout`).
    pub async fn next_failure(&self, timeout: Duration) -> Option<BookieFailure> {
        let mut rx = self.events_rx.lock().await;
        tokio::time::timeout(timeout, rx.recv())
            .await
            .ok()
            .flatten()
    }

    /// Installs a new ensemble from `first_entry` (which must be LAC + 1): every pending entry
    /// whose write set includes a replaced index is re-sent to the new bookie.
    pub fn change_ensemble(
        &self,
        first_entry: i64,
        ensemble: Vec<String>,
    ) -> Result<(), LedgerError> {
        let sends = {
            let mut st = self.state.lock();
            if let Some(err) = &st.fatal {
                return Err(err.clone());
            }
            if ensemble.len() != self.e {
                return Err(LedgerError::WriterFailed(format!(
                    "new ensemble has {} bookies, the ledger needs {}",
                    ensemble.len(),
                    self.e
                )));
            }
            if first_entry != st.lac + 1 {
                return Err(LedgerError::WriterFailed(format!(
                    "new ensemble must start at LAC + 1 = {}, not {first_entry}",
                    st.lac + 1
                )));
            }
            // A failed slot counts as replaced even by the same address: a bookie that
            // restarted (with its data) may take its own slot back; pending entries are re-sent.
            let changed: Vec<usize> = (0..self.e)
                .filter(|i| st.ensemble[*i] != ensemble[*i] || st.failed.contains(i))
                .collect();
            st.ensemble = ensemble;
            for i in &changed {
                st.generations[*i] += 1;
            }
            st.failed.clear();
            let mut sends = Vec::new();
            for p in st.pending.iter_mut() {
                for i in write_set(p.entry, self.e, self.qw) {
                    if changed.contains(&i) {
                        p.acked[i] = false;
                        sends.push((i, p.entry, p.body.clone()));
                    }
                }
            }
            let sends: Vec<_> = sends
                .into_iter()
                .map(|(i, entry, body)| (i, st.generations[i], st.ensemble[i].clone(), entry, body))
                .collect();
            self.release(&mut st);
            sends
        };
        for (index, generation, bookie, entry, body) in sends {
            self.send(index, generation, bookie, entry, body);
        }
        Ok(())
    }

    /// Fails every pending and future add (the control plane could not change the ensemble).
    pub fn fail(&self, error: LedgerError) {
        fail_all(&mut self.state.lock(), error);
        self.room.notify_all();
    }

    /// Resolves once nothing is pending (or the writer failed).
    pub fn drained(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut st = self.state.lock();
        if st.pending.is_empty() || st.fatal.is_some() {
            let _ = tx.send(());
        } else {
            st.drained.push(tx);
        }
        rx
    }

    /// Refuses further appends; pending ones still complete.
    pub fn close(&self) {
        self.state.lock().closed = true;
    }

    pub fn fatal(&self) -> Option<LedgerError> {
        self.state.lock().fatal.clone()
    }
}

fn fail_all(st: &mut WriterState, error: LedgerError) {
    if st.fatal.is_none() {
        st.fatal = Some(error.clone());
    }
    for mut p in st.pending.drain(..) {
        if let Some(done) = p.done.take() {
            let _ = done.send(Err(error.clone()));
        }
    }
    for d in st.drained.drain(..) {
        let _ = d.send(());
    }
}

/// A segment of a ledger: its first entry and its ensemble.
#[derive(Debug, Clone)]
pub struct Segment {
    pub first_entry: i64,
    pub ensemble: Vec<String>,
}

/// How to read a ledger.
pub struct ReadPlan {
    pub ledger: i64,
    pub qw: usize,
    pub digest: DigestManager,
    pub segments: Vec<Segment>,
    /// Use BATCH_READ_ENTRY where a single bookie holds every entry (E == Qw).
    pub batch: bool,
    /// Largest response a batch may ask for (`nettyMaxFrameSizeBytes`).
    pub max_batch_bytes: i64,
    /// Bookies to try last (known to be failing).
    pub avoid: HashSet<String>,
    /// Per segment, per write-set start (`entry % E`): the ensemble indexes to try, in order
    /// (the placement policy's read order). Missing: the write set's own order.
    pub orders: Vec<Vec<Vec<usize>>>,
    /// Read flags and key (fencing recovery reads).
    pub flags: u16,
    pub master_key: Option<Bytes>,
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
    fn segment_of(&self, entry: i64) -> (usize, &Segment) {
        let i = self
            .segments
            .iter()
            .rposition(|s| s.first_entry <= entry)
            .unwrap_or(0);
        (i, &self.segments[i])
    }

    /// Replicas of `entry` in the order to try them.
    fn replicas(&self, entry: i64) -> Vec<String> {
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
        order.sort_by_key(|b| self.avoid.contains(b));
        order
    }

    /// Where the segment of `entry` ends (exclusive), if another follows.
    fn segment_end(&self, entry: i64) -> Option<i64> {
        let (i, _) = self.segment_of(entry);
        self.segments.get(i + 1).map(|s| s.first_entry)
    }

    fn striped(&self, entry: i64) -> bool {
        self.segment_of(entry).1.ensemble.len() != self.qw
    }
}

/// Reads entries `first..=last`: batched where possible, otherwise one READ per entry with up
/// to `window` in flight. Returns the entries and whether batch reads still look supported:
/// false once every replica dropped the connection on BATCH_READ_ENTRY, as a bookie without
/// BP-62 does (the caller should then stop batching for good).
pub async fn read_range(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    first: i64,
    last: i64,
    window: usize,
) -> Result<(Vec<ReadEntry>, bool), LedgerError> {
    let mut out = Vec::with_capacity((last - first + 1).max(0) as usize);
    let mut next = first;
    let mut batch_ok = plan.batch;
    while next <= last {
        let segment_last = plan.segment_end(next).map_or(last, |e| (e - 1).min(last));
        if batch_ok && !plan.striped(next) {
            match read_batch(client, plan, next, segment_last).await {
                BatchOutcome::Entries(entries) => {
                    next += entries.len() as i64;
                    out.extend(entries);
                }
                BatchOutcome::Unsupported => batch_ok = false,
                BatchOutcome::Retry => {
                    // Let the single-read path find a good copy or report the precise error.
                    out.extend(read_singles(client, plan, next, next, 1).await?);
                    next += 1;
                }
            }
            continue;
        }
        let end = if batch_ok { segment_last } else { last };
        out.extend(read_singles(client, plan, next, end, window).await?);
        next = end + 1;
    }
    Ok((out, batch_ok))
}

enum BatchOutcome {
    Entries(Vec<ReadEntry>),
    Unsupported,
    Retry,
}

async fn read_batch(client: &BookieClient, plan: &ReadPlan, start: i64, end: i64) -> BatchOutcome {
    let want = (end - start + 1).min(i32::MAX as i64) as i32;
    let mut dropped = 0;
    let replicas = plan.replicas(start);
    for bookie in &replicas {
        let rx = client.batch_read(
            bookie,
            plan.ledger,
            start,
            want,
            plan.max_batch_bytes,
            plan.flags,
            plan.master_key.clone(),
        );
        match rx.await.unwrap_or(Err(ClientError::Closed)) {
            Ok(Reply::Entries(entries)) if !entries.is_empty() => {
                let verified: Result<Vec<ReadEntry>, _> = entries
                    .into_iter()
                    .enumerate()
                    .map(|(i, body)| {
                        plan.digest
                            .verify(&body, Some(start + i as i64))
                            .map(|v| ReadEntry {
                                entry_id: v.entry_id,
                                lac: v.last_add_confirmed,
                                length: v.length,
                                payload: v.payload,
                            })
                    })
                    .collect();
                // As the 4.17 client: one bad entry rejects the response; try another replica.
                if let Ok(v) = verified {
                    return BatchOutcome::Entries(v);
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

async fn read_singles(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    first: i64,
    last: i64,
    window: usize,
) -> Result<Vec<ReadEntry>, LedgerError> {
    let window = window.max(1);
    let mut out = Vec::with_capacity((last - first + 1).max(0) as usize);
    let mut inflight: VecDeque<tokio::task::JoinHandle<Result<ReadEntry, LedgerError>>> =
        VecDeque::new();
    let mut next = first;
    while next <= last || !inflight.is_empty() {
        while next <= last && inflight.len() < window {
            let replicas = plan.replicas(next);
            let entry = next;
            inflight.push_back(tokio::spawn(read_one(
                client.clone(),
                plan.ledger,
                entry,
                replicas,
                plan.digest.clone(),
                plan.flags,
                plan.master_key.clone(),
            )));
            next += 1;
        }
        if let Some(h) = inflight.pop_front() {
            let r = h.await.unwrap_or_else(|e| {
                Err(LedgerError::WriterFailed(format!("read task failed: {e}")))
            })?;
            out.push(r);
        }
    }
    Ok(out)
}

/// Reads one entry, trying its replicas in order until one returns a verified copy.
async fn read_one(
    client: Arc<BookieClient>,
    ledger: i64,
    entry: i64,
    replicas: Vec<String>,
    digest: DigestManager,
    flags: u16,
    master_key: Option<Bytes>,
) -> Result<ReadEntry, LedgerError> {
    let mut last = String::from("no replica");
    let mut digest_failures = 0;
    let mut missing = 0;
    for bookie in &replicas {
        let rx = client.read(bookie, ledger, entry, flags, master_key.clone());
        match rx.await.unwrap_or(Err(ClientError::Closed)) {
            Ok(Reply::Entry(body)) => match digest.verify(&body, Some(entry)) {
                Ok(v) => {
                    return Ok(ReadEntry {
                        entry_id: v.entry_id,
                        lac: v.last_add_confirmed,
                        length: v.length,
                        payload: v.payload,
                    })
                }
                Err(e) => {
                    digest_failures += 1;
                    last = format!("{bookie}: {e}");
                }
            },
            Ok(_) => last = format!("{bookie}: unexpected reply"),
            Err(e) => {
                if let ClientError::Bookie {
                    rc: rc::ENOENTRY | rc::ENOLEDGER,
                    ..
                } = e
                {
                    missing += 1;
                }
                last = e.to_string();
            }
        }
    }
    if digest_failures == replicas.len() && !replicas.is_empty() {
        return Err(LedgerError::Digest { ledger, entry });
    }
    Err(LedgerError::ReadFailed {
        ledger,
        entry,
        last,
        missing: !replicas.is_empty() && missing == replicas.len(),
    })
}

/// Flags of a ledger-recovery add (as the Java client sends them).
pub const RECOVERY_ADD_FLAGS: u16 = protocol::FLAG_RECOVERY_ADD | protocol::FLAG_HIGH_PRIORITY;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use crate::digest::{master_key, DigestType};
    use crate::runtime::runtime;
    use crate::server::test_bookie;

    #[test]
    fn replicas_follow_the_given_read_order_with_avoided_bookies_last() {
        let ensemble: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let mut plan = ReadPlan {
            ledger: 1,
            qw: 2,
            digest: DigestManager::new(1, b"", DigestType::Crc32c),
            segments: vec![Segment {
                first_entry: 0,
                ensemble,
            }],
            batch: false,
            max_batch_bytes: 5 << 20,
            avoid: HashSet::new(),
            orders: Vec::new(),
            flags: 0,
            master_key: None,
        };
        // Write-set order by default: entry 2 lives on indexes 2 and 0.
        assert_eq!(plan.replicas(2), vec!["c", "a"]);
        plan.orders = vec![vec![vec![1, 0], vec![2, 1], vec![0, 2]]];
        assert_eq!(plan.replicas(2), vec!["a", "c"]);
        assert_eq!(plan.replicas(4), vec!["c", "b"]);
        plan.avoid.insert("a".to_string());
        assert_eq!(plan.replicas(2), vec!["c", "a"]);
    }

    #[test]
    fn writer_survives_a_bookie_failure_through_an_ensemble_change() {
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
        let servers: Vec<_> = dirs.iter().map(|d| test_bookie(d.path()).1).collect();
        let addrs: Vec<String> = servers.iter().map(|s| s.local_addr().to_string()).collect();
        let client = Arc::new(BookieClient::new(ClientConfig::default()));
        let dm = DigestManager::new(9, b"", DigestType::Crc32c);
        let key = Bytes::copy_from_slice(&master_key(b""));
        let writer = LedgerWriter::new(
            client.clone(),
            9,
            2,
            2,
            key,
            dm.clone(),
            addrs[..3].to_vec(),
            0,
            0,
            0,
        );
        let rt = runtime().unwrap();
        let first: Vec<_> = (0..100)
            .map(|i| writer.append(format!("e{i}").as_bytes()))
            .collect();
        for (i, rx) in first.into_iter().enumerate() {
            assert_eq!(rt.block_on(rx).unwrap(), Ok(i as i64));
        }
        servers[1].stop(Duration::from_millis(10));
        let more: Vec<_> = (100..200)
            .map(|i| writer.append(format!("e{i}").as_bytes()))
            .collect();
        let failure = rt
            .block_on(writer.next_failure(Duration::from_secs(10)))
            .expect("a failure event");
        assert_eq!(failure.index, 1);
        let (lac, _, _) = writer.positions();
        let mut ensemble = addrs[..3].to_vec();
        ensemble[1] = addrs[3].clone();
        writer.change_ensemble(lac + 1, ensemble.clone()).unwrap();
        for (i, rx) in more.into_iter().enumerate() {
            assert_eq!(rt.block_on(rx).unwrap(), Ok(100 + i as i64));
        }
        let plan = ReadPlan {
            ledger: 9,
            qw: 2,
            digest: dm,
            segments: vec![
                Segment {
                    first_entry: 0,
                    ensemble: addrs[..3].to_vec(),
                },
                Segment {
                    first_entry: lac + 1,
                    ensemble,
                },
            ],
            batch: false,
            max_batch_bytes: 5 << 20,
            avoid: HashSet::new(),
            orders: Vec::new(),
            flags: 0,
            master_key: None,
        };
        let (entries, _) = rt.block_on(read_range(&client, &plan, 0, 199, 16)).unwrap();
        assert_eq!(entries.len(), 200);
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.payload, Bytes::from(format!("e{i}")));
        }
    }
}
