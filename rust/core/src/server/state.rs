//! What every connection of one server shares: the storage, the limits, the read-only state,
//! the metrics, the count of open connections, and the watch that wakes long-poll reads. It
//! holds state; it never reads or writes a socket.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use super::stats::ServerStats;
use crate::config::ServerConfig;
use crate::storage::LedgerStorage;

/// What every connection of one server shares.
pub(crate) struct ServerState {
    pub(super) storage: Arc<LedgerStorage>,
    pub(super) cfg: ServerConfig,
    pub(super) read_only: AtomicBool,
    /// While read-only: whether high-priority adds (recovery) are still taken. BookKeeper's
    /// `availableForHighPriorityWrites`: false once no directory has
    /// `minUsableSizeForHighPriorityWrites` free.
    pub(super) high_priority_writes: AtomicBool,
    pub(super) stats: ServerStats,
    /// Open connections; the server waits for them to drain on stop.
    pub(super) live: AtomicUsize,
    pub(super) drained: tokio::sync::Notify,
    /// Wakes long-poll reads when adds complete.
    pub(super) lac_watch: Arc<LacWatch>,
    /// The read threads (`numReadWorkerThreads`); None (0 threads): reads run inline on their
    /// connection's task.
    pub(super) reads: Option<super::reads::ReadPool>,
}

/// Long-poll reads waiting for a ledger's LAC to pass what they asked: each add that completes
/// while some wait wakes them to look again (they also look every `LONG_POLL_TICK`, which
/// covers an add submitted just before a read began to wait). Their number is bounded by the
/// read slots they hold (`maxPendingReadRequestsPerThread`).
#[derive(Default)]
pub(crate) struct LacWatch {
    waiting: AtomicUsize,
    notify: tokio::sync::Notify,
    /// Set by `stop`: waiting reads answer with the LAC they know instead of holding their
    /// connection (and the server's drain) until their deadline.
    stopping: AtomicBool,
}

impl LacWatch {
    /// This watch if some long-poll read waits now (an add completing later wakes them).
    pub(super) fn if_waited(self: &Arc<Self>) -> Option<Arc<Self>> {
        (self.waiting.load(std::sync::atomic::Ordering::Relaxed) > 0).then(|| self.clone())
    }

    pub(super) fn advanced(&self) {
        self.notify.notify_waiters();
    }

    /// Wakes every waiting read for good (the server stops).
    pub(super) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// A long-poll read counted as waiting while it lives.
pub(crate) struct LacWaiter(Arc<LacWatch>);

impl LacWaiter {
    pub(super) fn new(watch: &Arc<LacWatch>) -> Self {
        watch
            .waiting
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        LacWaiter(watch.clone())
    }

    pub(super) fn notify(&self) -> &tokio::sync::Notify {
        &self.0.notify
    }

    /// True once the server stops: answer now.
    pub(super) fn stopping(&self) -> bool {
        self.0.stopping.load(Ordering::SeqCst)
    }
}

impl Drop for LacWaiter {
    fn drop(&mut self) {
        self.0
            .waiting
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl ServerState {
    /// As BookKeeper's WriteEntryProcessor: a read-only bookie refuses an add unless it is
    /// high-priority and the bookie is still available for high-priority writes.
    pub(crate) fn refuses_add(&self, high_priority: bool) -> bool {
        self.read_only.load(Ordering::Relaxed)
            && !(high_priority && self.high_priority_writes.load(Ordering::Relaxed))
    }
}
