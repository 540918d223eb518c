//! When each lifecycle job is due: the timers of `gcWaitTime`, the minor and major compaction
//! intervals and the tier pass, and the disk-pressure rules (compaction suspended while space
//! is short, or forced with `isForceGCAllowWhenNoSpace`). A plain state machine over the clock
//! it is given; it runs no job and starts no thread.

use std::time::{Duration, Instant};

use crate::config::StorageConfig;

/// How often the tiers' usage is looked at (when the storage has two tiers or more).
pub(super) const TIER_PASS_INTERVAL: Duration = Duration::from_millis(500);

/// How often a full disk's logs are looked at for reclaiming (with a space reserve).
pub(super) const RECLAIM_INTERVAL: Duration = Duration::from_secs(1);

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
    pub(super) fn from_u8(v: u8) -> DiskPressure {
        match v {
            0 => DiskPressure::Normal,
            1 => DiskPressure::AlmostFull,
            _ => DiskPressure::Full,
        }
    }
}

/// A job the scheduler runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Job {
    /// One tier pass: demotion past the high watermarks, promotion of logs read.
    TierPass,
    /// Removal of the entry logs whose ledgers are all deleted.
    CollectGarbage,
    /// Compaction of the logs at most this live.
    Compact(f64),
    /// A full disk: compaction of the logs with the most garbage within the space reserve.
    Reclaim,
}

impl Job {
    /// What the job is called in log lines.
    pub(super) fn name(self) -> &'static str {
        match self {
            Job::TierPass => "moving entry logs between tiers",
            Job::CollectGarbage => "entry-log garbage collection",
            Job::Compact(_) => "compaction",
            Job::Reclaim => "reclaiming a full disk",
        }
    }
}

/// One timed compaction (minor or major).
struct Compaction {
    /// Zero: never by the timer.
    interval: Duration,
    threshold: f64,
    last: Instant,
}

impl Compaction {
    fn due(&self, now: Instant) -> bool {
        !self.interval.is_zero() && now >= self.last + self.interval
    }

    fn next(&self) -> Option<Instant> {
        (!self.interval.is_zero()).then(|| self.last + self.interval)
    }
}

/// The lifecycle's timers.
pub(super) struct Schedule {
    /// `gcWaitTime`; zero: no timed garbage collection.
    gc_wait: Duration,
    last_gc: Instant,
    /// With `isForceGCAllowWhenNoSpace`: how often garbage collection and both compactions
    /// run, whatever their intervals, while space is short (`flushInterval`, the cadence of
    /// the checkpoints that ran them before there was a scheduler; zero: never).
    forced_every: Option<Duration>,
    last_forced: Instant,
    major: Compaction,
    minor: Compaction,
    /// With two tiers or more: the next tier pass.
    next_tier_pass: Option<Instant>,
    /// With a space reserve: how often a full disk is reclaimed, and when it last was.
    reclaim_every: Option<Duration>,
    last_reclaim: Instant,
}

impl Schedule {
    /// The timers of `cfg` started at `now`; tier passes only with `tiers` of two or more.
    pub(super) fn new(cfg: &StorageConfig, tiers: usize, now: Instant) -> Schedule {
        let forced = cfg.force_gc_when_no_space && !cfg.flush_interval.is_zero();
        Schedule {
            gc_wait: cfg.gc_wait,
            last_gc: now,
            forced_every: forced.then_some(cfg.flush_interval),
            last_forced: now,
            major: Compaction {
                interval: cfg.major_compaction_interval,
                threshold: cfg.major_compaction_threshold,
                last: now,
            },
            minor: Compaction {
                interval: cfg.minor_compaction_interval,
                threshold: cfg.minor_compaction_threshold,
                last: now,
            },
            next_tier_pass: (tiers > 1).then(|| now + TIER_PASS_INTERVAL),
            reclaim_every: (cfg.disk_reserve_bytes != Some(0)).then_some(RECLAIM_INTERVAL),
            last_reclaim: now,
        }
    }

    /// Whether a job can ever fall due (if not, no thread need wait for one).
    pub(super) fn has_jobs(&self) -> bool {
        !self.gc_wait.is_zero()
            || self.forced_every.is_some()
            || self.major.next().is_some()
            || self.minor.next().is_some()
            || self.next_tier_pass.is_some()
            || self.reclaim_every.is_some()
    }

    /// The jobs due at `now` under `pressure`, in the order they run; their timers restart.
    /// As BookKeeper's collector: while some ledger directory is almost full the timed major
    /// compaction waits, while one is full the minor one too (compaction writes its new log
    /// before it frees the old ones); with forcing allowed, space being short runs garbage
    /// collection and both compactions instead.
    pub(super) fn due(&mut self, now: Instant, pressure: DiskPressure) -> Vec<Job> {
        let mut jobs = Vec::new();
        if self.tier_pass_due(now) {
            jobs.push(Job::TierPass);
        }
        let forced = pressure != DiskPressure::Normal
            && self
                .forced_every
                .is_some_and(|every| now >= self.last_forced + every);
        if forced {
            self.last_forced = now;
        }
        if forced || (!self.gc_wait.is_zero() && now >= self.last_gc + self.gc_wait) {
            self.last_gc = now;
            jobs.push(Job::CollectGarbage);
        }
        let suspended = [
            pressure != DiskPressure::Normal,
            pressure == DiskPressure::Full,
        ];
        for (timer, suspended) in [&mut self.major, &mut self.minor]
            .into_iter()
            .zip(suspended)
        {
            if (forced && timer.threshold > 0.0) || (timer.due(now) && !suspended) {
                timer.last = now;
                jobs.push(Job::Compact(timer.threshold));
            }
        }
        if self.reclaim_due(now, pressure) {
            self.last_reclaim = now;
            jobs.push(Job::Reclaim);
        }
        jobs
    }

    /// When a full disk is next reclaimed under `pressure` (never below Full).
    fn next_reclaim(&self, pressure: DiskPressure) -> Option<Instant> {
        self.reclaim_every
            .filter(|_| pressure == DiskPressure::Full)
            .map(|every| self.last_reclaim + every)
    }

    fn reclaim_due(&self, now: Instant, pressure: DiskPressure) -> bool {
        self.next_reclaim(pressure).is_some_and(|at| now >= at)
    }

    /// Whether a tier pass is due at `now`; if so its timer restarts. Asked between the logs
    /// of a long compaction too, so demotion keeps up while it runs.
    pub(super) fn tier_pass_due(&mut self, now: Instant) -> bool {
        match self.next_tier_pass {
            Some(at) if now >= at => {
                self.next_tier_pass = Some(now + TIER_PASS_INTERVAL);
                true
            }
            _ => false,
        }
    }

    /// When the next job falls due under `pressure`; None: only a wake-up (a change of
    /// pressure) can make one due. A compaction the pressure suspends counts from when the
    /// pressure lets it run.
    pub(super) fn next(&self, pressure: DiskPressure) -> Option<Instant> {
        let gc = (!self.gc_wait.is_zero()).then(|| self.last_gc + self.gc_wait);
        let forced = self
            .forced_every
            .filter(|_| pressure != DiskPressure::Normal)
            .map(|every| self.last_forced + every);
        let major = self
            .major
            .next()
            .filter(|_| pressure == DiskPressure::Normal);
        let minor = self.minor.next().filter(|_| pressure != DiskPressure::Full);
        let reclaim = self.next_reclaim(pressure);
        [self.next_tier_pass, gc, forced, major, minor, reclaim]
            .into_iter()
            .flatten()
            .min()
    }
}

#[cfg(test)]
mod tests {
    //! The rules against a clock moved by hand.

    use super::*;

    fn config(force: bool) -> StorageConfig {
        StorageConfig {
            flush_interval: Duration::from_secs(10),
            gc_wait: Duration::from_secs(600),
            force_gc_when_no_space: force,
            minor_compaction_interval: Duration::from_secs(3600),
            major_compaction_interval: Duration::from_secs(86400),
            ..crate::testing::storage_config(std::path::Path::new("/unused"))
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn each_timer_falls_due_at_its_interval() {
        let t0 = Instant::now();
        let mut s = Schedule::new(&config(false), 1, t0);
        assert!(s.due(t0 + secs(599), DiskPressure::Normal).is_empty());
        assert_eq!(s.next(DiskPressure::Normal), Some(t0 + secs(600)));
        assert_eq!(
            s.due(t0 + secs(600), DiskPressure::Normal),
            vec![Job::CollectGarbage]
        );
        assert_eq!(
            s.due(t0 + secs(3600), DiskPressure::Normal),
            vec![Job::CollectGarbage, Job::Compact(0.2)]
        );
        assert_eq!(
            s.due(t0 + secs(86400), DiskPressure::Normal),
            vec![Job::CollectGarbage, Job::Compact(0.8), Job::Compact(0.2)]
        );
    }

    #[test]
    fn short_space_suspends_timed_compaction_until_it_eases() {
        let t0 = Instant::now();
        let mut s = Schedule::new(&config(false), 1, t0);
        let day = t0 + secs(86400);
        // Full: only garbage collection, which only frees.
        assert_eq!(s.due(day, DiskPressure::Full), vec![Job::CollectGarbage]);
        assert_eq!(s.next(DiskPressure::Full), Some(day + secs(600)));
        // Almost full: the minor compaction resumes at once, the major one waits.
        assert_eq!(
            s.due(day + secs(1), DiskPressure::AlmostFull),
            vec![Job::Compact(0.2)]
        );
        assert_eq!(
            s.due(day + secs(2), DiskPressure::Normal),
            vec![Job::Compact(0.8)]
        );
    }

    #[test]
    fn short_space_forces_collection_every_flush_interval_when_allowed() {
        let t0 = Instant::now();
        let mut s = Schedule::new(&config(true), 1, t0);
        assert!(s.due(t0 + secs(5), DiskPressure::Full).is_empty());
        assert_eq!(s.next(DiskPressure::Full), Some(t0 + secs(10)));
        let all = vec![Job::CollectGarbage, Job::Compact(0.8), Job::Compact(0.2)];
        assert_eq!(s.due(t0 + secs(10), DiskPressure::Full), all);
        assert!(s.due(t0 + secs(15), DiskPressure::AlmostFull).is_empty());
        assert_eq!(s.due(t0 + secs(20), DiskPressure::AlmostFull), all);
        // Room again: nothing is forced.
        assert!(s.due(t0 + secs(40), DiskPressure::Normal).is_empty());
    }

    #[test]
    fn a_full_disk_is_reclaimed_with_a_reserve_whatever_forcing_says() {
        let t0 = Instant::now();
        let cfg = StorageConfig {
            disk_reserve_bytes: None,
            ..config(false)
        };
        let mut s = Schedule::new(&cfg, 1, t0);
        assert!(s
            .due(t0 + RECLAIM_INTERVAL, DiskPressure::AlmostFull)
            .is_empty());
        assert_eq!(s.next(DiskPressure::Full), Some(t0 + RECLAIM_INTERVAL));
        assert_eq!(
            s.due(t0 + RECLAIM_INTERVAL, DiskPressure::Full),
            vec![Job::Reclaim]
        );
        assert!(s.due(t0 + RECLAIM_INTERVAL, DiskPressure::Full).is_empty());
        // No reserve (diskReservedSpaceMB=0): nothing beyond BookKeeper's rules.
        let mut none = Schedule::new(&config(false), 1, t0);
        assert!(none.due(t0 + secs(5), DiskPressure::Full).is_empty());
    }

    #[test]
    fn tier_passes_only_with_tiers() {
        let t0 = Instant::now();
        let cfg = crate::testing::storage_config(std::path::Path::new("/unused"));
        assert!(!Schedule::new(&cfg, 1, t0).has_jobs());
        let mut s = Schedule::new(&cfg, 2, t0);
        assert!(s.has_jobs());
        assert_eq!(s.next(DiskPressure::Full), Some(t0 + TIER_PASS_INTERVAL));
        assert_eq!(
            s.due(t0 + TIER_PASS_INTERVAL, DiskPressure::Normal),
            vec![Job::TierPass]
        );
        assert!(!s.tier_pass_due(t0 + TIER_PASS_INTERVAL));
    }
}
