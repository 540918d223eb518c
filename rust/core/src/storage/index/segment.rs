//! Index segments: immutable files of (ledger, entry) -> location, sorted by key, written once
//! per write-cache flush and merged in the background. It owns the `.idx` files; it never
//! decides which segments are live (the manifest in `index.log` does).
//!
//! File: the common 32-byte header (magic `PBKXISEG`), then blocks, each one record
//! (`[len][crc32c][body]`) of runs, then one record holding the block directory and the
//! ledger Bloom filter, then a 16-byte trailer (offset of that record, magic).
//!
//! A run is entries of one ledger lying back to back in one entry log, as a sorted flush
//! writes them: `ledger u64, first entry u64, log id u32, first offset u32, count varint`,
//! then per later entry its id delta (varint), then per entry its record body length
//! (varint). Offsets follow from lengths, so an entry costs about 3 bytes on disk.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use super::block::{Block, Cursor, IndexEntry, Spot};
use super::cache::{BlockCache, BlockKey};
use crate::error::{Result, StorageError};
use crate::fs;
use crate::record::{
    append_record, be_u32, be_u64, check_file_header, file_header, verify_record, FILE_HEADER_LEN,
    RECORD_HEADER_LEN,
};
use crate::storage::entrylog::Location;

const SEGMENT_MAGIC: &[u8; 8] = b"PBKXISEG";
const SEGMENT_VERSION: u32 = 1;
const TRAILER_MAGIC: &[u8; 8] = b"PBKXIEND";
const TRAILER_LEN: usize = 16;
/// A block closes at the first run's end past this many entries or encoded bytes: lookups
/// binary-search a decoded block, so its size bounds their cost and the cache's unit. (Ending
/// runs at the limit instead made misses 1.2x faster and hits 1.2x slower: not taken.)
const BLOCK_MAX_ENTRIES: usize = 1024;
const BLOCK_MAX_BYTES: usize = 8 << 10;
const RUN_MAX_ENTRIES: usize = 4096;
/// Bloom filters: bits per key and probes. One filter holds ledger ids (scans), the other
/// (ledger, entry / 1024) buckets (lookups): when many ledgers are written interleaved every
/// segment holds every ledger, but only one or two hold a given bucket of its entries.
const BLOOM_BITS_PER_KEY: usize = 10;
const BUCKET_BITS: u32 = 10;
const BLOOM_PROBES: u32 = 6;
const DIR_ENTRY_LEN: usize = 8 + 8 + 8 + 8 + 8 + 4 + 4;

/// The file name of segment `seq`.
pub fn segment_name(seq: u64) -> String {
    format!("{seq:x}.idx")
}

/// Where a block is and which keys it holds (kept in memory for every block).
#[derive(Debug, Clone, Copy)]
struct BlockMeta {
    first: (u64, u64),
    last: (u64, u64),
    offset: u64,
    len: u32,
}

/// Ledger-id Bloom filter: a segment without the ledger is skipped without reading a block.
struct Bloom {
    bits: Vec<u64>,
}

fn bucket_key(ledger: u64, entry: u64) -> u64 {
    mix(ledger) ^ (entry >> BUCKET_BITS)
}

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Bloom {
    fn with_keys(keys: &[u64]) -> Bloom {
        // A power of two, so a probe is a mask rather than a division.
        let words = (keys.len() * BLOOM_BITS_PER_KEY)
            .div_ceil(64)
            .max(1)
            .next_power_of_two();
        let mut bloom = Bloom {
            bits: vec![0; words],
        };
        for k in keys {
            for bit in bloom.probes(*k) {
                bloom.bits[bit / 64] |= 1 << (bit % 64);
            }
        }
        bloom
    }

    fn probes(&self, key: u64) -> impl Iterator<Item = usize> {
        let h = mix(key);
        let (h1, h2) = (h as u32 as u64, (h >> 32) | 1);
        let mask = (self.bits.len() * 64 - 1) as u64;
        (0..BLOOM_PROBES as u64).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) & mask) as usize)
    }

    fn may_contain(&self, key: u64) -> bool {
        self.probes(key)
            .all(|bit| self.bits[bit / 64] & (1 << (bit % 64)) != 0)
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= ((b & 0x7F) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A run being collected.
struct Run {
    ledger: u64,
    first: u64,
    log_id: u32,
    first_offset: u64,
    next_offset: u64,
    last_entry: u64,
    deltas: Vec<u64>,
    lens: Vec<u32>,
}

impl Run {
    fn continues(&self, e: &IndexEntry) -> bool {
        e.ledger == self.ledger
            && e.at.log_id() == self.log_id
            && e.at.offset() == self.next_offset
            && e.entry > self.last_entry
            && self.lens.len() < RUN_MAX_ENTRIES
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ledger.to_be_bytes());
        out.extend_from_slice(&self.first.to_be_bytes());
        out.extend_from_slice(&self.log_id.to_be_bytes());
        out.extend_from_slice(&(self.first_offset as u32).to_be_bytes());
        put_varint(out, self.lens.len() as u64);
        for d in &self.deltas {
            put_varint(out, *d);
        }
        for l in &self.lens {
            put_varint(out, *l as u64);
        }
    }
}

fn decode_block(body: &[u8], what: &dyn Fn() -> String) -> Result<Block> {
    let bad = || StorageError::Corruption(format!("{}: malformed block", what()));
    // Sized once from the body (an entry takes at least two of its bytes, a run at least 26):
    // growing by doubling copied the entries over and over, a quarter of a cache miss's time.
    let mut block = Block::with_capacity(body.len() / 2 + 1, body.len() / 26 + 1);
    let mut at = 0usize;
    while at < body.len() {
        let head = body.get(at..at + 24).ok_or_else(bad)?;
        at += 24;
        let ledger = be_u64(&head[0..8]);
        let first = be_u64(&head[8..16]);
        let log_id = be_u32(&head[16..20]);
        let first_offset = be_u32(&head[20..24]);
        let count = get_varint(body, &mut at).ok_or_else(bad)? as usize;
        if count == 0 || count > RUN_MAX_ENTRIES {
            return Err(bad());
        }
        // A run stores its ids, then its lengths: the ids go in first, their spots after.
        block.start_run(ledger, log_id);
        let mut id = first;
        for i in 0..count {
            if i > 0 {
                let d = get_varint(body, &mut at).ok_or_else(bad)?;
                id = id.checked_add(d).ok_or_else(bad)?;
            }
            block.push(id, 0, 0).map_err(|_| bad())?;
        }
        let mut offset = u64::from(first_offset);
        for spot in block.run_spots_mut() {
            let len =
                u32::try_from(get_varint(body, &mut at).ok_or_else(bad)?).map_err(|_| bad())?;
            *spot = Spot {
                offset: u32::try_from(offset).map_err(|_| bad())?,
                len,
            };
            offset += (RECORD_HEADER_LEN + len as usize) as u64;
        }
    }
    block.trim();
    Ok(block)
}

/// Writes a segment from entries given in ascending (ledger, entry) order.
pub struct SegmentWriter {
    path: PathBuf,
    file: File,
    written: u64,
    buf: Vec<u8>,
    block: Vec<u8>,
    block_entries: usize,
    block_first: (u64, u64),
    last: Option<(u64, u64)>,
    run: Option<Run>,
    dir: Vec<BlockMeta>,
    ledgers: Vec<u64>,
    buckets: Vec<u64>,
    entries: u64,
}

impl SegmentWriter {
    /// Creates segment file `seq` in `dir` (it must not exist).
    pub fn create(dir: &Path, seq: u64) -> Result<SegmentWriter> {
        let path = dir.join(segment_name(seq));
        if path.exists() {
            fs::remove_file(&path)?; // an orphan of an interrupted flush or merge
        }
        let file = fs::create_new(&path)?;
        let buf = file_header(SEGMENT_MAGIC, SEGMENT_VERSION, seq).to_vec();
        Ok(SegmentWriter {
            path,
            file,
            written: 0,
            buf,
            block: Vec::with_capacity(BLOCK_MAX_BYTES + 64),
            block_entries: 0,
            block_first: (0, 0),
            last: None,
            run: None,
            dir: Vec::new(),
            ledgers: Vec::new(),
            buckets: Vec::new(),
            entries: 0,
        })
    }

    /// Adds the next entry; keys must ascend strictly.
    pub fn push(&mut self, e: IndexEntry) -> Result<()> {
        if let Some(last) = self.last {
            if e.key() <= last {
                return Err(StorageError::InvalidArgument(format!(
                    "index segment keys out of order: {:?} after {:?}",
                    e.key(),
                    last
                )));
            }
        }
        if self.ledgers.last() != Some(&e.ledger) {
            self.ledgers.push(e.ledger);
        }
        let bucket = bucket_key(e.ledger, e.entry);
        if self.buckets.last() != Some(&bucket) {
            self.buckets.push(bucket);
        }
        match &mut self.run {
            Some(run) if run.continues(&e) => {
                run.deltas.push(e.entry - run.last_entry);
                run.lens.push(e.at.len);
                run.last_entry = e.entry;
                run.next_offset += (RECORD_HEADER_LEN + e.at.len as usize) as u64;
            }
            _ => {
                if let Some(run) = self.run.take() {
                    run.encode(&mut self.block);
                }
                if self.block_entries >= BLOCK_MAX_ENTRIES || self.block.len() >= BLOCK_MAX_BYTES {
                    self.end_block()?;
                }
                if self.block_entries == 0 {
                    self.block_first = e.key();
                }
                self.run = Some(Run {
                    ledger: e.ledger,
                    first: e.entry,
                    log_id: e.at.log_id(),
                    first_offset: e.at.offset(),
                    next_offset: e.at.offset() + (RECORD_HEADER_LEN + e.at.len as usize) as u64,
                    last_entry: e.entry,
                    deltas: Vec::new(),
                    lens: vec![e.at.len],
                });
            }
        }
        self.block_entries += 1;
        self.entries += 1;
        self.last = Some(e.key());
        Ok(())
    }

    fn end_block(&mut self) -> Result<()> {
        if let Some(run) = self.run.take() {
            run.encode(&mut self.block);
        }
        if self.block_entries == 0 {
            return Ok(());
        }
        let offset = self.written + self.buf.len() as u64;
        append_record(&mut self.buf, &[&self.block]);
        self.dir.push(BlockMeta {
            first: self.block_first,
            last: self.last.unwrap_or(self.block_first),
            offset,
            len: (self.block.len() + RECORD_HEADER_LEN) as u32,
        });
        self.block.clear();
        self.block_entries = 0;
        if self.buf.len() >= 1 << 20 {
            self.write_buf()?;
        }
        Ok(())
    }

    fn write_buf(&mut self) -> Result<()> {
        fs::write_all(&self.file, &self.path, &self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Entries pushed so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Writes the directory, Bloom filters and trailer; `sync`: and makes the file durable.
    pub fn finish(mut self, sync: bool) -> Result<(PathBuf, u64)> {
        self.end_block()?;
        let bloom = Bloom::with_keys(&self.ledgers);
        let buckets = Bloom::with_keys(&self.buckets);
        let mut body = Vec::with_capacity(16 + self.dir.len() * DIR_ENTRY_LEN);
        body.extend_from_slice(&self.entries.to_be_bytes());
        body.extend_from_slice(&(self.dir.len() as u32).to_be_bytes());
        for b in &self.dir {
            for v in [b.first.0, b.first.1, b.last.0, b.last.1, b.offset] {
                body.extend_from_slice(&v.to_be_bytes());
            }
            body.extend_from_slice(&b.len.to_be_bytes());
            body.extend_from_slice(&0u32.to_be_bytes());
        }
        for filter in [&bloom, &buckets] {
            body.extend_from_slice(&(filter.bits.len() as u32).to_be_bytes());
            for w in &filter.bits {
                body.extend_from_slice(&w.to_be_bytes());
            }
        }
        let dir_offset = self.written + self.buf.len() as u64;
        append_record(&mut self.buf, &[&body]);
        self.buf.extend_from_slice(&dir_offset.to_be_bytes());
        self.buf.extend_from_slice(TRAILER_MAGIC);
        self.write_buf()?;
        if sync {
            fs::fsync(&self.file, &self.path)?;
        }
        Ok((self.path, self.written))
    }
}

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

    #[test]
    fn varints_round_trip() {
        let mut out = Vec::new();
        let vals = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
        for v in vals {
            put_varint(&mut out, v);
        }
        let mut at = 0;
        for v in vals {
            assert_eq!(get_varint(&out, &mut at), Some(v));
        }
        assert_eq!(get_varint(&out, &mut at), None);
    }
}
