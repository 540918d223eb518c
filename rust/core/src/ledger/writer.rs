//! The writer of one open ledger: sends each entry to its write set, counts acknowledgements
//! per ensemble slot and completes appends in entry-id order once Qa bookies hold them (the LAC
//! piggy-backed in every entry). It never chooses bookies: a failed slot is reported through the
//! [`FailureSink`], and releases stop until the control plane calls [`LedgerWriter::change_ensemble`].
//!
//! An adv writer (BookKeeper's `LedgerHandleAdv`) takes the entry id of each append from the
//! caller: pending adds are kept ordered by id and complete only once every lower id has, so
//! the LAC still moves contiguously.
//!
//! With BookKeeper's `WriteFlag.DEFERRED_SYNC` ([`LedgerWriter::enable_deferred_sync`]) each add
//! carries the flag (V3 only), bookies acknowledge it before their sync, and the LAC moves only
//! with [`LedgerWriter::force`] (FORCE_LEDGER to the whole ensemble), as BookKeeper's
//! `LedgerHandle`; a bookie failure then fails the writer instead of changing the ensemble.
//!
//! Bounds: at most `throttle` appends pending per ledger (BookKeeper's `throttle`; the blocking
//! entry points wait for room), and no entry larger than the client's frame limit.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, MutexGuard};

use super::error::LedgerError;
use super::quorum::{check_quorums, write_set};
use super::stats::client_stats;
use crate::bookie_conn::{BookieClient, ClientError, ReplyResult};
use crate::digest::{DigestManager, ENTRY_HEADER_LEN};
use crate::done::Done;
use crate::protocol::{self, Status, MASTER_KEY_LEN};

mod adv;
mod explicit_lac;
#[cfg(test)]
mod tests;

/// Flags of a ledger-recovery add (as the Java client sends them).
pub const RECOVERY_ADD_FLAGS: u16 = protocol::FLAG_RECOVERY_ADD | protocol::FLAG_HIGH_PRIORITY;

/// A bookie of the ensemble failed an add: the control plane should replace it.
#[derive(Debug, Clone)]
pub struct BookieFailure {
    pub ledger: i64,
    /// Which writer (several may write one ledger over time: a recovery, say).
    pub writer_id: u64,
    pub index: usize,
    pub bookie: String,
    pub error: String,
}

/// Receives failure events; called without the writer's lock held, at most once per failed
/// slot until the next ensemble change (so a queue behind it holds at most E events per writer).
pub type FailureSink = Arc<dyn Fn(BookieFailure) + Send + Sync>;

/// The outcome of one append: its entry id.
pub type AppendDone = Done<Result<i64, LedgerError>>;

struct PendingAdd {
    entry: i64,
    body: Bytes,
    length: i64,
    /// Which ensemble indexes acknowledged (write-set members only).
    acked: Vec<bool>,
    done: Option<AppendDone>,
    /// When the append was handed over (None with metrics off).
    started: Option<Instant>,
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
    /// Ensemble indexes that failed (reported once until the next ensemble change). Entries
    /// still complete while Qa bookies hold them (BookKeeper's `delayEnsembleChange`).
    failed: HashSet<usize>,
    /// The control plane is recording a new ensemble from LAC + 1: releases stop meanwhile, so
    /// the LAC stays where the new segment starts.
    changing: bool,
    fatal: Option<LedgerError>,
    closed: bool,
    /// Called once nothing is pending (or the writer failed).
    drained: Vec<Done<()>>,
    /// The last entry released in order (BookKeeper's `pendingAddsSequenceHead`) and the
    /// length there: the LAC itself without deferred sync, what a force confirms with it.
    pushed: i64,
    pushed_length: i64,
}

/// One copy of an entry to send to one slot of the ensemble.
struct EntrySend {
    index: usize,
    generation: u64,
    bookie: String,
    entry: i64,
    body: Bytes,
}

/// Why a writer takes no more appends: it failed, or it is closed.
fn refusal(st: &WriterState) -> Option<LedgerError> {
    if let Some(err) = &st.fatal {
        return Some(err.clone());
    }
    st.closed.then_some(LedgerError::Closed)
}

/// Completions to run once the state lock is released.
#[derive(Default)]
struct Completions {
    appends: Vec<(AppendDone, Result<i64, LedgerError>)>,
    drained: Vec<Done<()>>,
}

impl Completions {
    fn run(self) {
        for (done, r) in self.appends {
            done(r);
        }
        for d in self.drained {
            d(());
        }
    }
}

/// How one writer is set up.
pub struct WriterSpec {
    pub ledger: i64,
    pub writer_id: u64,
    pub qw: usize,
    pub qa: usize,
    pub master_key: Bytes,
    pub digest: DigestManager,
    pub ensemble: Vec<String>,
    pub next_entry: i64,
    pub length: i64,
    pub flags: u16,
}

/// Writes the entries of one open ledger. Thread-safe.
pub struct LedgerWriter {
    ledger: i64,
    writer_id: u64,
    e: usize,
    qw: usize,
    qa: usize,
    master_key: Bytes,
    digest: DigestManager,
    client: Arc<BookieClient>,
    state: Mutex<WriterState>,
    /// Signalled when pending adds complete (or the writer fails), for `wait_for_room`.
    room: Condvar,
    on_failure: FailureSink,
    flags: u16,
    /// BookKeeper's `WriteFlag.DEFERRED_SYNC`: set before the first append, never cleared.
    deferred_sync: AtomicBool,
    /// Largest payload an entry may carry: the frame limit minus add and entry headers.
    max_payload: usize,
    me: Weak<LedgerWriter>,
    /// Appends name their entry ids (BookKeeper's `LedgerHandleAdv`).
    adv: bool,
    /// The LAC just before the last release (BookKeeper's piggy-backed LAC: at most what the
    /// entries sent since carry): the explicit-LAC flush sends WRITE_LAC only past it.
    piggybacked_lac: AtomicI64,
    /// The last entry id released (BookKeeper's `pendingAddsSequenceHead`): the next release
    /// must be the id after it. Kept apart from the LAC, which a write flag may hold back.
    sequence_head: AtomicI64,
    /// Stops the explicit-LAC flush task, if one runs.
    lac_flush_stop: Arc<tokio::sync::Notify>,
}

/// How long blocking waits sleep between checks of their interrupt.
const INTERRUPT_CHECK: Duration = Duration::from_millis(100);

impl LedgerWriter {
    /// A writer appending from `spec.next_entry` (with the ledger's `length` so far).
    pub fn new(
        client: Arc<BookieClient>,
        spec: WriterSpec,
        on_failure: FailureSink,
    ) -> Result<Arc<LedgerWriter>, LedgerError> {
        Self::build(client, spec, on_failure, false)
    }

    /// An adv writer: every append names its entry id ([`append_adv`](Self::append_adv)).
    pub fn new_adv(
        client: Arc<BookieClient>,
        spec: WriterSpec,
        on_failure: FailureSink,
    ) -> Result<Arc<LedgerWriter>, LedgerError> {
        Self::build(client, spec, on_failure, true)
    }

    fn build(
        client: Arc<BookieClient>,
        spec: WriterSpec,
        on_failure: FailureSink,
        adv: bool,
    ) -> Result<Arc<LedgerWriter>, LedgerError> {
        let e = spec.ensemble.len();
        check_quorums(e as i64, spec.qw as i64, spec.qa as i64)?;
        let overhead = 8 + MASTER_KEY_LEN + ENTRY_HEADER_LEN + spec.digest.kind().digest_len();
        let max_payload = client.config().max_frame_size.saturating_sub(overhead);
        Ok(Arc::new_cyclic(|me| LedgerWriter {
            ledger: spec.ledger,
            writer_id: spec.writer_id,
            e,
            qw: spec.qw,
            qa: spec.qa,
            master_key: spec.master_key,
            digest: spec.digest,
            client,
            state: Mutex::new(WriterState {
                generations: vec![0; e],
                ensemble: spec.ensemble,
                next_entry: spec.next_entry,
                length: spec.length,
                lac: spec.next_entry - 1,
                lac_length: spec.length,
                pending: VecDeque::new(),
                failed: HashSet::new(),
                changing: false,
                fatal: None,
                closed: false,
                drained: Vec::new(),
                pushed: spec.next_entry - 1,
                pushed_length: spec.length,
            }),
            room: Condvar::new(),
            on_failure,
            flags: spec.flags,
            deferred_sync: AtomicBool::new(false),
            max_payload,
            me: me.clone(),
            adv,
            piggybacked_lac: AtomicI64::new(spec.next_entry - 1),
            sequence_head: AtomicI64::new(spec.next_entry - 1),
            lac_flush_stop: Arc::new(tokio::sync::Notify::new()),
        }))
    }

    pub fn ledger_id(&self) -> i64 {
        self.ledger
    }

    pub fn writer_id(&self) -> u64 {
        self.writer_id
    }

    /// The largest payload one append may carry.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// (LAC, ledger length at the LAC, next entry id).
    pub fn positions(&self) -> (i64, i64, i64) {
        let st = self.state.lock();
        (st.lac, st.lac_length, st.next_entry)
    }

    pub fn ensemble(&self) -> Vec<String> {
        self.state.lock().ensemble.clone()
    }

    /// Appends one payload; `done` gets its entry id once it and every earlier entry are
    /// acknowledged by Qa bookies. Never blocks (see [`wait_for_room`](Self::wait_for_room)).
    pub fn append(&self, payload: Bytes, done: AppendDone) {
        self.append_with_id(None, payload, done)
    }

    /// Packages entry `entry` (carrying the LAC now and the length with `payload`), puts it
    /// in the pending queue at `place` (ordered by entry id) and returns the sends to its write
    /// set's live slots: what every append does under the state lock.
    fn stage(
        &self,
        st: &mut WriterState,
        place: usize,
        entry: i64,
        payload: &Bytes,
        done: AppendDone,
    ) -> Vec<EntrySend> {
        st.length += payload.len() as i64;
        let body = self.digest.package(entry, st.lac, st.length, payload);
        st.pending.insert(
            place,
            PendingAdd {
                entry,
                body: body.clone(),
                length: st.length,
                acked: vec![false; self.e],
                done: Some(done),
                started: crate::metrics::start(),
            },
        );
        client_stats().pending_adds.inc();
        write_set(entry, self.e, self.qw)
            .filter(|i| !st.failed.contains(i))
            .map(|i| EntrySend {
                index: i,
                generation: st.generations[i],
                bookie: st.ensemble[i].clone(),
                entry,
                body: body.clone(),
            })
            .collect()
    }

    /// Sends what [`stage`](Self::stage) returned, once the state lock is released.
    fn send_all(&self, sends: Vec<EntrySend>) {
        for s in sends {
            self.send(s.index, s.generation, s.bookie, s.entry, s.body);
        }
    }

    /// Refuses an entry larger than the bookies accept (the frame limit minus headers).
    fn check_payload(&self, len: usize) -> Result<(), LedgerError> {
        if len > self.max_payload {
            return Err(LedgerError::InvalidArgument(format!(
                "an entry of {len} bytes exceeds the largest entry the bookies accept ({} bytes: \
                 nettyMaxFrameSizeBytes minus headers)",
                self.max_payload
            )));
        }
        Ok(())
    }

    /// Appends with a given entry id (recovery rewrites entries at known ids, in order).
    pub fn append_with_id(&self, entry_id: Option<i64>, payload: Bytes, done: AppendDone) {
        if self.adv {
            return done(Err(LedgerError::InvalidArgument(
                "an adv ledger's appends name their entry id (append_adv)".into(),
            )));
        }
        if let Err(e) = self.check_payload(payload.len()) {
            return done(Err(e));
        }
        let sends = {
            let mut st = self.state.lock();
            if let Some(err) = refusal(&st) {
                drop(st);
                return done(Err(err));
            }
            let entry = entry_id.unwrap_or(st.next_entry);
            if entry != st.next_entry {
                let next = st.next_entry;
                drop(st);
                return done(Err(LedgerError::WriterFailed(format!(
                    "entry {entry} is not the next entry {next}"
                ))));
            }
            st.next_entry += 1;
            let place = st.pending.len();
            self.stage(&mut st, place, entry, &payload, done)
        };
        self.send_all(sends);
    }

    /// Appends every payload, keeping at most `throttle` pending, and waits for all of them.
    /// Returns the last entry id (the LAC before the call if `payloads` is empty). `interrupt`
    /// is polled while waiting; when it returns true the call returns `Interrupted` (appends
    /// already started still complete).
    pub fn append_all_blocking(
        &self,
        payloads: impl IntoIterator<Item = Bytes>,
        throttle: usize,
        interrupt: &dyn Fn() -> bool,
    ) -> Result<i64, LedgerError> {
        struct Batch {
            outstanding: usize,
            last: i64,
            error: Option<LedgerError>,
        }
        let batch = Arc::new((
            Mutex::new(Batch {
                outstanding: 0,
                last: self.positions().0,
                error: None,
            }),
            Condvar::new(),
        ));
        for payload in payloads {
            self.wait_for_room(throttle, interrupt)?;
            if let Some(e) = batch.0.lock().error.clone() {
                return Err(e);
            }
            batch.0.lock().outstanding += 1;
            let b = batch.clone();
            self.append(
                payload,
                Box::new(move |r| {
                    let mut st = b.0.lock();
                    st.outstanding -= 1;
                    match r {
                        Ok(id) => st.last = st.last.max(id),
                        Err(e) => {
                            st.error.get_or_insert(e);
                        }
                    }
                    b.1.notify_all();
                }),
            );
        }
        let mut st = batch.0.lock();
        while st.outstanding > 0 {
            batch.1.wait_for(&mut st, INTERRUPT_CHECK);
            // Never ask with a lock held: asking may take the GIL, and a thread holding the
            // GIL may be completing appends, which takes this lock (a deadlock).
            if st.outstanding > 0 && MutexGuard::unlocked(&mut st, interrupt) {
                return Err(LedgerError::Interrupted);
            }
        }
        match st.error.take() {
            Some(e) => Err(e),
            None => Ok(st.last),
        }
    }

    fn send(&self, index: usize, generation: u64, bookie: String, entry: i64, body: Bytes) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let request = self.client.add_request_with_write_flags(
            &bookie,
            self.ledger,
            entry,
            self.master_key.clone(),
            body,
            self.flags,
            self.write_flags(),
        );
        let done: Done<ReplyResult> = Box::new(move |result| {
            me.on_response(index, generation, bookie, entry, result);
        });
        self.client.send(request, done);
    }

    fn on_response(
        &self,
        index: usize,
        generation: u64,
        bookie: String,
        entry: i64,
        result: ReplyResult,
    ) {
        let mut done = Completions::default();
        let mut failure = None;
        {
            let mut st = self.state.lock();
            if st.generations.get(index) != Some(&generation) {
                return; // an answer for a slot refilled meanwhile: it no longer counts
            }
            match result {
                Ok(_) => {
                    // Pending adds are ordered by entry id (consecutive, but for an adv
                    // writer's gaps).
                    let position = st.pending.binary_search_by_key(&entry, |p| p.entry).ok();
                    if let Some(p) = position.and_then(|i| st.pending.get_mut(i)) {
                        p.acked[index] = true;
                    }
                    self.release(&mut st, &mut done);
                }
                Err(err) => {
                    let fatal = match &err {
                        ClientError::Bookie {
                            status: Status::Fenced,
                            ..
                        } => Some(LedgerError::Fenced(self.ledger)),
                        ClientError::Bookie {
                            status: Status::Unauthorized,
                            ..
                        }
                        | ClientError::TooLarge { .. } => Some(LedgerError::Bookie(err.clone())),
                        ClientError::Closed => Some(LedgerError::Closed),
                        _ => None,
                    };
                    let fatal = fatal.or_else(|| self.deferred_sync_failure(&bookie, &err));
                    if let Some(f) = fatal {
                        fail_all(&mut st, f, &mut done);
                        self.room.notify_all();
                    } else if st.failed.insert(index) {
                        failure = Some(BookieFailure {
                            ledger: self.ledger,
                            writer_id: self.writer_id,
                            index,
                            bookie,
                            error: err.to_string(),
                        });
                    }
                }
            }
        }
        done.run();
        if let Some(f) = failure {
            (self.on_failure)(f);
        }
    }

    /// Releases completed entries at the head of the queue, in order.
    fn release(&self, st: &mut WriterState, done: &mut Completions) {
        if st.changing {
            return; // a new segment starts at LAC + 1: nothing completes until it is recorded
        }
        let mut now = None;
        let stats = client_stats();
        while let Some(front) = st.pending.front() {
            let next_in_sequence = self.sequence_head.load(Ordering::Relaxed) + 1;
            if front.acked.iter().filter(|a| **a).count() < self.qa
                || front.entry != next_in_sequence
            {
                break; // not yet at Qa, or (adv) a lower entry id has not been added yet
            }
            let Some(mut p) = st.pending.pop_front() else {
                break;
            };
            self.piggybacked_lac.store(st.lac, Ordering::Relaxed);
            self.sequence_head.store(p.entry, Ordering::Relaxed);
            st.pushed = p.entry;
            st.pushed_length = p.length;
            if !self.is_deferred_sync() {
                st.lac = p.entry;
                st.lac_length = p.length;
            }
            stats.pending_adds.dec();
            if p.started.is_some() {
                let at = *now.get_or_insert_with(Instant::now);
                stats.add_entry.record_between(true, p.started, at);
            }
            if let Some(d) = p.done.take() {
                done.appends.push((d, Ok(p.entry)));
            }
        }
        if st.pending.is_empty() {
            done.drained.append(&mut st.drained);
        }
        self.room.notify_all();
    }

    /// Blocks while `max_pending` appends are outstanding (BookKeeper's `throttle`), so one
    /// client cannot push a bookie past its own in-flight limit (which would answer
    /// ETOOMANYREQUESTS and cost an ensemble change). Returns at once if the writer failed;
    /// `Interrupted` when `interrupt` says so.
    pub fn wait_for_room(
        &self,
        max_pending: usize,
        interrupt: &dyn Fn() -> bool,
    ) -> Result<(), LedgerError> {
        let mut st = self.state.lock();
        while st.pending.len() >= max_pending.max(1) && st.fatal.is_none() {
            self.room.wait_for(&mut st, INTERRUPT_CHECK);
            // Asked without the state lock, for the reason given in `append_all_blocking`.
            if st.pending.len() >= max_pending.max(1) && MutexGuard::unlocked(&mut st, interrupt) {
                return Err(LedgerError::Interrupted);
            }
        }
        Ok(())
    }

    /// Freezes the LAC for an ensemble change and returns LAC + 1, where the new segment must
    /// start: releases stop until [`change_ensemble`](Self::change_ensemble) or
    /// [`cancel_change`](Self::cancel_change).
    pub fn begin_change(&self) -> i64 {
        let mut st = self.state.lock();
        st.changing = true;
        st.lac + 1
    }

    /// Ends a change begun with [`begin_change`](Self::begin_change) without a new ensemble.
    pub fn cancel_change(&self) {
        let mut done = Completions::default();
        {
            let mut st = self.state.lock();
            st.changing = false;
            self.release(&mut st, &mut done);
        }
        done.run();
    }

    /// Installs a new ensemble from `first_entry` (which must be LAC + 1): every pending entry
    /// whose write set includes a replaced index is re-sent to the new bookie.
    pub fn change_ensemble(
        &self,
        first_entry: i64,
        ensemble: Vec<String>,
    ) -> Result<(), LedgerError> {
        let mut done = Completions::default();
        let sends = {
            let mut st = self.state.lock();
            if let Some(err) = &st.fatal {
                return Err(err.clone());
            }
            if ensemble.len() != self.e {
                return Err(LedgerError::InvalidArgument(format!(
                    "new ensemble has {} bookies, the ledger needs {}",
                    ensemble.len(),
                    self.e
                )));
            }
            if first_entry != st.lac + 1 {
                return Err(LedgerError::InvalidArgument(format!(
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
            st.changing = false;
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
            self.release(&mut st, &mut done);
            sends
        };
        done.run();
        for (index, generation, bookie, entry, body) in sends {
            self.send(index, generation, bookie, entry, body);
        }
        Ok(())
    }

    /// Fails every pending and future add (the control plane could not change the ensemble).
    pub fn fail(&self, error: LedgerError) {
        let mut done = Completions::default();
        fail_all(&mut self.state.lock(), error, &mut done);
        self.room.notify_all();
        done.run();
    }

    /// Calls `done` once nothing is pending (or the writer failed); at once if that is now.
    pub fn when_drained(&self, done: Done<()>) {
        let mut st = self.state.lock();
        if st.pending.is_empty() || st.fatal.is_some() {
            drop(st);
            done(());
        } else {
            st.drained.push(done);
        }
    }

    /// Refuses further appends; pending ones still complete.
    pub fn close(&self) {
        self.state.lock().closed = true;
        explicit_lac::stop_flush(&self.lac_flush_stop);
    }

    pub fn fatal(&self) -> Option<LedgerError> {
        self.state.lock().fatal.clone()
    }
}

/// The outcome of a force: the LAC it confirmed.
pub type ForceDone = Done<Result<i64, LedgerError>>;

/// One force waiting for every bookie of the ensemble.
struct ForceProgress {
    waiting: usize,
    done: Option<ForceDone>,
    /// When the force began (None with metrics off), for `bookkeeper_client_FORCE`.
    started: Option<Instant>,
}

impl LedgerWriter {
    /// Makes every later add carry `WriteFlag.DEFERRED_SYNC`: bookies acknowledge it once
    /// journalled, before their sync, and the LAC advances only by [`force`](Self::force).
    /// Must come before the first append. Refused over V2, which has no write flags (the Java
    /// client fails such adds with `IllegalOpException`).
    pub fn enable_deferred_sync(&self) -> Result<(), LedgerError> {
        if self.client.config().use_v2_wire_protocol {
            return Err(LedgerError::InvalidArgument(
                "WriteFlag.DEFERRED_SYNC needs the V3 protocol: the V2 protocol has no write \
                 flags (set useV2WireProtocol=false)"
                    .to_string(),
            ));
        }
        let st = self.state.lock();
        if st.next_entry != st.pushed + 1 || !st.pending.is_empty() || st.next_entry > 0 {
            return Err(LedgerError::InvalidArgument(
                "write flags are set when the ledger is created, before its first add".to_string(),
            ));
        }
        self.deferred_sync.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Whether adds carry `WriteFlag.DEFERRED_SYNC`.
    pub fn is_deferred_sync(&self) -> bool {
        self.deferred_sync.load(Ordering::SeqCst)
    }

    fn write_flags(&self) -> i32 {
        if self.is_deferred_sync() {
            protocol::v3::WRITE_FLAG_DEFERRED_SYNC
        } else {
            0
        }
    }

    /// A deferred-sync ledger cannot change its ensemble (an entry acknowledged but not forced
    /// may exist only on the failed bookie): as BookKeeper, the writer fails with a write error.
    fn deferred_sync_failure(&self, bookie: &str, err: &ClientError) -> Option<LedgerError> {
        self.is_deferred_sync().then(|| {
            LedgerError::WriterFailed(format!(
                "bookie {bookie} failed an add ({err}) and a ledger written with \
                 WriteFlag.DEFERRED_SYNC cannot change its ensemble"
            ))
        })
    }

    /// BookKeeper's `force()`: sends FORCE_LEDGER to every bookie of the current ensemble and,
    /// once all answered, advances the LAC to the last entry acknowledged in order when the
    /// force began; `done` gets that LAC. The first failure fails the force (the LAC stays).
    /// With nothing written yet it completes at once. Refused over V2 (`IllegalOpException` in
    /// the Java client).
    pub fn force(&self, done: ForceDone) {
        if self.client.config().use_v2_wire_protocol {
            return done(Err(LedgerError::InvalidArgument(
                "force() sends FORCE_LEDGER, a V3 request: set useV2WireProtocol=false".to_string(),
            )));
        }
        let (pushed, pushed_length, ensemble) = {
            let st = self.state.lock();
            if let Some(err) = &st.fatal {
                let err = err.clone();
                drop(st);
                return done(Err(err));
            }
            if st.closed {
                drop(st);
                return done(Err(LedgerError::Closed));
            }
            (st.pushed, st.pushed_length, st.ensemble.clone())
        };
        if pushed < 0 || ensemble.is_empty() {
            return done(Ok(pushed));
        }
        let progress = Arc::new(Mutex::new(ForceProgress {
            waiting: ensemble.len(),
            done: Some(done),
            started: crate::metrics::start(),
        }));
        for bookie in ensemble {
            let Some(me) = self.me.upgrade() else {
                return;
            };
            let progress = progress.clone();
            let request = self.client.force_ledger_request(&bookie, self.ledger);
            self.client.send(
                request,
                Box::new(move |result: ReplyResult| {
                    me.on_force_answer(&progress, result, pushed, pushed_length)
                }),
            );
        }
    }

    fn on_force_answer(
        &self,
        progress: &Mutex<ForceProgress>,
        result: ReplyResult,
        pushed: i64,
        pushed_length: i64,
    ) {
        let (done, started) = {
            let mut p = progress.lock();
            let done = match result {
                Err(e) => p.done.take().map(|d| (d, Err(LedgerError::Bookie(e)))),
                Ok(_) => {
                    p.waiting -= 1;
                    if p.waiting > 0 {
                        return;
                    }
                    p.done.take().map(|d| (d, Ok(pushed)))
                }
            };
            (done, p.started)
        };
        let Some((done, outcome)) = done else {
            return;
        };
        client_stats().force.record_since(outcome.is_ok(), started);
        if outcome.is_ok() {
            let mut st = self.state.lock();
            if pushed > st.lac {
                st.lac = pushed;
                st.lac_length = pushed_length;
            }
        }
        done(outcome);
    }
}

fn fail_all(st: &mut WriterState, error: LedgerError, done: &mut Completions) {
    if st.fatal.is_none() {
        st.fatal = Some(error.clone());
    }
    let stats = client_stats();
    let now = Instant::now();
    for mut p in st.pending.drain(..) {
        stats.pending_adds.dec();
        stats.add_entry.record_between(false, p.started, now);
        if let Some(d) = p.done.take() {
            done.appends.push((d, Err(error.clone())));
        }
    }
    done.drained.append(&mut st.drained);
}
