//! The storage's data below the journal: the write cache, the entry logs and the index (ledger
//! states in memory, locations in segments). Every part reads or changes it through here; it
//! answers questions about ledgers, but runs no thread, journals nothing and reads no entry.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

use super::entrylog::EntryLogger;
use super::ids::LAST_ENTRY;
use super::index::segments::SegmentSet;
use super::index::{Index, LedgerState};
use super::journal::Mark;
use super::lifecycle::ScrubState;
use super::writecache::WriteCache;
use crate::error::{Result, StorageError};

/// The write cache, the entry logs and the index of one storage.
pub(super) struct Stores {
    pub(super) entrylog: EntryLogger,
    /// Ledger states, journal marks and the next segment number.
    pub(super) index: RwLock<Index>,
    /// Entries journalled, not yet in an entry log.
    pub(super) cache: WriteCache,
    /// The live index segments and their block cache.
    pub(super) segments: SegmentSet,
    /// The space kept back for collection when the disk fills (`diskReservedSpaceMB`).
    pub(super) reserve: super::reserve::SpaceReserve,
    /// The scrubber's findings, and the entries reads refuse until they are repaired.
    pub(super) scrub: ScrubState,
}

impl Stores {
    /// What `read` returns from the ledger's state; NoLedger if the ledger does not exist.
    pub(super) fn ledger<T>(&self, ledger: u64, read: impl FnOnce(&LedgerState) -> T) -> Result<T> {
        let idx = self.index.read();
        let st = idx
            .ledgers
            .get(&ledger)
            .ok_or(StorageError::NoLedger(ledger))?;
        Ok(read(st))
    }

    /// The first segment number a ledger's entries may be in (0 when it is unknown now).
    pub(super) fn since_of(&self, ledger: u64) -> u64 {
        self.ledger(ledger, |st| st.since_seq).unwrap_or(0)
    }

    /// The entry id (`LAST_ENTRY` resolved) and the ledger's first live segment number.
    pub(super) fn resolve(&self, ledger: u64, entry: u64) -> Result<(u64, u64)> {
        let (last, since) = self.ledger(ledger, |st| (st.last_entry, st.since_seq))?;
        let entry = if entry == LAST_ENTRY {
            last.ok_or(StorageError::NoEntry { ledger, entry })?
        } else {
            entry
        };
        Ok((entry, since))
    }

    /// The number the next segment (a flush's, a merge's, a compaction's) takes.
    pub(super) fn next_segment_seq(&self) -> u64 {
        let mut idx = self.index.write();
        idx.next_seq += 1;
        idx.next_seq - 1
    }

    /// Highest stored entry id of the ledger.
    pub(super) fn last_entry_id(&self, ledger: u64) -> Result<u64> {
        self.ledger(ledger, |st| st.last_entry)?
            .ok_or(StorageError::NoEntry {
                ledger,
                entry: LAST_ENTRY,
            })
    }

    /// The highest LAC the ledger's applied entries carried since the bookie started (-1:
    /// none yet).
    pub(super) fn max_lac(&self, ledger: u64) -> Result<i64> {
        self.ledger(ledger, |st| st.max_lac)
    }

    /// Raises the ledger's known LAC to `lac` (found in its last entry's header).
    pub(super) fn note_lac(&self, ledger: u64, lac: i64) {
        if let Some(st) = self.index.write().ledgers.get_mut(&ledger) {
            st.max_lac = st.max_lac.max(lac);
        }
    }

    pub(super) fn is_fenced(&self, ledger: u64) -> Result<bool> {
        self.ledger(ledger, |st| st.fenced)
    }

    pub(super) fn explicit_lac(&self, ledger: u64) -> Result<Option<Bytes>> {
        self.ledger(ledger, |st| st.explicit_lac.clone())
    }

    pub(super) fn master_key(&self, ledger: u64) -> Result<Arc<[u8]>> {
        self.ledger(ledger, |st| st.master_key.clone())
    }

    pub(super) fn ledger_exists(&self, ledger: u64) -> bool {
        self.index.read().ledgers.contains_key(&ledger)
    }

    /// Every ledger stored, ascending.
    pub(super) fn list_ledgers(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.index.read().ledgers.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Per journal directory: the position up to which its records are durable and applied.
    pub(super) fn journal_marks(&self) -> Vec<Mark> {
        self.index.read().marks.clone()
    }

    /// Per entry log: the ledger directory (`current/`) holding it.
    pub(super) fn entry_log_dirs(&self) -> HashMap<u32, PathBuf> {
        let el = &self.entrylog;
        el.placed_logs()
            .into_iter()
            .filter_map(|(id, dir, _)| el.dirs().path_of(dir).map(|p| (id, p.to_path_buf())))
            .collect()
    }
}
