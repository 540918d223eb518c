//! Moving entry logs between tiers (Alluxio's tier management, applied to entry logs): when a
//! tier's used bytes pass its high watermark, its coldest sealed logs (by the annotator) move to
//! the next tier, into the directory the allocator chooses there, until its usage is below its
//! low watermark; with `tieredStoragePromoteOnRead` a log below the top tier that was read
//! moves up one tier when that tier stays below its low watermark with it. Moves are paced to
//! `tieredStorageMoveRateByBytes`. The active log, logs whose seal failed and logs a garbage
//! collection or compaction holds are never moved. It decides which logs move and where; when
//! a pass runs is the lifecycle's scheduler's to decide.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::error::Result;
use crate::storage::dirs::DirState;
use crate::storage::entrylog::{log_name, pace_to, EntryLogger};
use crate::storage::stats::StorageStats;

/// What one pass of the mover did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MoveReport {
    pub demoted: u64,
    pub promoted: u64,
    pub bytes: u64,
}

/// Used and total bytes of tier `tier`.
fn tier_usage(states: &[DirState], tier: usize) -> (u64, u64) {
    states
        .iter()
        .filter(|s| s.tier == tier)
        .fold((0, 0), |(used, cap), s| {
            (
                used + s.usage.total_bytes.saturating_sub(s.usage.free_bytes),
                cap + s.usage.total_bytes,
            )
        })
}

/// What a tier pass works with.
pub(super) struct Mover<'a> {
    pub(super) entrylog: &'a EntryLogger,
    pub(super) stats: &'a StorageStats,
    /// The storage is closing: a move under way is abandoned, no other starts.
    pub(super) stop: &'a dyn Fn() -> bool,
}

impl Mover<'_> {
    /// One pass: demotion of every tier past its high watermark (top tier first, so a tier
    /// filled by demotion from above demotes in the same pass), then promotion of logs read
    /// since the last pass.
    pub(super) fn pass(&self) -> Result<MoveReport> {
        let dirs = self.entrylog.dirs();
        let mut report = MoveReport::default();
        if dirs.tier_count() < 2 {
            return Ok(report);
        }
        for tier in 0..dirs.tier_count() - 1 {
            if !self.demote(tier, &mut report)? {
                return Ok(report);
            }
        }
        if dirs.policy().promote_on_read {
            self.promote(&mut report)?;
        }
        Ok(report)
    }

    /// Moves tier `tier`'s coldest logs down while it is past its high watermark, until it is
    /// below its low one. Returns false if the storage is closing.
    fn demote(&self, tier: usize, report: &mut MoveReport) -> Result<bool> {
        let el = self.entrylog;
        let dirs = el.dirs();
        let states = dirs.states()?;
        let (mut used, cap) = tier_usage(&states, tier);
        let (high, low) = dirs.policy().watermarks(tier);
        if cap == 0 || (used as f64) <= high * cap as f64 {
            return Ok(true);
        }
        let target = (low * cap as f64) as u64;
        let candidates = {
            let logs = el.placed_logs();
            let in_tier: Vec<_> = logs
                .iter()
                .filter(|(_, d, _)| dirs.tier_of(*d) == tier)
                .map(|(id, _, meta)| (*id, &meta.heat))
                .collect();
            dirs.annotator().coldest_first(in_tier)
        };
        log::info!(
            "tier {tier}: {used} of {cap} bytes used (high watermark {high}); demoting its \
             coldest entry logs to below {target} bytes"
        );
        for id in candidates {
            if used <= target || (self.stop)() {
                break;
            }
            match self.move_one(id, tier, tier + 1)? {
                Moved::Done(bytes) => {
                    used = used.saturating_sub(bytes);
                    report.demoted += 1;
                    report.bytes += bytes;
                    self.stats.tier_demotions.inc();
                    self.stats.tier_moved_bytes.add(bytes);
                }
                Moved::Skipped => {}
                Moved::NoRoom => {
                    log::warn!(
                        "tier {tier} is past its high watermark but tier {} has no room for \
                         its entry logs",
                        tier + 1
                    );
                    break;
                }
                Moved::Stopped => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Moves the logs read below the top tier up one tier, where that tier stays at or below
    /// its low watermark with them (`tieredStoragePromoteOnRead`).
    fn promote(&self, report: &mut MoveReport) -> Result<()> {
        let el = self.entrylog;
        let dirs = el.dirs();
        for (id, dir, meta) in el.placed_logs() {
            let tier = dirs.tier_of(dir);
            if tier == 0 || !meta.wants_promotion.swap(false, Ordering::Relaxed) {
                continue;
            }
            let up = tier - 1;
            let states = dirs.states()?;
            let (used, cap) = tier_usage(&states, up);
            let (_, low) = dirs.policy().watermarks(up);
            if (used + el.log_size(id)) as f64 > low * cap as f64 {
                continue;
            }
            match self.move_one(id, tier, up)? {
                Moved::Done(bytes) => {
                    report.promoted += 1;
                    report.bytes += bytes;
                    self.stats.tier_promotions.inc();
                    self.stats.tier_moved_bytes.add(bytes);
                }
                Moved::Stopped => return Ok(()),
                Moved::Skipped | Moved::NoRoom => {}
            }
        }
        Ok(())
    }

    /// Moves log `id` from tier `from` to the directory of tier `to` the allocator chooses.
    fn move_one(&self, id: u32, from: usize, to: usize) -> Result<Moved> {
        let el = self.entrylog;
        let dirs = el.dirs();
        let Some(_pin) = el.pin(id) else {
            return Ok(Moved::Skipped);
        };
        // Still there (a collection may have removed it) and sealed?
        let Some(dir) = el
            .placed_logs()
            .into_iter()
            .find(|(i, _, _)| *i == id)
            .map(|(_, d, _)| d)
        else {
            return Ok(Moved::Skipped);
        };
        if dirs.tier_of(dir) != from || el.is_unsealed(id) {
            return Ok(Moved::Skipped);
        }
        let size = el.log_size(id);
        let states = dirs.states()?;
        let Some(dst) = dirs.choose_in_tier(&states, to, size) else {
            return Ok(Moved::NoRoom);
        };
        let rate = dirs.policy().move_rate_bytes;
        let started = Instant::now();
        let mut pace = |bytes: u64| pace_to(rate, started, bytes, self.stop);
        match el.move_log(id, dst, &mut pace)? {
            Some(bytes) => {
                log::info!(
                    "entry log {} moved from tier {from} to tier {to} ({bytes} bytes, {:.0} ms)",
                    log_name(id),
                    started.elapsed().as_secs_f64() * 1000.0
                );
                Ok(Moved::Done(bytes))
            }
            None if (self.stop)() => Ok(Moved::Stopped),
            None => Ok(Moved::Skipped),
        }
    }
}

enum Moved {
    Done(u64),
    Skipped,
    NoRoom,
    Stopped,
}
