//! An entry log open for reads: its descriptor, the `O_DIRECT` one large reads take
//! (`entryLogDirectReads`), its tier and the metadata that follows it across moves. It reads
//! nothing by itself; the logger's reads go through it.

use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use super::LogMeta;
use crate::fs;

/// With `entryLogDirectReads`, reads of at least this many bytes go around the page cache: a
/// scan's large reads then cost no page allocation and no copy out of the cache, which on a cold
/// ledger is most of the CPU. Smaller reads (single small entries) stay buffered, where the
/// kernel's read-ahead and the page cache serve neighbours and re-reads.
pub(super) const DIRECT_READ_MIN_BYTES: u64 = 128 << 10;

/// An open log file for reads.
pub(super) struct LogFile {
    pub(super) path: PathBuf,
    pub(super) file: File,
    /// The tier of its directory.
    pub(super) tier: usize,
    pub(super) meta: Arc<LogMeta>,
    /// With direct reads on: a descriptor opened `O_DIRECT` on first use for large reads (None
    /// where the file system refuses it).
    direct: Option<OnceLock<Option<File>>>,
}

impl LogFile {
    pub(super) fn new(
        path: PathBuf,
        file: File,
        tier: usize,
        meta: Arc<LogMeta>,
        direct_reads: bool,
    ) -> Self {
        LogFile {
            path,
            file,
            tier,
            meta,
            direct: direct_reads.then(OnceLock::new),
        }
    }

    /// The descriptor for a direct read of `len` bytes, if this read should be one.
    pub(super) fn direct_for(&self, len: u64) -> Option<&File> {
        if len < DIRECT_READ_MIN_BYTES {
            return None;
        }
        self.direct
            .as_ref()?
            .get_or_init(|| match fs::open_direct_read(&self.path) {
                Ok(file) => file,
                Err(e) => {
                    ::log::warn!(
                        "reading {} through the page cache: {e}",
                        self.path.display()
                    );
                    None
                }
            })
            .as_ref()
    }
}
