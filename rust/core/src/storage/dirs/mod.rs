//! A bookie's ledger directories: which directory takes each new entry log (an [`Allocator`]
//! over the directories' current disk usage), and where an existing log lives. It owns the
//! directory list, its usage and which directories the disk checker found full (those take no
//! new entry log while another can); it never opens or writes a log itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::error::{Result, StorageError};
use crate::fs::{self, DiskUsage};

/// One ledger directory as an allocator sees it.
#[derive(Debug, Clone)]
pub struct DirState {
    /// The directory's `current/`, where entry logs live.
    pub path: PathBuf,
    pub usage: DiskUsage,
}

/// Chooses the directory of a new entry log. Called only at rollover, never per entry.
pub trait Allocator: Send {
    /// The index into `dirs` of the directory to use, or None if none can take a log.
    fn choose(&mut self, dirs: &[DirState]) -> Option<usize>;

    /// The name operators configure it by.
    fn name(&self) -> &'static str;
}

/// Cycles through the directories in order: spreads data and I/O across disks evenly.
#[derive(Debug, Default)]
pub struct RoundRobinAllocator {
    next: usize,
}

impl Allocator for RoundRobinAllocator {
    fn choose(&mut self, dirs: &[DirState]) -> Option<usize> {
        if dirs.is_empty() {
            return None;
        }
        let i = self.next % dirs.len();
        self.next = self.next.wrapping_add(1);
        Some(i)
    }

    fn name(&self) -> &'static str {
        "RoundRobinAllocator"
    }
}

/// The ledger directories of one bookie.
pub struct LedgerDirs {
    dirs: Vec<PathBuf>,
    /// Per directory: the disk checker found it past `diskUsageThreshold`.
    full: Vec<AtomicBool>,
    allocator: Mutex<Box<dyn Allocator>>,
}

impl LedgerDirs {
    /// `dirs` are `current/` directories, in configuration order.
    pub fn new(dirs: Vec<PathBuf>, allocator: Box<dyn Allocator>) -> Self {
        LedgerDirs {
            full: dirs.iter().map(|_| AtomicBool::new(false)).collect(),
            dirs,
            allocator: Mutex::new(allocator),
        }
    }

    /// Records which directories are full (one flag per directory, in configuration order;
    /// missing flags mean not full). Set by the bookie's disk checker.
    pub fn set_full(&self, full: &[bool]) {
        for (i, flag) in self.full.iter().enumerate() {
            flag.store(full.get(i).copied().unwrap_or(false), Ordering::Relaxed);
        }
    }

    /// Per directory: whether the disk checker found it full.
    pub fn full_flags(&self) -> Vec<bool> {
        self.full
            .iter()
            .map(|f| f.load(Ordering::Relaxed))
            .collect()
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Every directory with its disk usage now.
    pub fn states(&self) -> Result<Vec<DirState>> {
        self.dirs
            .iter()
            .map(|d| {
                Ok(DirState {
                    path: d.clone(),
                    usage: fs::disk_usage(d)?,
                })
            })
            .collect()
    }

    /// The directory the next entry log goes to: the allocator chooses among the directories
    /// not marked full. When every one is full (the bookie is then read-only, and only
    /// high-priority or recovery adds still come), the one with the most free bytes takes it.
    pub fn choose_for_new_log(&self) -> Result<PathBuf> {
        let states = self.states()?;
        let full = self.full_flags();
        let mut writable = Vec::with_capacity(states.len());
        let mut filled = Vec::new();
        for (i, state) in states.into_iter().enumerate() {
            if full.get(i).copied().unwrap_or(false) {
                filled.push(state);
            } else {
                writable.push(state);
            }
        }
        if writable.is_empty() {
            let best = filled
                .into_iter()
                .max_by_key(|s| s.usage.free_bytes)
                .ok_or_else(|| StorageError::InvalidArgument("no ledger directory".into()))?;
            log::warn!(
                "every ledger directory is full; a new entry log goes to {} ({} bytes free)",
                best.path.display(),
                best.usage.free_bytes
            );
            return Ok(best.path);
        }
        let mut allocator = self.allocator.lock();
        let chosen = allocator.choose(&writable).ok_or_else(|| {
            StorageError::InvalidArgument(format!(
                "{} found no ledger directory that can take a new entry log",
                allocator.name()
            ))
        })?;
        writable
            .into_iter()
            .nth(chosen)
            .map(|s| s.path)
            .ok_or_else(|| StorageError::Corruption("allocator chose a missing directory".into()))
    }

    /// The directory holding `file_name`, if any.
    pub fn locate(&self, file_name: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|d| d.join(file_name).exists())
            .map(|d| d.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_cycles_through_the_directories() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = LedgerDirs::new(
            vec![a.path().into(), b.path().into()],
            Box::<RoundRobinAllocator>::default(),
        );
        let picks: Vec<PathBuf> = (0..4).map(|_| dirs.choose_for_new_log().unwrap()).collect();
        assert_eq!(picks[0], a.path());
        assert_eq!(picks[1], b.path());
        assert_eq!(picks[2], a.path());
        std::fs::write(b.path().join("1.log"), b"x").unwrap();
        assert_eq!(dirs.locate("1.log"), Some(b.path()));
        assert_eq!(dirs.locate("2.log"), None);
    }

    #[test]
    fn full_directories_take_no_new_log_while_another_can() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = LedgerDirs::new(
            vec![a.path().into(), b.path().into()],
            Box::<RoundRobinAllocator>::default(),
        );
        dirs.set_full(&[true, false]);
        for _ in 0..4 {
            assert_eq!(dirs.choose_for_new_log().unwrap(), b.path());
        }
        // All full: still a directory (the bookie is read-only; recovery adds may come).
        dirs.set_full(&[true, true]);
        let p = dirs.choose_for_new_log().unwrap();
        assert!(p == a.path() || p == b.path());
        dirs.set_full(&[]);
        assert_eq!(dirs.full_flags(), vec![false, false]);
    }
}
