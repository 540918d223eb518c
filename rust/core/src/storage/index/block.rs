//! What the index holds per entry, and a decoded segment block: the unit segments read and
//! the block cache keeps. It never touches a file.

use crate::storage::entrylog::Location;

/// One indexed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub ledger: u64,
    pub entry: u64,
    pub at: Location,
}

impl IndexEntry {
    pub(super) fn key(&self) -> (u64, u64) {
        (self.ledger, self.entry)
    }
}

/// A decoded block: its entries sorted by (ledger, entry).
pub struct Block {
    pub entries: Vec<IndexEntry>,
}

impl Block {
    /// Memory a cached block is charged for.
    pub fn charge(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<IndexEntry>() + 64
    }

    pub(super) fn find(&self, ledger: u64, entry: u64) -> Option<usize> {
        self.entries
            .binary_search_by(|e| e.key().cmp(&(ledger, entry)))
            .ok()
    }
}
