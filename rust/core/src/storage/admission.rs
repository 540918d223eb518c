//! Write admission: every add, fence, explicit LAC and deletion is checked here (ids, master
//! key, fence) and handed to the journal that owns its ledger. It owns the order of a ledger's
//! fences and adds in the journal; it never applies a record (the journal's applier does, once
//! the record is durable).

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};

use super::ids::check_id;
use super::index::LedgerState;
use super::journal::{Completion, Journal, JournalOp};
use super::stats::StorageStats;
use super::stores::Stores;
use crate::error::{Result, StorageError};

/// Stripes of the admission locks (adds and fences of ledgers in one stripe serialise briefly).
const ADMISSION_STRIPES: usize = 64;

/// An add that passed its checks: the journal it goes to, its ledger's key, and the ledger's
/// stripe, held until the entry is in the journal queue.
pub(super) struct Admitted<'a> {
    journal: &'a Journal,
    key: Arc<[u8]>,
    ledger: u64,
    entry: u64,
    _stripe: MutexGuard<'a, ()>,
}

impl Admitted<'_> {
    /// Queues the entry, waiting for room in the journal queue; `done` is called once it is
    /// durable (or failed).
    pub(super) fn submit(self, data: Bytes, done: Completion) -> Result<()> {
        let op = JournalOp::entry(self.ledger, self.entry, data);
        self.journal.submit(op, Some(self.key), done)
    }

    /// As [`submit`](Self::submit), but fails with `QueueFull` (dropping `done`) instead of
    /// waiting for room in the journal queue.
    pub(super) fn try_submit(self, data: Bytes, done: Completion) -> Result<()> {
        let op = JournalOp::entry(self.ledger, self.entry, data);
        self.journal.try_submit(op, Some(self.key), done)
    }

    /// Deferred sync: queues the entry (waiting for room when `blocking`, else failing with
    /// `QueueFull`); `done` is called once it is written to the journal, before its sync.
    pub(super) fn submit_deferred_sync(
        self,
        data: Bytes,
        blocking: bool,
        done: Completion,
    ) -> Result<()> {
        let op = JournalOp::entry(self.ledger, self.entry, data);
        self.journal
            .submit_deferred_sync(op, Some(self.key), done, blocking)
    }
}

/// Admission of one storage's writes.
pub(super) struct Admission {
    stores: Arc<Stores>,
    journals: Arc<[Journal]>,
    stats: Arc<StorageStats>,
    /// Per ledger (striped): an add's fence check and journal submission, or a fence's flag
    /// and journal submission, happen under it, so journal order matches fence order.
    stripes: Vec<Mutex<()>>,
}

impl Admission {
    pub(super) fn new(
        stores: Arc<Stores>,
        journals: Arc<[Journal]>,
        stats: Arc<StorageStats>,
    ) -> Admission {
        Admission {
            stores,
            journals,
            stats,
            stripes: (0..ADMISSION_STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    fn journal_for(&self, ledger: u64) -> &Journal {
        &self.journals[(ledger % self.journals.len() as u64) as usize]
    }

    /// The lock ordering `ledger`'s fence check and journal submission.
    fn stripe(&self, ledger: u64) -> MutexGuard<'_, ()> {
        self.stripes[(ledger % ADMISSION_STRIPES as u64) as usize].lock()
    }

    /// Checks an add (ids, key, fence) and counts it; the entry goes to its journal through
    /// what this returns.
    ///
    /// The ledger's stripe is held from the fence check to the journal: an add admitted before
    /// a fence is journalled before it, so a fence's durability covers every add it did not
    /// refuse (see `fence`).
    pub(super) fn admit(
        &self,
        ledger: u64,
        entry: u64,
        master_key: &[u8],
        recovery: bool,
        data: &Bytes,
    ) -> Result<Admitted<'_>> {
        check_id("ledger id", ledger)?;
        check_id("entry id", entry)?;
        let stripe = self.stripe(ledger);
        let key = self.writable_key(ledger, master_key, recovery)?;
        self.stats.add_entry_bytes.ok.record(data.len() as u64);
        self.stats.write_bytes.add(data.len() as u64);
        Ok(Admitted {
            journal: self.journal_for(ledger),
            key,
            ledger,
            entry,
            _stripe: stripe,
        })
    }

    /// Fences the ledger, creating it with `master_key` if this bookie does not know it yet.
    /// `done` runs once the fence is durable. Returns whether the ledger was already fenced.
    pub(super) fn fence(&self, ledger: u64, master_key: &[u8], done: Completion) -> Result<bool> {
        check_id("ledger id", ledger)?;
        // No add of this ledger is between its fence check and the journal meanwhile: every
        // add before the fence record in the journal is applied (readable) when it is durable.
        let _admission = self.stripe(ledger);
        let (was_fenced, durable, key) = {
            let mut idx = self.stores.index.write();
            let key = Arc::from(master_key);
            let st = idx.get_or_create(ledger, &key);
            if *st.master_key != *master_key {
                return Err(StorageError::Unauthorized(ledger));
            }
            let was = st.fenced;
            st.fenced = true;
            (was, st.fence_durable, st.master_key.clone())
        };
        // Why: a fence made durable must have been flagged first, or adds admitted after the
        // durable fence could slip in ahead of it (their check reads the flag).
        assert!(
            !durable || was_fenced,
            "a durable fence of ledger {ledger} was not flagged"
        );
        if durable {
            done(Ok(()));
            return Ok(true);
        }
        // A second fence before the first is durable journals again, so it too waits for
        // durability: journal order puts it after the first.
        self.journal_for(ledger)
            .submit(JournalOp::Fence { ledger }, Some(key), done)?;
        Ok(was_fenced)
    }

    /// Records the ledger's explicit LAC blob; `done` runs once it is durable.
    pub(super) fn set_explicit_lac(
        &self,
        ledger: u64,
        master_key: &[u8],
        lac: Bytes,
        done: Completion,
    ) -> Result<()> {
        check_id("ledger id", ledger)?;
        let key = self.writable_key(ledger, master_key, true)?;
        self.journal_for(ledger)
            .submit(JournalOp::Lac { ledger, lac }, Some(key), done)
    }

    /// Forces the ledger: `done` runs once every record of its journal queued before this call
    /// (so every entry of the ledger accepted before it) is durable.
    pub(super) fn force_ledger(&self, ledger: u64, done: Completion) -> Result<()> {
        check_id("ledger id", ledger)?;
        self.journal_for(ledger).force(ledger, done)
    }

    /// Deletes the ledger; `done` runs once the deletion is durable.
    pub(super) fn delete_ledger(&self, ledger: u64, done: Completion) -> Result<()> {
        if !self.stores.ledger_exists(ledger) {
            return Err(StorageError::NoLedger(ledger));
        }
        self.journal_for(ledger)
            .submit(JournalOp::Delete { ledger }, None, done)
    }

    /// Checks key and fence for a write and returns the ledger's key, creating the ledger with
    /// `master_key` on its first write.
    fn writable_key(&self, ledger: u64, master_key: &[u8], recovery: bool) -> Result<Arc<[u8]>> {
        let check = |st: &LedgerState| {
            if *st.master_key != *master_key {
                return Err(StorageError::Unauthorized(ledger));
            }
            if st.fenced && !recovery {
                return Err(StorageError::Fenced(ledger));
            }
            Ok(st.master_key.clone())
        };
        if let Some(st) = self.stores.index.read().ledgers.get(&ledger) {
            return check(st);
        }
        let mut idx = self.stores.index.write();
        let st = idx.get_or_create(ledger, &Arc::from(master_key));
        check(st)
    }
}
