//! Entry logs: entry data appended to log files across the ledger directories, read back by
//! location. It owns the `.log` files; it never decides what is durable (the journal does) nor
//! which directory a new log goes to (the [`LedgerDirs`] allocator does).
//!
//! A record is `[len][crc32c][ledger][entry][data]` at its [`Location`]. A log is sealed at
//! rollover and close: a ledgers-map record (ledger -> bytes) is appended and its offset written
//! into the header, so garbage collection need not scan the log.

mod ledgers_map;
mod location;
mod log;
mod moves;

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

pub use ledgers_map::LedgersMap;
pub use location::{log_name, Location};
pub use log::{read_ledgers_map, scan_entries};
pub use moves::pace_to;

use crate::error::{Result, StorageError};
use crate::fs;
use crate::metrics::Counter;
use crate::record::{append_record_with_crc, be_u64, verify_record, RECORD_HEADER_LEN};
use crate::storage::dirs::{Heat, LedgerDirs};
use crate::storage::release::{Releaser, Unlinked};
use log::ActiveLog;

/// Bytes of a record before the entry data: frame header plus ledger and entry ids.
pub const ENTRY_RECORD_OVERHEAD: usize = RECORD_HEADER_LEN + 16;
/// One positional read covers at most this many bytes of back-to-back records.
const MAX_READ_BYTES: u64 = 4 << 20;
/// Bytes between two wanted records that one read may take along rather than split in two.
const MAX_SKIPPED_BYTES: u64 = 4 << 10;
/// The same where the log reads directly (`entryLogDirectReads`). Skipped bytes read directly
/// cost the device's time and no CPU, and a run of wanted records with the records between them
/// is large enough to be read directly, where records read one by one (a strided read takes
/// every other record of a bookie holding two write sets of a striped ledger) would each go
/// through the page cache.
/// Measured while healing a lost bookie: the source bookies' CPU 3.2–5.1 s → 2.0–2.2 s for
/// 0.9 GB copied (docs/performance.md).
const MAX_SKIPPED_BYTES_DIRECT: u64 = 256 << 10;

/// With `entryLogDirectReads`, reads of at least this many bytes go around the page cache: a
/// scan's large reads then cost no page allocation and no copy out of the cache, which on a cold
/// ledger is most of the CPU. Smaller reads (single small entries) stay buffered, where the
/// kernel's read-ahead and the page cache serve neighbours and re-reads.
const DIRECT_READ_MIN_BYTES: u64 = 128 << 10;

/// An open log file for reads.
struct LogFile {
    path: PathBuf,
    file: File,
    /// The tier of its directory.
    tier: usize,
    meta: Arc<LogMeta>,
    /// With direct reads on: a descriptor opened `O_DIRECT` on first use for large reads (None
    /// where the file system refuses it).
    direct: Option<OnceLock<Option<File>>>,
}

impl LogFile {
    fn new(path: PathBuf, file: File, tier: usize, meta: Arc<LogMeta>, direct_reads: bool) -> Self {
        LogFile {
            path,
            file,
            tier,
            meta,
            direct: direct_reads.then(OnceLock::new),
        }
    }

    /// The descriptor for a direct read of `len` bytes, if this read should be one.
    fn direct_for(&self, len: u64) -> Option<&File> {
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

/// What the storage remembers of a log across moves: how hot it is, and whether a read asked
/// for it to move up a tier (`tieredStoragePromoteOnRead`).
#[derive(Debug, Default)]
pub struct LogMeta {
    pub heat: Heat,
    pub wants_promotion: AtomicBool,
}

/// Where a log is: the one notion of an entry log's location, shared by reads, garbage
/// collection, compaction and moves between tiers.
struct Place {
    /// Index of its ledger directory.
    dir: usize,
    meta: Arc<LogMeta>,
}

/// A log no move, garbage collection or compaction may touch while another holds it;
/// released on drop.
pub struct LogPin<'a> {
    logger: &'a EntryLogger,
    id: u32,
}

impl Drop for LogPin<'_> {
    fn drop(&mut self) {
        self.logger.pinned.lock().remove(&self.id);
    }
}

/// All entry logs of a bookie.
pub struct EntryLogger {
    dirs: Arc<LedgerDirs>,
    size_limit: u64,
    write_buffer: usize,
    direct_io: bool,
    /// `entryLogDirectReads`: large reads use `O_DIRECT` (see [`Self::with_direct_reads`]).
    direct_reads: bool,
    active: Mutex<Option<ActiveLog>>,
    /// Logs rolled over whose seal failed (a full disk): their data may not be durable yet, so
    /// every [`sync`](Self::sync) seals them again first and fails while it cannot.
    unsealed: Mutex<Vec<ActiveLog>>,
    next_id: Mutex<u32>,
    /// Open read descriptors (lock order: `files`, then `logs`).
    files: RwLock<HashMap<u32, Arc<LogFile>>>,
    /// Every log's directory and metadata.
    logs: RwLock<HashMap<u32, Place>>,
    /// Logs held by a move, a garbage collection or a compaction.
    pinned: Mutex<HashSet<u32>>,
    /// Logs removed so far (compaction, garbage collection): a read whose log vanished between
    /// finding an entry's location and reading it sees this change and looks again.
    removals: AtomicU64,
    /// Frees removed logs' blocks in steps once their readers are done.
    releaser: Releaser,
    pub rollovers: Counter,
    /// Entry data appended to logs.
    pub written_bytes: Counter,
}

impl EntryLogger {
    /// With `on` (`entryLogDirectReads`), reads of at least `DIRECT_READ_MIN_BYTES` go around
    /// the page cache where the file system allows it (and such runs are not hinted for kernel
    /// read-ahead, which would only read them twice).
    pub fn with_direct_reads(mut self, on: bool) -> Self {
        self.direct_reads = on;
        self
    }

    /// The ledger directories the logs are written to.
    pub fn dirs(&self) -> &LedgerDirs {
        &self.dirs
    }

    /// Opens the entry logs of `dirs`, finishing or undoing moves between directories a crash
    /// interrupted. New logs get ids above every existing one; the first log is created on the
    /// first append.
    /// With `direct_io` (`dbStorage_directIOEntryLogger`), logs are written with `O_DIRECT`
    /// where the file system allows it.
    pub fn open(
        dirs: Arc<LedgerDirs>,
        size_limit: u64,
        write_buffer: usize,
        direct_io: bool,
    ) -> Result<Self> {
        let placed = moves::recover(&dirs.paths())?;
        let max_id = placed.keys().max().map_or(0, |id| *id as u64);
        let next_id = u32::try_from(max_id + 1)
            .map_err(|_| StorageError::Corruption("entry log ids exhausted".to_string()))?;
        let logs = placed
            .into_iter()
            .map(|(id, dir)| {
                (
                    id,
                    Place {
                        dir,
                        meta: Arc::default(),
                    },
                )
            })
            .collect();
        Ok(EntryLogger {
            dirs,
            size_limit,
            write_buffer: write_buffer.max(4096),
            direct_io,
            direct_reads: false,
            active: Mutex::new(None),
            unsealed: Mutex::new(Vec::new()),
            next_id: Mutex::new(next_id),
            files: RwLock::new(HashMap::new()),
            logs: RwLock::new(logs),
            pinned: Mutex::new(HashSet::new()),
            releaser: Releaser::new("pybkx-entrylog-release"),
            removals: AtomicU64::new(0),
            rollovers: Counter::default(),
            written_bytes: Counter::default(),
        })
    }

    fn new_log(&self) -> Result<ActiveLog> {
        let id = {
            let mut next = self.next_id.lock();
            let id = *next;
            *next = id
                .checked_add(1)
                .ok_or_else(|| StorageError::Corruption("entry log ids exhausted".into()))?;
            id
        };
        let dir = self.dirs.choose_for_new_log()?;
        let (log, reader) = ActiveLog::create(&dir, id, self.write_buffer, self.direct_io)?;
        let index = self.dirs.index_of(&dir).unwrap_or(0);
        let meta = Arc::new(LogMeta::default());
        self.dirs.annotator().touch(&meta.heat);
        let mut files = self.files.write();
        files.insert(
            id,
            Arc::new(LogFile::new(
                log.path.clone(),
                reader,
                self.dirs.tier_of(index),
                meta.clone(),
                self.direct_reads,
            )),
        );
        self.logs.write().insert(id, Place { dir: index, meta });
        Ok(log)
    }

    /// Appends entries; returns their locations in order. Data is buffered: call [`flush`]
    /// before publishing the locations to readers.
    pub fn append<'a>(
        &self,
        entries: impl IntoIterator<Item = (u64, u64, &'a [u8])>,
        out: &mut Vec<Location>,
    ) -> Result<()> {
        self.append_checked(
            entries
                .into_iter()
                .map(|(l, e, d)| (l, e, d, crate::storage::journal::entry_crc(l, e, d))),
            out,
        )
    }

    /// [`append`](Self::append) of entries whose record checksum (CRC32C of
    /// `[ledger][entry][data]`) the caller already has: the journal computed it.
    pub fn append_checked<'a>(
        &self,
        entries: impl IntoIterator<Item = (u64, u64, &'a [u8], u32)>,
        out: &mut Vec<Location>,
    ) -> Result<()> {
        let mut guard = self.active.lock();
        let mut written = 0u64;
        for (ledger, entry, data, crc) in entries {
            let size = (ENTRY_RECORD_OVERHEAD + data.len()) as u64;
            let must_roll = match guard.as_ref() {
                None => true,
                Some(log) => log.end + size > self.size_limit && !log.is_empty(),
            };
            if must_roll {
                if let Some(mut old) = guard.take() {
                    if let Err(e) = old.seal() {
                        ::log::error!(
                            "entry log {}: sealing at rollover failed ({e}); retried at the next \
                             checkpoint, which fails until it succeeds",
                            old.path.display()
                        );
                        self.unsealed.lock().push(old);
                        return Err(e);
                    }
                    self.rollovers.inc();
                }
                *guard = Some(self.new_log()?);
            }
            let Some(log) = guard.as_mut() else {
                return Err(StorageError::Closed);
            };
            let offset = log.end;
            append_record_with_crc(
                &mut log.buf,
                crc,
                &[&ledger.to_be_bytes(), &entry.to_be_bytes(), data],
            );
            log.end += size;
            *log.ledgers.entry(ledger).or_insert(0) += size;
            out.push(Location::new(log.id, offset, (16 + data.len()) as u32));
            written += data.len() as u64;
            log.write_if_full()?;
        }
        self.written_bytes.add(written);
        if let Some(log) = guard.as_ref() {
            // Written now: the active log is the hottest.
            if let Some(f) = self.files.read().get(&log.id) {
                self.dirs.annotator().touch(&f.meta.heat);
            }
        }
        Ok(())
    }

    /// Hands buffered data to the OS so positional reads see it.
    pub fn flush(&self) -> Result<()> {
        if let Some(log) = self.active.lock().as_mut() {
            log.publish()?;
        }
        Ok(())
    }

    /// Makes everything published so far durable: every indexed location was written to its
    /// file before it was published, and sealed logs were synced when sealed, so sealing the
    /// logs whose seal failed and syncing the active log (outside the append lock) covers them
    /// all.
    pub fn sync(&self) -> Result<()> {
        self.seal_pending()?;
        let active = self
            .active
            .lock()
            .as_ref()
            .map(|log| (log.sync_handle.clone(), log.path.clone()));
        if let Some((handle, path)) = active {
            fs::fdatasync(&handle, &path)?;
        }
        Ok(())
    }

    /// Seals the logs whose seal failed at rollover; the first failure is returned and the
    /// rest stay pending.
    fn seal_pending(&self) -> Result<()> {
        let mut pending = self.unsealed.lock();
        while let Some(log) = pending.last_mut() {
            log.seal()?;
            ::log::info!(
                "entry log {}: sealed after an earlier failure",
                log.path.display()
            );
            pending.pop();
            self.rollovers.inc();
        }
        Ok(())
    }

    /// Seals the active log (and any whose seal failed); the next append starts a new one.
    pub fn close(&self) -> Result<()> {
        self.seal_pending()?;
        if let Some(mut log) = self.active.lock().take() {
            if let Err(e) = log.seal() {
                self.unsealed.lock().push(log);
                return Err(e);
            }
        }
        Ok(())
    }

    fn file(&self, id: u32) -> Result<Arc<LogFile>> {
        if let Some(f) = self.files.read().get(&id) {
            return Ok(f.clone());
        }
        // Opened under the write lock, so a move cannot switch the log's location between
        // looking it up and opening it.
        let mut files = self.files.write();
        if let Some(f) = files.get(&id) {
            return Ok(f.clone());
        }
        let name = log_name(id);
        let place = self.logs.read().get(&id).map(|p| (p.dir, p.meta.clone()));
        let Some((dir, path, meta)) =
            place.and_then(|(d, m)| self.dirs.path_of(d).map(|p| (d, p.join(&name), m)))
        else {
            return Err(StorageError::Corruption(format!(
                "entry log {name} is missing from every ledger directory"
            )));
        };
        let f = Arc::new(LogFile::new(
            path.clone(),
            fs::open_read(&path)?,
            self.dirs.tier_of(dir),
            meta,
            self.direct_reads,
        ));
        files.insert(id, f.clone());
        Ok(f)
    }

    /// Counts a read of `log` for the annotator and, for a log below the top tier with
    /// `tieredStoragePromoteOnRead`, asks for its promotion. Atomics only.
    fn touch(&self, log: &LogFile) {
        self.dirs.annotator().touch(&log.meta.heat);
        if log.tier > 0 && self.dirs.policy().promote_on_read {
            log.meta.wants_promotion.store(true, Ordering::Relaxed);
        }
    }

    /// Reads one entry's data, checking the record's checksum and ids.
    pub fn read(&self, ledger: u64, entry: u64, at: Location) -> Result<Bytes> {
        let (mut out, err) = self.read_run(ledger, &[(entry, at)]);
        match err {
            Some(e) => Err(e),
            None => out.pop().ok_or(StorageError::NoEntry { ledger, entry }),
        }
    }

    /// Reads entries in order, with one positional read per run of records that lie back to
    /// back in one log (the common case for a ledger written by one writer), or close enough
    /// that reading the bytes between costs less than another read (a strided batch read skips
    /// the records of other write-set positions). Returns the entries read before the first
    /// failure, and that failure.
    pub fn read_run(
        &self,
        ledger: u64,
        items: &[(u64, Location)],
    ) -> (Vec<Bytes>, Option<StorageError>) {
        let mut out = Vec::with_capacity(items.len());
        let mut i = 0;
        while i < items.len() {
            let first = items[i].1;
            // Skipped bytes are worth reading along only where the run will be read directly:
            // through the page cache they would be copied out for nothing.
            let max_skipped = if i + 1 < items.len() && self.reads_directly(first.log_id()) {
                MAX_SKIPPED_BYTES_DIRECT
            } else {
                MAX_SKIPPED_BYTES
            };
            let mut end = first.offset() + (RECORD_HEADER_LEN as u64) + first.len as u64;
            let mut j = i + 1;
            while j < items.len()
                && items[j].1.log_id() == first.log_id()
                && items[j].1.offset() >= end
                && items[j].1.offset() - end <= max_skipped
                && end - first.offset() < MAX_READ_BYTES
            {
                end = items[j].1.offset() + (RECORD_HEADER_LEN as u64) + items[j].1.len as u64;
                j += 1;
            }
            let buf = match self.pread(first.log_id(), first.offset(), end - first.offset()) {
                Ok(b) => b,
                Err(e) => return (out, Some(e)),
            };
            for (entry, at) in &items[i..j] {
                let from = (at.offset() - first.offset()) as usize;
                let to = from + RECORD_HEADER_LEN + at.len as usize;
                match check_record(&buf, from, to, ledger, *entry, *at) {
                    Ok(data) => out.push(data),
                    Err(e) => return (out, Some(e)),
                }
            }
            i = j;
        }
        (out, None)
    }

    /// Asks the kernel to read `len` bytes of log `log_id` at `offset` ahead, asynchronously:
    /// a sequential scan's next runs are on their way while this one is served.
    /// A run large enough to be read directly is not hinted: the page cache would only read it
    /// twice.
    pub fn prefetch(&self, log_id: u32, offset: u64, len: u64) {
        if let Ok(log) = self.file(log_id) {
            if log.direct_for(len).is_none() {
                fs::advise_will_need(&log.file, offset, len);
            }
        }
    }

    /// Whether large reads of log `log_id` go around the page cache (direct reads on, and the
    /// file system takes them). A log that cannot be opened says no: the read reports it.
    pub fn reads_directly(&self, log_id: u32) -> bool {
        self.direct_reads
            && self
                .file(log_id)
                .is_ok_and(|log| log.direct_for(DIRECT_READ_MIN_BYTES).is_some())
    }

    fn pread(&self, log_id: u32, offset: u64, len: u64) -> Result<Bytes> {
        let log = self.file(log_id)?;
        self.touch(&log);
        // `len` comes from index locations of back-to-back records, capped near
        // MAX_READ_BYTES by `read_run` (one record may exceed it alone, up to the frame limit).
        if let Some(direct) = log.direct_for(len) {
            if let Some(bytes) = fs::read_direct_at(direct, &log.path, offset, len as usize)? {
                return Ok(bytes);
            }
            // Refused at read time (an alignment the device will not take): the page cache
            // serves this read; the next large one tries again.
        }
        let mut buf = vec![0u8; len as usize];
        fs::read_exact_at(&log.file, &log.path, &mut buf, offset)?;
        Ok(Bytes::from(buf))
    }

    /// The id of the log being appended to, if any.
    pub fn active_id(&self) -> Option<u32> {
        self.active.lock().as_ref().map(|l| l.id)
    }

    /// Deletes sealed log `id` (never the active one); returns the bytes freed. Readers that
    /// still hold the file keep reading it until they let go.
    pub fn remove_log(&self, id: u32) -> Result<u64> {
        if self.active_id() == Some(id) {
            return Err(StorageError::InvalidArgument(format!(
                "entry log {} is being written",
                log_name(id)
            )));
        }
        // Counted before the log leaves the maps: a read that fails to find it has then seen
        // the count change (and looks again), whenever it read the count before.
        self.removals.fetch_add(1, Ordering::AcqRel);
        let (readers, place) = {
            let mut files = self.files.write();
            let readers = files.remove(&id);
            (readers, self.logs.write().remove(&id))
        };
        // A log whose seal failed holds no live entry if it is being removed: stop retrying it.
        self.unsealed.lock().retain(|l| l.id != id);
        let name = log_name(id);
        let Some(dir) = place.and_then(|p| self.dirs.path_of(p.dir)) else {
            return Ok(0);
        };
        let path = dir.join(&name);
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        // Held open past the unlink, so that its blocks are freed in steps, not by this call or
        // by whichever reader closes it last (see `release`). Without it: freed as unlinked.
        let held = fs::open_write(&path).ok();
        fs::remove_file(&path)?;
        if let Some(file) = held {
            self.releaser.release(Unlinked {
                file,
                path,
                readers: readers.map(|r| r as Arc<dyn Any + Send + Sync>),
            });
        }
        Ok(size)
    }

    /// How many logs have been removed since the logger opened (see `removals`).
    pub fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }

    /// Where sealed log `id` is, if it exists.
    pub fn log_path(&self, id: u32) -> Option<PathBuf> {
        let dir = self.logs.read().get(&id).map(|p| p.dir)?;
        self.dirs.path_of(dir).map(|d| d.join(log_name(id)))
    }

    /// Every log with its directory (index) and metadata, ascending by id.
    pub fn placed_logs(&self) -> Vec<(u32, usize, Arc<LogMeta>)> {
        let mut v: Vec<_> = self
            .logs
            .read()
            .iter()
            .map(|(id, p)| (*id, p.dir, p.meta.clone()))
            .collect();
        v.sort_unstable_by_key(|(id, _, _)| *id);
        v
    }

    /// Holds log `id` against moves, garbage collection and compaction until the pin is
    /// dropped; None if another holds it.
    pub fn pin(&self, id: u32) -> Option<LogPin<'_>> {
        let fresh = self.pinned.lock().insert(id);
        fresh.then(|| LogPin { logger: self, id })
    }

    /// Whether log `id` may still be written: the active log or one whose seal failed.
    pub fn is_unsealed(&self, id: u32) -> bool {
        let active = self.active.lock();
        active.as_ref().is_some_and(|l| l.id == id)
            || self.unsealed.lock().iter().any(|l| l.id == id)
    }

    /// The size of log `id` in bytes (0 if it is gone).
    pub fn log_size(&self, id: u32) -> u64 {
        self.log_path(id)
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len())
    }

    /// The ledgers map of every log: from its sealed map, by scanning an unsealed log, or from
    /// memory for the active one.
    pub fn ledgers_maps(&self) -> Result<HashMap<u32, LedgersMap>> {
        let mut out = HashMap::new();
        let active_id = self
            .active
            .lock()
            .as_ref()
            .map(|l| (l.id, l.ledgers.clone()));
        for (id, _, _) in self.placed_logs() {
            match &active_id {
                Some((aid, map)) if *aid == id => {
                    out.insert(id, map.clone());
                }
                _ => {
                    if let Some(map) = self.read_map_of(id)? {
                        out.insert(id, map);
                    }
                }
            }
        }
        Ok(out)
    }
}

impl EntryLogger {
    /// The ledgers map of sealed log `id`, None if the log is gone. A move renames the file
    /// for an instant; a read that misses it tries again at the log's location then.
    fn read_map_of(&self, id: u32) -> Result<Option<LedgersMap>> {
        let mut tries = 0;
        loop {
            let Some(path) = self.log_path(id) else {
                return Ok(None);
            };
            match read_ledgers_map(&path) {
                Ok(map) => return Ok(Some(map)),
                Err(e) if tries < 50 && !path.exists() => {
                    tries += 1;
                    ::log::debug!("{e}; the log is moving, trying again");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Verifies the record at `buf[from..to]` and returns its entry data without copying.
fn check_record(
    buf: &Bytes,
    from: usize,
    to: usize,
    ledger: u64,
    entry: u64,
    at: Location,
) -> Result<Bytes> {
    let what = || {
        format!(
            "entry {entry} of ledger {ledger} at {}:{}",
            log_name(at.log_id()),
            at.offset()
        )
    };
    let body = verify_record(&buf[from..to], what)?;
    if be_u64(&body[0..8]) != ledger || be_u64(&body[8..16]) != entry {
        return Err(StorageError::Corruption(format!(
            "{} holds another entry",
            what()
        )));
    }
    Ok(buf.slice(from + RECORD_HEADER_LEN + 16..to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::FILE_HEADER_LEN;
    use crate::storage::dirs::RoundRobinAllocator;
    use std::fs::OpenOptions;
    use std::os::unix::fs::FileExt;

    fn dirs_of(paths: &[PathBuf]) -> Arc<LedgerDirs> {
        Arc::new(LedgerDirs::new(
            paths.to_vec(),
            Box::<RoundRobinAllocator>::default(),
        ))
    }

    fn list_log_ids(dir: &std::path::Path) -> Result<Vec<u64>> {
        fs::list_hex_ids(dir, ".log")
    }

    /// Runs a test with page-cache writes and with direct I/O.
    fn both_modes(test: impl Fn(bool)) {
        test(false);
        test(true);
    }

    /// Descriptors of this process open on `path` after its unlink.
    #[test]
    fn a_removed_log_is_freed_in_steps_once_its_readers_let_go() {
        use crate::testing::open_descriptors_of_deleted;
        let d = tempfile::tempdir().unwrap();
        let el =
            EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 20, 4096, false).unwrap();
        let mut locs = Vec::new();
        let data = vec![7u8; 100_000];
        for e in 0..30u64 {
            el.append([(1u64, e, &data[..])], &mut locs).unwrap();
        }
        el.flush().unwrap();
        let first = locs[0].log_id();
        assert_ne!(el.active_id(), Some(first));
        let path = d.path().join(log_name(first));
        let reader = el.file(first).unwrap(); // a read in progress
        el.remove_log(first).unwrap();
        assert!(!path.exists());
        // The releaser waits for the reader: both descriptors stay open and the log whole.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(open_descriptors_of_deleted(&path), 2);
        let at = locs[9];
        let mut got = vec![0u8; at.data_len()];
        reader
            .file
            .read_exact_at(
                &mut got,
                at.offset() + (RECORD_HEADER_LEN as u64) + at.len as u64 - data.len() as u64,
            )
            .unwrap();
        assert_eq!(got, data);
        drop(reader);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while open_descriptors_of_deleted(&path) > 0 || el.releaser.pending() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the removed log is still open"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn a_seal_that_fails_at_rollover_is_retried_by_every_sync_until_it_succeeds() {
        both_modes(seal_failure_at_rollover);
    }

    fn seal_failure_at_rollover(direct: bool) {
        let d = tempfile::tempdir().unwrap();
        let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 4096, 4096, direct).unwrap();
        let mut locs = Vec::new();
        el.append([(1u64, 0u64, &[1u8; 1000][..])], &mut locs)
            .unwrap();
        el.flush().unwrap();
        let first = el.active_id().unwrap();
        let first_path = d.path().join(log_name(first));
        // The disk refuses to sync the first log: its seal at the next rollover fails.
        let fault = fs::inject_fault(fs::Fault {
            path_prefix: first_path.clone(),
            ops: vec![fs::Op::Sync],
            action: fs::FaultAction::Fail(libc::ENOSPC),
            times: None,
        });
        let rolled = el.append([(1u64, 1u64, &[2u8; 4000][..])], &mut locs);
        assert!(rolled.is_err(), "the rollover's seal failed");
        // Not durable: a checkpoint must not pass while the old log is unsealed.
        assert!(el.sync().is_err());
        assert!(el.sync().is_err());
        fs::remove_fault(fault);
        el.append([(1u64, 1u64, &[2u8; 4000][..])], &mut locs)
            .unwrap();
        el.flush().unwrap();
        el.sync().unwrap();
        assert_ne!(el.active_id(), Some(first));
        // Sealed now: the map is in the header, and the entries read back.
        let mut header = [0u8; FILE_HEADER_LEN];
        std::fs::File::open(&first_path)
            .unwrap()
            .read_exact_at(&mut header, 0)
            .unwrap();
        assert_ne!(be_u64(&header[24..32]), 0, "ledgers map offset written");
        assert_eq!(
            read_ledgers_map(&first_path).unwrap().get(&1).copied(),
            Some(1000 + ENTRY_RECORD_OVERHEAD as u64)
        );
        assert_eq!(&el.read(1, 0, locs[0]).unwrap()[..], &[1u8; 1000][..]);
        el.close().unwrap();
    }

    #[test]
    fn append_read_and_rollover_with_sealed_maps() {
        both_modes(append_read_and_rollover);
    }

    fn append_read_and_rollover(direct: bool) {
        let d1 = tempfile::tempdir().unwrap();
        let d2 = tempfile::tempdir().unwrap();
        let dirs = vec![d1.path().to_path_buf(), d2.path().to_path_buf()];
        let el = EntryLogger::open(dirs_of(&dirs), 8192, 4096, direct).unwrap();
        let mut locs = Vec::new();
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 500]).collect();
        el.append(
            payloads
                .iter()
                .enumerate()
                .map(|(i, p)| (1 + (i as u64 % 2), i as u64, p.as_slice())),
            &mut locs,
        )
        .unwrap();
        el.flush().unwrap();
        for (i, at) in locs.iter().enumerate() {
            let got = el.read(1 + (i as u64 % 2), i as u64, *at).unwrap();
            assert_eq!(&got[..], &payloads[i][..]);
        }
        // A location read as the wrong entry is detected, not misread.
        assert!(el.read(1, 99, locs[0]).is_err());
        assert!(el.rollovers.get() >= 2);
        el.close().unwrap();
        let maps = el.ledgers_maps().unwrap();
        assert!(maps.len() >= 3);
        let total: u64 = maps.values().flat_map(|m| m.values()).sum();
        assert_eq!(total, 40 * (500 + ENTRY_RECORD_OVERHEAD as u64));
        assert!(!list_log_ids(d1.path()).unwrap().is_empty());
        assert!(!list_log_ids(d2.path()).unwrap().is_empty());

        // Reopened, new logs take new ids and old data stays readable.
        let el = EntryLogger::open(dirs_of(&dirs), 8192, 4096, direct).unwrap();
        assert_eq!(&el.read(1, 0, locs[0]).unwrap()[..], &payloads[0][..]);
        let mut more = Vec::new();
        el.append([(3u64, 0u64, &b"x"[..])], &mut more).unwrap();
        assert!(more[0].log_id() > locs.last().unwrap().log_id());
    }

    #[test]
    fn unsealed_log_map_is_rebuilt_by_scanning() {
        both_modes(unsealed_map_rebuilt);
    }

    fn unsealed_map_rebuilt(direct: bool) {
        let d = tempfile::tempdir().unwrap();
        let el =
            EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 20, 4096, direct).unwrap();
        let mut locs = Vec::new();
        el.append(
            [(5u64, 0u64, &[1u8; 100][..]), (6, 0, &[2u8; 50][..])],
            &mut locs,
        )
        .unwrap();
        el.flush().unwrap();
        // Simulate a crash: never sealed.
        let path = d.path().join(log_name(locs[0].log_id()));
        let map = read_ledgers_map(&path).unwrap();
        assert_eq!(map[&5], 100 + ENTRY_RECORD_OVERHEAD as u64);
        assert_eq!(map[&6], 50 + ENTRY_RECORD_OVERHEAD as u64);
        // A log cut before its header was written holds nothing.
        let empty = d.path().join(log_name(999));
        std::fs::File::create(&empty).unwrap();
        assert!(read_ledgers_map(&empty).unwrap().is_empty());
    }

    #[test]
    fn corrupt_record_is_reported_on_read() {
        both_modes(corrupt_record_reported);
    }

    fn corrupt_record_reported(direct: bool) {
        let d = tempfile::tempdir().unwrap();
        let el =
            EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 20, 4096, direct).unwrap();
        let mut locs = Vec::new();
        el.append([(1u64, 0u64, &[9u8; 64][..])], &mut locs)
            .unwrap();
        el.flush().unwrap();
        let path = d.path().join(log_name(locs[0].log_id()));
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0xFF], locs[0].offset() + 40).unwrap();
        assert!(matches!(
            el.read(1, 0, locs[0]),
            Err(StorageError::Corruption(_))
        ));
    }

    /// Direct mode: whatever mix of sizes and flushes, every published end is a block boundary,
    /// every entry reads back, and scans and ledgers maps see the entries and not the padding.
    #[test]
    fn direct_writes_pad_each_flush_to_a_block_and_scans_skip_the_padding() {
        let d = tempfile::tempdir().unwrap();
        let el =
            EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 30, 4096, true).unwrap();
        let mut want = Vec::new();
        let mut locs = Vec::new();
        let mut seed = 7u64;
        for round in 0..40u64 {
            let batch: Vec<(u64, u64, Vec<u8>)> = (0..(round % 9 + 1))
                .map(|i| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let len = (seed >> 33) as usize % 70_000;
                    (round % 3, round * 100 + i, vec![(seed >> 20) as u8; len])
                })
                .collect();
            el.append(
                batch.iter().map(|(l, e, p)| (*l, *e, p.as_slice())),
                &mut locs,
            )
            .unwrap();
            el.flush().unwrap();
            want.extend(batch);
            let active = el.active.lock();
            let log = active.as_ref().unwrap();
            assert!(log.is_direct(), "this file system does direct I/O");
            assert!(log.buf.is_empty());
            assert_eq!(log.end % crate::aligned::DIRECT_ALIGN as u64, 0);
        }
        for ((l, e, p), at) in want.iter().zip(&locs) {
            assert_eq!(&el.read(*l, *e, *at).unwrap()[..], &p[..]);
        }
        let path = d.path().join(log_name(locs[0].log_id()));
        let mut scanned = Vec::new();
        scan_entries(&path, |l, e, _, data| scanned.push((l, e, data.to_vec()))).unwrap();
        assert_eq!(scanned, want);
        let expected_map = |m: &LedgersMap| {
            (0..3).all(|l| {
                let bytes: u64 = want
                    .iter()
                    .filter(|(wl, _, _)| *wl == l)
                    .map(|(_, _, p)| (p.len() + ENTRY_RECORD_OVERHEAD) as u64)
                    .sum();
                m.get(&l).copied().unwrap_or(0) == bytes
            }) && m.len() == 3
        };
        assert!(
            expected_map(&read_ledgers_map(&path).unwrap()),
            "scanned map"
        );
        el.close().unwrap();
        assert!(
            expected_map(&read_ledgers_map(&path).unwrap()),
            "sealed map"
        );
    }

    /// An entry too large for the room a log has after its header goes into that log, in
    /// either mode: no empty log is sealed for it (a direct log's header takes a whole block).
    #[test]
    fn an_entry_larger_than_a_fresh_log_goes_into_it() {
        both_modes(|direct| {
            let d = tempfile::tempdir().unwrap();
            let el =
                EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 8192, 4096, direct).unwrap();
            let mut locs = Vec::new();
            for e in 0..3u64 {
                el.append([(1u64, e, &[e as u8; 7000][..])], &mut locs)
                    .unwrap();
            }
            el.close().unwrap();
            assert_eq!(el.rollovers.get(), 2, "one log per entry, none empty");
            let maps = el.ledgers_maps().unwrap();
            assert_eq!(maps.len(), 3);
            assert!(maps.values().all(|m| m.len() == 1));
            for (e, at) in locs.iter().enumerate() {
                assert_eq!(
                    &el.read(1, e as u64, *at).unwrap()[..],
                    &[e as u8; 7000][..]
                );
            }
        });
    }

    /// A file system that refuses a direct write loses nothing: the log goes on through the
    /// page cache. A direct write that fails (a full disk) is retried with the same bytes.
    #[test]
    fn a_refused_or_failed_direct_write_loses_nothing() {
        let d = tempfile::tempdir().unwrap();
        let el =
            EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 30, 4096, true).unwrap();
        let mut locs = Vec::new();
        el.append([(1u64, 0u64, &[1u8; 3000][..])], &mut locs)
            .unwrap();
        el.flush().unwrap();
        let path = d.path().join(log_name(locs[0].log_id()));
        let fail_once = |errno| {
            fs::inject_fault(fs::Fault {
                path_prefix: path.clone(),
                ops: vec![fs::Op::Write],
                action: fs::FaultAction::Fail(errno),
                times: Some(1),
            })
        };
        fail_once(libc::ENOSPC);
        el.append([(1u64, 1u64, &[2u8; 5000][..])], &mut locs)
            .unwrap();
        assert!(el.flush().is_err(), "the disk was full");
        el.flush().unwrap();
        fail_once(libc::EINVAL);
        el.append([(1u64, 2u64, &[3u8; 7000][..])], &mut locs)
            .unwrap();
        el.flush().unwrap();
        assert!(!el.active.lock().as_ref().unwrap().is_direct());
        // Back to the page cache's write size (`writeBufferSizeBytes`, 4096 here): a record
        // past it is written at once, without waiting for the 1 MiB of a direct write.
        el.append([(1u64, 3u64, &[4u8; 5000][..])], &mut locs)
            .unwrap();
        assert!(el.active.lock().as_ref().unwrap().buf.is_empty());
        el.flush().unwrap();
        for (i, (at, fill)) in locs.iter().zip([1u8, 2, 3, 4]).enumerate() {
            let got = el.read(1, i as u64, *at).unwrap();
            assert!(!got.is_empty() && got.iter().all(|b| *b == fill));
        }
        el.close().unwrap();
        let mut entries = Vec::new();
        scan_entries(&path, |_, e, _, _| entries.push(e)).unwrap();
        assert_eq!(entries, vec![0, 1, 2, 3]);
    }

    /// Entries of varied sizes from 1 to 200,000 bytes, appended in a few flushes.
    fn varied_entries(el: &EntryLogger, count: u64) -> (Vec<Vec<u8>>, Vec<Location>) {
        let mut data = Vec::new();
        let mut locs = Vec::new();
        for e in 0..count {
            let len = 1 + (e as usize * 7919) % 200_000;
            data.push((0..len).map(|i| (i as u64 ^ e) as u8).collect::<Vec<u8>>());
            el.append([(5u64, e, &data[e as usize][..])], &mut locs)
                .unwrap();
            if e % 5 == 4 {
                el.flush().unwrap();
            }
        }
        el.flush().unwrap();
        (data, locs)
    }

    fn read_all(el: &EntryLogger, locs: &[Location]) -> Vec<Bytes> {
        let items: Vec<(u64, Location)> = (0..).zip(locs.iter().copied()).collect();
        let (got, err) = el.read_run(5, &items);
        assert!(err.is_none(), "{err:?}");
        got
    }

    /// Large reads go around the page cache where the file system allows it, and return what
    /// the page cache would: within blocks, across them, and up to a log's unaligned end (a log
    /// written through the page cache, then read by a logger with direct reads on).
    #[test]
    fn large_reads_with_direct_io_return_the_bytes_written() {
        for written_directly in [true, false] {
            let d = tempfile::tempdir().unwrap();
            let dirs = dirs_of(&[d.path().to_path_buf()]);
            let el = EntryLogger::open(dirs.clone(), 1 << 30, 4096, written_directly).unwrap();
            let (data, locs) = varied_entries(&el, 23);
            el.close().unwrap();
            let el = EntryLogger::open(dirs, 1 << 30, 4096, true)
                .unwrap()
                .with_direct_reads(true);
            let log = el.file(locs[0].log_id()).unwrap();
            let fs_does_direct = fs::open_direct_read(&log.path).unwrap().is_some();
            assert_eq!(log.direct_for(1 << 20).is_some(), fs_does_direct);
            assert!(log.direct_for(DIRECT_READ_MIN_BYTES - 1).is_none());
            let got = read_all(&el, &locs);
            assert_eq!(got.len(), data.len());
            for (g, want) in got.iter().zip(&data) {
                assert_eq!(&g[..], &want[..]);
            }
            // One entry at a time: small ones through the page cache, large ones directly.
            for (e, at) in locs.iter().enumerate() {
                assert_eq!(&el.read(5, e as u64, *at).unwrap()[..], &data[e][..]);
            }
        }
    }

    /// A strided read wants every other record. Through the page cache each is read alone;
    /// with direct reads the records between are read along, so that the run is one read large
    /// enough to go around the page cache.
    #[test]
    fn direct_reads_take_the_records_between_wanted_ones_along() {
        for direct_reads in [false, true] {
            let d = tempfile::tempdir().unwrap();
            let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 30, 4096, true)
                .unwrap()
                .with_direct_reads(direct_reads);
            let data = |e: u64| vec![(e % 251) as u8; 20_000];
            let mut locs = Vec::new();
            for e in 0..20 {
                el.append([(5u64, e, &data(e)[..])], &mut locs).unwrap();
            }
            el.flush().unwrap();
            let path = d.path().join(log_name(locs[0].log_id()));
            let direct = direct_reads && fs::open_direct_read(&path).unwrap().is_some();
            let wanted: Vec<(u64, Location)> =
                (0..20).step_by(2).map(|e| (e, locs[e as usize])).collect();
            let reads = fs::inject_fault(fs::Fault {
                path_prefix: path.clone(),
                ops: vec![fs::Op::Read],
                action: fs::FaultAction::Delay(std::time::Duration::ZERO),
                times: None,
            });
            let (got, err) = el.read_run(5, &wanted);
            let calls = fs::fault_hits(reads);
            fs::remove_fault(reads);
            assert!(err.is_none(), "{err:?}");
            assert_eq!(got.len(), wanted.len());
            for ((e, _), g) in wanted.iter().zip(&got) {
                assert_eq!(
                    &g[..],
                    &data(*e)[..],
                    "entry {e}, direct reads {direct_reads}"
                );
            }
            assert_eq!(
                calls,
                if direct { 1 } else { 10 },
                "direct reads {direct_reads}"
            );
        }
    }

    /// A direct read the file system refuses (EINVAL) is served by the page cache; one that
    /// fails is an error, never bytes of another kind.
    #[test]
    fn a_refused_direct_read_falls_back_and_a_failed_one_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 30, 4096, true)
            .unwrap()
            .with_direct_reads(true);
        let (data, locs) = varied_entries(&el, 12);
        let path = d.path().join(log_name(locs[0].log_id()));
        if fs::open_direct_read(&path).unwrap().is_none() {
            // No direct reads here: the injected EINVAL would fail the page-cache read itself.
            return;
        }
        let fail_reads = |errno, times| {
            fs::inject_fault(fs::Fault {
                path_prefix: path.clone(),
                ops: vec![fs::Op::Read],
                action: fs::FaultAction::Fail(errno),
                times: Some(times),
            })
        };
        fail_reads(libc::EINVAL, 1);
        let got = read_all(&el, &locs);
        assert!(got.iter().zip(&data).all(|(g, w)| g[..] == w[..]));
        let failing = fail_reads(libc::EIO, 2);
        let items: Vec<(u64, Location)> = (0..).zip(locs.iter().copied()).collect();
        let (_, err) = el.read_run(5, &items);
        assert!(matches!(err, Some(StorageError::Io { .. })), "{err:?}");
        fs::remove_fault(failing);
        assert_eq!(read_all(&el, &locs).len(), data.len());
    }
}
