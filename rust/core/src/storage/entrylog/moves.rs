//! Moving a sealed entry log to another ledger directory (demotion to a lower tier, promotion
//! to a higher one) and, at open, finishing or undoing a move a crash interrupted. A log's id
//! and its records' offsets do not change when it moves, so no index entry changes: only
//! where the file is, which [`EntryLogger`] keeps as the one notion of a log's location.
//!
//! A move of `X.log` from directory S to directory D, each step durable before the next:
//! 1. copy to `D/X.log.moving`, fsync it and D;
//! 2. readers switch to the copy (a descriptor of it replaces the old one; readers already
//!    holding the old descriptor finish on it: an unlinked file stays readable);
//! 3. rename `S/X.log` to `S/X.log.old`, fsync S: **the commit point**;
//! 4. rename `D/X.log.moving` to `D/X.log`, fsync D;
//! 5. remove `S/X.log.old`, fsync S.
//!
//! At open ([`recover`]): a `.old` means the move committed, so the copy wins (renamed into
//! place if step 4 had not happened) and the `.old` is removed; a `.moving` without a `.old` is
//! a copy that never committed and is removed. A `kill -9` at any point therefore leaves
//! exactly one complete `X.log` in use.

use std::any::Any;
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::log_file::LogFile;
use super::{log_name, EntryLogger};
use crate::error::{IoContext, Result, StorageError};
use crate::fs;
use crate::storage::release::Unlinked;

/// Suffix of a copy being made (step 1).
const MOVING: &str = ".log.moving";
/// Suffix of the source after the commit (step 3).
const OLD: &str = ".log.old";
/// One read and one write of a copy.
const CHUNK: u64 = 1 << 20;

/// Where one log's files are, by directory index: as `X.log`, as `X.log.old` (a committed move's
/// source), as `X.log.moving` (a copy).
#[derive(Default)]
struct Seen {
    logs: Vec<usize>,
    olds: Vec<usize>,
    movings: Vec<usize>,
}

/// Finishes or undoes the moves a crash interrupted in `dirs` (the ledger directories'
/// `current/`, in configuration order) and returns the directory (index) of every entry log.
pub(super) fn recover(dirs: &[&Path]) -> Result<HashMap<u32, usize>> {
    let mut seen: HashMap<u32, Seen> = HashMap::new();
    for (i, d) in dirs.iter().enumerate() {
        for (suffix, pick) in [(".log", 0usize), (OLD, 1), (MOVING, 2)] {
            for id in fs::list_hex_ids(d, suffix)? {
                let Ok(id) = u32::try_from(id) else { continue };
                let s = seen.entry(id).or_default();
                match pick {
                    0 => s.logs.push(i),
                    1 => s.olds.push(i),
                    _ => s.movings.push(i),
                }
            }
        }
    }
    let mut placed = HashMap::with_capacity(seen.len());
    for (id, s) in seen {
        let home = if s.olds.is_empty() {
            keep_the_source(dirs, id, &s)?
        } else {
            finish_committed(dirs, id, &s)?
        };
        if let Some(home) = home {
            placed.insert(id, home);
        }
    }
    Ok(placed)
}

/// The file of log `id` with `suffix` in directory `dir`.
fn file_of(dirs: &[&Path], dir: usize, id: u32, suffix: &str) -> std::path::PathBuf {
    dirs[dir].join(format!("{id:x}{suffix}"))
}

/// A move of log `id` that committed (a `.old` exists): the copy is complete and synced (step 1
/// came before the commit), so it takes the log's name and the `.old` goes. Returns the log's
/// directory.
fn finish_committed(dirs: &[&Path], id: u32, s: &Seen) -> Result<Option<usize>> {
    let home = if let Some(&d) = s.logs.first() {
        d
    } else if let Some(&d) = s.movings.first() {
        fs::rename(&file_of(dirs, d, id, MOVING), &file_of(dirs, d, id, ".log"))?;
        fs::sync_dir(dirs[d])?;
        d
    } else {
        // No copy at all (not made by a move of ours): keep the only data there is.
        let d = s.olds[0];
        log::warn!(
            "entry log {}: only a .old copy exists; restored",
            log_name(id)
        );
        fs::rename(&file_of(dirs, d, id, OLD), &file_of(dirs, d, id, ".log"))?;
        fs::sync_dir(dirs[d])?;
        return Ok(Some(d));
    };
    for &d in &s.olds {
        fs::remove_file(&file_of(dirs, d, id, OLD))?;
        fs::sync_dir(dirs[d])?;
    }
    for &d in s
        .movings
        .iter()
        .filter(|&&d| d != home || s.logs.contains(&d))
    {
        remove_if_present(&file_of(dirs, d, id, MOVING), dirs[d])?;
    }
    log::info!(
        "entry log {}: finished a move interrupted after its commit",
        log_name(id)
    );
    Ok(Some(home))
}

/// No move of log `id` committed: the source stays and any copy (complete or not) goes.
/// Returns the log's directory, None for a copy whose source is gone (left alone).
fn keep_the_source(dirs: &[&Path], id: u32, s: &Seen) -> Result<Option<usize>> {
    let Some(&first) = s.logs.first() else {
        // A copy whose source is gone: not made by a move of ours; left alone.
        log::warn!(
            "entry log {}: a {MOVING} file without its log is left in place",
            log_name(id)
        );
        return Ok(None);
    };
    for &d in &s.movings {
        fs::remove_file(&file_of(dirs, d, id, MOVING))?;
        fs::sync_dir(dirs[d])?;
        log::info!(
            "entry log {}: removed an uncommitted move's copy",
            log_name(id)
        );
    }
    if s.logs.len() == 1 {
        return Ok(Some(first));
    }
    // Never left by a move (the source is renamed before the copy takes the name); resolved
    // deterministically: the largest copy, then the first directory.
    let size = |d: usize| std::fs::metadata(file_of(dirs, d, id, ".log")).map_or(0, |m| m.len());
    let keep = s
        .logs
        .iter()
        .copied()
        .max_by_key(|&d| (size(d), std::cmp::Reverse(d)))
        .unwrap_or(first);
    for &d in s.logs.iter().filter(|&&d| d != keep) {
        log::warn!(
            "entry log {} is in two directories; the copy in {} is removed",
            log_name(id),
            dirs[d].display()
        );
        fs::remove_file(&file_of(dirs, d, id, ".log"))?;
        fs::sync_dir(dirs[d])?;
    }
    Ok(Some(keep))
}

fn remove_if_present(path: &Path, dir: &Path) -> Result<()> {
    if path.exists() {
        fs::remove_file(path)?;
        fs::sync_dir(dir)?;
    }
    Ok(())
}

impl EntryLogger {
    /// Moves sealed log `id` to ledger directory `dst` (an index into the directories), in the
    /// steps of this module's description. `pace(bytes copied so far)` is called after every
    /// chunk; it may sleep (rate limit) and returns false to abandon the move (the copy is
    /// removed). Returns the bytes moved, or None if the move was abandoned or the log is
    /// already there or gone. The caller must hold the log's pin (see [`pin`](Self::pin)); the
    /// active log and logs whose seal failed are refused.
    pub fn move_log(
        &self,
        id: u32,
        dst: usize,
        pace: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>> {
        if self.is_unsealed(id) {
            return Err(StorageError::InvalidArgument(format!(
                "entry log {} is being written",
                log_name(id)
            )));
        }
        let Some(src) = self.logs.read().get(&id).map(|p| p.dir) else {
            return Ok(None);
        };
        if src == dst {
            return Ok(None);
        }
        let (Some(src_dir), Some(dst_dir)) = (self.dirs.path_of(src), self.dirs.path_of(dst))
        else {
            return Err(StorageError::InvalidArgument(format!(
                "no ledger directory {dst}"
            )));
        };
        let name = log_name(id);
        let src_path = src_dir.join(&name);
        let final_path = dst_dir.join(&name);
        let tmp = dst_dir.join(format!("{id:x}{MOVING}"));
        // 1. Copy and sync.
        let source = fs::open_read(&src_path)?;
        let len = source
            .metadata()
            .ctx(|| format!("reading the size of {}", src_path.display()))?
            .len();
        remove_if_present(&tmp, dst_dir)?;
        let copy = fs::create_new(&tmp)?;
        let copied = copy_synced((&source, &src_path), (&copy, &tmp), dst_dir, len, pace);
        match copied {
            Ok(true) => {}
            Ok(false) => {
                fs::remove_file(&tmp)?;
                return Ok(None);
            }
            Err(e) => {
                if let Err(e2) = fs::remove_file(&tmp) {
                    log::warn!("removing an abandoned copy: {e2}");
                }
                return Err(e);
            }
        }
        drop(copy);
        // 2. Readers switch to the copy.
        let reader = fs::open_read(&tmp)?;
        let source_readers = self.place(id, dst, final_path.clone(), reader);
        // 3. Commit.
        let old = src_dir.join(format!("{id:x}{OLD}"));
        if let Err(e) = fs::rename(&src_path, &old).and_then(|_| fs::sync_dir(src_dir)) {
            // Not committed (or not known to be): back to the source, which is intact.
            if old.exists() && !src_path.exists() {
                if let Err(e2) = fs::rename(&old, &src_path) {
                    log::error!("entry log {name}: undoing a failed move: {e2}");
                }
            }
            self.place(id, src, src_path, source);
            if let Err(e2) = fs::remove_file(&tmp) {
                log::warn!("removing an abandoned copy: {e2}");
            }
            return Err(e);
        }
        // 4. The copy takes the log's name. 5. The source goes. A failure here is finished by
        // the next open (the commit is durable); readers already use the copy.
        fs::rename(&tmp, &final_path)?;
        fs::sync_dir(dst_dir)?;
        drop(source);
        // Freed in steps once the reads of the source are done (see `release`).
        let held = fs::open_write(&old).ok();
        fs::remove_file(&old)?;
        fs::sync_dir(src_dir)?;
        if let Some(file) = held {
            self.releaser.release(Unlinked {
                file,
                path: old,
                readers: source_readers.map(|r| r as Arc<dyn Any + Send + Sync>),
            });
        }
        Ok(Some(len))
    }

    /// Makes directory `dir` the location of log `id`, read through `file` from now on;
    /// returns the readers' handle of its previous location, if it was open.
    fn place(
        &self,
        id: u32,
        dir: usize,
        path: std::path::PathBuf,
        file: std::fs::File,
    ) -> Option<Arc<LogFile>> {
        let mut files = self.files.write();
        let mut logs = self.logs.write();
        let place = logs.get_mut(&id)?;
        place.dir = dir;
        files.insert(
            id,
            Arc::new(LogFile::new(
                path,
                file,
                self.dirs.tier_of(dir),
                place.meta.clone(),
                self.direct_reads,
            )),
        )
    }
}

/// Step 1 of a move: copies `len` bytes of `from` into `to` in chunks, calling `pace` after each,
/// then syncs the copy and its directory `to_dir`. Returns false if `pace` abandoned it.
fn copy_synced(
    (from, from_path): (&File, &Path),
    (to, to_path): (&File, &Path),
    to_dir: &Path,
    len: u64,
    pace: &mut dyn FnMut(u64) -> bool,
) -> Result<bool> {
    let mut buf = vec![0u8; CHUNK.min(len) as usize];
    let mut at = 0u64;
    while at < len {
        let n = CHUNK.min(len - at) as usize;
        fs::read_exact_at(from, from_path, &mut buf[..n], at)?;
        fs::write_all_at(to, to_path, &buf[..n], at)?;
        at += n as u64;
        if !pace(at) {
            return Ok(false);
        }
    }
    fs::fsync(to, to_path)?;
    fs::sync_dir(to_dir)?;
    Ok(true)
}

/// Sleeps as long as needed for `bytes` copied since `started` to stay within `rate` bytes per
/// second (0: unpaced), in slices of at most 100 ms; stops early when `stop()` says so.
/// Returns false if stopped.
pub fn pace_to(
    rate: u64,
    started: std::time::Instant,
    bytes: u64,
    stop: &dyn Fn() -> bool,
) -> bool {
    if rate == 0 {
        return !stop();
    }
    let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
    loop {
        if stop() {
            return false;
        }
        let Some(wait) = due.checked_sub(started.elapsed()) else {
            return true;
        };
        if wait.is_zero() {
            return true;
        }
        std::thread::sleep(wait.min(Duration::from_millis(100)));
    }
}

#[cfg(test)]
mod tests {
    //! Moves over real directories: the data reads back after a move, a move interrupted at
    //! every step is finished or undone at open with exactly one copy left, and reads running
    //! during moves never fail.

    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::storage::dirs::{GreedyAllocator, LedgerDirs};
    use crate::storage::entrylog::Location;

    fn logger(paths: &[PathBuf]) -> EntryLogger {
        let dirs = Arc::new(LedgerDirs::new(
            paths.to_vec(),
            Box::<GreedyAllocator>::default(),
        ));
        EntryLogger::open(dirs, 64 << 10, 4096, true).unwrap()
    }

    fn payload(i: u64) -> Vec<u8> {
        vec![(i % 251) as u8; 700 + (i as usize * 37) % 900]
    }

    /// Writes 300 entries over several logs into the first directory, sealed; returns their
    /// locations.
    fn fill(el: &EntryLogger) -> Vec<Location> {
        let data: Vec<Vec<u8>> = (0..300).map(payload).collect();
        let mut locs = Vec::new();
        el.append(
            data.iter()
                .enumerate()
                .map(|(i, d)| (1u64, i as u64, d.as_slice())),
            &mut locs,
        )
        .unwrap();
        el.flush().unwrap();
        el.close().unwrap();
        locs
    }

    fn check_all(el: &EntryLogger, locs: &[Location]) {
        for (i, at) in locs.iter().enumerate() {
            assert_eq!(
                &el.read(1, i as u64, *at).unwrap()[..],
                &payload(i as u64)[..]
            );
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_moved_log_reads_back_from_its_new_directory_and_stays_there() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let paths = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        let el = logger(&paths);
        let locs = fill(&el);
        let first = locs[0].log_id();
        let pin = el.pin(first).unwrap();
        assert!(el.pin(first).is_none(), "one holder at a time");
        let moved = el.move_log(first, 1, &mut |_| true).unwrap();
        drop(pin);
        assert!(moved.unwrap() > 0);
        assert_eq!(el.log_path(first), Some(b.path().join(log_name(first))));
        assert!(!a.path().join(log_name(first)).exists());
        assert_eq!(names(b.path()), vec![log_name(first)]);
        check_all(&el, &locs);
        // Reopened: found where it went.
        drop(el);
        let el = logger(&paths);
        assert_eq!(el.log_path(first), Some(b.path().join(log_name(first))));
        check_all(&el, &locs);
        // Abandoned moves leave nothing behind.
        let second = locs.last().unwrap().log_id();
        assert_eq!(el.move_log(second, 1, &mut |_| false).unwrap(), None);
        assert_eq!(el.log_path(second), Some(a.path().join(log_name(second))));
        assert_eq!(names(b.path()), vec![log_name(first)]);
        check_all(&el, &locs);
    }

    /// The files a move leaves after step `step` (1 = copy made, ..., 5 = done), with the copy
    /// possibly cut short when `torn`.
    fn crash_after(step: usize, torn: bool, src: &Path, dst: &Path, id: u32) {
        let log = src.join(log_name(id));
        let moving = dst.join(format!("{id:x}{MOVING}"));
        let old = src.join(format!("{id:x}{OLD}"));
        if step == 0 {
            return;
        }
        let data = std::fs::read(&log).unwrap();
        let cut = if torn { data.len() / 3 } else { data.len() };
        std::fs::write(&moving, &data[..cut]).unwrap();
        if step >= 3 {
            std::fs::rename(&log, &old).unwrap();
        }
        if step >= 4 {
            std::fs::rename(&moving, dst.join(log_name(id))).unwrap();
        }
        if step >= 5 {
            std::fs::remove_file(&old).unwrap();
        }
    }

    #[test]
    fn a_move_interrupted_at_any_step_leaves_one_complete_log() {
        for (step, torn) in [
            (0, false),
            (1, true),
            (1, false),
            (3, false),
            (4, false),
            (5, false),
        ] {
            let a = tempfile::tempdir().unwrap();
            let b = tempfile::tempdir().unwrap();
            let paths = vec![a.path().to_path_buf(), b.path().to_path_buf()];
            let locs = fill(&logger(&paths));
            let id = locs[0].log_id();
            crash_after(step, torn, a.path(), b.path(), id);
            let el = logger(&paths);
            check_all(&el, &locs);
            let (home, away) = if step >= 3 { (&b, &a) } else { (&a, &b) };
            assert_eq!(
                el.log_path(id),
                Some(home.path().join(log_name(id))),
                "step {step}"
            );
            let left: Vec<String> = names(away.path())
                .into_iter()
                .filter(|n| n.starts_with(&format!("{id:x}.")))
                .collect();
            assert!(left.is_empty(), "step {step}: {left:?} left behind");
            assert!(!names(home.path())
                .iter()
                .any(|n| n.ends_with(".old") || n.ends_with(".moving")));
        }
    }

    #[test]
    fn reads_during_moves_never_fail() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let paths = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        let el = Arc::new(logger(&paths));
        let locs = Arc::new(fill(&el));
        let ids: Vec<u32> = {
            let mut v: Vec<u32> = locs.iter().map(|l| l.log_id()).collect();
            v.dedup();
            v
        };
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|k| {
                let (el, locs, stop) = (el.clone(), locs.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let i = (n * 7 + k) as usize % locs.len();
                        let got = el.read(1, i as u64, locs[i]).unwrap();
                        assert_eq!(&got[..], &payload(i as u64)[..]);
                        n += 1;
                    }
                    // Maps too (a public API reading files by location).
                    el.ledgers_maps().unwrap();
                    n
                })
            })
            .collect();
        for round in 0..20 {
            for &id in &ids {
                let _pin = el.pin(id).unwrap();
                let to = (round + 1) % 2;
                el.move_log(id, to, &mut |_| true).unwrap();
                assert!(el.ledgers_maps().unwrap().contains_key(&id));
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        check_all(&el, &locs);
    }
}
