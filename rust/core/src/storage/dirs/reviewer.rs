//! Reviewers: a veto on an allocator's choice of directory for a new entry log (Alluxio's
//! worker reviewers, applied to entry logs). They judge one directory's free space; they never
//! choose.

use super::DirState;

/// Accepts or refuses a directory for a new entry log.
pub trait Reviewer: Send {
    fn accept(&mut self, dir: &DirState) -> bool;

    /// The name operators configure it by (`entryLogReviewerClass`).
    fn name(&self) -> &'static str;
}

/// Accepts every directory.
#[derive(Debug, Default)]
pub struct AcceptingReviewer;

impl Reviewer for AcceptingReviewer {
    fn accept(&mut self, _dir: &DirState) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "AcceptingReviewer"
    }
}

/// Accepts a directory with probability 1 while it has more than `soft` bytes available, 0 at
/// or below `hard`, and linearly in between: the fuller a directory, the likelier a new log goes
/// elsewhere (Alluxio's ProbabilisticBufferReviewer).
#[derive(Debug)]
pub struct ProbabilisticBufferReviewer {
    soft: u64,
    hard: u64,
    rng: u64,
}

impl ProbabilisticBufferReviewer {
    /// A soft limit at or below the hard limit is raised to it (as Alluxio does).
    pub fn new(soft: u64, hard: u64) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9E37_79B9_7F4A_7C15, |d| d.as_nanos() as u64);
        Self::with_seed(soft, hard, seed)
    }

    /// As [`new`](Self::new) with a fixed random seed (tests).
    pub fn with_seed(soft: u64, hard: u64, seed: u64) -> Self {
        ProbabilisticBufferReviewer {
            soft: soft.max(hard),
            hard,
            rng: seed | 1,
        }
    }

    /// The probability of accepting a directory with `available` bytes.
    pub fn probability(&self, available: u64) -> f64 {
        if available > self.soft {
            return 1.0;
        }
        if available <= self.hard {
            return 0.0;
        }
        // Here hard < available <= soft, so soft > hard.
        (available - self.hard) as f64 / (self.soft - self.hard) as f64
    }

    /// Uniform in [0, 1) (xorshift64*).
    fn next_unit(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (r >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Reviewer for ProbabilisticBufferReviewer {
    fn accept(&mut self, dir: &DirState) -> bool {
        let p = self.probability(dir.usage.free_bytes);
        // Draw only when it matters, so certain answers cost nothing.
        p >= 1.0 || (p > 0.0 && self.next_unit() < p)
    }

    fn name(&self) -> &'static str {
        "ProbabilisticBufferReviewer"
    }
}
