//! A bookie's ledger directories: which directory takes each new entry log (an [`Allocator`]
//! over the directories' current disk usage), and where an existing log lives. It owns the
//! directory list and its usage; it never opens or writes a log itself.

use std::path::{Path, PathBuf};

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
    allocator: Mutex<Box<dyn Allocator>>,
}

impl LedgerDirs {
    /// `dirs` are `current/` directories, in configuration order.
    pub fn new(dirs: Vec<PathBuf>, allocator: Box<dyn Allocator>) -> Self {
        LedgerDirs {
            dirs,
            allocator: Mutex::new(allocator),
        }
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

    /// The directory the next entry log goes to.
    pub fn choose_for_new_log(&self) -> Result<PathBuf> {
        let states = self.states()?;
        let mut allocator = self.allocator.lock();
        let chosen = allocator.choose(&states).ok_or_else(|| {
            StorageError::InvalidArgument(format!(
                "{} found no ledger directory that can take a new entry log",
                allocator.name()
            ))
        })?;
        states
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
}
