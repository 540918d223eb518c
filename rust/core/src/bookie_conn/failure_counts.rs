//! Per-bookie failure figures of a client: how many requests to each bookie failed, for the
//! health check (quarantine) and for sticky reads in Python. It counts; it never decides what a
//! count means or which bookie to use.
//!
//! Two counts per bookie, kept across reconnections:
//! - `errors`: failures BookKeeper's client counts toward quarantine (`recordError` of its
//!   per-channel pool): timeouts and bookie answers other than the expected ones (no such
//!   entry or ledger, fenced, read-only). A refused or dropped connection is expected too
//!   (BookKeeper's `BookieHandleNotAvailableException`): a bookie that is down leaves the
//!   registration instead. Taken and reset by [`FailureCounts::take_errors`] once per interval.
//! - `failures`: every failed request the bookie could be blamed for (all but a request too
//!   large to send or a closed client), never reset: a reader compares it
//!   with the value it saw before to learn that a bookie failed since.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::reply::{ClientError, ReplyResult};
use crate::protocol::Status;

/// The counts of one bookie, shared by its successive connections.
#[derive(Debug, Default)]
pub(super) struct BookieCounts {
    errors: AtomicU64,
    failures: AtomicU64,
}

impl BookieCounts {
    /// Counts the outcome of one request (a request refused before it left, too large or on
    /// a closed client, says nothing about the bookie).
    pub(super) fn record(&self, result: &ReplyResult) {
        let Err(err) = result else { return };
        if matches!(err, ClientError::TooLarge { .. } | ClientError::Closed) {
            return;
        }
        self.failures.fetch_add(1, Ordering::Relaxed);
        if counts_toward_quarantine(err) {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether BookKeeper's client would record `err` against its bookie (everything but its
/// `EXPECTED_BK_OPERATION_ERRORS`, and nothing the bookie never saw).
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

/// Every bookie's counts. One entry per bookie address the client ever sent to: bounded by
/// the bookies of the cluster, as the connections are.
#[derive(Debug, Default)]
pub(super) struct FailureCounts {
    by_bookie: Mutex<HashMap<String, Arc<BookieCounts>>>,
}

impl FailureCounts {
    /// The counts of `bookie`, made on first use.
    pub(super) fn of(&self, bookie: &str) -> Arc<BookieCounts> {
        let mut map = self.by_bookie.lock();
        if let Some(c) = map.get(bookie) {
            return c.clone();
        }
        let c = Arc::new(BookieCounts::default());
        map.insert(bookie.to_string(), c.clone());
        c
    }

    /// Counts the outcome of a request to `bookie` that failed before it had a connection.
    pub(super) fn record(&self, bookie: &str, result: &ReplyResult) {
        if result.is_err() {
            self.of(bookie).record(result);
        }
    }

    /// Each bookie's `errors` since the last call (bookies with none left out), reset to 0.
    pub(super) fn take_errors(&self) -> Vec<(String, u64)> {
        let map = self.by_bookie.lock();
        map.iter()
            .filter_map(|(bookie, c)| {
                let n = c.errors.swap(0, Ordering::Relaxed);
                (n > 0).then(|| (bookie.clone(), n))
            })
            .collect()
    }

    /// Every failed request to `bookie` since the client started (0 for one never used).
    pub(super) fn failures(&self, bookie: &str) -> u64 {
        self.by_bookie
            .lock()
            .get(bookie)
            .map_or(0, |c| c.failures.load(Ordering::Relaxed))
    }
}
