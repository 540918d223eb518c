//! The live segments, oldest first, and their merging. Lookups go newest first, so a later
//! location of an entry (a re-add, a compaction's move) wins. It never writes `index.log`: the
//! caller records the list it returns in the manifest.
//!
//! Merging keeps the list in levels, like a counter in base [`MERGE_FANIN`]: flushes add
//! level-0 segments at the end; when `MERGE_FANIN` adjacent segments share a level they are
//! merged into one of the next level in their place. Every entry is rewritten once per level,
//! and the list stays short (under `MERGE_FANIN` per level).

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use super::cache::BlockCache;
use super::segment::{IndexEntry, Segment, SegmentIter};
use super::segment_writer::SegmentWriter;
use super::SegmentRef;
use crate::error::Result;
use crate::fs;
use crate::storage::entrylog::Location;
use crate::storage::release::{Releaser, Unlinked};

/// Adjacent segments of one level merged together.
pub const MERGE_FANIN: usize = 6;

/// All live segments of the index.
pub struct SegmentSet {
    dir: PathBuf,
    list: RwLock<Arc<Vec<Arc<Segment>>>>,
    pub cache: BlockCache,
    /// Frees merged-away segments in steps once no lookup holds them.
    releaser: Releaser,
}

impl SegmentSet {
    /// Opens the segments the manifest lists and removes segment files it does not list
    /// (left by a flush or merge that crashed before its manifest record).
    pub fn open(dir: &Path, manifest: &[SegmentRef], cache_bytes: usize) -> Result<SegmentSet> {
        let mut list = Vec::with_capacity(manifest.len());
        for r in manifest {
            list.push(Segment::open(dir, r.seq, r.level)?);
        }
        for id in fs::list_hex_ids(dir, ".idx")? {
            if !manifest.iter().any(|r| r.seq == id) {
                log::info!("removing index segment {id:x}.idx (not in the manifest)");
                fs::remove_file(&dir.join(super::segment::segment_name(id)))?;
            }
        }
        Ok(SegmentSet {
            dir: dir.to_path_buf(),
            list: RwLock::new(Arc::new(list)),
            cache: BlockCache::new(cache_bytes),
            releaser: Releaser::new("pybkx-segment-release"),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The live segments now, oldest first.
    pub fn snapshot(&self) -> Arc<Vec<Arc<Segment>>> {
        self.list.read().clone()
    }

    /// The manifest describing the live segments that are durable (all of them right after a
    /// checkpoint synced the others).
    pub fn manifest(&self) -> Vec<SegmentRef> {
        self.list
            .read()
            .iter()
            .filter(|s| s.is_durable())
            .map(|s| SegmentRef {
                seq: s.seq,
                level: s.level,
            })
            .collect()
    }

    /// Adds a flushed segment as the newest.
    pub fn push(&self, seg: Arc<Segment>) {
        let mut list = self.list.write();
        let mut next = Vec::clone(&list);
        next.push(seg);
        *list = Arc::new(next);
    }

    /// The newest location of an entry in segments numbered `since_seq` or later.
    pub fn get(&self, ledger: u64, entry: u64, since_seq: u64) -> Result<Option<Location>> {
        Ok(self.find(ledger, entry, since_seq)?.map(|(at, _)| at))
    }

    /// As [`get`](Self::get), with the segment that holds the entry.
    pub fn find(
        &self,
        ledger: u64,
        entry: u64,
        since_seq: u64,
    ) -> Result<Option<(Location, Arc<Segment>)>> {
        let list = self.snapshot();
        for seg in list.iter().rev() {
            if seg.seq < since_seq {
                continue;
            }
            if let Some(at) = seg.get(ledger, entry, &self.cache)? {
                return Ok(Some((at, seg.clone())));
            }
        }
        Ok(None)
    }

    /// Entries of `ledger` from `from` on, ascending, at most `max`, newest location per entry.
    pub fn scan_ledger(
        &self,
        ledger: u64,
        from: u64,
        max: usize,
        since_seq: u64,
    ) -> Result<Vec<IndexEntry>> {
        let list = self.snapshot();
        let mut merged: std::collections::BTreeMap<u64, IndexEntry> = Default::default();
        // Oldest first, so newer locations overwrite older ones.
        for seg in list.iter() {
            if seg.seq < since_seq || !seg.may_hold_ledger(ledger) {
                continue;
            }
            let mut taken = 0usize;
            seg.scan_ledger(ledger, from, &self.cache, &mut |e| {
                merged.insert(e.entry, *e);
                taken += 1;
                taken < max
            })?;
        }
        Ok(merged.into_values().take(max).collect())
    }

    /// Memory the segments hold outside the block cache.
    pub fn resident_bytes(&self) -> usize {
        self.list.read().iter().map(|s| s.resident_bytes()).sum()
    }

    pub fn entry_count(&self) -> u64 {
        self.list.read().iter().map(|s| s.entries()).sum()
    }

    /// The oldest group of `MERGE_FANIN` adjacent durable segments of one level, if any
    /// (segments flushed since the last checkpoint are the newest and not merged yet).
    pub fn pick_merge(&self) -> Option<Vec<Arc<Segment>>> {
        let list: Vec<Arc<Segment>> = self
            .snapshot()
            .iter()
            .take_while(|s| s.is_durable())
            .cloned()
            .collect();
        let mut start = 0;
        for i in 1..=list.len() {
            if i == list.len() || list[i].level != list[start].level {
                if i - start >= MERGE_FANIN {
                    return Some(list[start..start + MERGE_FANIN].to_vec());
                }
                start = i;
            }
        }
        None
    }

    /// Merges `inputs` (adjacent, oldest first) into segment `seq`, keeping the newest location
    /// of each entry and only entries `keep(ledger, segment seq)` accepts. The new segment is
    /// durable but not yet live: see [`replace`](Self::replace).
    pub fn merge(
        &self,
        inputs: &[Arc<Segment>],
        seq: u64,
        keep: &mut dyn FnMut(u64, u64) -> bool,
    ) -> Result<Arc<Segment>> {
        let mut iters: Vec<(SegmentIter, Option<IndexEntry>, u64)> = Vec::new();
        for s in inputs {
            let mut it = s.iter();
            let first = it.next_entry()?;
            iters.push((it, first, s.seq));
        }
        let mut out = SegmentWriter::create(&self.dir, seq)?;
        loop {
            // The smallest key; among equal keys the newest input (highest index) wins.
            let mut best: Option<usize> = None;
            for (i, (_, head, _)) in iters.iter().enumerate() {
                if let Some(h) = head {
                    best = match best {
                        Some(b) => {
                            let bh = iters[b].1.as_ref().map(|e| (e.ledger, e.entry));
                            if Some((h.ledger, h.entry)) <= bh {
                                Some(i)
                            } else {
                                Some(b)
                            }
                        }
                        None => Some(i),
                    };
                }
            }
            let Some(b) = best else { break };
            let Some(chosen) = iters[b].1 else { break };
            let chosen_seq = iters[b].2;
            for (it, head, _) in iters.iter_mut() {
                if head.is_some_and(|h| (h.ledger, h.entry) == (chosen.ledger, chosen.entry)) {
                    *head = it.next_entry()?;
                }
            }
            if keep(chosen.ledger, chosen_seq) {
                out.push(chosen)?;
            }
        }
        out.finish(true)?;
        fs::sync_dir(&self.dir)?;
        let level = inputs.iter().map(|s| s.level).max().unwrap_or(0) + 1;
        Segment::open(&self.dir, seq, level)
    }

    /// Puts `merged` in the place of `inputs` in the live list; returns the new manifest. The
    /// caller records it, then calls [`remove_files`](Self::remove_files).
    pub fn replace(&self, inputs: &[Arc<Segment>], merged: Arc<Segment>) -> Vec<SegmentRef> {
        let mut list = self.list.write();
        let mut next: Vec<Arc<Segment>> = Vec::with_capacity(list.len());
        let mut placed = false;
        for s in list.iter() {
            if inputs.iter().any(|i| i.seq == s.seq) {
                if !placed {
                    next.push(merged.clone());
                    placed = true;
                }
            } else {
                next.push(s.clone());
            }
        }
        *list = Arc::new(next);
        list.iter()
            .filter(|s| s.is_durable())
            .map(|s| SegmentRef {
                seq: s.seq,
                level: s.level,
            })
            .collect()
    }

    /// Deletes merged-away segment files and drops their cached blocks. Lookups still holding
    /// one keep reading it (the descriptor stays valid); its blocks are freed in steps once they
    /// let go (see `release`), not at once by whichever of them closes it last.
    pub fn remove_files(&self, inputs: &[Arc<Segment>]) {
        for s in inputs {
            self.cache.forget_segment(s.seq);
            let held = fs::open_write(s.path()).ok();
            if let Err(e) = fs::remove_file(s.path()) {
                log::warn!("removing merged index segment: {e}");
                continue;
            }
            if let Some(file) = held {
                self.releaser.release(Unlinked {
                    file,
                    path: s.path().to_path_buf(),
                    readers: Some(s.clone() as Arc<dyn Any + Send + Sync>),
                });
            }
        }
    }

    /// Merged-away segments waiting to be freed, or being freed.
    #[cfg(test)]
    pub fn releasing(&self) -> usize {
        self.releaser.pending()
    }
}
