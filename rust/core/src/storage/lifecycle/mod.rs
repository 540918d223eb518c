//! The disk's lifecycle: what happens to entry logs after they are written. Entry-log garbage
//! collection (`gc`), compaction (`compaction`) and moves between tiers (`tiering`), with the
//! rules that say when each runs: `gcWaitTime`, the minor and major compaction intervals, the
//! disk pressure the bookie's disk checker reports (`isForceGCAllowWhenNoSpace`) and the tier
//! pass interval. It decides which logs are removed, rewritten or moved; it never writes an
//! entry a client sent (the write path does) and never decides which ledgers are gone (the
//! bookie's metadata does).

mod compaction;
mod gc;
#[cfg(test)]
mod tests;
mod tiering;

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

pub use compaction::CompactionReport;
pub use gc::GcReport;
pub use tiering::MoveReport;

use super::checkpoint::Checkpointer;
use super::stats::StorageStats;
use super::stores::Stores;
use crate::config::StorageConfig;
use crate::error::Result;
use compaction::Compactor;
use tiering::Mover;

/// How often the mover looks at the tiers' usage when not asked.
const PASS_INTERVAL: Duration = Duration::from_millis(500);

/// How full the ledger directories are, for the garbage collector's choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DiskPressure {
    Normal = 0,
    /// Some ledger directory is past `diskUsageWarnThreshold`.
    AlmostFull = 1,
    /// Some ledger directory is past `diskUsageThreshold`.
    Full = 2,
}

impl DiskPressure {
    fn from_u8(v: u8) -> DiskPressure {
        match v {
            0 => DiskPressure::Normal,
            1 => DiskPressure::AlmostFull,
            _ => DiskPressure::Full,
        }
    }
}

/// The keys the lifecycle follows.
#[derive(Debug, Clone)]
pub(super) struct LifecycleConfig {
    gc_wait: Duration,
    force_gc_when_no_space: bool,
    minor_compaction_threshold: f64,
    minor_compaction_interval: Duration,
    major_compaction_threshold: f64,
    major_compaction_interval: Duration,
    compaction_rate_bytes: u64,
}

impl LifecycleConfig {
    pub(super) fn of(cfg: &StorageConfig) -> LifecycleConfig {
        LifecycleConfig {
            gc_wait: cfg.gc_wait,
            force_gc_when_no_space: cfg.force_gc_when_no_space,
            minor_compaction_threshold: cfg.minor_compaction_threshold,
            minor_compaction_interval: cfg.minor_compaction_interval,
            major_compaction_threshold: cfg.major_compaction_threshold,
            major_compaction_interval: cfg.major_compaction_interval,
            compaction_rate_bytes: cfg.compaction_rate_bytes,
        }
    }
}

/// When the timed collections ran last (the checkpoint thread's timers).
pub(super) struct Timers {
    last_gc: Instant,
    last_minor: Instant,
    last_major: Instant,
}

impl Timers {
    pub(super) fn new() -> Timers {
        let now = Instant::now();
        Timers {
            last_gc: now,
            last_minor: now,
            last_major: now,
        }
    }
}

/// The lifecycle of one storage's entry logs.
pub(super) struct Lifecycle {
    stores: Arc<Stores>,
    checkpointer: Arc<Checkpointer>,
    stats: Arc<StorageStats>,
    cfg: LifecycleConfig,
    /// One collection (garbage collection or compaction) at a time.
    collecting: Mutex<()>,
    /// One tier pass at a time (the thread's or `move_entry_logs`).
    moving: Mutex<()>,
    /// How full the ledger directories are, as the bookie's disk checker last said:
    /// [`DiskPressure`] as a number.
    pressure: AtomicU8,
    /// The storage is closing: running jobs end early, no other starts.
    stopping: AtomicBool,
    /// The tier mover was asked for a pass.
    mover_wake: Mutex<bool>,
    mover_signal: Condvar,
}

impl Lifecycle {
    pub(super) fn new(
        stores: Arc<Stores>,
        checkpointer: Arc<Checkpointer>,
        stats: Arc<StorageStats>,
        cfg: LifecycleConfig,
    ) -> Lifecycle {
        Lifecycle {
            stores,
            checkpointer,
            stats,
            cfg,
            collecting: Mutex::new(()),
            moving: Mutex::new(()),
            pressure: AtomicU8::new(DiskPressure::Normal as u8),
            stopping: AtomicBool::new(false),
            mover_wake: Mutex::new(false),
            mover_signal: Condvar::new(),
        }
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Removes the entry logs none of whose ledgers exists any more.
    pub(super) fn gc_entry_logs(&self) -> Result<GcReport> {
        let _one_at_a_time = self.collecting.lock();
        gc::remove_dead_logs(&self.stores, &self.checkpointer, &self.stats)
    }

    /// Compacts the entry logs whose live share of bytes is at most `threshold`.
    pub(super) fn compact(&self, threshold: f64) -> Result<CompactionReport> {
        self.compact_between(threshold, &mut || {})
    }

    fn compact_between(
        &self,
        threshold: f64,
        between: &mut dyn FnMut(),
    ) -> Result<CompactionReport> {
        let _one_at_a_time = self.collecting.lock();
        let compactor = Compactor {
            stores: &self.stores,
            checkpointer: &self.checkpointer,
            stats: &self.stats,
            rate_bytes: self.cfg.compaction_rate_bytes,
        };
        compactor.compact(threshold, &|| self.stopping(), between)
    }

    /// One tier pass now.
    pub(super) fn move_entry_logs(&self) -> Result<MoveReport> {
        if self.stores.entrylog.dirs().tier_count() < 2 {
            return Ok(MoveReport::default());
        }
        let _one_pass_at_a_time = self.moving.lock();
        let mover = Mover {
            entrylog: &self.stores.entrylog,
            stats: &self.stats,
            stop: &|| self.stopping(),
        };
        mover.pass()
    }

    /// Records how full the ledger directories are (see `LedgerStorage::set_disk_pressure`).
    pub(super) fn set_disk_pressure(&self, pressure: DiskPressure) {
        let old = self.pressure.swap(pressure as u8, Ordering::AcqRel);
        if old != pressure as u8 {
            log::info!(
                "ledger directories {pressure:?}: compaction follows \
                 (isForceGCAllowWhenNoSpace={})",
                self.cfg.force_gc_when_no_space
            );
        }
    }

    fn pressure(&self) -> DiskPressure {
        DiskPressure::from_u8(self.pressure.load(Ordering::Acquire))
    }

    /// Whether a tier mover thread has work (two tiers or more).
    pub(super) fn has_tiers(&self) -> bool {
        self.stores.entrylog.dirs().tier_count() > 1
    }

    /// Ends the running jobs early and the mover thread.
    pub(super) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        *self.mover_wake.lock() = true;
        self.mover_signal.notify_all();
    }

    /// The mover thread: a pass every [`PASS_INTERVAL`] or when woken, until the storage
    /// closes.
    pub(super) fn run_mover(&self) {
        loop {
            {
                let mut asked = self.mover_wake.lock();
                if !*asked && !self.stopping() {
                    self.mover_signal.wait_for(&mut asked, PASS_INTERVAL);
                }
                *asked = false;
            }
            if self.stopping() {
                break;
            }
            if let Err(e) = self.move_entry_logs() {
                log::error!("moving entry logs between tiers failed: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// After a timed checkpoint: every gcWaitTime removal of entry logs whose ledgers are
    /// all deleted, and the compactions due.
    pub(super) fn after_checkpoint(&self, timers: &mut Timers) -> Result<()> {
        let cfg = &self.cfg;
        let gc = &cfg.gc_wait;
        if !gc.is_zero() && timers.last_gc.elapsed() >= *gc {
            timers.last_gc = Instant::now();
            self.gc_entry_logs()?;
        }
        let pressure = self.pressure();
        let forced = cfg.force_gc_when_no_space && pressure != DiskPressure::Normal;
        if forced {
            // Space is short: everything deleted goes now (BookKeeper's forced GC).
            timers.last_gc = Instant::now();
            self.gc_entry_logs()?;
        }
        for (interval, threshold, last, suspended) in [
            (
                cfg.major_compaction_interval,
                cfg.major_compaction_threshold,
                &mut timers.last_major,
                pressure != DiskPressure::Normal,
            ),
            (
                cfg.minor_compaction_interval,
                cfg.minor_compaction_threshold,
                &mut timers.last_minor,
                pressure == DiskPressure::Full,
            ),
        ] {
            let due = !interval.is_zero() && last.elapsed() >= interval;
            if (forced && threshold > 0.0) || (due && !suspended) {
                *last = Instant::now();
                self.compact(threshold)?;
            }
        }
        Ok(())
    }
}
