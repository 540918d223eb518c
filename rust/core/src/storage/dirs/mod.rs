//! A bookie's ledger directories: which directory takes each new entry log (an [`Allocator`]
//! and a [`Reviewer`] over the directories' tiers and available space), and where an existing
//! log lives. It owns the directory list, their tiers and quotas, their usage and which ones
//! the disk checker found full (those take no new entry log while another can); it never opens
//! or writes a log itself.

pub mod allocator;
pub mod annotator;
pub mod reviewer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::config::DirsConfig;
use crate::error::{IoContext, Result, StorageError};
use crate::fs::{self, DiskUsage};
pub use allocator::{Allocator, GreedyAllocator, MaxFreeAllocator, RoundRobinAllocator};
pub use annotator::{Annotator, Heat};
pub use reviewer::{AcceptingReviewer, ProbabilisticBufferReviewer, Reviewer};

/// One ledger directory as an allocator sees it.
#[derive(Debug, Clone)]
pub struct DirState {
    /// The directory's `current/`, where entry logs live.
    pub path: PathBuf,
    /// 0 is the top (fastest) tier.
    pub tier: usize,
    /// Capacity and available bytes: the file system's, or within the directory's quota.
    pub usage: DiskUsage,
}

/// What a directory holds, for the disk checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirKind {
    Ledger,
    Index,
    Journal,
}

impl DirKind {
    pub fn name(self) -> &'static str {
        match self {
            DirKind::Ledger => "ledger",
            DirKind::Index => "index",
            DirKind::Journal => "journal",
        }
    }
}

/// One directory's file-system usage, as [`directory_usage`] reports it.
#[derive(Debug, Clone)]
pub struct DirUsage {
    pub kind: DirKind,
    pub path: PathBuf,
    pub usage: DiskUsage,
    /// A ledger directory marked full by the disk checker.
    pub full: bool,
}

/// One configured ledger directory.
#[derive(Debug, Clone)]
struct Dir {
    path: PathBuf,
    tier: usize,
    /// Bytes this directory may hold (`tieredStorageLevelNDirsQuota`); None: the file system's.
    quota: Option<u64>,
}

/// The ledger directories of one bookie.
pub struct LedgerDirs {
    dirs: Vec<Dir>,
    /// Per directory: the disk checker found it past `diskUsageThreshold`.
    full: Vec<AtomicBool>,
    allocator: Mutex<Box<dyn Allocator>>,
    reviewer: Mutex<Box<dyn Reviewer>>,
    /// Bytes a new entry log is expected to take (`logSizeLimit`).
    need: u64,
    /// Ranks entry logs hot to cold for moves between tiers.
    annotator: Annotator,
    /// When and how logs move between tiers.
    policy: TierPolicy,
}

/// When entry logs move between tiers: per tier, demotion starts once its used bytes pass
/// `high` of its capacity and stops below `low`; promotion on read; the pace of the copies.
#[derive(Debug, Clone, Default)]
pub struct TierPolicy {
    /// Per tier: (high, low) watermarks as fractions of the tier's capacity.
    pub watermarks: Vec<(f64, f64)>,
    pub promote_on_read: bool,
    /// Bytes per second a move copies; 0: unpaced.
    pub move_rate_bytes: u64,
}

/// Default watermarks of a tier (`tieredStorageLevel<N>HighWatermark`, `...LowWatermark`).
pub const DEFAULT_HIGH_WATERMARK: f64 = 0.95;
pub const DEFAULT_LOW_WATERMARK: f64 = 0.7;

impl TierPolicy {
    /// Tier `tier`'s (high, low) watermarks.
    pub fn watermarks(&self, tier: usize) -> (f64, f64) {
        self.watermarks
            .get(tier)
            .copied()
            .unwrap_or((DEFAULT_HIGH_WATERMARK, DEFAULT_LOW_WATERMARK))
    }
}

impl LedgerDirs {
    /// One tier of `dirs` (`current/` directories, in configuration order), no quotas, no
    /// reviewer, any size fits.
    pub fn new(dirs: Vec<PathBuf>, allocator: Box<dyn Allocator>) -> Self {
        let dirs = dirs
            .into_iter()
            .map(|path| Dir {
                path,
                tier: 0,
                quota: None,
            })
            .collect();
        Self::build(
            dirs,
            allocator,
            Box::new(AcceptingReviewer),
            0,
            Annotator::new(annotator::Scheme::Lru),
            TierPolicy::default(),
        )
    }

    /// The directories `dirs` (`current/` directories, in configuration order) with the tiers,
    /// quotas and policies of `cfg`; a new log is expected to take `need` bytes. Raises
    /// InvalidArgument for an unknown allocator or reviewer.
    pub fn configured(dirs: Vec<PathBuf>, cfg: &DirsConfig, need: u64) -> Result<Self> {
        let allocator = allocator::by_name(&cfg.allocator).ok_or_else(|| {
            StorageError::InvalidArgument(format!(
                "entryLogAllocatorClass {:?} is not one of MaxFreeAllocator, GreedyAllocator, \
                 RoundRobinAllocator",
                cfg.allocator
            ))
        })?;
        let reviewer: Box<dyn Reviewer> =
            match cfg.reviewer.rsplit('.').next().unwrap_or(&cfg.reviewer) {
                "AcceptingReviewer" => Box::new(AcceptingReviewer),
                "ProbabilisticBufferReviewer" => Box::new(ProbabilisticBufferReviewer::new(
                    cfg.reviewer_soft_limit,
                    cfg.reviewer_hard_limit,
                )),
                other => {
                    return Err(StorageError::InvalidArgument(format!(
                        "entryLogReviewerClass {other:?} is not one of \
                         ProbabilisticBufferReviewer, AcceptingReviewer"
                    )))
                }
            };
        let annotator = Annotator::by_name(&cfg.annotator, cfg.lrfu_step, cfg.lrfu_attenuation)?;
        let levels = cfg.high_watermarks.len().max(cfg.low_watermarks.len());
        let mut watermarks = Vec::with_capacity(levels);
        for level in 0..levels {
            let high = cfg
                .high_watermarks
                .get(level)
                .copied()
                .unwrap_or(DEFAULT_HIGH_WATERMARK);
            let low = cfg
                .low_watermarks
                .get(level)
                .copied()
                .unwrap_or(DEFAULT_LOW_WATERMARK);
            if !(0.0..=1.0).contains(&high) || !(0.0..=1.0).contains(&low) || low >= high {
                return Err(StorageError::InvalidArgument(format!(
                    "tier {level}: the watermarks must satisfy 0 <= low < high <= 1, got \
                     high {high} and low {low}"
                )));
            }
            watermarks.push((high, low));
        }
        let policy = TierPolicy {
            watermarks,
            promote_on_read: cfg.promote_on_read,
            move_rate_bytes: cfg.move_rate_bytes,
        };
        let dirs = dirs
            .into_iter()
            .enumerate()
            .map(|(i, path)| Dir {
                path,
                tier: cfg.tiers.get(i).copied().unwrap_or(0),
                quota: cfg.quotas.get(i).copied().flatten(),
            })
            .collect();
        Ok(Self::build(
            dirs, allocator, reviewer, need, annotator, policy,
        ))
    }

    fn build(
        dirs: Vec<Dir>,
        allocator: Box<dyn Allocator>,
        reviewer: Box<dyn Reviewer>,
        need: u64,
        annotator: Annotator,
        policy: TierPolicy,
    ) -> Self {
        LedgerDirs {
            full: dirs.iter().map(|_| AtomicBool::new(false)).collect(),
            dirs,
            allocator: Mutex::new(allocator),
            reviewer: Mutex::new(reviewer),
            need,
            annotator,
            policy,
        }
    }

    /// The annotator ranking the entry logs hot to cold.
    pub fn annotator(&self) -> &Annotator {
        &self.annotator
    }

    /// When and how logs move between tiers.
    pub fn policy(&self) -> &TierPolicy {
        &self.policy
    }

    /// The number of tiers (1 + the lowest tier's level).
    pub fn tier_count(&self) -> usize {
        self.dirs.iter().map(|d| d.tier + 1).max().unwrap_or(0)
    }

    /// The tier of directory `dir` (an index into [`paths`](Self::paths)).
    pub fn tier_of(&self, dir: usize) -> usize {
        self.dirs.get(dir).map_or(0, |d| d.tier)
    }

    /// The directory of tier `tier` a log of `size` bytes moved there goes to: the allocator's
    /// choice (with the reviewer's veto, then without) among the tier's directories not marked
    /// full that have `size` bytes available; None if none has. `states` are [`states`]
    /// (Self::states) read now.
    pub fn choose_in_tier(&self, states: &[DirState], tier: usize, size: u64) -> Option<usize> {
        let full = self.full_flags();
        let members: Vec<usize> = (0..states.len())
            .filter(|&i| states[i].tier == tier && !full.get(i).copied().unwrap_or(false))
            .collect();
        let candidates: Vec<DirState> = members.iter().map(|&i| states[i].clone()).collect();
        let mut allocator = self.allocator.lock();
        let mut reviewer = self.reviewer.lock();
        allocator
            .choose(&candidates, size, reviewer.as_mut())
            .or_else(|| allocator.choose(&candidates, size, &mut AcceptingReviewer))
            .and_then(|k| members.get(k).copied())
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

    /// The directories' paths (`current/`), in configuration order.
    pub fn paths(&self) -> Vec<&Path> {
        self.dirs.iter().map(|d| d.path.as_path()).collect()
    }

    /// Every directory with its tier and usage now. A directory with a quota reports the quota
    /// as its capacity and, as available, what is left of it (at most the file system's free
    /// space).
    pub fn states(&self) -> Result<Vec<DirState>> {
        self.dirs
            .iter()
            .map(|d| {
                let fs_usage = fs::disk_usage(&d.path)?;
                let usage = match d.quota {
                    None => fs_usage,
                    Some(quota) => {
                        let used = dir_bytes(&d.path)?;
                        DiskUsage {
                            total_bytes: quota,
                            free_bytes: quota.saturating_sub(used).min(fs_usage.free_bytes),
                        }
                    }
                };
                Ok(DirState {
                    path: d.path.clone(),
                    tier: d.tier,
                    usage,
                })
            })
            .collect()
    }

    /// The directory the next entry log goes to: the allocator chooses among the directories
    /// not marked full, with the reviewer's veto; if the reviewer refuses every one, without
    /// it; if none has room for a whole log, the one with the most available bytes. When every
    /// directory is full (the bookie is then read-only, and only high-priority or recovery adds
    /// still come), the one with the most available bytes takes it.
    pub fn choose_for_new_log(&self) -> Result<PathBuf> {
        let states = self.states()?;
        let full = self.full_flags();
        let writable: Vec<DirState> = states
            .iter()
            .enumerate()
            .filter(|(i, _)| !full.get(*i).copied().unwrap_or(false))
            .map(|(_, s)| s.clone())
            .collect();
        let candidates = if writable.is_empty() {
            log::warn!("every ledger directory is full; a new entry log goes to the emptiest");
            &states
        } else {
            &writable
        };
        let chosen = {
            let mut allocator = self.allocator.lock();
            let mut reviewer = self.reviewer.lock();
            allocator
                .choose(candidates, self.need, reviewer.as_mut())
                .or_else(|| allocator.choose(candidates, self.need, &mut AcceptingReviewer))
        };
        let chosen = chosen.or_else(|| {
            candidates
                .iter()
                .enumerate()
                .max_by_key(|(i, s)| (s.usage.free_bytes, std::cmp::Reverse(*i)))
                .map(|(i, _)| i)
        });
        chosen
            .and_then(|i| candidates.get(i))
            .map(|s| s.path.clone())
            .ok_or_else(|| StorageError::InvalidArgument("no ledger directory".into()))
    }

    /// Total and free bytes of the directories' file systems, summed per directory (as
    /// BookKeeper's GET_BOOKIE_INFO reports them).
    pub fn summed_usage(&self) -> Result<DiskUsage> {
        let mut sum = DiskUsage {
            total_bytes: 0,
            free_bytes: 0,
        };
        for state in self.states()? {
            sum.total_bytes += state.usage.total_bytes;
            sum.free_bytes += state.usage.free_bytes;
        }
        Ok(sum)
    }

    /// The path (`current/`) of directory `i`.
    pub fn path_of(&self, i: usize) -> Option<&Path> {
        self.dirs.get(i).map(|d| d.path.as_path())
    }

    /// The index of the directory at `path`.
    pub fn index_of(&self, path: &Path) -> Option<usize> {
        self.dirs.iter().position(|d| d.path == path)
    }

    /// The directory holding `file_name`, if any.
    pub fn locate(&self, file_name: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|d| d.path.join(file_name).exists())
            .map(|d| d.path.as_path())
    }
}

/// Every directory the storage writes to, with its file system's usage now, for the disk
/// checker: the ledger directories of `ledger_dirs` first (configuration order, each with
/// whether it is marked full), then `others` (the index directory if separate, the journal
/// directories) in their order.
pub fn directory_usage(
    ledger_dirs: &LedgerDirs,
    others: &[(DirKind, PathBuf)],
) -> Result<Vec<DirUsage>> {
    let full = ledger_dirs.full_flags();
    let mut out = Vec::new();
    for (i, state) in ledger_dirs.states()?.into_iter().enumerate() {
        out.push(DirUsage {
            kind: DirKind::Ledger,
            path: state.path,
            usage: state.usage,
            full: full.get(i).copied().unwrap_or(false),
        });
    }
    for (kind, path) in others {
        out.push(DirUsage {
            kind: *kind,
            path: path.clone(),
            usage: fs::disk_usage(path)?,
            full: false,
        });
    }
    Ok(out)
}

/// Bytes of the files directly in `dir` (entry logs, index files): what counts against a quota.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0u64;
    for ent in std::fs::read_dir(dir).ctx(|| format!("listing {}", dir.display()))? {
        let Ok(ent) = ent else { continue };
        if let Ok(meta) = ent.metadata() {
            if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests;
