//! Moving entry logs between tiers (Alluxio's tier management, applied to entry logs): when a
//! tier's used bytes pass its high watermark, its coldest sealed logs (by the annotator) move to
//! the next tier, into the directory the allocator chooses there, until its usage is below its
//! low watermark; with `tieredStoragePromoteOnRead` a log below the top tier that was read
//! moves up one tier when that tier stays below its low watermark with it. Moves are paced to
//! `tieredStorageMoveRateByBytes`. The active log, logs whose seal failed and logs a garbage
//! collection or compaction holds are never moved. One thread (`pybkx-tier-mover`) runs the
//! passes: every half second and when asked.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::dirs::DirState;
use super::entrylog::{log_name, pace_to};
use super::Inner;
use crate::error::Result;

/// How often the mover looks at the tiers' usage when not asked.
const PASS_INTERVAL: Duration = Duration::from_millis(500);

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

impl Inner {
    /// The mover thread: a pass every [`PASS_INTERVAL`] or when woken, until the storage
    /// closes.
    pub(super) fn run_mover(&self) {
        loop {
            {
                let mut asked = self.mover_wake.lock();
                if !*asked && !self.closed.load(Ordering::Acquire) {
                    self.mover_signal.wait_for(&mut asked, PASS_INTERVAL);
                }
                *asked = false;
            }
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            if let Err(e) = self.move_pass() {
                log::error!("moving entry logs between tiers failed: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// Wakes the mover for a pass now.
    pub(super) fn wake_mover(&self) {
        *self.mover_wake.lock() = true;
        self.mover_signal.notify_all();
    }

    /// One pass: demotion of every tier past its high watermark (top tier first, so a tier
    /// filled by demotion from above demotes in the same pass), then promotion of logs read
    /// since the last pass.
    pub(super) fn move_pass(&self) -> Result<MoveReport> {
        let el = &self.shared.entrylog;
        let dirs = el.dirs();
        let tiers = dirs.tier_count();
        let mut report = MoveReport::default();
        if tiers < 2 {
            return Ok(report);
        }
        let _one_pass_at_a_time = self.mover_pass.lock();
        let policy = dirs.policy().clone();
        for tier in 0..tiers - 1 {
            let states = dirs.states()?;
            let (mut used, cap) = tier_usage(&states, tier);
            let (high, low) = policy.watermarks(tier);
            if cap == 0 || (used as f64) <= high * cap as f64 {
                continue;
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
                if used <= target || self.closed.load(Ordering::Acquire) {
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
                    Moved::Stopped => return Ok(report),
                }
            }
        }
        if policy.promote_on_read {
            for (id, dir, meta) in el.placed_logs() {
                let tier = dirs.tier_of(dir);
                if tier == 0 || !meta.wants_promotion.swap(false, Ordering::Relaxed) {
                    continue;
                }
                let up = tier - 1;
                let states = dirs.states()?;
                let (used, cap) = tier_usage(&states, up);
                let (_, low) = policy.watermarks(up);
                let size = el.log_size(id);
                if (used + size) as f64 > low * cap as f64 {
                    continue;
                }
                match self.move_one(id, tier, up)? {
                    Moved::Done(bytes) => {
                        report.promoted += 1;
                        report.bytes += bytes;
                        self.stats.tier_promotions.inc();
                        self.stats.tier_moved_bytes.add(bytes);
                    }
                    Moved::Stopped => return Ok(report),
                    Moved::Skipped | Moved::NoRoom => {}
                }
            }
        }
        Ok(report)
    }

    /// Moves log `id` from tier `from` to the directory of tier `to` the allocator chooses.
    fn move_one(&self, id: u32, from: usize, to: usize) -> Result<Moved> {
        let el = &self.shared.entrylog;
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
        let stop = || self.closed.load(Ordering::Acquire);
        let mut pace = |bytes: u64| pace_to(rate, started, bytes, &stop);
        match el.move_log(id, dst, &mut pace)? {
            Some(bytes) => {
                log::info!(
                    "entry log {} moved from tier {from} to tier {to} ({bytes} bytes, {:.0} ms)",
                    log_name(id),
                    started.elapsed().as_secs_f64() * 1000.0
                );
                Ok(Moved::Done(bytes))
            }
            None if stop() => Ok(Moved::Stopped),
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

#[cfg(test)]
mod tests {
    //! The mover over a real two-tier storage whose top tier has a small quota.

    use std::path::Path;

    use bytes::Bytes;

    use super::super::{LedgerStorage, LAST_ENTRY};
    use crate::config::{DirsConfig, StorageConfig};
    use crate::error::StorageError;

    const QUOTA: u64 = 1 << 20;

    fn config(dir: &Path, promote: bool) -> StorageConfig {
        StorageConfig {
            ledger_dirs: vec![dir.join("ssd"), dir.join("hdd")],
            index_dirs: vec![dir.join("index")],
            log_size_limit: 64 << 10,
            write_cache_bytes: 1 << 20,
            // The expected placements count logs of page-cache writes (direct I/O pads each
            // log's header and flushes to blocks, which moves where the top tier fills up);
            // moves of direct-written logs are tested in `entrylog::moves`.
            entry_log_direct_io: false,
            dirs: DirsConfig {
                tiers: vec![0, 1],
                quotas: vec![Some(QUOTA), None],
                allocator: "GreedyAllocator".into(),
                promote_on_read: promote,
                ..Default::default()
            },
            ..crate::testing::storage_config(dir)
        }
    }

    fn add(s: &LedgerStorage, l: u64, e: u64) {
        LedgerStorage::wait_for(|d| s.add_entry(l, e, b"k", Bytes::from(payload(l, e)), false, d))
            .unwrap();
    }

    fn payload(l: u64, e: u64) -> Vec<u8> {
        vec![(l * 7 + e) as u8; 3000 + (e as usize % 5) * 100]
    }

    fn tier_bytes(dir: &Path) -> u64 {
        std::fs::read_dir(dir.join("current"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    }

    /// Writes ledgers 1..=n, 100 entries each, one after the other, checkpointing after each.
    fn write_ledgers(s: &LedgerStorage, ledgers: std::ops::RangeInclusive<u64>) {
        for l in ledgers {
            for e in 0..100 {
                add(s, l, e);
            }
            s.checkpoint().unwrap();
            s.move_entry_logs().unwrap();
        }
    }

    fn tier_of_ledger(s: &LedgerStorage, dir: &Path, ledger: u64) -> Vec<bool> {
        let maps = s.entry_log_ledgers().unwrap();
        let homes = s.entry_log_dirs();
        maps.iter()
            .filter(|(_, m)| m.contains_key(&ledger))
            .map(|(id, _)| homes[id].starts_with(dir.join("ssd")))
            .collect()
    }

    #[test]
    fn demotion_keeps_the_top_tier_under_its_quota_with_the_hot_logs_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = LedgerStorage::open(config(dir.path(), false)).unwrap();
        // About 3 MiB: three times the top tier's quota.
        write_ledgers(&s, 1..=10);
        assert!(tier_bytes(&dir.path().join("ssd")) <= QUOTA);
        assert!(s.inner.stats.tier_demotions.get() > 0);
        assert!(s.inner.stats.tier_moved_bytes.get() > QUOTA / 4);
        // The first ledger's logs went down, the last one's are on top.
        assert!(tier_of_ledger(&s, dir.path(), 1).iter().all(|top| !top));
        assert!(tier_of_ledger(&s, dir.path(), 10).iter().all(|top| *top));
        for l in 1..=10 {
            for e in 0..100 {
                assert_eq!(&s.read_entry(l, e).unwrap()[..], &payload(l, e)[..]);
            }
        }
        // Reopened: every log is found where it went.
        drop(s);
        let s = LedgerStorage::open(config(dir.path(), false)).unwrap();
        for l in 1..=10 {
            assert_eq!(
                &s.read_entry(l, LAST_ENTRY).unwrap()[..],
                &payload(l, 99)[..]
            );
        }
    }

    #[test]
    fn a_demoted_log_read_again_is_promoted_when_the_top_tier_has_room() {
        let dir = tempfile::tempdir().unwrap();
        let s = LedgerStorage::open(config(dir.path(), true)).unwrap();
        write_ledgers(&s, 1..=10);
        assert!(tier_of_ledger(&s, dir.path(), 1).iter().all(|top| !top));
        // Make room on top: the newest ledgers go.
        for l in 6..=10 {
            LedgerStorage::wait_for(|d| s.delete_ledger(l, d)).unwrap();
        }
        s.checkpoint().unwrap();
        s.gc_entry_logs().unwrap();
        for e in 0..100 {
            s.read_entry(1, e).unwrap();
        }
        let report = s.move_entry_logs().unwrap();
        assert!(report.promoted > 0, "{report:?}");
        assert!(tier_of_ledger(&s, dir.path(), 1).iter().any(|top| *top));
        for e in 0..100 {
            assert_eq!(&s.read_entry(1, e).unwrap()[..], &payload(1, e)[..]);
        }
        assert!(matches!(s.read_entry(7, 0), Err(StorageError::NoLedger(7))));
    }
}
