//! The journal files a checkpoint let go: which ones the writer may reuse at a rollover
//! (`journalReuseFiles`) and their removal beyond `journalMaxBackups`, cut down in steps, one
//! batch at a time in the background. The two never take the same file; it never writes a
//! record.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Mutex, MutexGuard};

use super::file::{journal_path, list_journal_ids};
use crate::error::Result;
use crate::fs;

/// The journal files a checkpoint no longer needs, as the writer (reusing one at a rollover,
/// `journalReuseFiles`) and removal (cutting those beyond `journalMaxBackups`) share them.
/// Taken by the writer for the whole reuse of a file and by removal while it picks its files,
/// so that the two never take the same file.
#[derive(Default)]
pub(super) struct OldFiles {
    /// Files with lower ids are covered by a durable checkpoint: their records are in the
    /// entry logs and the index.
    mark_file_id: u64,
    /// Files a removal has taken and not yet finished with.
    removing: HashSet<u64>,
}

impl OldFiles {
    /// The file the writer should reuse: the oldest covered by the checkpoint, not being
    /// removed, and at most `max_len` bytes long (so the files kept as backups are the pool, as
    /// in BookKeeper). A longer file, written under a larger `journalMaxSizeMB`, would keep its
    /// size for ever: it is left to be removed once newer backups push it out.
    pub(super) fn reusable(&self, dir: &std::path::Path, ids: &[u64], max_len: u64) -> Option<u64> {
        ids.iter().copied().find(|id| {
            *id < self.mark_file_id
                && !self.removing.contains(id)
                && std::fs::metadata(journal_path(dir, *id)).is_ok_and(|m| m.len() <= max_len)
        })
    }
}

/// Removal of one journal directory's old files.
pub(super) struct Removal {
    dir: PathBuf,
    /// Old files being removed in the background, one batch at a time.
    pub(super) remover: Mutex<Option<JoinHandle<Result<()>>>>,
    /// Set on shutdown: a background removal stops between steps.
    stop: Arc<AtomicBool>,
    /// Which old files the writer may reuse, shared with it.
    old_files: Arc<Mutex<OldFiles>>,
}

impl Removal {
    /// The removal of `dir`'s old files, sharing `old_files` with the writer.
    pub(super) fn new(dir: PathBuf, old_files: Arc<Mutex<OldFiles>>) -> Removal {
        Removal {
            dir,
            remover: Mutex::new(None),
            stop: Arc::new(AtomicBool::new(false)),
            old_files,
        }
    }

    /// Removes journal files older than `mark_file_id`, keeping the newest `keep` of them;
    /// returns how many it took. Each is cut down in steps before it is unlinked (a large file
    /// unlinked at once holds up every sync on the file system, the journal's own included).
    /// `mark_file_id` must be durable: with `journalReuseFiles` the files it keeps may be
    /// overwritten from then on.
    ///
    /// With `wait` the removal is done before this returns (explicit checkpoints, close).
    /// Without, a background thread does it (the timed checkpoints: the checkpoint thread also
    /// flushes the write cache, and a large file's removal there would hold up adds: see
    /// docs/performance.md, "Design figures behind the code");
    /// while an earlier batch is still being removed, none is started (0 is returned) and the
    /// next checkpoint takes these files. Errors of a background batch are logged; its files
    /// stay and a later checkpoint removes them.
    pub(super) fn remove_old_files(
        &self,
        mark_file_id: u64,
        keep: usize,
        wait: bool,
    ) -> Result<usize> {
        let mut remover = self.remover.lock();
        if let Some(running) = remover.take() {
            if !wait && !running.is_finished() {
                *remover = Some(running);
                drop(self.cover(mark_file_id));
                return Ok(0);
            }
            self.finish_removal(running);
        }
        let doomed: Vec<u64> = {
            let mut old_files = self.cover(mark_file_id);
            let old: Vec<u64> = list_journal_ids(&self.dir)?
                .into_iter()
                .filter(|id| *id < old_files.mark_file_id)
                .collect();
            let doomed = old[..old.len().saturating_sub(keep)].to_vec();
            old_files.removing.extend(&doomed);
            doomed
        };
        if doomed.is_empty() {
            return Ok(0);
        }
        let count = doomed.len();
        let (dir, stop, old_files) = (self.dir.clone(), self.stop.clone(), self.old_files.clone());
        let remove = move |stop: Option<&AtomicBool>| {
            let paths: Vec<PathBuf> = doomed.iter().map(|id| journal_path(&dir, *id)).collect();
            let removed = remove_files(&dir, &paths, stop);
            let mut old_files = old_files.lock();
            for id in &doomed {
                old_files.removing.remove(id);
            }
            removed
        };
        if wait {
            // Under the lock, so that no background batch cuts the same files meanwhile.
            remove(None)?;
            return Ok(count);
        }
        let spawned = std::thread::Builder::new()
            .name("pybkx-journal-removal".to_string())
            .spawn(move || remove(Some(&stop)));
        match spawned {
            Ok(handle) => *remover = Some(handle),
            Err(e) => {
                log::warn!(
                    "journal {}: no thread to remove old files: {e}",
                    self.dir.display()
                );
                // The closure and the ids it held are gone: the files are free to take again.
                self.old_files.lock().removing.clear();
            }
        }
        Ok(count)
    }

    /// Records that files older than `mark_file_id` are covered by a durable checkpoint.
    fn cover(&self, mark_file_id: u64) -> MutexGuard<'_, OldFiles> {
        let mut old_files = self.old_files.lock();
        old_files.mark_file_id = old_files.mark_file_id.max(mark_file_id);
        old_files
    }

    fn finish_removal(&self, remover: JoinHandle<Result<()>>) {
        match remover.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                log::warn!("removing old journal files: {e} (a later checkpoint retries)")
            }
            Err(_) => log::error!("journal file removal for {} panicked", self.dir.display()),
        }
    }

    /// Stops a background removal between two steps and waits for it.
    pub(super) fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(remover) = self.remover.lock().take() {
            self.finish_removal(remover);
        }
    }
}

/// Removes `paths` (old files of the journal in `dir`) in steps, then syncs `dir`.
fn remove_files(dir: &std::path::Path, paths: &[PathBuf], stop: Option<&AtomicBool>) -> Result<()> {
    for path in paths {
        if !fs::remove_file_in_steps(path, fs::FREE_STEP, fs::FREE_PAUSE, stop)? {
            break;
        }
    }
    fs::sync_dir(dir)
}
