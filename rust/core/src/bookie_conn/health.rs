//! Per-bookie health figures the client keeps as requests complete, one record per bookie
//! shared by its successive connections: requests pending; the time of the last failure (a
//! timeout, a lost connection, EIO, a failed TLS) and of the last slow answer (a read that needed
//! a speculative request to another replica), which order reads; and two counts for the
//! decisions Python makes (quarantine, sticky reads):
//! - `errors`: failures BookKeeper's client counts toward quarantine (`recordError` of its
//!   per-channel pool, see [`counts_toward_quarantine`]); taken and reset once per health-check
//!   interval;
//! - `blamed`: every failed request the bookie could be blamed for (all but a request too large
//!   to send or a closed client), never reset: a reader compares it with the value it saw before
//!   to learn that a bookie failed since.
//!
//! This file only counts; it never decides what a count means or which bookie to use.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::reply::{ClientError, ReplyResult};
use crate::done::Done;
use crate::protocol::Status;

/// The live figures of one bookie, shared by every request to it (they outlive connections).
#[derive(Debug)]
pub(super) struct BookieHealth {
    /// When the client started: times below are milliseconds after it, plus one (0: never).
    born: Instant,
    pending: AtomicU64,
    last_failure_ms: AtomicU64,
    last_slow_ms: AtomicU64,
    failures: AtomicU64,
    slow_answers: AtomicU64,
    errors: AtomicU64,
    blamed: AtomicU64,
}

/// A bookie's figures at one moment: what `BookieClient::bookie_health` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthFigures {
    /// Requests sent and not completed yet (adds and reads).
    pub pending: u64,
    /// How long ago the bookie last failed a request (timed out, lost its connection or
    /// answered EIO); None: never.
    pub since_failure: Option<Duration>,
    /// How long ago a read of it needed a speculative request to another replica that answered
    /// first; None: never.
    pub since_slow: Option<Duration>,
    /// Failures since the client started.
    pub failures: u64,
    /// Slow answers since the client started.
    pub slow_answers: u64,
}

impl BookieHealth {
    pub(super) fn new(born: Instant) -> Self {
        BookieHealth {
            born,
            pending: AtomicU64::new(0),
            last_failure_ms: AtomicU64::new(0),
            last_slow_ms: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            slow_answers: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            blamed: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis().min(u64::MAX as u128 - 1) as u64 + 1
    }

    fn since(&self, at_ms: u64) -> Option<Duration> {
        (at_ms > 0).then(|| Duration::from_millis(self.now_ms().saturating_sub(at_ms)))
    }

    pub(super) fn note_failure(&self) {
        self.last_failure_ms.store(self.now_ms(), Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn note_slow(&self) {
        self.last_slow_ms.store(self.now_ms(), Ordering::Relaxed);
        self.slow_answers.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn figures(&self) -> HealthFigures {
        HealthFigures {
            pending: self.pending.load(Ordering::Relaxed),
            since_failure: self.since(self.last_failure_ms.load(Ordering::Relaxed)),
            since_slow: self.since(self.last_slow_ms.load(Ordering::Relaxed)),
            failures: self.failures.load(Ordering::Relaxed),
            slow_answers: self.slow_answers.load(Ordering::Relaxed),
        }
    }

    /// Counts a request pending until `done` is called, then its outcome (see [`record`]).
    ///
    /// [`record`]: BookieHealth::record
    pub(super) fn track(self: std::sync::Arc<Self>, done: Done<ReplyResult>) -> Done<ReplyResult> {
        self.pending.fetch_add(1, Ordering::Relaxed);
        Box::new(move |result: ReplyResult| {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            self.record(&result);
            done(result)
        })
    }

    /// Counts the outcome of one request, sent or refused before it left (a request too large
    /// or on a closed client says nothing about the bookie).
    pub(super) fn record(&self, result: &ReplyResult) {
        let Err(err) = result else { return };
        if matches!(err, ClientError::TooLarge { .. } | ClientError::Closed) {
            return;
        }
        self.blamed.fetch_add(1, Ordering::Relaxed);
        if counts_toward_quarantine(err) {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        if is_failure(err) {
            self.note_failure();
        }
    }

    /// The quarantine errors since the last call, reset to 0.
    pub(super) fn take_errors(&self) -> u64 {
        self.errors.swap(0, Ordering::Relaxed)
    }

    /// Every failed request the bookie could be blamed for since the client started.
    pub(super) fn blamed(&self) -> u64 {
        self.blamed.load(Ordering::Relaxed)
    }
}

/// Whether BookKeeper's client would record `err` against its bookie toward quarantine
/// (everything but its `EXPECTED_BK_OPERATION_ERRORS`, and nothing the bookie never saw). A
/// refused or dropped connection is expected too (BookKeeper's
/// `BookieHandleNotAvailableException`): a bookie that is down leaves the registration instead.
pub fn counts_toward_quarantine(err: &ClientError) -> bool {
    match err {
        // A bookie whose TLS fails serves this client nothing: BookKeeper counts its
        // SecurityException as any other error.
        ClientError::Timeout { .. } | ClientError::Security { .. } => true,
        ClientError::Bookie { status, .. } => !matches!(
            status,
            Status::NoEntry | Status::NoLedger | Status::Fenced | Status::ReadOnly
        ),
        ClientError::Unavailable { .. } | ClientError::TooLarge { .. } | ClientError::Closed => {
            false
        }
    }
}

/// Whether an error says something about the bookie's health: not answering, not reachable,
/// or unable to read its own disk. Missing entries, fencing and refusals are answers.
fn is_failure(e: &ClientError) -> bool {
    match e {
        // A bookie whose TLS fails cannot serve this client: read it last.
        ClientError::Timeout { .. }
        | ClientError::Unavailable { .. }
        | ClientError::Security { .. } => true,
        ClientError::Bookie { status, .. } => *status == Status::Io,
        ClientError::TooLarge { .. } | ClientError::Closed => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn read_error(status: Status) -> ClientError {
        ClientError::Bookie {
            bookie: "b".into(),
            op: "read",
            status,
        }
    }

    #[test]
    fn a_request_is_pending_until_done_and_only_health_errors_are_failures() {
        let health = Arc::new(BookieHealth::new(Instant::now()));
        let (tx, rx) = std::sync::mpsc::channel();
        let done = health.clone().track(Box::new(move |r: ReplyResult| {
            let _ = tx.send(r.is_ok());
        }));
        assert_eq!(health.figures().pending, 1);
        done(Err(ClientError::Timeout {
            bookie: "b".into(),
            op: "read",
        }));
        assert_eq!(
            rx.recv().ok(),
            Some(false),
            "the outcome still reaches the caller"
        );
        let f = health.figures();
        assert_eq!((f.pending, f.failures), (0, 1));
        assert!(f.since_failure.is_some() && f.since_slow.is_none());
        // A missing entry or a fenced ledger is an answer; EIO is a failure.
        health.clone().track(Box::new(|_| {}))(Err(read_error(Status::NoEntry)));
        health.clone().track(Box::new(|_| {}))(Err(read_error(Status::Fenced)));
        assert_eq!(health.figures().failures, 1);
        health.clone().track(Box::new(|_| {}))(Err(read_error(Status::Io)));
        assert_eq!(health.figures().failures, 2);
        health.note_slow();
        let f = health.figures();
        assert_eq!((f.slow_answers, f.pending), (1, 0));
        assert!(f.since_slow.is_some());
    }
}
