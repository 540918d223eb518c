//! Journal files: naming, creation with header and preallocation, appends, and syncs.
//! It never decides what a group is or when to sync.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Result;
use crate::fs;
use crate::record::{file_header, FILE_HEADER_LEN};

pub(super) const JOURNAL_MAGIC: &[u8; 8] = b"PBKXJRNL";
/// Format 2: records put their kind last (see `op`); format 1 files are still replayed.
pub(super) const JOURNAL_VERSION: u32 = 2;

/// `<dir>/<hex id>.txn`, as BookKeeper names journal files.
pub fn journal_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:x}.txn"))
}

/// Ids of the journal files in `dir`, ascending.
pub fn list_journal_ids(dir: &Path) -> Result<Vec<u64>> {
    fs::list_hex_ids(dir, ".txn")
}

/// A journal file shared by the writer (appends) and the sync thread (syncs).
pub(super) struct JournalFile {
    pub(super) id: u64,
    pub(super) path: PathBuf,
    file: File,
    /// Where the pages not yet dropped from the page cache start (`journalRemoveFromPageCache`).
    dropped_to: AtomicU64,
}

/// Synced journal data within this distance of the synced end stays in the page cache (as
/// BookKeeper keeps it): dropping right behind the writer could cut pages it still fills.
const PAGE_CACHE_LAG: u64 = 8 << 20;

impl JournalFile {
    pub(super) fn sync(&self) -> Result<()> {
        fs::fdatasync(&self.file, &self.path)
    }

    /// Drops the pages of data synced up to `synced_end` (less [`PAGE_CACHE_LAG`]) from the page
    /// cache: a journal is only read again by a replay after a crash, and synced pages kept
    /// cached push out entry-log pages that reads want (BookKeeper's
    /// `journalRemoveFromPageCache`). Called by the sync thread only.
    pub(super) fn drop_synced_pages(&self, synced_end: u64) {
        let upto = synced_end.saturating_sub(PAGE_CACHE_LAG) & !4095;
        let from = self.dropped_to.load(Ordering::Relaxed);
        if upto > from {
            fs::advise_dont_need(&self.file, from, upto - from);
            self.dropped_to.store(upto, Ordering::Relaxed);
        }
    }
}

/// The writer's view of its current file.
pub(super) struct OpenJournal {
    pub(super) file: Arc<JournalFile>,
    /// Bytes handed to the OS (header included).
    pub(super) written: u64,
    preallocated: u64,
}

impl OpenJournal {
    /// Creates journal `id` in `dir`. A failed creation (a full disk) removes what it left, so
    /// the same id can be tried again.
    pub(super) fn create(dir: &Path, id: u64, prealloc: u64) -> Result<Self> {
        let path = journal_path(dir, id);
        let created = Self::create_at(dir, &path, id, prealloc);
        if created.is_err() && path.exists() {
            if let Err(e) = fs::remove_file(&path) {
                log::warn!("removing the unfinished journal {}: {e}", path.display());
            }
        }
        created
    }

    fn create_at(dir: &Path, path: &Path, id: u64, prealloc: u64) -> Result<Self> {
        let path = path.to_path_buf();
        let file = fs::create_new(&path)?;
        fs::write_all(
            &file,
            &path,
            &file_header(JOURNAL_MAGIC, JOURNAL_VERSION, id),
        )?;
        let mut open = OpenJournal {
            file: Arc::new(JournalFile {
                id,
                path,
                file,
                dropped_to: AtomicU64::new(0),
            }),
            written: FILE_HEADER_LEN as u64,
            preallocated: 0,
        };
        open.ensure_preallocated(0, prealloc);
        fs::fsync(&open.file.file, &open.file.path)?;
        fs::sync_dir(dir)?;
        Ok(open)
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

    /// Writes `buf` at the end of the written data. Positional, so that after a failed (or
    /// short) write the same bytes can be written again at the same place.
    pub(super) fn write(&mut self, buf: &[u8], prealloc: u64) -> Result<()> {
        self.ensure_preallocated(buf.len() as u64, prealloc);
        fs::write_all_at(&self.file.file, &self.file.path, buf, self.written)?;
        self.written += buf.len() as u64;
        Ok(())
    }

    /// Cuts whatever a failed write left after `offset` (synced), so the file ends with whole
    /// records and the next write goes there.
    pub(super) fn rewind(&mut self, offset: u64) -> Result<()> {
        fs::truncate_and_sync(&self.file.file, &self.file.path, offset)?;
        self.written = offset;
        self.preallocated = self.preallocated.min(offset);
        Ok(())
    }
}
