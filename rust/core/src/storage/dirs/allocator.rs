//! Allocators: which directory takes a new entry log (Alluxio's worker allocators, applied to
//! entry logs). Directories come in tiers, tier 0 on top; every allocator prefers the highest
//! tier with a directory that has `need` bytes available and that the reviewer accepts, and
//! goes down a tier only when none has. They choose; they never create a file.

use super::reviewer::Reviewer;
use super::DirState;

/// Chooses the directory of a new entry log. Called only at rollover, never per entry.
pub trait Allocator: Send {
    /// The index into `dirs` of the directory to use, or None if none has `need` bytes
    /// available and is accepted by `reviewer`.
    fn choose(
        &mut self,
        dirs: &[DirState],
        need: u64,
        reviewer: &mut dyn Reviewer,
    ) -> Option<usize>;

    /// The name operators configure it by (`entryLogAllocatorClass`).
    fn name(&self) -> &'static str;
}

/// The tiers present in `dirs`, top (lowest number) first.
fn tiers(dirs: &[DirState]) -> Vec<usize> {
    let mut t: Vec<usize> = dirs.iter().map(|d| d.tier).collect();
    t.sort_unstable();
    t.dedup();
    t
}

fn fits(dir: &DirState, need: u64) -> bool {
    dir.usage.free_bytes >= need
}

/// The directory with the most available bytes in the highest tier that can take the log.
/// Spreads space evenly; the default. Ties (directories on one file system report the same free
/// space) go to each of the tied directories in turn, so logs still spread over them.
#[derive(Debug, Default)]
pub struct MaxFreeAllocator {
    /// Rotates where the scan for the maximum starts, which breaks ties in turn.
    next: usize,
}

impl Allocator for MaxFreeAllocator {
    fn choose(
        &mut self,
        dirs: &[DirState],
        need: u64,
        reviewer: &mut dyn Reviewer,
    ) -> Option<usize> {
        for tier in tiers(dirs) {
            let members: Vec<usize> = (0..dirs.len()).filter(|&i| dirs[i].tier == tier).collect();
            let n = members.len();
            let start = self.next % n;
            let mut best: Option<usize> = None;
            for k in 0..n {
                let i = members[(start + k) % n];
                let d = &dirs[i];
                if !fits(d, need) {
                    continue;
                }
                if best.is_some_and(|b| dirs[b].usage.free_bytes >= d.usage.free_bytes) {
                    continue;
                }
                if reviewer.accept(d) {
                    best = Some(i);
                }
            }
            if best.is_some() {
                self.next = self.next.wrapping_add(1);
                return best;
            }
        }
        None
    }

    fn name(&self) -> &'static str {
        "MaxFreeAllocator"
    }
}

/// The first directory, top tier down and in the order configured, that can take the log.
#[derive(Debug, Default)]
pub struct GreedyAllocator;

impl Allocator for GreedyAllocator {
    fn choose(
        &mut self,
        dirs: &[DirState],
        need: u64,
        reviewer: &mut dyn Reviewer,
    ) -> Option<usize> {
        for tier in tiers(dirs) {
            for (i, d) in dirs.iter().enumerate() {
                if d.tier == tier && fits(d, need) && reviewer.accept(d) {
                    return Some(i);
                }
            }
        }
        None
    }

    fn name(&self) -> &'static str {
        "GreedyAllocator"
    }
}

/// Cycles through the directories of the highest tier that can take the log, remembering per
/// tier where it left off: spreads logs and I/O across a tier's disks evenly.
#[derive(Debug, Default)]
pub struct RoundRobinAllocator {
    /// Per tier: the position (within the tier's directories) chosen last.
    last: Vec<Option<usize>>,
}

impl Allocator for RoundRobinAllocator {
    fn choose(
        &mut self,
        dirs: &[DirState],
        need: u64,
        reviewer: &mut dyn Reviewer,
    ) -> Option<usize> {
        for tier in tiers(dirs) {
            let members: Vec<usize> = (0..dirs.len()).filter(|&i| dirs[i].tier == tier).collect();
            if self.last.len() <= tier {
                self.last.resize(tier + 1, None);
            }
            let n = members.len();
            let start = self.last[tier].map_or(0, |p| (p + 1) % n);
            for k in 0..n {
                let pos = (start + k) % n;
                let i = members[pos];
                if fits(&dirs[i], need) && reviewer.accept(&dirs[i]) {
                    self.last[tier] = Some(pos);
                    return Some(i);
                }
            }
        }
        None
    }

    fn name(&self) -> &'static str {
        "RoundRobinAllocator"
    }
}

/// The allocator named `name` (`entryLogAllocatorClass`, with or without a package prefix).
pub fn by_name(name: &str) -> Option<Box<dyn Allocator>> {
    match name.rsplit('.').next().unwrap_or(name) {
        "MaxFreeAllocator" => Some(Box::<MaxFreeAllocator>::default()),
        "GreedyAllocator" => Some(Box::new(GreedyAllocator)),
        "RoundRobinAllocator" => Some(Box::<RoundRobinAllocator>::default()),
        _ => None,
    }
}
