//! The disk's lifecycle: what happens to entry logs after they are written. Entry-log garbage
//! collection (`gc`), compaction (`compaction`) and moves between tiers (`tiering`), each run
//! by one scheduler thread (`pybkx-lifecycle`) when `scheduler` says it is due (`gcWaitTime`,
//! the minor and major compaction intervals, the disk pressure the bookie's disk checker
//! reports, `isForceGCAllowWhenNoSpace`, the tier pass interval), or at once when asked (the
//! storage's API: the bookie's metadata GC, an operator's forced compaction, tools). The
//! scrubber (`scrub`) reads the sealed logs back on a thread of its own (`pybkx-scrub`, every
//! `scrubIntervalSeconds` at `scrubRateBytesPerSecond`: a paced run takes hours, and must not
//! hold up collection), or at once when asked; `replica_digest` answers what a ledger's range
//! holds for the cross-replica check. It decides which logs are removed, rewritten or
//! moved; it never writes an entry a client sent (the write path does) and never decides which
//! ledgers are gone (the bookie's metadata does).

mod compaction;
mod gc;
mod reclaim;
mod replica_digest;
mod scheduler;
mod scrub;
#[cfg(test)]
mod tests;
mod tiering;

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

pub use compaction::CompactionReport;
pub use gc::GcReport;
pub use replica_digest::{replica_digest, DigestRange, ReplicaDigest, REPLICA_DIGEST_LEN};
pub use scheduler::DiskPressure;
pub use scrub::{ScrubCheck, ScrubFinding, ScrubReport, ScrubState};
pub use tiering::MoveReport;

use super::checkpoint::Checkpointer;
use super::stats::StorageStats;
use super::stores::Stores;
use crate::config::StorageConfig;
use crate::error::Result;
use compaction::Compactor;
use scheduler::{Job, Schedule};
use scrub::Scrubber;
use tiering::Mover;

/// How long the scheduler waits after a failed job before it may run another.
const FAILURE_PAUSE: Duration = Duration::from_millis(200);

/// Which compaction a collection asked for runs (at its configured threshold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compaction {
    /// `minorCompactionThreshold`.
    Minor,
    /// `majorCompactionThreshold`.
    Major,
}

/// What a collection asked for at once did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CollectReport {
    pub gc: GcReport,
    /// The compaction asked for, if any.
    pub compaction: Option<CompactionReport>,
}

/// The lifecycle of one storage's entry logs.
pub(super) struct Lifecycle {
    stores: Arc<Stores>,
    checkpointer: Arc<Checkpointer>,
    stats: Arc<StorageStats>,
    /// `minorCompactionThreshold`, `majorCompactionThreshold`.
    minor_threshold: f64,
    major_threshold: f64,
    /// `compactionRateByBytes`.
    compaction_rate_bytes: u64,
    /// `scrubRateBytesPerSecond`, `scrubIntervalSeconds` (zero: no background scrubber).
    scrub_rate_bytes: u64,
    scrub_interval: Duration,
    /// `isForceGCAllowWhenNoSpace` (for the log line a change of pressure writes).
    force_gc_when_no_space: bool,
    /// The timers; the scheduler thread's alone once it runs.
    schedule: Mutex<Schedule>,
    /// One collection (garbage collection or compaction) at a time.
    collecting: Mutex<()>,
    /// One tier pass at a time (the scheduler's or `move_entry_logs`).
    moving: Mutex<()>,
    /// How full the ledger directories are, as the bookie's disk checker last said:
    /// [`DiskPressure`] as a number.
    pressure: AtomicU8,
    /// The storage is closing: running jobs end early, no other starts.
    stopping: AtomicBool,
    /// Wakes the scheduler: the pressure changed, or the storage is closing.
    wake: Mutex<()>,
    wake_signal: Condvar,
}

impl Lifecycle {
    pub(super) fn new(
        stores: Arc<Stores>,
        checkpointer: Arc<Checkpointer>,
        stats: Arc<StorageStats>,
        cfg: &StorageConfig,
    ) -> Lifecycle {
        let tiers = stores.entrylog.dirs().tier_count();
        Lifecycle {
            stores,
            checkpointer,
            stats,
            minor_threshold: cfg.minor_compaction_threshold,
            major_threshold: cfg.major_compaction_threshold,
            compaction_rate_bytes: cfg.compaction_rate_bytes,
            scrub_rate_bytes: cfg.scrub_rate_bytes,
            scrub_interval: cfg.scrub_interval,
            force_gc_when_no_space: cfg.force_gc_when_no_space,
            schedule: Mutex::new(Schedule::new(cfg, tiers, Instant::now())),
            collecting: Mutex::new(()),
            moving: Mutex::new(()),
            pressure: AtomicU8::new(DiskPressure::Normal as u8),
            stopping: AtomicBool::new(false),
            wake: Mutex::new(()),
            wake_signal: Condvar::new(),
        }
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    fn pressure(&self) -> DiskPressure {
        DiskPressure::from_u8(self.pressure.load(Ordering::Acquire))
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

    /// Garbage collection now, then the compaction asked for: what the bookie asks for after
    /// it deleted ledgers whose metadata is gone, and what an operator's forced pass runs.
    pub(super) fn collect(&self, compaction: Option<Compaction>) -> Result<CollectReport> {
        let gc = self.gc_entry_logs()?;
        let compaction = match compaction {
            None => None,
            Some(Compaction::Minor) => Some(self.compact(self.minor_threshold)?),
            Some(Compaction::Major) => Some(self.compact(self.major_threshold)?),
        };
        Ok(CollectReport { gc, compaction })
    }

    /// A compaction that calls `between` after each log it rewrites.
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
            rate_bytes: self.compaction_rate_bytes,
        };
        compactor.compact(threshold, &|| self.stopping(), between)
    }

    /// A full disk with its space reserve given back: the logs with the most garbage are
    /// compacted within the reserve (see `reclaim`).
    fn reclaim(&self) -> Result<CompactionReport> {
        let reserve = &self.stores.reserve;
        if !reserve.is_released() {
            return Ok(CompactionReport::default());
        }
        let _one_at_a_time = self.collecting.lock();
        let compactor = Compactor {
            stores: &self.stores,
            checkpointer: &self.checkpointer,
            stats: &self.stats,
            rate_bytes: 0,
        };
        let threshold = if self.major_threshold > 0.0 {
            self.major_threshold
        } else {
            reclaim::DEFAULT_RECLAIM_THRESHOLD
        };
        reclaim::reclaim(&compactor, threshold, reserve.compaction_budget(), &|| {
            self.stopping()
        })
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

    /// One scrub run now, at `rate_bytes` per second (0: unpaced), on the caller's thread;
    /// waits for a run in progress to finish first.
    pub(super) fn scrub(&self, rate_bytes: u64) -> Result<ScrubReport> {
        Scrubber {
            stores: &self.stores,
            stats: &self.stats,
            state: &self.stores.scrub,
            rate_bytes,
            stop: &|| self.stopping(),
        }
        .run()
    }

    /// Whether the background scrubber runs (a rate and an interval are set).
    pub(super) fn has_scrubber(&self) -> bool {
        self.scrub_rate_bytes > 0 && !self.scrub_interval.is_zero()
    }

    /// The scrubber thread: a paced run every `scrubIntervalSeconds` (counted from the end of
    /// the last), the first one interval after the open, until the storage closes.
    pub(super) fn run_scrubber(&self) {
        loop {
            let due = Instant::now() + self.scrub_interval;
            {
                let mut wake = self.wake.lock();
                while !self.stopping() && Instant::now() < due {
                    self.wake_signal.wait_until(&mut wake, due);
                }
            }
            if self.stopping() {
                return;
            }
            if let Err(e) = self.scrub(self.scrub_rate_bytes) {
                log::error!("scrub failed: {e}");
            }
        }
    }

    /// Records how full the ledger directories are (see `LedgerStorage::set_disk_pressure`);
    /// the scheduler looks at its timers again.
    pub(super) fn set_disk_pressure(&self, pressure: DiskPressure) {
        let old = self.pressure.swap(pressure as u8, Ordering::AcqRel);
        if old != pressure as u8 {
            log::info!(
                "ledger directories {pressure:?}: compaction follows \
                 (isForceGCAllowWhenNoSpace={})",
                self.force_gc_when_no_space
            );
            self.wake_scheduler();
        }
    }

    /// Whether a job can ever fall due by itself (else no scheduler thread is needed).
    pub(super) fn has_timed_jobs(&self) -> bool {
        self.schedule.lock().has_jobs()
    }

    /// Ends the running jobs early and the scheduler thread.
    pub(super) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.wake_scheduler();
    }

    fn wake_scheduler(&self) {
        let _wake = self.wake.lock();
        self.wake_signal.notify_all();
    }

    /// The scheduler thread: runs each job when the schedule says it is due, one at a time,
    /// until the storage closes.
    pub(super) fn run_scheduler(&self) {
        let mut schedule = self.schedule.lock();
        while let Some(jobs) = self.next_jobs(&mut schedule) {
            for job in jobs {
                if self.stopping() {
                    return;
                }
                if let Err(e) = self.run_job(job, &mut schedule) {
                    log::error!("{} failed: {e}", job.name());
                    // The disk filled between two disk checks: the reserve takes the retry.
                    self.stores.reserve.release_on_no_space(&e);
                    // Do not spin on a failing disk; the next due time retries.
                    std::thread::sleep(FAILURE_PAUSE);
                }
            }
        }
    }

    /// Waits until jobs are due and returns them; None once the storage is closing.
    fn next_jobs(&self, schedule: &mut Schedule) -> Option<Vec<Job>> {
        let mut wake = self.wake.lock();
        loop {
            if self.stopping() {
                return None;
            }
            let pressure = self.pressure();
            let jobs = schedule.due(Instant::now(), pressure);
            if !jobs.is_empty() {
                return Some(jobs);
            }
            match schedule.next(pressure) {
                Some(at) => {
                    self.wake_signal.wait_until(&mut wake, at);
                }
                None => self.wake_signal.wait(&mut wake),
            }
        }
    }

    fn run_job(&self, job: Job, schedule: &mut Schedule) -> Result<()> {
        match job {
            Job::TierPass => self.move_entry_logs().map(|_| ()),
            Job::CollectGarbage => self.gc_entry_logs().map(|_| ()),
            Job::Reclaim => self.reclaim().map(|_| ()),
            // A long compaction lets the tier passes due meanwhile run between its logs.
            Job::Compact(threshold) => self
                .compact_between(threshold, &mut || {
                    if schedule.tier_pass_due(Instant::now()) {
                        if let Err(e) = self.move_entry_logs() {
                            log::error!("{} failed: {e}", Job::TierPass.name());
                        }
                    }
                })
                .map(|_| ()),
        }
    }
}
