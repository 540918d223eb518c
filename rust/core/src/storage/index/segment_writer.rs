//! Writing an index segment in one sequential pass from entries in ascending (ledger, entry)
//! order: runs packed into blocks, then the block directory, the Bloom filters and the
//! trailer. It never reads a segment back.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::block::IndexEntry;
use super::segment_format::{
    bucket_key, segment_name, BlockMeta, Bloom, Run, BLOCK_MAX_BYTES, BLOCK_MAX_ENTRIES,
    DIR_ENTRY_LEN, SEGMENT_MAGIC, SEGMENT_VERSION, TRAILER_MAGIC,
};
use crate::error::{Result, StorageError};
use crate::fs;
use crate::record::{append_record, file_header, RECORD_HEADER_LEN};

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
