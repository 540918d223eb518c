//! The index: (ledger, entry) -> entry-log location, plus each ledger's master key, fenced bit
//! and explicit LAC. It owns `index.log`; it never reads entry data.
//!
//! The index lives in memory (12 bytes per entry) and is persisted incrementally: each
//! checkpoint appends the changes since the previous one and ends with a checkpoint record that
//! holds the journal marks. Loading replays `index.log` up to its last complete checkpoint, so a
//! restart only replays the journal after that mark. When the log outgrows the live state it is
//! rewritten as one snapshot.

mod log;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;

pub use log::IndexLog;

use super::entrylog::Location;
use super::journal::Mark;
use crate::record::{append_record, be_u32, be_u64};

const PAGE_BITS: u32 = 9;
const PAGE_SLOTS: usize = 1 << PAGE_BITS;

const REC_LEDGER: u8 = 1;
const REC_LOCATIONS: u8 = 2;
const REC_DELETE: u8 = 3;
const REC_CHECKPOINT: u8 = 4;

const FLAG_FENCED: u8 = 1;
const FLAG_HAS_LAC: u8 = 2;

/// Locations of 512 consecutive entries; `loc == 0` means absent (offset 0 is a file header).
struct Page {
    locs: [u64; PAGE_SLOTS],
    lens: [u32; PAGE_SLOTS],
}

impl Page {
    fn new() -> Box<Page> {
        Box::new(Page {
            locs: [0; PAGE_SLOTS],
            lens: [0; PAGE_SLOTS],
        })
    }
}

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
    pages: BTreeMap<u64, Box<Page>>,
    /// Entries changed since the last checkpoint, as an inclusive range.
    dirty: Option<(u64, u64)>,
}

impl LedgerState {
    pub fn new(master_key: Arc<[u8]>) -> Self {
        LedgerState {
            master_key,
            fenced: false,
            fence_durable: false,
            explicit_lac: None,
            max_lac: -1,
            pages: BTreeMap::new(),
            dirty: None,
        }
    }

    pub fn get(&self, entry: u64) -> Option<Location> {
        let page = self.pages.get(&(entry >> PAGE_BITS))?;
        let slot = (entry as usize) & (PAGE_SLOTS - 1);
        let loc = page.locs[slot];
        (loc != 0).then(|| Location {
            loc,
            len: page.lens[slot],
        })
    }

    pub fn set(&mut self, entry: u64, at: Location) {
        let page = self
            .pages
            .entry(entry >> PAGE_BITS)
            .or_insert_with(Page::new);
        let slot = (entry as usize) & (PAGE_SLOTS - 1);
        page.locs[slot] = at.loc;
        page.lens[slot] = at.len;
        self.dirty = Some(match self.dirty {
            None => (entry, entry),
            Some((lo, hi)) => (lo.min(entry), hi.max(entry)),
        });
    }

    /// Every stored entry id, ascending.
    pub fn entry_ids(&self) -> Vec<u64> {
        let mut ids = Vec::new();
        for (pno, page) in &self.pages {
            for (slot, loc) in page.locs.iter().enumerate() {
                if *loc != 0 {
                    ids.push((pno << PAGE_BITS) + slot as u64);
                }
            }
        }
        ids
    }

    /// Highest stored entry id.
    pub fn last_entry(&self) -> Option<u64> {
        for (pno, page) in self.pages.iter().rev() {
            if let Some(slot) = page.locs.iter().rposition(|l| *l != 0) {
                return Some((pno << PAGE_BITS) + slot as u64);
            }
        }
        None
    }

    fn encode_meta(&self, ledger: u64, out: &mut Vec<u8>) {
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
                lac,
            ],
        );
    }

    /// Appends location records for entries in `lo..=hi`, one record per page span.
    fn encode_locations(&self, ledger: u64, lo: u64, hi: u64, out: &mut Vec<u8>) {
        let mut chunk = Vec::new();
        for (pno, page) in self.pages.range((lo >> PAGE_BITS)..=(hi >> PAGE_BITS)) {
            let base = pno << PAGE_BITS;
            let from = lo.saturating_sub(base).min(PAGE_SLOTS as u64 - 1) as usize;
            let to = (hi - base).min(PAGE_SLOTS as u64 - 1) as usize;
            let Some(first) = (from..=to).find(|s| page.locs[*s] != 0) else {
                continue;
            };
            let last = (first..=to)
                .rev()
                .find(|s| page.locs[*s] != 0)
                .unwrap_or(first);
            chunk.clear();
            for s in first..=last {
                chunk.extend_from_slice(&page.locs[s].to_be_bytes());
                chunk.extend_from_slice(&page.lens[s].to_be_bytes());
            }
            append_record(
                out,
                &[
                    &[REC_LOCATIONS],
                    &ledger.to_be_bytes(),
                    &(base + first as u64).to_be_bytes(),
                    &((last - first + 1) as u32).to_be_bytes(),
                    &chunk,
                ],
            );
        }
    }

    fn entry_count(&self) -> usize {
        self.pages
            .values()
            .map(|p| p.locs.iter().filter(|l| **l != 0).count())
            .sum()
    }
}

/// The in-memory index and what has changed since the last checkpoint.
#[derive(Default)]
pub struct Index {
    pub ledgers: HashMap<u64, LedgerState>,
    /// Ledgers whose key, fence or LAC changed since the last checkpoint.
    meta_dirty: HashSet<u64>,
    /// Ledgers with changed locations since the last checkpoint.
    loc_dirty: HashSet<u64>,
    /// Ledgers deleted since the last checkpoint, in order.
    deleted: Vec<u64>,
    /// Per journal: the position up to which every record is applied here.
    pub marks: Vec<Mark>,
    /// A failed checkpoint lost track of the delta: the next one writes everything.
    needs_snapshot: bool,
}

impl Index {
    pub fn get_or_create(&mut self, ledger: u64, key: &Arc<[u8]>) -> &mut LedgerState {
        self.ledgers.entry(ledger).or_insert_with(|| {
            self.meta_dirty.insert(ledger);
            LedgerState::new(key.clone())
        })
    }

    /// Marks the ledger's metadata as changed for the next checkpoint.
    pub fn touch_meta(&mut self, ledger: u64) {
        self.meta_dirty.insert(ledger);
    }

    pub fn set_location(&mut self, ledger: u64, entry: u64, at: Location, key: &Arc<[u8]>) {
        self.get_or_create(ledger, key).set(entry, at);
        self.loc_dirty.insert(ledger);
    }

    pub fn delete(&mut self, ledger: u64) {
        if self.ledgers.remove(&ledger).is_some() {
            self.deleted.push(ledger);
        }
        self.meta_dirty.remove(&ledger);
        self.loc_dirty.remove(&ledger);
    }

    pub fn entry_count(&self) -> usize {
        self.ledgers.values().map(|l| l.entry_count()).sum()
    }

    /// Encodes the changes since the last checkpoint (or everything, for a snapshot) followed
    /// by a checkpoint record with the current marks, and forgets the changes.
    pub fn take_checkpoint(&mut self, snapshot: bool, out: &mut Vec<u8>) -> Vec<Mark> {
        self.needs_snapshot = false;
        if snapshot {
            for (ledger, st) in &self.ledgers {
                st.encode_meta(*ledger, out);
                if let Some(last) = st.last_entry() {
                    st.encode_locations(*ledger, 0, last, out);
                }
            }
        } else {
            for ledger in &self.deleted {
                append_record(out, &[&[REC_DELETE], &ledger.to_be_bytes()]);
            }
            for ledger in &self.meta_dirty {
                if let Some(st) = self.ledgers.get(ledger) {
                    st.encode_meta(*ledger, out);
                }
            }
            for ledger in &self.loc_dirty {
                if let Some(st) = self.ledgers.get(ledger) {
                    if let Some((lo, hi)) = st.dirty {
                        st.encode_locations(*ledger, lo, hi, out);
                    }
                }
            }
        }
        for st in self.ledgers.values_mut() {
            st.dirty = None;
        }
        self.deleted.clear();
        self.meta_dirty.clear();
        self.loc_dirty.clear();
        let mut body = Vec::with_capacity(4 + self.marks.len() * 16);
        body.extend_from_slice(&(self.marks.len() as u32).to_be_bytes());
        for m in &self.marks {
            body.extend_from_slice(&m.file_id.to_be_bytes());
            body.extend_from_slice(&m.offset.to_be_bytes());
        }
        append_record(out, &[&[REC_CHECKPOINT], &body]);
        self.marks.clone()
    }

    /// After a checkpoint could not be written, its delta is lost (and the log may end in a
    /// partial write): the next checkpoint must rewrite the whole index.
    pub fn checkpoint_failed(&mut self) {
        self.needs_snapshot = true;
    }

    pub fn needs_snapshot(&self) -> bool {
        self.needs_snapshot
    }

    /// Forgets which entries changed (after loading: everything loaded is already persisted).
    pub(super) fn clear_dirty(&mut self) {
        for st in self.ledgers.values_mut() {
            st.dirty = None;
        }
    }

    pub(super) fn load_record(
        &mut self,
        body: &[u8],
    ) -> std::result::Result<Option<Vec<Mark>>, String> {
        let short = || format!("index record of {} bytes is too short", body.len());
        let kind = *body.first().ok_or_else(short)?;
        let rest = &body[1..];
        match kind {
            REC_LEDGER => {
                if rest.len() < 13 {
                    return Err(short());
                }
                let ledger = be_u64(&rest[0..8]);
                let flags = rest[8];
                let klen = be_u32(&rest[9..13]) as usize;
                let key = rest.get(13..13 + klen).ok_or_else(short)?;
                let lac = &rest[13 + klen..];
                let st = self
                    .ledgers
                    .entry(ledger)
                    .or_insert_with(|| LedgerState::new(Arc::from(key)));
                st.master_key = Arc::from(key);
                st.fenced = flags & FLAG_FENCED != 0;
                st.fence_durable = st.fenced;
                st.explicit_lac = (flags & FLAG_HAS_LAC != 0).then(|| Bytes::copy_from_slice(lac));
            }
            REC_LOCATIONS => {
                if rest.len() < 20 {
                    return Err(short());
                }
                let ledger = be_u64(&rest[0..8]);
                let first = be_u64(&rest[8..16]);
                let n = be_u32(&rest[16..20]) as usize;
                let slots = rest.get(20..20 + n * 12).ok_or_else(short)?;
                let st = self
                    .ledgers
                    .entry(ledger)
                    .or_insert_with(|| LedgerState::new(Arc::from(&[][..])));
                for (i, s) in slots.chunks_exact(12).enumerate() {
                    let loc = be_u64(&s[0..8]);
                    if loc != 0 {
                        st.set(
                            first + i as u64,
                            Location {
                                loc,
                                len: be_u32(&s[8..12]),
                            },
                        );
                    }
                }
                st.dirty = None;
            }
            REC_DELETE => {
                let ledger = be_u64(rest.get(0..8).ok_or_else(short)?);
                self.ledgers.remove(&ledger);
            }
            REC_CHECKPOINT => {
                let n = be_u32(rest.get(0..4).ok_or_else(short)?) as usize;
                let marks = rest.get(4..4 + n * 16).ok_or_else(short)?;
                return Ok(Some(
                    marks
                        .chunks_exact(16)
                        .map(|c| Mark {
                            file_id: be_u64(&c[0..8]),
                            offset: be_u64(&c[8..16]),
                        })
                        .collect(),
                ));
            }
            k => return Err(format!("unknown index record kind {k}")),
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Arc<[u8]> {
        Arc::from(&b"k"[..])
    }

    fn at(n: u64) -> Location {
        Location {
            loc: (1 << 32) | (32 + n * 100),
            len: 16 + n as u32,
        }
    }

    #[test]
    fn pages_hold_sparse_and_dense_entries() {
        let mut st = LedgerState::new(key());
        for e in 0..2000 {
            st.set(e, at(e));
        }
        st.set(1_000_000_000, at(7));
        assert_eq!(st.get(1999), Some(at(1999)));
        assert_eq!(st.get(2000), None);
        assert_eq!(st.last_entry(), Some(1_000_000_000));
        assert_eq!(st.entry_count(), 2001);
    }

    #[test]
    fn checkpoints_round_trip_through_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, mut idx) = IndexLog::open(dir.path()).unwrap();
        idx.marks = vec![Mark::default()];
        for e in 0..1500 {
            idx.set_location(1, e, at(e), &key());
        }
        idx.set_location(2, 3, at(3), &key());
        idx.ledgers.get_mut(&2).unwrap().fenced = true;
        idx.ledgers.get_mut(&2).unwrap().fence_durable = true;
        idx.touch_meta(2);
        idx.marks = vec![Mark {
            file_id: 3,
            offset: 99,
        }];
        let mut buf = Vec::new();
        idx.take_checkpoint(false, &mut buf);
        log.append(&buf).unwrap();

        idx.set_location(1, 1500, at(1500), &key());
        idx.delete(2);
        idx.marks = vec![Mark {
            file_id: 4,
            offset: 7,
        }];
        buf.clear();
        idx.take_checkpoint(false, &mut buf);
        log.append(&buf).unwrap();
        // A torn third checkpoint is cut away.
        idx.set_location(9, 0, at(0), &key());
        buf.clear();
        idx.take_checkpoint(false, &mut buf);
        log.append(&buf[..buf.len() - 5]).unwrap();
        drop(log);

        let (_log, loaded) = IndexLog::open(dir.path()).unwrap();
        assert_eq!(
            loaded.marks,
            vec![Mark {
                file_id: 4,
                offset: 7
            }]
        );
        let l1 = &loaded.ledgers[&1];
        assert_eq!(l1.last_entry(), Some(1500));
        assert_eq!(l1.get(777), Some(at(777)));
        assert!(!loaded.ledgers.contains_key(&2));
        assert!(!loaded.ledgers.contains_key(&9) || loaded.ledgers[&9].get(0).is_some());
    }

    #[test]
    fn snapshot_rewrite_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, mut idx) = IndexLog::open(dir.path()).unwrap();
        idx.marks = vec![
            Mark {
                file_id: 1,
                offset: 2,
            },
            Mark {
                file_id: 5,
                offset: 6,
            },
        ];
        for l in 0..10 {
            for e in (0..100).step_by(3) {
                idx.set_location(l, e, at(e), &key());
            }
        }
        idx.ledgers.get_mut(&4).unwrap().explicit_lac = Some(Bytes::from_static(b"lac"));
        let mut buf = Vec::new();
        idx.take_checkpoint(true, &mut buf);
        log.rewrite(&buf).unwrap();
        let (_log, loaded) = IndexLog::open(dir.path()).unwrap();
        assert_eq!(loaded.entry_count(), 10 * 34);
        assert_eq!(
            loaded.ledgers[&4].explicit_lac.as_deref(),
            Some(&b"lac"[..])
        );
        assert_eq!(loaded.marks.len(), 2);
    }
}
