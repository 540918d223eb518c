//! A replica's digest of what it stores of one ledger in an entry range, for the cross-replica
//! check: the count of the entries it holds there, their bytes, and a SHA-1 over (entry id,
//! SHA-1 of the stored entry) in entry order, optionally with each entry's own SHA-1. The
//! entries are read through the storage's range reads (record CRC32C checked), hashed where
//! they are read, and never handed to the caller. It decides nothing about which replica is
//! right (the bookie's checker compares) and never writes.

use bytes::Bytes;
use sha1::{Digest, Sha1};

use crate::error::{Result, StorageError};
use crate::storage::read::RangeLimits;

/// Length of an entry's and a range's digest (SHA-1).
pub const REPLICA_DIGEST_LEN: usize = 20;
/// Bytes one range read covers (at least one entry, however large).
const READ_CHUNK_BYTES: usize = 4 << 20;

/// The entries a digest covers: `first, first + stride, ...` up to `last` (a striped ledger's
/// entries of one write set have the stride of its ensemble size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DigestRange {
    pub first: u64,
    pub last: u64,
    pub stride: u64,
}

/// What one replica stores of a ledger in a [`DigestRange`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaDigest {
    /// Entries held and read whole.
    pub entries: u64,
    /// Their stored bytes.
    pub bytes: u64,
    /// Entries the index lists but whose record cannot be read (a failed CRC, a truncated log):
    /// left out of `entries` and of the digest, as a missing entry would be.
    pub unreadable: u64,
    /// SHA-1 over each held entry's id (8 bytes, big-endian) and its SHA-1, in entry order.
    pub digest: [u8; REPLICA_DIGEST_LEN],
    /// Each held entry's id and SHA-1, when asked for (else empty).
    pub listed: Vec<(u64, [u8; REPLICA_DIGEST_LEN])>,
}

/// The digest of what a storage holds of one ledger in `range`, with each entry's own digest
/// when `list`; `read_range` reads from an entry as a batch read does (the first entry or its
/// error, then more until a limit or a missing entry). Work is bounded by the range, never by
/// the ledger: each run of held entries is one read per 4 MiB, each missing or unreadable
/// entry one failed lookup. A ledger the storage does not know holds no entries (not an
/// error). Errors: `StorageError::InvalidArgument` for an empty stride or a range ending before
/// it starts, the storage's other errors (closed, index unreadable).
pub fn replica_digest(
    range: DigestRange,
    list: bool,
    mut read_range: impl FnMut(u64, RangeLimits) -> Result<Vec<Bytes>>,
) -> Result<ReplicaDigest> {
    if range.stride == 0 || range.last < range.first {
        return Err(StorageError::InvalidArgument(format!(
            "a digest needs first <= last and a stride of at least 1: {range:?}"
        )));
    }
    let mut acc = Accumulator::new(list);
    let mut next = Some(range.first);
    while let Some(at) = next.filter(|at| *at <= range.last) {
        let left = (range.last - at) / range.stride + 1;
        let limits = RangeLimits {
            max_count: usize::try_from(left).unwrap_or(usize::MAX),
            max_bytes: READ_CHUNK_BYTES,
            per_entry_overhead: 0,
            stride: range.stride,
        };
        let read = match read_range(at, limits) {
            Ok(entries) => entries,
            Err(StorageError::NoLedger(_)) => break,
            Err(StorageError::NoEntry { .. }) => Vec::new(),
            Err(StorageError::Corruption(_) | StorageError::Io { .. }) => {
                acc.unreadable += 1;
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        let mut entry = at;
        for data in &read {
            acc.add(entry, data);
            entry = entry.saturating_add(range.stride);
        }
        // Past what was read, or past the one entry that could not be.
        let steps = u64::try_from(read.len().max(1)).unwrap_or(u64::MAX);
        next = steps
            .checked_mul(range.stride)
            .and_then(|step| at.checked_add(step));
    }
    Ok(acc.finish())
}

/// The running digest of one range.
struct Accumulator {
    outer: Sha1,
    entries: u64,
    bytes: u64,
    unreadable: u64,
    list: bool,
    listed: Vec<(u64, [u8; REPLICA_DIGEST_LEN])>,
}

impl Accumulator {
    fn new(list: bool) -> Self {
        Self {
            outer: Sha1::new(),
            entries: 0,
            bytes: 0,
            unreadable: 0,
            list,
            listed: Vec::new(),
        }
    }

    fn add(&mut self, entry_id: u64, data: &Bytes) {
        let own: [u8; REPLICA_DIGEST_LEN] = Sha1::digest(data).into();
        self.outer.update(entry_id.to_be_bytes());
        self.outer.update(own);
        self.entries += 1;
        self.bytes += data.len() as u64;
        if self.list {
            self.listed.push((entry_id, own));
        }
    }

    fn finish(self) -> ReplicaDigest {
        ReplicaDigest {
            entries: self.entries,
            bytes: self.bytes,
            unreadable: self.unreadable,
            digest: self.outer.finalize().into(),
            listed: self.listed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::tests::{add, open};
    use crate::storage::LedgerStorage;

    fn digest_of(
        s: &LedgerStorage,
        ledger: u64,
        range: DigestRange,
        list: bool,
    ) -> Result<ReplicaDigest> {
        s.replica_digest(ledger, range, list)
    }

    fn every(first: u64, last: u64, stride: u64) -> DigestRange {
        DigestRange {
            first,
            last,
            stride,
        }
    }

    #[test]
    fn two_stores_of_the_same_entries_agree_and_one_changed_entry_is_named() {
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, b) = (open(a_dir.path()), open(b_dir.path()));
        for e in 0..30 {
            add(&a, 7, e, format!("entry-{e}").as_bytes()).unwrap();
            let body = if e == 12 {
                "forged".to_string()
            } else {
                format!("entry-{e}")
            };
            add(&b, 7, e, body.as_bytes()).unwrap();
        }
        b.checkpoint().unwrap(); // half from the index, half from the write cache
        let same = every(0, 9, 1);
        let (da, db) = (
            digest_of(&a, 7, same, false).unwrap(),
            digest_of(&b, 7, same, false).unwrap(),
        );
        assert_eq!((da.entries, da.digest), (10, db.digest));
        let whole = every(0, 29, 1);
        let (la, lb) = (
            digest_of(&a, 7, whole, true).unwrap(),
            digest_of(&b, 7, whole, true).unwrap(),
        );
        assert_ne!(la.digest, lb.digest);
        let differing: Vec<u64> = la
            .listed
            .iter()
            .zip(&lb.listed)
            .filter(|(x, y)| x != y)
            .map(|(x, _)| x.0)
            .collect();
        assert_eq!(differing, vec![12]);
    }

    #[test]
    fn a_strided_range_counts_only_its_entries_and_skips_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        for e in (0..40).filter(|e| e % 4 == 1 && *e != 17) {
            add(&s, 3, e, b"x").unwrap();
        }
        let found = digest_of(&s, 3, every(1, 39, 4), true).unwrap();
        let ids: Vec<u64> = found.listed.iter().map(|(e, _)| *e).collect();
        assert_eq!(ids, vec![1, 5, 9, 13, 21, 25, 29, 33, 37]);
        assert_eq!((found.entries, found.bytes), (9, 9));
        let unknown = digest_of(&s, 99, every(0, 10, 1), false).unwrap();
        assert_eq!((unknown.entries, unknown.unreadable), (0, 0));
        assert!(digest_of(&s, 3, every(0, 10, 0), false).is_err());
        assert!(digest_of(&s, 3, every(10, 9, 1), false).is_err());
    }
}
