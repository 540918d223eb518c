//! Journal files: naming, creation with header and preallocation, appends (through the page
//! cache, or direct writes of whole blocks), and syncs.
//! It never decides what a group is or when to sync.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::aligned::{AlignedBuf, DIRECT_ALIGN};
use crate::error::{IoContext, Result};
use crate::fs::{self, DirectWrite};
use crate::record::{file_header, FILE_HEADER_LEN, RECORD_HEADER_LEN};

use super::op::{file_tag, JournalOp};

pub(super) const JOURNAL_MAGIC: &[u8; 8] = b"PBKXJRNL";
/// Format 3: records end with their kind and the file's tag (see `op`); format 2 and 1 files
/// are still replayed.
pub(super) const JOURNAL_VERSION: u32 = 3;

/// A zero record header: where the written data of a file ends (`ScanEnd::Clean`). A reused
/// file's every write is followed by one (the next write covers it), because past the new data
/// lie the old records of the file's previous life, not zeros.
const END_MARK: [u8; RECORD_HEADER_LEN] = [0; RECORD_HEADER_LEN];

/// `<dir>/<hex id>.txn`, as BookKeeper names journal files.
pub fn journal_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:x}.txn"))
}

/// Ids of the journal files in `dir`, ascending.
pub fn list_journal_ids(dir: &Path) -> Result<Vec<u64>> {
    fs::list_hex_ids(dir, ".txn")
}

/// A journal file shared by the writer (appends) and the sync thread (syncs, and in direct mode
/// the writes themselves).
pub(super) struct JournalFile {
    pub(super) id: u64,
    pub(super) path: PathBuf,
    file: File,
    /// The same file opened with `O_DIRECT` (`journalDirectIO`), when the file system does
    /// direct I/O: records go from the writer's buffer to the device without a copy into the
    /// page cache.
    direct: Option<File>,
    /// Cleared when the file system refuses a direct write: the file goes on through the page
    /// cache (and its synced pages are dropped again).
    direct_ok: AtomicBool,
    /// Where the pages not yet dropped from the page cache start (`journalRemoveFromPageCache`).
    dropped_to: AtomicU64,
    /// A reused file (`journalReuseFiles`): its writes end with [`END_MARK`].
    reused: bool,
}

/// The page size the page cache reads and writes in (4 KiB on the platforms pybkx runs on).
const PAGE_SIZE: usize = 4096;

/// Pending records that make a direct write before their group ends (as the entry log's).
const DIRECT_WRITE_BYTES: usize = 1 << 20;

/// Synced journal data within this distance of the synced end stays in the page cache (as
/// BookKeeper keeps it): dropping right behind the writer could cut pages it still fills.
const PAGE_CACHE_LAG: u64 = 8 << 20;

/// Records for one direct write, made by the sync thread: `bytes` belong at `at`, a block
/// boundary, and start with the bytes already written of that block (see [`OpenJournal`]).
pub(super) struct Chunk {
    pub(super) at: u64,
    /// Where this chunk's new records start (`at` plus the rewritten bytes).
    pub(super) records_from: u64,
    pub(super) bytes: AlignedBuf,
}

impl JournalFile {
    /// The `O_DIRECT` descriptor, while the file system takes direct writes.
    fn direct_writes(&self) -> Option<&File> {
        self.direct
            .as_ref()
            .filter(|_| self.direct_ok.load(Ordering::Relaxed))
    }

    pub(super) fn sync(&self) -> Result<()> {
        fs::fdatasync(&self.file, &self.path)
    }

    /// Writes `bytes` at `at`: directly (padded with zeros to whole blocks, `at` a block
    /// boundary) while the file system accepts it, else through the page cache.
    fn write_at(&self, bytes: &mut AlignedBuf, at: u64) -> Result<()> {
        let logical = bytes.len();
        if self.reused {
            bytes.extend_from_slice(&END_MARK);
            if self.direct_writes().is_none() {
                // Through the page cache, a write that covers only part of a page the cache
                // does not hold first reads that page from the disk; a new file's preallocated
                // blocks read as zeros without I/O, a reused file's do not. Zeros to the end of
                // the last page make it whole (the next write covers them; the page is written
                // back either way).
                let end = at + bytes.len() as u64;
                let page = PAGE_SIZE as u64;
                bytes.resize_zeroed(bytes.len() + (end.div_ceil(page) * page - end) as usize);
            }
        }
        let written = self.write_at_as_is(bytes, at);
        bytes.truncate(logical);
        written
    }

    fn write_at_as_is(&self, bytes: &mut AlignedBuf, at: u64) -> Result<()> {
        if let Some(direct) = self.direct_writes() {
            let logical = bytes.len();
            bytes.pad_to(DIRECT_ALIGN);
            let result = fs::write_direct_at(direct, &self.path, bytes.as_slice(), at);
            bytes.truncate(logical);
            match result? {
                DirectWrite::Done => return Ok(()),
                DirectWrite::Refused => {
                    log::warn!(
                        "journal {}: the file system refused a direct write; this journal is \
                         written through the page cache",
                        self.path.display()
                    );
                    self.direct_ok.store(false, Ordering::Relaxed);
                }
            }
        }
        fs::write_all_at(&self.file, &self.path, bytes.as_slice(), at)
    }

    /// Writes a chunk the writer handed over (the sync thread, before syncing its group). A
    /// failed write cuts the file where the chunk's records start (best effort), so that the
    /// file, which is abandoned for a new one, ends with whole records.
    pub(super) fn write_chunk(&self, chunk: &mut Chunk) -> Result<()> {
        let written = self.write_at(&mut chunk.bytes, chunk.at);
        if written.is_err() {
            if let Err(e) = fs::truncate_and_sync(&self.file, &self.path, chunk.records_from) {
                log::warn!("journal {}: {e}", self.path.display());
            }
        }
        written
    }

    /// Drops the pages of data synced up to `synced_end` (less [`PAGE_CACHE_LAG`]) from the page
    /// cache: a journal is only read again by a replay after a crash, and synced pages kept
    /// cached push out entry-log pages that reads want (BookKeeper's
    /// `journalRemoveFromPageCache`). Called by the sync thread only.
    pub(super) fn drop_synced_pages(&self, synced_end: u64) {
        if self.direct_writes().is_some() {
            return; // nothing of it is in the page cache
        }
        let upto = synced_end.saturating_sub(PAGE_CACHE_LAG) & !4095;
        let from = self.dropped_to.load(Ordering::Relaxed);
        if upto > from {
            fs::advise_dont_need(&self.file, from, upto - from);
            self.dropped_to.store(upto, Ordering::Relaxed);
        }
    }
}

/// The writer's view of its current file, and the records not yet written to it.
///
/// In direct mode the writer only encodes: the sync thread makes the writes (see
/// [`OpenJournal::take_chunk`]), so the device's time for a group's bytes is spent beside the
/// next group's forming, as with page-cache writes (whose device time is spent in the sync).
/// A direct write takes whole blocks, so each one starts with the bytes already written of the
/// block the file's end falls in and rewrites them unchanged: a write torn by a crash leaves
/// each of its sectors old or new, and those old bytes equal the new, so nothing written before
/// is damaged. The rest of the last block is zeros, as the preallocated file is.
pub(super) struct OpenJournal {
    pub(super) file: Arc<JournalFile>,
    /// Bytes written or handed to the sync thread to write (header included): where the next
    /// record goes.
    pub(super) written: u64,
    preallocated: u64,
    /// The bytes of the block `written` falls in that precede it (`tail` of them, direct mode
    /// only), then the records not yet written or handed over.
    buf: AlignedBuf,
    tail: usize,
    /// The capacity a fresh buffer starts with: the largest a group's buffer has grown to
    /// (bounded by the group thresholds, `journalBufferedWritesThreshold` plus one entry, or
    /// the write size in direct mode).
    capacity: usize,
}

impl OpenJournal {
    /// Creates journal `id` in `dir`, written with direct I/O if `direct_io` and the file
    /// system allows it. A failed creation (a full disk) removes what it left, so the same id
    /// can be tried again.
    pub(super) fn create(
        dir: &Path,
        id: u64,
        prealloc: u64,
        direct_io: bool,
        buffer: usize,
    ) -> Result<Self> {
        let path = journal_path(dir, id);
        let created = Self::create_at(dir, &path, id, prealloc, direct_io, buffer);
        if created.is_err() && path.exists() {
            if let Err(e) = fs::remove_file(&path) {
                log::warn!("removing the unfinished journal {}: {e}", path.display());
            }
        }
        created
    }

    fn create_at(
        dir: &Path,
        path: &Path,
        id: u64,
        prealloc: u64,
        direct_io: bool,
        buffer: usize,
    ) -> Result<Self> {
        let file = fs::create_new(path)?;
        let header = file_header(JOURNAL_MAGIC, JOURNAL_VERSION, id);
        fs::write_all(&file, path, &header)?;
        let mut open = Self::opened(path, id, file, 0, false, direct_io, buffer)?;
        open.ensure_preallocated(0, prealloc);
        fs::fsync(&open.file.file, &open.file.path)?;
        fs::sync_dir(dir)?;
        Ok(open)
    }

    /// Makes the old journal `old_id` in `dir` (covered by a checkpoint, no longer needed) the
    /// new journal `id`, its blocks kept: its header is rewritten, followed by an end mark, and
    /// it is renamed. Appends then overwrite blocks the file system has already allocated and
    /// written, so a sync has no allocation to commit, and no file is freed or preallocated.
    ///
    /// Crash-safe at every step: until the rename the file keeps its old name, below the
    /// checkpoint's mark, and no replay reads it; after it, the file reads as a journal `id` with
    /// no records. A failure before the rename leaves the file under its old name (reused or
    /// removed later); after it, the file is removed, so that a new one can take `id` at once.
    pub(super) fn reuse(
        dir: &Path,
        old_id: u64,
        id: u64,
        direct_io: bool,
        buffer: usize,
    ) -> Result<Self> {
        let old = journal_path(dir, old_id);
        let file = fs::open_rw(&old)?;
        let len = file
            .metadata()
            .ctx(|| format!("reading the size of {}", old.display()))?
            .len();
        let mut start = file_header(JOURNAL_MAGIC, JOURNAL_VERSION, id).to_vec();
        start.extend_from_slice(&END_MARK);
        fs::write_all_at(&file, &old, &start, 0)?;
        fs::fdatasync(&file, &old)?;
        let path = journal_path(dir, id);
        fs::rename(&old, &path)?;
        let opened = fs::sync_dir(dir)
            .and_then(|()| Self::opened(&path, id, file, len, true, direct_io, buffer));
        if opened.is_err() {
            if let Err(e) = fs::remove_file(&path) {
                log::warn!("removing the unfinished journal {}: {e}", path.display());
            }
        }
        opened
    }

    /// The writer's state for journal `id` just created or reused (`reused`) at `path`, its
    /// header written and `preallocated` bytes of it allocated.
    fn opened(
        path: &Path,
        id: u64,
        file: File,
        preallocated: u64,
        reused: bool,
        direct_io: bool,
        buffer: usize,
    ) -> Result<Self> {
        let path = path.to_path_buf();
        let direct = if direct_io {
            let direct = fs::open_direct_write(&path)?;
            if direct.is_none() {
                log::info!(
                    "journal {}: the file system refuses direct I/O; written through the page cache",
                    path.display()
                );
            }
            direct
        } else {
            None
        };
        let capacity = buffer + DIRECT_ALIGN;
        let mut buf = AlignedBuf::with_capacity(capacity);
        let tail = if direct.is_some() {
            buf.extend_from_slice(&file_header(JOURNAL_MAGIC, JOURNAL_VERSION, id));
            FILE_HEADER_LEN
        } else {
            0
        };
        Ok(OpenJournal {
            file: Arc::new(JournalFile {
                id,
                path,
                file,
                direct_ok: AtomicBool::new(direct.is_some()),
                direct,
                dropped_to: AtomicU64::new(0),
                reused,
            }),
            written: FILE_HEADER_LEN as u64,
            preallocated,
            buf,
            tail,
            capacity,
        })
    }

    fn ensure_preallocated(&mut self, extra: u64, step: u64) {
        if step == 0 || self.written + extra <= self.preallocated {
            return;
        }
        let target = (self.written + extra).max(self.preallocated + step);
        fs::preallocate(
            &self.file.file,
            &self.file.path,
            self.preallocated,
            target - self.preallocated,
        );
        self.preallocated = target;
    }

    /// Whether the sync thread writes this file's records (direct mode).
    pub(super) fn is_direct(&self) -> bool {
        self.file.direct.is_some()
    }

    /// Appends `op`'s record, tagged for this file.
    pub(super) fn append(&mut self, op: &JournalOp) {
        op.encode(&mut self.buf, file_tag(self.file.id));
    }

    /// Bytes of records appended and not yet written or handed over.
    pub(super) fn pending(&self) -> usize {
        self.buf.len() - self.tail
    }

    /// Pending bytes that make a write before the group ends: direct writes each wait for the
    /// device, so they are made at least [`DIRECT_WRITE_BYTES`] large.
    pub(super) fn write_threshold(&self, write_buffer: usize) -> usize {
        if self.is_direct() {
            write_buffer.max(DIRECT_WRITE_BYTES)
        } else {
            write_buffer
        }
    }

    /// Forgets the records not yet written (their group is held and written again later).
    pub(super) fn discard_pending(&mut self) {
        self.buf.truncate(self.tail);
    }

    /// Direct mode: the pending records, after the bytes of the block they continue, as a chunk
    /// for the sync thread to write; the file's end moves past them. None when nothing is
    /// pending.
    pub(super) fn take_chunk(&mut self, prealloc: u64) -> Option<Chunk> {
        let pending = self.pending();
        if pending == 0 {
            return None;
        }
        self.ensure_preallocated(pending as u64, prealloc);
        let at = self.written - self.tail as u64;
        let whole = self.buf.len() / DIRECT_ALIGN * DIRECT_ALIGN;
        // As large as the last group needed, so that a group's buffer does not grow (a copy of
        // all it holds each time) while its records are encoded.
        self.capacity = self.capacity.max(self.buf.capacity());
        let mut next = AlignedBuf::with_capacity(self.capacity);
        next.extend_from_slice(&self.buf.as_slice()[whole..]);
        let bytes = std::mem::replace(&mut self.buf, next);
        let records_from = self.written;
        self.written += pending as u64;
        self.tail = self.buf.len();
        Some(Chunk {
            at,
            records_from,
            bytes,
        })
    }

    /// Writes the pending records after the written data, now (page-cache mode, and a held
    /// group's retry in either mode). Positional, so that after a failed (or short) write the
    /// same bytes can be written again at the same place. On failure the pending records are
    /// forgotten, as by [`OpenJournal::discard_pending`].
    pub(super) fn write_pending(&mut self, prealloc: u64) -> Result<()> {
        let pending = self.pending();
        if pending == 0 {
            return Ok(());
        }
        self.ensure_preallocated(pending as u64, prealloc);
        let at = self.written - self.tail as u64;
        if let Err(e) = self.file.write_at(&mut self.buf, at) {
            self.discard_pending();
            return Err(e);
        }
        self.written += pending as u64;
        if self.is_direct() {
            // Keep the partial last block: the next write rewrites it.
            let whole = self.buf.len() / DIRECT_ALIGN * DIRECT_ALIGN;
            self.buf.discard_front(whole);
        } else {
            self.buf.clear();
        }
        self.tail = self.buf.len();
        Ok(())
    }

    /// Cuts whatever a failed write left after `offset` (synced), so the file ends with whole
    /// records and the next write goes there. Pending records are forgotten. Only for a held
    /// group: no chunk of this file may be waiting for the sync thread.
    pub(super) fn rewind(&mut self, offset: u64) -> Result<()> {
        self.buf.clear();
        self.tail = 0;
        fs::truncate_and_sync(&self.file.file, &self.file.path, offset)?;
        self.written = offset;
        self.preallocated = self.preallocated.min(offset);
        if self.is_direct() {
            // The partial block the next direct write starts with, as it is on disk.
            let tail = (offset % DIRECT_ALIGN as u64) as usize;
            self.buf.resize_zeroed(tail);
            let block = self.buf.as_mut_slice();
            if let Err(e) = fs::read_exact_at(
                &self.file.file,
                &self.file.path,
                block,
                offset - tail as u64,
            ) {
                self.buf.clear();
                // Read again in full at the next rewind.
                return Err(e);
            }
            self.tail = tail;
        }
        Ok(())
    }
}
