//! The index: (ledger, entry) -> entry-log location, plus each ledger's master key, fenced bit,
//! explicit LAC and last entry. It owns `index.log` and the segment files; it never reads entry
//! data.
//!
//! Locations live on disk, in immutable sorted segments (one per write-cache flush, merged in
//! the background), read through a block cache bounded in bytes: memory does not grow with the
//! number of entries. Ledger states are small and stay in memory; `index.log` persists them
//! incrementally: each checkpoint appends the changes since the previous one and ends with a
//! checkpoint record holding the journal marks and the manifest (the live segments, oldest
//! first). Loading replays `index.log` up to its last complete checkpoint record. When the log
//! outgrows the live state it is rewritten as one snapshot.

mod block;
pub mod cache;
mod log;
pub mod segment;
mod segment_format;
pub mod segment_writer;
pub mod segments;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;

pub use log::IndexLog;

use super::entrylog::Location;
use super::ids::IdMap;
use super::journal::Mark;
use crate::record::{append_record, be_u32, be_u64};

const REC_LEDGER: u8 = 1;
/// Version-1 files only: locations kept in `index.log` (migrated into a segment on open).
const REC_LOCATIONS: u8 = 2;
const REC_DELETE: u8 = 3;
const REC_CHECKPOINT: u8 = 4;

const FLAG_FENCED: u8 = 1;
const FLAG_HAS_LAC: u8 = 2;
const NO_ENTRY: u64 = u64::MAX;

/// What a bookie knows of one ledger.
pub struct LedgerState {
    pub master_key: Arc<[u8]>,
    pub fenced: bool,
    /// The fence has been journalled and applied: a fencing read need not wait.
    pub fence_durable: bool,
    pub explicit_lac: Option<Bytes>,
    /// The highest LAC piggy-backed by an entry applied since the bookie started (-1: none
    /// yet; after a restart, the last entry's header gives it). Not persisted.
    pub max_lac: i64,
    /// Highest stored entry id.
    pub last_entry: Option<u64>,
    /// Segments older than this sequence number hold only entries of an earlier ledger with
    /// the same id (deleted since): lookups skip them.
    pub since_seq: u64,
}

impl LedgerState {
    pub fn new(master_key: Arc<[u8]>, since_seq: u64) -> Self {
        LedgerState {
            master_key,
            fenced: false,
            fence_durable: false,
            explicit_lac: None,
            max_lac: -1,
            last_entry: None,
            since_seq,
        }
    }

    fn encode(&self, ledger: u64, out: &mut Vec<u8>) {
        let mut flags = 0u8;
        if self.fence_durable {
            flags |= FLAG_FENCED;
        }
        let lac: &[u8] = match &self.explicit_lac {
            Some(b) => {
                flags |= FLAG_HAS_LAC;
                b
            }
            None => &[],
        };
        append_record(
            out,
            &[
                &[REC_LEDGER],
                &ledger.to_be_bytes(),
                &[flags],
                &(self.master_key.len() as u32).to_be_bytes(),
                &self.master_key,
                &self.last_entry.unwrap_or(NO_ENTRY).to_be_bytes(),
                &self.since_seq.to_be_bytes(),
                lac,
            ],
        );
    }
}

/// A live segment as the manifest lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRef {
    pub seq: u64,
    pub level: u32,
}

/// The ledger states and what has changed since the last checkpoint.
#[derive(Default)]
pub struct Index {
    pub ledgers: IdMap<LedgerState>,
    /// Ledgers whose state changed since the last checkpoint.
    meta_dirty: HashSet<u64>,
    /// Ledgers deleted since the last checkpoint, in order.
    deleted: Vec<u64>,
    /// Per journal: the position up to which every record is applied here.
    pub marks: Vec<Mark>,
    /// The live segments, oldest first, as last loaded (the segment set owns the live list).
    pub manifest: Vec<SegmentRef>,
    /// The sequence number the next segment gets.
    pub next_seq: u64,
    /// A failed checkpoint lost track of the delta: the next one writes everything.
    needs_snapshot: bool,
    /// Locations read from a version-1 `index.log`, to be moved into a segment.
    pub(super) legacy: Option<BTreeMap<(u64, u64), Location>>,
}

impl Index {
    pub fn get_or_create(&mut self, ledger: u64, key: &Arc<[u8]>) -> &mut LedgerState {
        let since = self.next_seq;
        self.ledgers.entry(ledger).or_insert_with(|| {
            self.meta_dirty.insert(ledger);
            LedgerState::new(key.clone(), since)
        })
    }

    /// Marks the ledger's state as changed for the next checkpoint.
    pub fn touch_meta(&mut self, ledger: u64) {
        self.meta_dirty.insert(ledger);
    }

    pub fn delete(&mut self, ledger: u64) {
        if self.ledgers.remove(&ledger).is_some() {
            self.deleted.push(ledger);
        }
        self.meta_dirty.remove(&ledger);
    }

    /// Encodes the changes since the last checkpoint (or every ledger, for a snapshot) and
    /// forgets them. The caller ends the batch with [`checkpoint_record`].
    pub fn take_delta(&mut self, snapshot: bool, out: &mut Vec<u8>) {
        self.needs_snapshot = false;
        if snapshot {
            for (ledger, st) in &self.ledgers {
                st.encode(*ledger, out);
            }
        } else {
            for ledger in &self.deleted {
                append_record(out, &[&[REC_DELETE], &ledger.to_be_bytes()]);
            }
            for ledger in &self.meta_dirty {
                if let Some(st) = self.ledgers.get(ledger) {
                    st.encode(*ledger, out);
                }
            }
        }
        self.deleted.clear();
        self.meta_dirty.clear();
    }

    /// After a checkpoint could not be written, its delta is lost (and the log may end in a
    /// partial write): the next checkpoint must rewrite the whole index.
    pub fn checkpoint_failed(&mut self) {
        self.needs_snapshot = true;
    }

    pub fn needs_snapshot(&self) -> bool {
        self.needs_snapshot
    }

    /// Loads one record of `index.log` (format `version`); returns whether it was a
    /// checkpoint record (the end of a consistent state).
    pub(super) fn load_record(
        &mut self,
        version: u32,
        body: &[u8],
    ) -> std::result::Result<bool, String> {
        let short = || format!("index record of {} bytes is too short", body.len());
        let kind = *body.first().ok_or_else(short)?;
        let rest = &body[1..];
        match kind {
            REC_LEDGER => self.load_ledger(version, rest).ok_or_else(short)?,
            REC_LOCATIONS if version == 1 => self.load_locations(rest).ok_or_else(short)?,
            REC_DELETE => self.load_delete(rest).ok_or_else(short)?,
            REC_CHECKPOINT => {
                self.load_checkpoint(version, rest).ok_or_else(short)?;
                return Ok(true);
            }
            k => return Err(format!("unknown index record kind {k}")),
        }
        Ok(false)
    }

    /// A ledger's state (None: the record is too short).
    fn load_ledger(&mut self, version: u32, rest: &[u8]) -> Option<()> {
        let fixed = rest.get(..13)?;
        let ledger = be_u64(&fixed[0..8]);
        let flags = fixed[8];
        let klen = be_u32(&fixed[9..13]) as usize;
        let key = rest.get(13..13 + klen)?;
        let mut tail = &rest[13 + klen..];
        let (last_entry, since_seq) = if version >= 2 {
            let fixed = tail.get(0..16)?;
            let last = be_u64(&fixed[0..8]);
            let since = be_u64(&fixed[8..16]);
            tail = &tail[16..];
            ((last != NO_ENTRY).then_some(last), since)
        } else {
            (None, 0)
        };
        let st = self
            .ledgers
            .entry(ledger)
            .or_insert_with(|| LedgerState::new(Arc::from(key), since_seq));
        st.master_key = Arc::from(key);
        st.fenced = flags & FLAG_FENCED != 0;
        st.fence_durable = st.fenced;
        st.explicit_lac = (flags & FLAG_HAS_LAC != 0).then(|| Bytes::copy_from_slice(tail));
        if version >= 2 {
            st.last_entry = last_entry;
            st.since_seq = since_seq;
        }
        Some(())
    }

    /// A version-1 record of locations, kept to be migrated into a segment.
    fn load_locations(&mut self, rest: &[u8]) -> Option<()> {
        let head = rest.get(..20)?;
        let ledger = be_u64(&head[0..8]);
        let first = be_u64(&head[8..16]);
        let n = be_u32(&head[16..20]) as usize;
        let slots = rest.get(20..20 + n * 12)?;
        let legacy = self.legacy.get_or_insert_with(BTreeMap::new);
        let mut last = None;
        for (i, s) in slots.chunks_exact(12).enumerate() {
            let loc = be_u64(&s[0..8]);
            if loc != 0 {
                let entry = first + i as u64;
                legacy.insert(
                    (ledger, entry),
                    Location {
                        loc,
                        len: be_u32(&s[8..12]),
                    },
                );
                last = Some(entry);
            }
        }
        let st = self
            .ledgers
            .entry(ledger)
            .or_insert_with(|| LedgerState::new(Arc::from(&[][..]), 0));
        st.last_entry = st.last_entry.max(last);
        Some(())
    }

    /// A deletion.
    fn load_delete(&mut self, rest: &[u8]) -> Option<()> {
        let ledger = be_u64(rest.get(0..8)?);
        self.ledgers.remove(&ledger);
        if let Some(legacy) = &mut self.legacy {
            let doomed: Vec<(u64, u64)> = legacy
                .range((ledger, 0)..=(ledger, u64::MAX))
                .map(|(k, _)| *k)
                .collect();
            for k in doomed {
                legacy.remove(&k);
            }
        }
        Some(())
    }

    /// A checkpoint: the journal marks and, from version 2, the next segment number and the
    /// manifest.
    fn load_checkpoint(&mut self, version: u32, rest: &[u8]) -> Option<()> {
        let n = be_u32(rest.get(0..4)?) as usize;
        let marks = rest.get(4..4 + n * 16)?;
        self.marks = marks
            .chunks_exact(16)
            .map(|c| Mark {
                file_id: be_u64(&c[0..8]),
                offset: be_u64(&c[8..16]),
            })
            .collect();
        if version >= 2 {
            let mut at = 4 + n * 16;
            let next = rest.get(at..at + 12)?;
            self.next_seq = be_u64(&next[0..8]);
            let count = be_u32(&next[8..12]) as usize;
            at += 12;
            let segs = rest.get(at..at + count * 12)?;
            self.manifest = segs
                .chunks_exact(12)
                .map(|c| SegmentRef {
                    seq: be_u64(&c[0..8]),
                    level: be_u32(&c[8..12]),
                })
                .collect();
        }
        Some(())
    }
}

/// The record that ends a checkpoint: journal marks, next segment number and the manifest.
pub fn checkpoint_record(
    marks: &[Mark],
    next_seq: u64,
    segments: &[SegmentRef],
    out: &mut Vec<u8>,
) {
    let mut body = Vec::with_capacity(16 + marks.len() * 16 + segments.len() * 12);
    body.extend_from_slice(&(marks.len() as u32).to_be_bytes());
    for m in marks {
        body.extend_from_slice(&m.file_id.to_be_bytes());
        body.extend_from_slice(&m.offset.to_be_bytes());
    }
    body.extend_from_slice(&next_seq.to_be_bytes());
    body.extend_from_slice(&(segments.len() as u32).to_be_bytes());
    for s in segments {
        body.extend_from_slice(&s.seq.to_be_bytes());
        body.extend_from_slice(&s.level.to_be_bytes());
    }
    append_record(out, &[&[REC_CHECKPOINT], &body]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Arc<[u8]> {
        Arc::from(&b"k"[..])
    }

    #[test]
    fn checkpoints_round_trip_through_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, mut idx) = IndexLog::open(dir.path()).unwrap();
        idx.get_or_create(1, &key()).last_entry = Some(1499);
        idx.touch_meta(1);
        let st = idx.get_or_create(2, &key());
        st.fenced = true;
        st.fence_durable = true;
        let marks = vec![Mark {
            file_id: 3,
            offset: 99,
        }];
        let segs = [SegmentRef { seq: 4, level: 0 }];
        let mut buf = Vec::new();
        idx.take_delta(false, &mut buf);
        checkpoint_record(&marks, 5, &segs, &mut buf);
        log.append(&buf).unwrap();

        idx.delete(2);
        idx.ledgers.get_mut(&1).unwrap().explicit_lac = Some(Bytes::from_static(b"lac"));
        idx.touch_meta(1);
        buf.clear();
        idx.take_delta(false, &mut buf);
        checkpoint_record(&marks, 6, &segs, &mut buf);
        log.append(&buf).unwrap();
        // A torn third checkpoint is cut away.
        idx.get_or_create(9, &key());
        buf.clear();
        idx.take_delta(false, &mut buf);
        checkpoint_record(&marks, 7, &[], &mut buf);
        log.append(&buf[..buf.len() - 5]).unwrap();
        drop(log);

        let (_log, loaded) = IndexLog::open(dir.path()).unwrap();
        assert_eq!(loaded.marks, marks);
        assert_eq!(loaded.next_seq, 6);
        assert_eq!(loaded.manifest, segs.to_vec());
        let l1 = &loaded.ledgers[&1];
        assert_eq!(l1.last_entry, Some(1499));
        assert_eq!(l1.explicit_lac.as_deref(), Some(&b"lac"[..]));
        assert!(!loaded.ledgers.contains_key(&2));
    }
}
