//! One entry log file: creation with its header, buffered appends, and sealing (the ledgers
//! map appended and its offset written into the header). It never chooses a directory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ledgers_map::{encode_ledgers_map, LedgersMap};
use super::location::log_name;
use crate::error::{IoContext, Result};
use crate::fs;
use crate::record::{append_record, file_header, FILE_HEADER_LEN};

pub(super) const LOG_MAGIC: &[u8; 8] = b"PBKXELOG";
pub(super) const LOG_VERSION: u32 = 1;
/// The header's spare field holds the ledgers-map offset once the log is sealed.
pub(super) const MAP_OFFSET_AT: u64 = 24;
/// Ledger id of the ledgers-map record; real ledger ids are non-negative i64.
pub(super) const MAP_MARKER: u64 = u64::MAX;

/// The log being appended to.
pub(super) struct ActiveLog {
    pub(super) id: u32,
    pub(super) path: PathBuf,
    file: File,
    /// A second descriptor of the same file, so a checkpoint can fdatasync it without holding
    /// the lock that appends need (a sync under the lock would stall acknowledgements).
    pub(super) sync_handle: Arc<File>,
    /// Logical end: bytes written plus bytes still in `buf`.
    pub(super) end: u64,
    pub(super) buf: Vec<u8>,
    pub(super) ledgers: LedgersMap,
}

impl ActiveLog {
    /// Creates log `id` in `dir` (synced, header included); returns it and a read handle.
    pub(super) fn create(dir: &Path, id: u32, write_buffer: usize) -> Result<(Self, File)> {
        let path = dir.join(log_name(id));
        let file = fs::create_new(&path)?;
        fs::write_all(
            &file,
            &path,
            &file_header(LOG_MAGIC, LOG_VERSION, id as u64),
        )?;
        fs::fsync(&file, &path)?;
        fs::sync_dir(dir)?;
        let reader = fs::open_read(&path)?;
        let sync_handle = Arc::new(
            file.try_clone()
                .ctx(|| format!("duplicating {}", path.display()))?,
        );
        Ok((
            ActiveLog {
                id,
                path,
                file,
                sync_handle,
                end: FILE_HEADER_LEN as u64,
                buf: Vec::with_capacity(write_buffer + (64 << 10)),
                ledgers: LedgersMap::new(),
            },
            reader,
        ))
    }

    /// Hands buffered bytes to the OS.
    pub(super) fn write_buf(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        fs::write_all(&self.file, &self.path, &self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes the rest, appends the ledgers map, records its offset in the header and syncs.
    pub(super) fn seal(mut self) -> Result<()> {
        self.write_buf()?;
        let map_offset = self.end;
        let mut rec = Vec::new();
        let body = encode_ledgers_map(&self.ledgers);
        append_record(
            &mut rec,
            &[&MAP_MARKER.to_be_bytes(), &MAP_MARKER.to_be_bytes(), &body],
        );
        fs::write_all(&self.file, &self.path, &rec)?;
        fs::write_all_at(
            &self.file,
            &self.path,
            &map_offset.to_be_bytes(),
            MAP_OFFSET_AT,
        )?;
        fs::fdatasync(&self.file, &self.path)
    }
}
