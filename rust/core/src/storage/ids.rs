//! Ledger and entry ids as the storage takes them: the id hasher of its per-ledger maps, the
//! entry id that means "the last one", and the range check every write applies. Plain types
//! and checks; it holds no state.

use std::collections::HashMap;

use crate::error::{Result, StorageError};

/// Hashes a ledger id with one multiplication, for the maps every add and read looks up
/// (SipHash's tens of nanoseconds per lookup buy collision resistance these maps do not need:
/// ledger ids come from the metadata store's counter).
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ *b as u64).wrapping_mul(0x0100_0000_01B3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by ledger id, hashed by [`IdHasher`].
pub type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

/// Entry id that asks for the highest stored entry (BookKeeper's entry id -1).
pub const LAST_ENTRY: u64 = u64::MAX;

/// Ledger and entry ids are non-negative Java longs.
pub(super) const MAX_ID: u64 = i64::MAX as u64;

/// Refuses an id a Java client could not have sent (InvalidArgument).
pub(super) fn check_id(what: &str, id: u64) -> Result<()> {
    if id > MAX_ID {
        return Err(StorageError::InvalidArgument(format!(
            "{what} {id} is out of range"
        )));
    }
    Ok(())
}
