//! Applying durable journal groups to the entry logs and the index, in journal order. Used by
//! the journal's sync thread and by replay; it never journals anything itself.

use std::sync::Arc;

use parking_lot::RwLock;

use super::entrylog::{EntryLogger, Location};
use super::index::Index;
use super::journal::{Applier, JournalOp, Mark};
use crate::error::{Result, StorageError};

/// What the journal threads apply to: entry logs and index.
pub(super) struct Shared {
    pub(super) entrylog: EntryLogger,
    pub(super) index: RwLock<Index>,
}

impl Applier for Shared {
    fn apply(&self, journal: usize, ops: &[JournalOp], mark: Mark) -> Result<()> {
        let mut locations: Vec<Location> = Vec::new();
        self.entrylog.append(
            ops.iter().filter_map(|op| match op {
                JournalOp::Entry {
                    ledger,
                    entry,
                    data,
                } => Some((*ledger, *entry, &data[..])),
                _ => None,
            }),
            &mut locations,
        )?;
        if !locations.is_empty() {
            // Readers may only see locations whose bytes the OS already has.
            self.entrylog.flush()?;
        }
        let no_key: Arc<[u8]> = Arc::from(&[][..]);
        let mut idx = self.index.write();
        let mut locs = locations.into_iter();
        for op in ops {
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
                } => {
                    let Some(at) = locs.next() else {
                        return Err(StorageError::Corruption("entry log lost a location".into()));
                    };
                    idx.set_location(*ledger, *entry, at, &no_key);
                    if let Some(lac) = piggybacked_lac(data) {
                        let st = idx.get_or_create(*ledger, &no_key);
                        st.max_lac = st.max_lac.max(lac);
                    }
                }
                JournalOp::Fence { ledger } => {
                    let st = idx.get_or_create(*ledger, &no_key);
                    st.fenced = true;
                    st.fence_durable = true;
                    idx.touch_meta(*ledger);
                }
                JournalOp::Lac { ledger, lac } => {
                    idx.get_or_create(*ledger, &no_key).explicit_lac = Some(lac.clone());
                    idx.touch_meta(*ledger);
                }
                JournalOp::Delete { ledger } => idx.delete(*ledger),
            }
        }
        if let Some(m) = idx.marks.get_mut(journal) {
            *m = mark;
        }
        Ok(())
    }
}

/// The LAC an entry carries in its header (ledger id, entry id, LAC, ...), if it has one.
pub(crate) fn piggybacked_lac(entry: &[u8]) -> Option<i64> {
    let field = entry.get(16..24)?;
    let mut lac = [0u8; 8];
    lac.copy_from_slice(field);
    Some(i64::from_be_bytes(lac))
}
