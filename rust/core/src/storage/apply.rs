//! Applying durable journal groups to the write cache and the ledger states, in journal order.
//! Used by the journal's sync thread and by replay; it never journals anything itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use super::entrylog::EntryLogger;
use super::index::segments::SegmentSet;
use super::index::{Index, IndexLog};
use super::journal::{Applier, JournalOp, Mark};
use super::readahead::ReadAheadCache;
use super::writecache::WriteCache;
use crate::error::{Result, StorageError};

/// How long an add waits for a running flush to make room in a full write cache.
const FULL_CACHE_WAIT: Duration = Duration::from_secs(120);

/// What wakes the checkpoint thread early.
#[derive(Default)]
pub(super) struct Wake {
    pub(super) stop: bool,
    pub(super) flush: bool,
}

/// A flush that failed after its generation was taken: retried before anything else.
pub(super) struct PendingFlush {
    pub(super) gen: Arc<super::writecache::Generation>,
    pub(super) seq: u64,
}

/// The index log and what a failed flush left to retry; held while a flush or a merge
/// records its result, which also serialises them.
pub(super) struct Flusher {
    pub(super) log: IndexLog,
    pub(super) pending: Option<PendingFlush>,
    /// Segments flushed since the last checkpoint: not synced, not in the manifest yet.
    pub(super) unsynced: Vec<Arc<super::index::segment::Segment>>,
    /// Ledger-state changes taken by flushes since the last checkpoint.
    pub(super) records: Vec<u8>,
    /// Whether the next checkpoint rewrites `index.log` as a snapshot.
    pub(super) snapshot: bool,
    /// The journal marks the flushed segments and `records` cover.
    pub(super) flushed_marks: Vec<Mark>,
    /// The marks recorded by the last checkpoint record written.
    pub(super) persisted_marks: Vec<Mark>,
    /// Merged-away segments whose files go once a manifest without them is durable.
    pub(super) doomed: Vec<Arc<super::index::segment::Segment>>,
}

/// What the journal threads apply to, and what flushes and reads use.
pub(super) struct Shared {
    pub(super) entrylog: EntryLogger,
    pub(super) index: RwLock<Index>,
    pub(super) cache: WriteCache,
    pub(super) segments: SegmentSet,
    pub(super) read_ahead: ReadAheadCache,
    pub(super) flusher: Mutex<Flusher>,
    pub(super) wake: Mutex<Wake>,
    pub(super) wake_signal: Condvar,
    /// Set while the journals replay at open: a full cache is flushed inline, as no
    /// checkpoint thread runs yet.
    pub(super) replaying: AtomicBool,
}

impl Shared {
    /// Asks the checkpoint thread for a flush now.
    pub(super) fn request_flush(&self) {
        self.wake.lock().flush = true;
        self.wake_signal.notify_all();
    }
}

impl Applier for Shared {
    fn apply(&self, journal: usize, ops: &[JournalOp], mark: Mark) -> Result<()> {
        let mut active = 0usize;
        {
            let no_key: Arc<[u8]> = Arc::from(&[][..]);
            let mut idx = self.index.write();
            for op in ops {
                match op {
                    JournalOp::Key { ledger, key } => {
                        let st = idx.get_or_create(*ledger, key);
                        if st.master_key != *key {
                            st.master_key = key.clone();
                            idx.touch_meta(*ledger);
                        }
                    }
                    JournalOp::Entry {
                        ledger,
                        entry,
                        data,
                        crc,
                    } => {
                        // In journal order with the other records: a delete later in the
                        // group must drop this entry, an add after a delete must survive it.
                        active = self.cache.put(*ledger, *entry, data.clone(), *crc);
                        let st = idx.get_or_create(*ledger, &no_key);
                        if let Some(lac) = piggybacked_lac(data) {
                            st.max_lac = st.max_lac.max(lac);
                        }
                        // Persisted by the flush that writes the entry (it marks the ledgers of
                        // its generation changed), not tracked per entry here.
                        if st.last_entry.is_none_or(|last| *entry > last) {
                            st.last_entry = Some(*entry);
                        }
                    }
                    JournalOp::Fence { ledger } => {
                        let st = idx.get_or_create(*ledger, &no_key);
                        st.fenced = true;
                        st.fence_durable = true;
                        idx.touch_meta(*ledger);
                    }
                    JournalOp::Lac { ledger, lac } => {
                        idx.get_or_create(*ledger, &no_key).explicit_lac = Some(lac.clone());
                        idx.touch_meta(*ledger);
                    }
                    JournalOp::Delete { ledger } => {
                        idx.delete(*ledger);
                        self.cache.forget_ledger(*ledger);
                        self.read_ahead.forget_ledger(*ledger);
                    }
                }
            }
            if let Some(m) = idx.marks.get_mut(journal) {
                *m = mark;
            }
        }
        if self.cache.flush_due(active) {
            if self.replaying.load(Ordering::Acquire) {
                self.flush(false)?;
            } else {
                self.request_flush();
            }
        }
        self.wait_for_room()
    }
}

impl Shared {
    /// Holds the caller (the journal's sync thread, so new adds queue behind it) while the
    /// write cache is full and a flush runs: memory stays bounded when the disk is slower
    /// than the journal.
    fn wait_for_room(&self) -> Result<()> {
        if !self.cache.is_full() {
            return Ok(());
        }
        let deadline = Instant::now() + FULL_CACHE_WAIT;
        while self.cache.is_full() {
            if self.wake.lock().stop {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StorageError::Io {
                    context: "the write cache stayed full: flushes to the entry logs are failing \
                              or stalled"
                        .into(),
                    source: std::io::Error::from(std::io::ErrorKind::TimedOut),
                });
            }
            self.request_flush();
            self.cache
                .wait_for_room((deadline - now).min(Duration::from_millis(200)));
        }
        Ok(())
    }
}

/// The LAC an entry carries in its header (ledger id, entry id, LAC, ...), if it has one.
pub(crate) fn piggybacked_lac(entry: &[u8]) -> Option<i64> {
    let field = entry.get(16..24)?;
    let mut lac = [0u8; 8];
    lac.copy_from_slice(field);
    Some(i64::from_be_bytes(lac))
}
