//! The space reserve (`diskReservedSpaceMB`): one allocated file per directory the storage
//! writes to, made at start, given back to the file system when the disk is full (the disk
//! checker's Full pressure, or ENOSPC on an internal write) so that checkpoints, index records
//! and a compaction can still write, and made again once the disk has room. While a reserve is
//! released its bytes still count as used in the usage the disk checker sees, so giving it back
//! never makes a full bookie look writable. It owns the reserve files and their state; it never
//! decides when the bookie is writable (the disk checker does) nor what is compacted.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::error::{Result, StorageError};
use crate::fs;
use crate::metrics::Counter;

/// The reserve file's name, in each directory it guards.
pub const RESERVE_FILE: &str = "pybkx-space-reserve";

/// Room kept for the writes beside a compaction's rewritten entries (its index segment, the
/// checkpoint and manifest records in `index.log`, the ledgers map of a sealed log).
pub const INDEX_MARGIN: u64 = 4 << 20;

/// The most of one entry log a derived reserve makes room to compact: a full disk is reclaimed
/// least live log first, and those hold little live data, so room for a whole 1 GiB log
/// (BookKeeper's `logSizeLimit`) on every bookie would cost far more than it wins.
const MAX_DERIVED_COMPACTION: u64 = 256 << 20;

/// The most of a file system a derived reserve takes (an eighth): on a small disk a larger
/// one would leave little for data, and a bookie turns read-only at `diskUsageThreshold` with
/// the reserve counted as used.
const MAX_SHARE_DIVISOR: u64 = 8;

/// What a directory's reserve is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveKind {
    /// A ledger or index directory: room for a compaction and the index writes.
    Ledger,
    /// A journal directory: room for the records a read-only bookie still journals (deletions,
    /// fences) and a journal file's preallocation.
    Journal,
}

/// One directory's reserve.
struct Slot {
    kind: ReserveKind,
    file: PathBuf,
    /// The device of the directory's file system: a released reserve counts as used for every
    /// directory on it.
    dev: u64,
    bytes: u64,
    /// The file exists with `bytes` allocated.
    held: AtomicBool,
}

/// The reserves of one storage.
pub struct SpaceReserve {
    slots: Vec<Slot>,
    /// One make or release at a time.
    changing: Mutex<()>,
    /// Times a reserve was given back, and made again.
    pub releases: Counter,
    pub restores: Counter,
}

/// What a derived reserve is sized from.
#[derive(Debug, Clone, Copy)]
pub struct ReserveBasis {
    /// `logSizeLimit`: the most one compaction rewrites.
    pub log_size_limit: u64,
    /// The write cache (`dbStorage_writeCacheMaxSizeMb`): the most one checkpoint flushes.
    pub write_cache: u64,
    /// `journalPreAllocSizeMB`.
    pub journal_prealloc: u64,
}

/// The size of a derived reserve (`diskReservedSpaceMB` unset) for a directory of `kind` on a
/// file system of `total` bytes: a ledger directory's fits one checkpoint's flush of the write
/// cache (which lets the journal go), one entry log of at most [`MAX_DERIVED_COMPACTION`]
/// compacted, and [`INDEX_MARGIN`]; a journal directory's two preallocation chunks; either at
/// most an eighth of the file system, whole MiB.
pub fn derived_size(kind: ReserveKind, total: u64, basis: ReserveBasis) -> u64 {
    let want = match kind {
        ReserveKind::Ledger => basis
            .log_size_limit
            .min(MAX_DERIVED_COMPACTION)
            .saturating_add(basis.write_cache)
            .saturating_add(INDEX_MARGIN),
        ReserveKind::Journal => basis.journal_prealloc.saturating_mul(2).max(1 << 20),
    };
    capped(want, total)
}

/// `bytes` kept to an eighth of a file system of `total` bytes, whole MiB.
pub fn capped(bytes: u64, total: u64) -> u64 {
    bytes.min(total / MAX_SHARE_DIVISOR) >> 20 << 20
}

impl SpaceReserve {
    /// No reserve at all (`diskReservedSpaceMB=0`).
    pub fn disabled() -> SpaceReserve {
        SpaceReserve::open(Vec::new())
    }

    /// Makes the reserve of every `(kind, directory, bytes)` (directories listed twice count
    /// once; 0 bytes: none). A reserve that cannot be made (the disk is already full) is logged
    /// and starts released: the bookie then starts read-only and makes it once there is room,
    /// instead of refusing to start, which on a full disk would be a restart loop no deletion
    /// could end.
    pub fn open(dirs: Vec<(ReserveKind, PathBuf, u64)>) -> SpaceReserve {
        let mut slots: Vec<Slot> = Vec::new();
        for (kind, dir, bytes) in dirs {
            let file = dir.join(RESERVE_FILE);
            if bytes == 0 || slots.iter().any(|s| s.file == file) {
                continue;
            }
            let dev = std::fs::metadata(&dir).map_or(0, |m| m.dev());
            slots.push(Slot {
                kind,
                file,
                dev,
                bytes,
                held: AtomicBool::new(false),
            });
        }
        let reserve = SpaceReserve {
            slots,
            changing: Mutex::new(()),
            releases: Counter::default(),
            restores: Counter::default(),
        };
        {
            let _one = reserve.changing.lock();
            for slot in &reserve.slots {
                match make(slot) {
                    Ok(()) => slot.held.store(true, Ordering::Release),
                    Err(e) => log::error!(
                        "cannot make the space reserve {} ({} bytes, diskReservedSpaceMB): {e}; \
                         it counts as used until the disk has room for it",
                        slot.file.display(),
                        slot.bytes
                    ),
                }
            }
        }
        reserve
    }

    /// Gives every held reserve back to its file system (the disk is full): returns the bytes
    /// freed. A reserve that cannot be removed stays held and is logged.
    pub fn release(&self, why: &str) -> u64 {
        let _one = self.changing.lock();
        let mut freed = 0;
        for slot in self.slots.iter().filter(|s| s.held.load(Ordering::Acquire)) {
            match remove(slot) {
                Ok(()) => {
                    slot.held.store(false, Ordering::Release);
                    freed += slot.bytes;
                    self.releases.inc();
                    log::warn!(
                        "released the space reserve {} ({} bytes): {why}; garbage collection, \
                         compaction and checkpoints write into it",
                        slot.file.display(),
                        slot.bytes
                    );
                }
                Err(e) => log::error!("cannot release {}: {e}", slot.file.display()),
            }
        }
        freed
    }

    /// Removes every reserve file as the storage closes cleanly: a stopped bookie holds no
    /// space it does not use (the next open makes them again). Not counted as a release.
    pub fn remove_at_close(&self) {
        let _one = self.changing.lock();
        for slot in self.slots.iter().filter(|s| s.held.load(Ordering::Acquire)) {
            match remove(slot) {
                Ok(()) => slot.held.store(false, Ordering::Release),
                Err(e) => log::warn!("cannot remove {} at close: {e}", slot.file.display()),
            }
        }
    }

    /// Gives the reserves back if `e` says a disk had no room; returns whether it did.
    pub fn release_on_no_space(&self, e: &StorageError) -> bool {
        fs::is_no_space(e) && self.release("an internal write found the disk full") > 0
    }

    /// Makes every released reserve again; Ok(true) once all are held. A reserve that does not
    /// fit yet stays released (Ok(false)). One that fails otherwise (a directory that refuses
    /// the file) is logged and stays released, still counted as used, without holding the
    /// bookie read-only: the disk checker must go on judging the disks.
    pub fn restore(&self) -> Result<bool> {
        let _one = self.changing.lock();
        let mut all = true;
        for slot in self
            .slots
            .iter()
            .filter(|s| !s.held.load(Ordering::Acquire))
        {
            match make(slot) {
                Ok(()) => {
                    slot.held.store(true, Ordering::Release);
                    self.restores.inc();
                    log::info!(
                        "made the space reserve {} ({} bytes) again",
                        slot.file.display(),
                        slot.bytes
                    );
                }
                Err(e) if fs::is_no_space(&e) => all = false,
                Err(e) => log::error!(
                    "cannot make the space reserve {} again: {e}; it stays counted as used",
                    slot.file.display()
                ),
            }
        }
        Ok(all)
    }

    /// Bytes of released reserves on the file system holding `dir`: what the disk checker
    /// counts as used there on top of the file system's own figure.
    pub fn held_back_on(&self, dir: &Path) -> u64 {
        let Ok(dev) = std::fs::metadata(dir).map(|m| m.dev()) else {
            return 0;
        };
        self.slots
            .iter()
            .filter(|s| s.dev == dev && !s.held.load(Ordering::Acquire))
            .map(|s| s.bytes)
            .sum()
    }

    /// Whether some reserve is released.
    pub fn is_released(&self) -> bool {
        self.slots.iter().any(|s| !s.held.load(Ordering::Acquire))
    }

    /// Bytes of released reserves.
    pub fn released_bytes(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| !s.held.load(Ordering::Acquire))
            .map(|s| s.bytes)
            .sum()
    }

    /// The most live bytes one compaction may write while the disk is full: the largest
    /// ledger-directory reserve, less [`INDEX_MARGIN`] (0: no compaction beyond the
    /// configured ones).
    pub fn compaction_budget(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.kind == ReserveKind::Ledger)
            .map(|s| s.bytes.saturating_sub(INDEX_MARGIN).max(s.bytes / 2))
            .max()
            .unwrap_or(0)
    }

    /// Every reserve file with its size and whether it is held (tests, tools).
    pub fn files(&self) -> Vec<(PathBuf, u64, bool)> {
        self.slots
            .iter()
            .map(|s| (s.file.clone(), s.bytes, s.held.load(Ordering::Acquire)))
            .collect()
    }
}

/// Creates (or keeps) the reserve file with its bytes allocated and synced. A file left by a
/// failed attempt is removed, so a failure frees what it took.
fn make(slot: &Slot) -> Result<()> {
    let file = match fs::open_write(&slot.file) {
        Ok(f) => f,
        Err(_) => fs::create_new(&slot.file)?,
    };
    let made =
        fs::allocate(&file, &slot.file, slot.bytes).and_then(|()| fs::fsync(&file, &slot.file));
    if let Err(e) = made {
        drop(file);
        if let Err(gone) = fs::remove_file(&slot.file) {
            log::warn!("{gone}");
        }
        return Err(e);
    }
    if let Some(dir) = slot.file.parent() {
        fs::sync_dir(dir)?;
    }
    Ok(())
}

/// Removes the reserve file; its blocks return to the file system at once (nothing holds it
/// open).
fn remove(slot: &Slot) -> Result<()> {
    match fs::remove_file(&slot.file) {
        Ok(()) => Ok(()),
        Err(StorageError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    //! The reserve on a real directory; the full disk itself is an injected ENOSPC.

    use super::*;
    use crate::fs::{inject_fault, remove_fault, Fault, FaultAction, Op};

    fn allocated(path: &Path) -> u64 {
        std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
    }

    #[test]
    fn made_at_open_released_and_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let r = SpaceReserve::open(vec![(
            ReserveKind::Ledger,
            dir.path().to_path_buf(),
            8 << 20,
        )]);
        let file = dir.path().join(RESERVE_FILE);
        assert!(
            allocated(&file) >= 8 << 20,
            "the reserve's blocks are allocated"
        );
        assert!(!r.is_released());
        assert_eq!(r.held_back_on(dir.path()), 0);

        assert_eq!(r.release("test"), 8 << 20);
        assert!(!file.exists());
        assert!(r.is_released());
        assert_eq!(
            r.held_back_on(dir.path()),
            8 << 20,
            "released counts as used"
        );
        assert_eq!(r.release("again"), 0, "nothing left to release");

        assert!(r.restore().unwrap());
        assert!(allocated(&file) >= 8 << 20);
        assert_eq!(r.held_back_on(dir.path()), 0);
        assert_eq!((r.releases.get(), r.restores.get()), (1, 1));
    }

    #[test]
    fn a_reserve_that_does_not_fit_starts_released_and_is_made_once_it_fits() {
        let dir = tempfile::tempdir().unwrap();
        let no_space = inject_fault(Fault {
            path_prefix: dir.path().to_path_buf(),
            ops: vec![Op::Allocate],
            action: FaultAction::Fail(libc::ENOSPC),
            times: None,
        });
        let r = SpaceReserve::open(vec![(
            ReserveKind::Journal,
            dir.path().to_path_buf(),
            1 << 20,
        )]);
        let file = dir.path().join(RESERVE_FILE);
        assert!(r.is_released());
        assert!(!file.exists(), "a failed attempt leaves no file");
        assert!(!r.restore().unwrap(), "still no room");
        remove_fault(no_space);
        assert!(r.restore().unwrap());
        assert!(file.exists());
    }

    #[test]
    fn a_reserve_refused_otherwise_stays_counted_but_holds_nothing_back() {
        let dir = tempfile::tempdir().unwrap();
        let r = SpaceReserve::open(vec![(
            ReserveKind::Ledger,
            dir.path().to_path_buf(),
            1 << 20,
        )]);
        r.release("test");
        let eio = inject_fault(Fault {
            path_prefix: dir.path().to_path_buf(),
            ops: vec![Op::Allocate],
            action: FaultAction::Fail(libc::EIO),
            times: None,
        });
        assert!(
            r.restore().unwrap(),
            "not a lack of space: the bookie may turn writable"
        );
        assert_eq!(r.held_back_on(dir.path()), 1 << 20, "still counted as used");
        remove_fault(eio);
        assert!(r.restore().unwrap());
        assert!(!r.is_released());
    }

    #[test]
    fn only_no_space_releases() {
        let dir = tempfile::tempdir().unwrap();
        let r = SpaceReserve::open(vec![(
            ReserveKind::Ledger,
            dir.path().to_path_buf(),
            1 << 20,
        )]);
        let eio = StorageError::Io {
            context: "x".into(),
            source: std::io::Error::from_raw_os_error(libc::EIO),
        };
        assert!(!r.release_on_no_space(&eio));
        let full = StorageError::Io {
            context: "x".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        };
        assert!(r.release_on_no_space(&full.clone()), "a cloned ENOSPC too");
        assert!(r.is_released());
    }

    #[test]
    fn derived_sizes_fit_the_disk() {
        let gib = 1u64 << 30;
        let basis = ReserveBasis {
            log_size_limit: gib,
            write_cache: 64 << 20,
            journal_prealloc: 16 << 20,
        };
        let big = 100 * gib;
        assert_eq!(
            derived_size(ReserveKind::Ledger, big, basis),
            (256 << 20) + (64 << 20) + INDEX_MARGIN
        );
        let small_logs = ReserveBasis {
            log_size_limit: 16 << 20,
            ..basis
        };
        assert_eq!(
            derived_size(ReserveKind::Ledger, big, small_logs),
            (16 << 20) + (64 << 20) + INDEX_MARGIN
        );
        assert_eq!(derived_size(ReserveKind::Ledger, 48 << 20, basis), 6 << 20);
        assert_eq!(derived_size(ReserveKind::Journal, big, basis), 32 << 20);
        assert_eq!(derived_size(ReserveKind::Journal, 4 << 20, basis), 0);
    }

    /// The reserve inside a whole storage: made at open, given back by Full pressure and
    /// counted as used meanwhile, remade on request; a full disk reclaimed by compaction.
    mod in_a_storage {
        use std::time::{Duration, Instant};

        use crate::config::StorageConfig;
        use crate::storage::tests::{add, entry_payload, small_cache_config, wait};
        use crate::storage::{DiskPressure, LedgerStorage};

        /// Entries of about 20 KB: many 256 KiB logs.
        const BIG: u64 = 20_000;

        fn config(dir: &std::path::Path, reserve: u64) -> StorageConfig {
            StorageConfig {
                disk_reserve_bytes: Some(reserve),
                ..small_cache_config(dir)
            }
        }

        fn counter(s: &LedgerStorage, name: &str) -> u64 {
            s.metrics()
                .iter()
                .find(|m| m.name == name)
                .and_then(|m| m.int_value())
                .unwrap_or(0)
        }

        #[test]
        fn made_at_open_given_back_when_full_and_remade() {
            let dir = tempfile::tempdir().unwrap();
            let s = LedgerStorage::open(config(dir.path(), 2 << 20)).unwrap();
            let files = s.space_reserve();
            assert_eq!(
                files.len(),
                2,
                "one in the ledger and one in the journal directory"
            );
            assert!(files
                .iter()
                .all(|(path, bytes, held)| { *held && *bytes == 2 << 20 && path.exists() }));
            s.set_disk_pressure(DiskPressure::Full);
            assert!(s
                .space_reserve()
                .iter()
                .all(|(p, _, held)| !held && !p.exists()));
            assert_eq!(counter(&s, "pybkx_disk_reserve_released_bytes"), 4 << 20);
            assert!(s.restore_space_reserve().unwrap());
            assert!(s
                .space_reserve()
                .iter()
                .all(|(p, _, held)| *held && p.exists()));
            assert_eq!(counter(&s, "pybkx_disk_reserve_restores"), 2);
            let paths: Vec<_> = s.space_reserve().into_iter().map(|(p, _, _)| p).collect();
            s.close().unwrap();
            // A cleanly closed storage holds no space it does not use; the next open remakes it.
            assert!(paths.iter().all(|p| !p.exists()), "{paths:?}");
            let s = LedgerStorage::open(config(dir.path(), 2 << 20)).unwrap();
            assert!(paths.iter().all(|p| p.exists()), "{paths:?}");
            s.close().unwrap();
        }

        #[test]
        fn a_flush_leaves_deleted_ledgers_out() {
            let dir = tempfile::tempdir().unwrap();
            let s = LedgerStorage::open(config(dir.path(), 0)).unwrap();
            for e in 0..20 {
                add(&s, 1, e, &entry_payload(1, e, 0)).unwrap();
                add(&s, 2, e, &entry_payload(2, e, 0)).unwrap();
            }
            wait(|d| s.delete_ledger(1, d)).unwrap();
            s.checkpoint().unwrap();
            let maps = s.entry_log_ledgers().unwrap();
            assert!(maps.values().all(|m| !m.contains_key(&1)), "{maps:?}");
            s.close().unwrap();
            let s = LedgerStorage::open(config(dir.path(), 0)).unwrap();
            for e in 0..20 {
                assert_eq!(
                    &s.read_entry(2, e).unwrap()[..],
                    &entry_payload(2, e, 0)[..]
                );
            }
            assert!(!s.ledger_exists(1));
        }

        #[test]
        fn a_full_disk_is_reclaimed_by_compacting_the_logs_with_most_garbage() {
            let dir = tempfile::tempdir().unwrap();
            let s = LedgerStorage::open(config(dir.path(), 8 << 20)).unwrap();
            for round in 0..8u64 {
                for e in round * 20..round * 20 + 20 {
                    add(&s, 1, e, &entry_payload(1, e, BIG)).unwrap();
                    add(&s, 2, e, &entry_payload(2, e, BIG)).unwrap();
                }
                s.checkpoint().unwrap();
            }
            let mixed = s.entry_log_ledgers().unwrap().len();
            assert!(mixed > 3, "{mixed} logs");
            wait(|d| s.delete_ledger(1, d)).unwrap();
            // The timed jobs are off (gcWaitTime 0, no compaction intervals): only the full
            // disk makes the scheduler compact, isForceGCAllowWhenNoSpace being false.
            s.set_disk_pressure(DiskPressure::Full);
            let deadline = Instant::now() + Duration::from_secs(30);
            while counter(&s, "pybkx_gc_compacted_entry_logs") < 2 {
                assert!(Instant::now() < deadline, "no reclaiming compaction");
                std::thread::sleep(Duration::from_millis(50));
            }
            for e in 0..160 {
                assert_eq!(
                    &s.read_entry(2, e).unwrap()[..],
                    &entry_payload(2, e, BIG)[..]
                );
            }
            s.close().unwrap();
        }
    }
}
