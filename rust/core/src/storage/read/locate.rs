//! Locating entries: where each entry a read wants is (the write cache, the read-ahead cache,
//! or an entry log through the index), and which entries a range read takes within its
//! limits. It reads no entry data from the logs.

use std::sync::Arc;

use bytes::Bytes;

use super::prefetch::Prefetcher;
use super::readahead_cache::ReadAheadCache;
use super::readahead_threads::READ_AHEAD_WAIT;
use crate::error::{Result, StorageError};
use crate::record;
use crate::storage::entrylog::Location;
use crate::storage::ids::MAX_ID;
use crate::storage::index::segment::Segment;
use crate::storage::stores::Stores;

/// No range read collects more entries than this, whatever its limits say.
const MAX_RANGE_ENTRIES: usize = 1 << 20;
/// One read-ahead I/O covers at most this many bytes.
const MAX_READ_AHEAD_BYTES: usize = 1 << 20;

/// Limits of a range read, in BookKeeper's batch-read terms.
#[derive(Debug, Clone, Copy)]
pub struct RangeLimits {
    /// At most this many entries; 0 means no count limit.
    pub max_count: usize,
    /// After the first entry (always returned), stop before the total would exceed this.
    pub max_bytes: usize,
    /// Bytes counted per entry on top of its data (e.g. a length prefix on the wire).
    pub per_entry_overhead: usize,
    /// Distance between the entries read: 1 for consecutive entries (BP-62), E for the entries
    /// of one write-set position of a striped ledger (pybkx's strided batch read).
    pub stride: u64,
}

/// Where a located entry is: already in memory, or in an entry log.
pub(super) enum Found {
    Cached(Bytes),
    /// In an entry log.
    At(Location),
    /// In an entry log, indexed by this segment (whose following entries read-ahead takes).
    Indexed(Location, Arc<Segment>),
}

impl Found {
    /// Whether the entry is read from an entry log.
    pub(super) fn on_disk(&self) -> bool {
        !matches!(self, Found::Cached(_))
    }
}

/// What a read looks in, in order: the write cache, the read-ahead cache (asking for the next
/// window when a scan is served from it), the index.
#[derive(Clone, Copy)]
pub(super) struct Lookup<'a> {
    pub(super) stores: &'a Stores,
    pub(super) read_ahead: &'a ReadAheadCache,
    pub(super) prefetcher: &'a Prefetcher,
}

impl Lookup<'_> {
    /// Where an entry is. `sequential`: the read takes consecutive entries (not a strided
    /// read), so the read-ahead threads may read on ahead of it.
    pub(super) fn find(
        &self,
        ledger: u64,
        entry: u64,
        since: u64,
        sequential: bool,
    ) -> Result<Option<Found>> {
        if let Some(data) = self.stores.cache.get(ledger, entry) {
            return Ok(Some(Found::Cached(data)));
        }
        if let Some(data) = self.read_ahead.take_or_wait(ledger, entry, READ_AHEAD_WAIT) {
            if sequential && self.prefetcher.has_threads() {
                // A scan served by the read-ahead threads never misses while they keep up:
                // this is where it asks for the next window once past the middle of the last.
                self.prefetcher
                    .prefetch(self.stores, self.read_ahead, ledger, entry, since, true);
            }
            return Ok(Some(Found::Cached(data)));
        }
        Ok(self
            .stores
            .segments
            .find(ledger, entry, since)?
            .map(|(at, seg)| Found::Indexed(at, seg)))
    }

    /// The entry id (`LAST_ENTRY` resolved) and where it is.
    pub(super) fn locate(&self, ledger: u64, entry: u64) -> Result<(u64, Found)> {
        let (entry, since) = self.stores.resolve(ledger, entry)?;
        let found = self
            .find(ledger, entry, since, true)?
            .ok_or(StorageError::NoEntry { ledger, entry })?;
        Ok((entry, found))
    }

    /// The entries a range read takes and where they are: the first always (or its error),
    /// then more until a limit or a missing entry.
    pub(super) fn locate_range(
        &self,
        ledger: u64,
        first: u64,
        limits: RangeLimits,
    ) -> Result<Vec<(u64, Found)>> {
        let (_, since) = self.stores.resolve(ledger, first)?;
        let mut range = Range::new(limits);
        let mut next = Some(first);
        while let Some(entry) = next {
            if range.items.len() >= range.max_count {
                break;
            }
            let Some(found) = self.find(ledger, entry, since, range.stride == 1)? else {
                if range.items.is_empty() {
                    return Err(StorageError::NoEntry { ledger, entry });
                }
                break;
            };
            let len = match &found {
                Found::Cached(d) => d.len(),
                Found::At(at) | Found::Indexed(at, _) => at.data_len(),
            };
            if !range.fits(len) {
                break;
            }
            let walk = match &found {
                Found::Indexed(at, seg) => Some((at.log_id(), seg.clone())),
                _ => None,
            };
            range.items.push((entry, found));
            next = entry.checked_add(range.stride);
            let Some((log, seg)) = walk else { continue };
            next = self.walk_segment(&mut range, ledger, entry, next, log, seg)?;
            if range.full {
                break;
            }
        }
        Ok(range.items)
    }

    /// Takes the entries that follow `entry` from its segment `seg` while they lie in `log`;
    /// returns the next entry wanted (None once the range is complete).
    ///
    /// The entries that follow were most likely flushed with this one: walking its segment
    /// spares a search of every segment for each. (An entry's bytes never change, so a copy
    /// indexed elsewhere too is the same entry.) It stops where the segment has a gap, and where
    /// it moves on to another entry log: a flush can span two logs, and compaction may since
    /// have moved the second one's entries and deleted it, leaving this segment's copies there
    /// stale (the next search finds where they are now).
    fn walk_segment(
        &self,
        range: &mut Range,
        ledger: u64,
        entry: u64,
        mut next: Option<u64>,
        log: u32,
        seg: Arc<Segment>,
    ) -> Result<Option<u64>> {
        let cache = &self.stores.segments.cache;
        seg.scan_ledger(ledger, entry.saturating_add(1), cache, &mut |e| {
            let Some(want) = next else { return false };
            if e.at.log_id() != log {
                return false;
            }
            if e.entry < want {
                return true; // a strided read steps over the other write-set positions
            }
            if e.entry > want {
                return false;
            }
            if !range.fits(e.at.data_len()) {
                range.full = true;
                return false;
            }
            range.items.push((e.entry, Found::At(e.at)));
            next = want.checked_add(range.stride);
            true
        })?;
        if range.full {
            // The batch ends inside this segment's run: the last entry keeps the segment, for
            // the read to take the rest of the run ahead.
            if let Some((_, last)) = range.items.last_mut() {
                if let Found::At(at) = *last {
                    *last = Found::Indexed(at, seg);
                }
            }
        }
        Ok(next)
    }

    /// The ledger's entries written back to back after `entry` (at `at`) in the same log, at
    /// most `max` of them and `MAX_READ_AHEAD_BYTES` of data counting `counted` bytes already
    /// taken: they were flushed together, so the same segment indexes them and one I/O reads
    /// them with it.
    pub(super) fn rest_of_run(
        &self,
        ledger: u64,
        entry: u64,
        at: Location,
        seg: &Segment,
        max: usize,
        counted: usize,
    ) -> Result<Vec<(u64, Location)>> {
        let mut rest = Vec::new();
        if max == 0 || entry >= MAX_ID {
            return Ok(rest);
        }
        let mut end = at.offset() + (record::RECORD_HEADER_LEN + at.len as usize) as u64;
        let mut bytes = counted;
        seg.scan_ledger(ledger, entry + 1, &self.stores.segments.cache, &mut |e| {
            if e.at.log_id() != at.log_id() || e.at.offset() != end {
                return false;
            }
            bytes += e.at.len as usize;
            if bytes > MAX_READ_AHEAD_BYTES {
                return false;
            }
            end += (record::RECORD_HEADER_LEN + e.at.len as usize) as u64;
            rest.push((e.entry, e.at));
            rest.len() < max
        })?;
        Ok(rest)
    }
}

/// The entries a range read has taken so far, against its limits.
struct Range {
    items: Vec<(u64, Found)>,
    max_count: usize,
    max_bytes: usize,
    per_entry_overhead: usize,
    stride: u64,
    total: usize,
    /// A limit ended the range inside a segment's run.
    full: bool,
}

impl Range {
    fn new(limits: RangeLimits) -> Range {
        Range {
            items: Vec::new(),
            max_count: match limits.max_count {
                0 => MAX_RANGE_ENTRIES,
                n => n.min(MAX_RANGE_ENTRIES),
            },
            max_bytes: limits.max_bytes,
            per_entry_overhead: limits.per_entry_overhead,
            stride: limits.stride.max(1),
            total: 0,
            full: false,
        }
    }

    /// Whether one more entry of `len` bytes fits (the first always does).
    fn fits(&mut self, len: usize) -> bool {
        self.total += self.per_entry_overhead + len;
        self.items.is_empty() || (self.items.len() < self.max_count && self.total <= self.max_bytes)
    }
}
