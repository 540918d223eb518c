//! Deferred sync's bookkeeping: the ledgers whose acknowledged deferred-sync records a failed
//! write, sync or apply may have lost, so that no later force of theirs answers OK. It holds
//! state only; the journal and sync threads decide when a record is lost.
//!
//! A deferred-sync record is acknowledged before its sync (BookKeeper's `ackBeforeSync`); if
//! that sync then fails, the caller already holds an acknowledgement, and only a failing force
//! can tell it. (A Java bookie stops when a journal sync fails; a pybkx journal writes again
//! after a failure, so it must remember.)

use std::collections::HashSet;

use parking_lot::Mutex;

use crate::error::StorageError;

/// The ledgers with acknowledged deferred-sync records that never became durable (or were not
/// applied). One id per such ledger (a failure is rare and loses at most the ledgers of the
/// groups in flight); the ledger's deletion removes it.
#[derive(Debug, Default)]
pub(super) struct LostDeferred(Mutex<HashSet<u64>>);

impl LostDeferred {
    /// Records that acknowledged deferred-sync records of `ledgers` may be lost.
    pub(super) fn mark(&self, ledgers: &[u64]) {
        if ledgers.is_empty() {
            return;
        }
        let mut lost = self.0.lock();
        for ledger in ledgers {
            if lost.insert(*ledger) {
                log::error!(
                    "ledger {ledger}: deferred-sync entries were acknowledged and then a journal \
                     failure lost them; its forces fail from now on"
                );
            }
        }
    }

    pub(super) fn contains(&self, ledger: u64) -> bool {
        self.0.lock().contains(&ledger)
    }

    /// The ledger was deleted: a ledger created again with its id starts clean.
    pub(super) fn forget(&self, ledger: u64) {
        self.0.lock().remove(&ledger);
    }

    /// A force's outcome: `synced`, unless the ledger lost acknowledged records.
    pub(super) fn force_outcome(
        &self,
        ledger: u64,
        synced: crate::error::Result<()>,
    ) -> crate::error::Result<()> {
        synced?;
        if self.contains(ledger) {
            return Err(lost_error(ledger));
        }
        Ok(())
    }
}

/// A force's answer when a journal failure may have lost deferred-sync records it acknowledged.
pub(super) fn lost_error(ledger: u64) -> StorageError {
    StorageError::Io {
        context: format!("forcing ledger {ledger}"),
        source: std::io::Error::other(
            "a journal write or sync failed after deferred-sync entries of this ledger were \
             acknowledged: they may not be durable",
        ),
    }
}
