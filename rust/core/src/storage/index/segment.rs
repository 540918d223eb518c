//! Index segments: immutable files of (ledger, entry) -> location, sorted by key, written once
//! per write-cache flush (`segment_writer`) and merged in the background. It owns reading the
//! `.idx` files (lookups, scans, iteration); it never decides which segments are live (the
//! manifest in `index.log` does). The format is `segment_format`'s.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use super::block::{Block, Cursor, IndexEntry, Spot};
use super::cache::{BlockCache, BlockKey};
pub use super::segment_format::segment_name;
use super::segment_format::{
    bucket_key, decode_block, BlockMeta, Bloom, DIR_ENTRY_LEN, SEGMENT_MAGIC, SEGMENT_VERSION,
    TRAILER_LEN, TRAILER_MAGIC,
};
use crate::error::{Result, StorageError};
use crate::fs;
use crate::record::{
    be_u32, be_u64, check_file_header, verify_record, FILE_HEADER_LEN, RECORD_HEADER_LEN,
};
use crate::storage::entrylog::Location;

/// An open, immutable segment.
pub struct Segment {
    pub seq: u64,
    /// Merge level: 0 for a flushed segment, k+1 for a merge of level-k segments.
    pub level: u32,
    path: PathBuf,
    file: File,
    dir: Vec<BlockMeta>,
    bloom: Bloom,
    buckets: Bloom,
    entries: u64,
    bytes: u64,
    /// Synced and listed in the manifest (a segment flushed since the last checkpoint is not).
    durable: AtomicBool,
}

impl Segment {
    /// Opens segment `seq` in `dir`, loading its block directory and Bloom filter.
    pub fn open(dir: &Path, seq: u64, level: u32) -> Result<Arc<Segment>> {
        let path = dir.join(segment_name(seq));
        let file = fs::open_read(&path)?;
        let what = || path.display().to_string();
        let size = file
            .metadata()
            .map_err(|e| StorageError::Io {
                context: format!("reading the size of {}", what()),
                source: e,
            })?
            .len();
        let corrupt = |why: &str| StorageError::Corruption(format!("{}: {why}", what()));
        if size < (FILE_HEADER_LEN + TRAILER_LEN) as u64 {
            return Err(corrupt("too short"));
        }
        let mut header = [0u8; FILE_HEADER_LEN];
        fs::read_exact_at(&file, &path, &mut header, 0)?;
        check_file_header(&header, SEGMENT_MAGIC, SEGMENT_VERSION, "index segment")?;
        let mut trailer = [0u8; TRAILER_LEN];
        fs::read_exact_at(&file, &path, &mut trailer, size - TRAILER_LEN as u64)?;
        if &trailer[8..16] != TRAILER_MAGIC {
            return Err(corrupt("no trailer (an unfinished write)"));
        }
        let dir_offset = be_u64(&trailer[0..8]);
        let dir_len = size
            .checked_sub(TRAILER_LEN as u64 + dir_offset)
            .filter(|n| *n >= RECORD_HEADER_LEN as u64)
            .ok_or_else(|| corrupt("bad directory offset"))?;
        let mut raw = vec![0u8; dir_len as usize];
        fs::read_exact_at(&file, &path, &mut raw, dir_offset)?;
        let body = verify_record(&raw, what)?;
        let short = || corrupt("short directory");
        let entries = be_u64(body.get(0..8).ok_or_else(short)?);
        let n = be_u32(body.get(8..12).ok_or_else(short)?) as usize;
        let mut at = 12;
        // The count is checked against the bytes that hold it before anything is sized by it.
        if n > (body.len() - at) / DIR_ENTRY_LEN {
            return Err(short());
        }
        let mut blocks = Vec::with_capacity(n);
        for _ in 0..n {
            let d = body.get(at..at + DIR_ENTRY_LEN).ok_or_else(short)?;
            let block = BlockMeta {
                first: (be_u64(&d[0..8]), be_u64(&d[8..16])),
                last: (be_u64(&d[16..24]), be_u64(&d[24..32])),
                offset: be_u64(&d[32..40]),
                len: be_u32(&d[40..44]),
            };
            // A block is read whole into memory: it must lie between header and directory.
            let end = block.offset.checked_add(u64::from(block.len));
            if block.offset < FILE_HEADER_LEN as u64 || end.is_none_or(|e| e > dir_offset) {
                return Err(corrupt("a block lies outside the segment"));
            }
            blocks.push(block);
            at += DIR_ENTRY_LEN;
        }
        let mut filters = Vec::with_capacity(2);
        for _ in 0..2 {
            let words = be_u32(body.get(at..at + 4).ok_or_else(short)?) as usize;
            at += 4;
            let bits = body
                .get(at..at + words * 8)
                .ok_or_else(short)?
                .chunks_exact(8)
                .map(be_u64)
                .collect::<Vec<_>>();
            if !bits.len().is_power_of_two() {
                return Err(corrupt("bad Bloom filter size"));
            }
            at += words * 8;
            filters.push(Bloom { bits });
        }
        let buckets = filters.pop().ok_or_else(short)?;
        let bloom = filters.pop().ok_or_else(short)?;
        Ok(Arc::new(Segment {
            seq,
            level,
            path,
            file,
            dir: blocks,
            bloom,
            buckets,
            entries,
            bytes: size,
            durable: AtomicBool::new(true),
        }))
    }

    pub fn entries(&self) -> u64 {
        self.entries
    }

    pub fn is_durable(&self) -> bool {
        self.durable.load(Ordering::Acquire)
    }

    pub fn set_unsynced(&self) {
        self.durable.store(false, Ordering::Release);
    }

    pub fn set_durable(&self) {
        self.durable.store(true, Ordering::Release);
    }

    /// Makes the file durable.
    pub fn sync(&self) -> Result<()> {
        fs::fsync(&self.file, &self.path)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Memory held for this segment whatever the cache holds.
    pub fn resident_bytes(&self) -> usize {
        self.dir.capacity() * std::mem::size_of::<BlockMeta>()
            + (self.bloom.bits.len() + self.buckets.bits.len()) * 8
    }

    pub fn may_hold_ledger(&self, ledger: u64) -> bool {
        self.in_ledger_range(ledger) && self.bloom.may_contain(ledger)
    }

    fn in_ledger_range(&self, ledger: u64) -> bool {
        match (self.dir.first(), self.dir.last()) {
            (Some(first), Some(last)) => first.first.0 <= ledger && ledger <= last.last.0,
            _ => false,
        }
    }

    /// Index of the block that would hold `key`.
    fn block_for(&self, key: (u64, u64)) -> Option<usize> {
        let i = self.dir.partition_point(|b| b.first <= key);
        let i = i.checked_sub(1)?;
        (key <= self.dir[i].last).then_some(i)
    }

    /// Reads and decodes block `i` from the file (not through the cache).
    fn read_block(&self, i: usize) -> Result<Block> {
        let meta = self.dir[i];
        let mut raw = vec![0u8; meta.len as usize];
        fs::read_exact_at(&self.file, &self.path, &mut raw, meta.offset)?;
        let what = || format!("{} block {i}", self.path.display());
        let body = verify_record(&raw, what)?;
        decode_block(body, &what)
    }

    fn block(&self, i: usize, cache: &BlockCache) -> Result<Arc<Block>> {
        let key = BlockKey {
            seq: self.seq,
            block: i as u32,
        };
        if let Some(b) = cache.get(&key) {
            return Ok(b);
        }
        let b = Arc::new(self.read_block(i)?);
        cache.insert(key, b.clone());
        Ok(b)
    }

    /// The location of an entry, if this segment holds it.
    pub fn get(&self, ledger: u64, entry: u64, cache: &BlockCache) -> Result<Option<Location>> {
        if !self.in_ledger_range(ledger) || !self.buckets.may_contain(bucket_key(ledger, entry)) {
            return Ok(None);
        }
        let Some(i) = self.block_for((ledger, entry)) else {
            return Ok(None);
        };
        Ok(self.block(i, cache)?.find(ledger, entry))
    }

    /// Calls `f` with the entries of `ledger` from `from` on, ascending, until it returns false.
    pub fn scan_ledger(
        &self,
        ledger: u64,
        from: u64,
        cache: &BlockCache,
        f: &mut dyn FnMut(&IndexEntry) -> bool,
    ) -> Result<()> {
        if !self.may_hold_ledger(ledger) {
            return Ok(());
        }
        let start = self.dir.partition_point(|b| b.last < (ledger, from));
        for i in start..self.dir.len() {
            if self.dir[i].first.0 > ledger {
                break;
            }
            let block = self.block(i, cache)?;
            let mut at = block.seek(ledger, from);
            while let Some(e) = block.next(&mut at) {
                if e.ledger != ledger || !f(&e) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Every entry in order, read block by block from the file (for merges: no cache churn).
    pub fn iter(self: &Arc<Self>) -> SegmentIter {
        SegmentIter {
            seg: self.clone(),
            block: 0,
            entries: Block::default(),
            at: Cursor::default(),
        }
    }
}

/// Sequential reader of a whole segment.
pub struct SegmentIter {
    seg: Arc<Segment>,
    block: usize,
    entries: Block,
    at: Cursor,
}

impl SegmentIter {
    pub fn next_entry(&mut self) -> Result<Option<IndexEntry>> {
        loop {
            if let Some(e) = self.entries.next(&mut self.at) {
                return Ok(Some(e));
            }
            if self.block >= self.seg.dir.len() {
                return Ok(None);
            }
            self.entries = self.seg.read_block(self.block)?;
            self.at = Cursor::default();
            self.block += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::segment_writer::SegmentWriter;
    use super::*;

    fn e(ledger: u64, entry: u64, log: u32, offset: u64, len: u32) -> IndexEntry {
        IndexEntry {
            ledger,
            entry,
            at: Location::new(log, offset, len),
        }
    }

    #[test]
    fn write_open_get_and_scan() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::create(dir.path(), 7).unwrap();
        let mut all = Vec::new();
        // Ledger 1: back-to-back records (one run), ledger 2 strided, ledger 3 in two logs.
        let mut off = 32;
        for i in 0..3000u64 {
            let len = 16 + (i % 300) as u32;
            all.push(e(1, i, 1, off, len));
            off += 8 + len as u64;
        }
        for i in 0..500u64 {
            all.push(e(2, i * 3, 1, off, 20));
            off += 100;
        }
        all.push(e(3, 0, 1, off, 30));
        all.push(e(3, 1, 2, 32, 30));
        for x in &all {
            w.push(*x).unwrap();
        }
        assert!(w.push(e(0, 0, 1, 32, 16)).is_err());
        w.finish(true).unwrap();
        let seg = Segment::open(dir.path(), 7, 0).unwrap();
        assert_eq!(seg.entries(), all.len() as u64);
        let cache = BlockCache::new(1 << 20);
        for x in &all {
            assert_eq!(seg.get(x.ledger, x.entry, &cache).unwrap(), Some(x.at));
        }
        assert_eq!(seg.get(2, 1, &cache).unwrap(), None);
        assert_eq!(seg.get(9, 0, &cache).unwrap(), None);
        let mut seen = Vec::new();
        seg.scan_ledger(2, 10, &cache, &mut |x| {
            seen.push(x.entry);
            seen.len() < 5
        })
        .unwrap();
        assert_eq!(seen, vec![12, 15, 18, 21, 24]);
        let mut it = seg.iter();
        let mut n = 0;
        while let Some(x) = it.next_entry().unwrap() {
            assert_eq!(x, all[n]);
            n += 1;
        }
        assert_eq!(n, all.len());
    }

    #[test]
    fn back_to_back_entries_cost_about_two_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::create(dir.path(), 1).unwrap();
        let mut off = 32;
        let n = 100_000u64;
        for i in 0..n {
            w.push(e(i / 10_000, i % 10_000, 1, off, 116)).unwrap();
            off += 8 + 116;
        }
        w.finish(true).unwrap();
        let seg = Segment::open(dir.path(), 1, 0).unwrap();
        assert!(seg.bytes() < n * 3, "{} bytes", seg.bytes());
    }

    #[test]
    fn a_torn_segment_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::create(dir.path(), 1).unwrap();
        w.push(e(1, 0, 1, 32, 16)).unwrap();
        let (path, size) = w.finish(true).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(size - 3).unwrap();
        assert!(Segment::open(dir.path(), 1, 0).is_err());
    }
}
