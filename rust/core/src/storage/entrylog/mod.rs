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
mod log_file;
mod moves;
mod read;

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub use ledgers_map::LedgersMap;
pub use location::{log_name, Location};
pub use log::{read_ledgers_map, scan_entries};
pub use moves::pace_to;

use crate::error::{Result, StorageError};
use crate::fs;
use crate::metrics::Counter;
use crate::record::{append_record_with_crc, RECORD_HEADER_LEN};
use crate::storage::dirs::{Heat, LedgerDirs};
use crate::storage::release::{Releaser, Unlinked};
use log::ActiveLog;
use log_file::LogFile;

/// Bytes of a record before the entry data: frame header plus ledger and entry ids.
pub const ENTRY_RECORD_OVERHEAD: usize = RECORD_HEADER_LEN + 16;
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

/// Where an append began, so that a failed one can be undone.
struct AppendMark {
    /// The active log then, and its logical end and ledgers map.
    id: Option<u32>,
    end: u64,
    ledgers: LedgersMap,
    /// The id the next new log would have taken: logs from it on were started by the append.
    next_id: u32,
    /// Locations in the caller's vector before the append.
    located: usize,
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
        let created = self.dirs.choose_for_new_log().and_then(|dir| {
            ActiveLog::create(&dir, id, self.write_buffer, self.direct_io).map(|made| (dir, made))
        });
        let (dir, (log, reader)) = match created {
            Ok(made) => made,
            Err(e) => {
                // The id goes back unused: a disk that stays full would otherwise leave a
                // fresh number (and, before `create` cleaned up, an empty file) per attempt.
                let mut next = self.next_id.lock();
                if *next == id.wrapping_add(1) {
                    *next = id;
                }
                return Err(e);
            }
        };
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
    ///
    /// A failed call leaves no trace (see [`rewind`](Self::rewind)): the active log goes back
    /// to where the call began, the logs it started are removed and their ids given back, so a
    /// flush retried on a full disk writes its entries at the same place again instead of
    /// leaving a log's worth of unindexed copies per attempt.
    pub fn append_checked<'a>(
        &self,
        entries: impl IntoIterator<Item = (u64, u64, &'a [u8], u32)>,
        out: &mut Vec<Location>,
    ) -> Result<()> {
        self.append_marked(entries, out, false)
    }

    /// [`append_checked`](Self::append_checked), then [`flush`](Self::flush), under one lock:
    /// a failure of either leaves no trace (nothing else appends in between).
    pub fn append_published<'a>(
        &self,
        entries: impl IntoIterator<Item = (u64, u64, &'a [u8], u32)>,
        out: &mut Vec<Location>,
    ) -> Result<()> {
        self.append_marked(entries, out, true)
    }

    fn append_marked<'a>(
        &self,
        entries: impl IntoIterator<Item = (u64, u64, &'a [u8], u32)>,
        out: &mut Vec<Location>,
        publish: bool,
    ) -> Result<()> {
        let mut guard = self.active.lock();
        let mark = AppendMark {
            id: guard.as_ref().map(|l| l.id),
            end: guard.as_ref().map_or(0, |l| l.end),
            ledgers: guard
                .as_ref()
                .map(|l| l.ledgers.clone())
                .unwrap_or_default(),
            next_id: *self.next_id.lock(),
            located: out.len(),
        };
        let mut done = self.append_locked(&mut guard, entries, out);
        if done.is_ok() && publish {
            if let Some(log) = guard.as_mut() {
                done = log.publish();
            }
        }
        if done.is_err() {
            out.truncate(mark.located);
            self.rewind(&mut guard, mark);
        }
        done
    }

    fn append_locked<'a>(
        &self,
        guard: &mut Option<ActiveLog>,
        entries: impl IntoIterator<Item = (u64, u64, &'a [u8], u32)>,
        out: &mut Vec<Location>,
    ) -> Result<()> {
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

    /// Undoes a failed append (the `active` lock held since `mark` was taken): the logs it
    /// started hold only its records, so they are removed and their ids given back; the log
    /// active at the mark (active still, or back from the logs whose seal failed) is cut back
    /// to the mark. A log the append sealed keeps its tail (unindexed copies compaction drops).
    fn rewind(&self, guard: &mut Option<ActiveLog>, mark: AppendMark) {
        let mut started: Vec<u32> = Vec::new();
        if guard.as_ref().is_some_and(|l| l.id >= mark.next_id) {
            started.extend(guard.take().map(|l| l.id));
        }
        {
            let mut unsealed = self.unsealed.lock();
            started.extend(
                unsealed
                    .iter()
                    .filter(|l| l.id >= mark.next_id)
                    .map(|l| l.id),
            );
            unsealed.retain(|l| l.id < mark.next_id);
            if guard.is_none() {
                if let Some(at) = unsealed.iter().position(|l| Some(l.id) == mark.id) {
                    *guard = Some(unsealed.remove(at));
                }
            }
        }
        if let Some(log) = guard.as_mut().filter(|l| Some(l.id) == mark.id) {
            log.rewind_to(mark.end, mark.ledgers);
        }
        started.extend(self.logs.read().keys().filter(|id| **id >= mark.next_id));
        started.sort_unstable();
        started.dedup();
        for id in started {
            let dir = {
                let mut files = self.files.write();
                files.remove(&id);
                self.logs.write().remove(&id).map(|p| p.dir)
            };
            if let Some(path) = dir
                .and_then(|d| self.dirs.path_of(d))
                .map(|d| d.join(log_name(id)))
            {
                if let Err(e) = fs::remove_file(&path) {
                    ::log::warn!("removing a log a failed append started: {e}");
                }
            }
        }
        *self.next_id.lock() = mark.next_id;
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

#[cfg(test)]
mod tests;
