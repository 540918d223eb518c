//! Applying durable journal groups to the write cache and the ledger states, in journal order.
//! Used by the journal's sync thread and by replay; it never journals anything itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::checkpoint::Checkpointer;
use super::index::Index;
use super::journal::{Applier, JournalOp, Mark};
use super::read::ReadAheadCache;
use super::stores::Stores;
use crate::error::Result;

/// What the journals hand their durable groups to.
pub(super) struct JournalApplier {
    stores: Arc<Stores>,
    /// Flushes a full write cache (asked for, or inline during replay) and holds adds while
    /// it stays full.
    checkpointer: Arc<Checkpointer>,
    /// A deleted ledger's entries read ahead are dropped with it.
    read_ahead: Arc<ReadAheadCache>,
    /// Set while the journals replay at open: a full cache is flushed inline, as no
    /// checkpoint thread runs yet.
    replaying: AtomicBool,
}

impl JournalApplier {
    /// An applier for a storage whose journals are about to be replayed.
    pub(super) fn replaying(
        stores: Arc<Stores>,
        checkpointer: Arc<Checkpointer>,
        read_ahead: Arc<ReadAheadCache>,
    ) -> JournalApplier {
        JournalApplier {
            stores,
            checkpointer,
            read_ahead,
            replaying: AtomicBool::new(true),
        }
    }

    /// Replay is over: from now on the checkpoint thread flushes.
    pub(super) fn replayed(&self) {
        self.replaying.store(false, Ordering::Release);
    }

    /// Applies one record to the index (and the write cache); returns the active generation's
    /// bytes after an entry, else None.
    fn apply_op(&self, idx: &mut Index, op: &JournalOp, no_key: &Arc<[u8]>) -> Option<usize> {
        match op {
            JournalOp::Key { ledger, key } => {
                let st = idx.get_or_create(*ledger, key);
                if st.master_key != *key {
                    st.master_key = key.clone();
                    idx.touch_meta(*ledger);
                }
            }
            JournalOp::Entry {
                ledger,
                entry,
                data,
                crc,
            } => {
                // In journal order with the other records: a delete later in the group must
                // drop this entry, an add after a delete must survive it.
                let active = self.stores.cache.put(*ledger, *entry, data.clone(), *crc);
                let st = idx.get_or_create(*ledger, no_key);
                if let Some(lac) = piggybacked_lac(data) {
                    st.max_lac = st.max_lac.max(lac);
                }
                // Persisted by the flush that writes the entry (it marks the ledgers of its
                // generation changed), not tracked per entry here.
                if st.last_entry.is_none_or(|last| *entry > last) {
                    st.last_entry = Some(*entry);
                }
                return Some(active);
            }
            JournalOp::Fence { ledger } => {
                let st = idx.get_or_create(*ledger, no_key);
                st.fenced = true;
                st.fence_durable = true;
                idx.touch_meta(*ledger);
            }
            JournalOp::Lac { ledger, lac } => {
                let st = idx.get_or_create(*ledger, no_key);
                // As BookKeeper's bookie (`TransientLedgerInfo.setExplicitLac`): the explicit
                // LAC raises the LAC the bookie reports, so long-poll reads see it too.
                if let Some(value) = explicit_lac_value(lac) {
                    st.max_lac = st.max_lac.max(value);
                }
                st.explicit_lac = Some(lac.clone());
                idx.touch_meta(*ledger);
            }
            JournalOp::Delete { ledger } => {
                idx.delete(*ledger);
                self.stores.cache.forget_ledger(*ledger);
                self.read_ahead.forget_ledger(*ledger);
            }
        }
        None
    }
}

impl Applier for JournalApplier {
    fn apply(&self, journal: usize, ops: &[JournalOp], mark: Mark) -> Result<()> {
        let mut active = 0usize;
        {
            let no_key: Arc<[u8]> = Arc::from(&[][..]);
            let mut idx = self.stores.index.write();
            for op in ops {
                if let Some(bytes) = self.apply_op(&mut idx, op, &no_key) {
                    active = bytes;
                }
            }
            if let Some(m) = idx.marks.get_mut(journal) {
                // Why: groups are applied in journal order; a mark going back would make the
                // next checkpoint let go of journal files holding records not yet applied.
                assert!(mark >= *m, "journal {journal}'s mark moved backwards");
                *m = mark;
            }
        }
        if self.stores.cache.flush_due(active) {
            if self.replaying.load(Ordering::Acquire) {
                self.checkpointer.flush(false)?;
            } else {
                self.checkpointer.request_flush();
            }
        }
        self.checkpointer.wait_for_room()
    }
}

/// The LAC of a WRITE_LAC body (ledger id, LAC, digest), if it is long enough.
fn explicit_lac_value(body: &[u8]) -> Option<i64> {
    let field = body.get(8..16)?;
    let mut lac = [0u8; 8];
    lac.copy_from_slice(field);
    Some(i64::from_be_bytes(lac))
}

/// The LAC an entry carries in its header (ledger id, entry id, LAC, ...), if it has one.
pub(crate) fn piggybacked_lac(entry: &[u8]) -> Option<i64> {
    let field = entry.get(16..24)?;
    let mut lac = [0u8; 8];
    lac.copy_from_slice(field);
    Some(i64::from_be_bytes(lac))
}
