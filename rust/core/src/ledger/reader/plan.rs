//! What a read works from: the [`ReadPlan`] of one version of a ledger's metadata (segments,
//! read order, digest, batch size), built and checked once and used by every read, and the
//! [`ReadOptions`] of one read call. Pure arithmetic over placement: it never touches the
//! network and never decides which bookies exist.

use std::collections::HashSet;

use bytes::Bytes;

use crate::digest::DigestManager;
use crate::ledger::error::LedgerError;
use crate::ledger::quorum::write_set;

/// A segment of a ledger: its first entry and its ensemble (bookie addresses).
#[derive(Debug, Clone)]
pub struct Segment {
    pub first_entry: i64,
    pub ensemble: Vec<String>,
}

impl From<(i64, Vec<String>)> for Segment {
    fn from((first_entry, ensemble): (i64, Vec<String>)) -> Segment {
        Segment {
            first_entry,
            ensemble,
        }
    }
}

/// How to read one version of a ledger's metadata: built once, used by every read.
pub struct ReadPlan {
    pub(super) ledger: i64,
    qw: usize,
    pub(super) digest: DigestManager,
    segments: Vec<Segment>,
    /// Per segment, per write-set start (`entry % E`): the ensemble indexes to try, in order
    /// (the placement policy's read order). Empty: the write set's own order.
    orders: Vec<Vec<Vec<usize>>>,
    /// Largest response a batch may ask for (`nettyMaxFrameSizeBytes`).
    pub(super) max_batch_bytes: i64,
}

/// What one read call wants beyond the plan.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Use BATCH_READ_ENTRY: BP-62's where a single bookie holds every entry (E == Qw),
    /// strided ones where entries are striped (E > Qw).
    pub batch: bool,
    /// Bookies to try last (known to be failing).
    pub avoid: HashSet<String>,
    /// Read flags and key (fencing recovery reads).
    pub flags: u16,
    pub master_key: Option<Bytes>,
    /// Single reads (and runs of a batched read) in flight at once.
    pub window: usize,
    /// Only the entries whose write set holds one of these ensemble positions (what a copy of
    /// lost bookies needs); empty: every entry. On a striped segment the other write-set
    /// starts are not read at all.
    pub held_by: Vec<usize>,
}

impl ReadPlan {
    /// Checks the plan: segments start at entry 0 and grow, every ensemble holds at least Qw
    /// bookies, read orders name indexes of their ensembles.
    pub fn new(
        ledger: i64,
        qw: usize,
        digest: DigestManager,
        segments: Vec<Segment>,
        orders: Vec<Vec<Vec<usize>>>,
        max_batch_bytes: i64,
    ) -> Result<ReadPlan, LedgerError> {
        let bad = |why: &str| Err(LedgerError::InvalidArgument(format!("read plan: {why}")));
        if segments.first().map(|s| s.first_entry) != Some(0) {
            return bad("segments must start with one at entry 0");
        }
        if segments
            .windows(2)
            .any(|w| w[1].first_entry <= w[0].first_entry)
        {
            return bad("segment starts must increase");
        }
        if qw == 0 || segments.iter().any(|s| s.ensemble.len() < qw) {
            return bad("every ensemble needs at least the write quorum of bookies");
        }
        if orders.len() > segments.len() {
            return bad("more read orders than segments");
        }
        for (seg, per_start) in segments.iter().zip(&orders) {
            if per_start.iter().flatten().any(|i| *i >= seg.ensemble.len()) {
                return bad("a read order names an index outside its ensemble");
            }
        }
        Ok(ReadPlan {
            ledger,
            qw,
            digest,
            segments,
            orders,
            max_batch_bytes,
        })
    }

    pub fn ledger_id(&self) -> i64 {
        self.ledger
    }

    pub fn digest(&self) -> &DigestManager {
        &self.digest
    }

    fn segment_of(&self, entry: i64) -> (usize, &Segment) {
        let i = self
            .segments
            .iter()
            .rposition(|s| s.first_entry <= entry)
            .unwrap_or(0);
        (i, &self.segments[i])
    }

    /// Replicas of `entry` in the order to try them.
    pub(super) fn replicas(&self, entry: i64, avoid: &HashSet<String>) -> Vec<String> {
        let (n, seg) = self.segment_of(entry);
        let e = seg.ensemble.len();
        let chosen = self
            .orders
            .get(n)
            .and_then(|per_start| per_start.get(entry.rem_euclid(e as i64) as usize));
        let mut order: Vec<String> = match chosen {
            Some(indexes) => indexes
                .iter()
                .filter_map(|i| seg.ensemble.get(*i).cloned())
                .collect(),
            None => write_set(entry, e, self.qw.min(e))
                .map(|i| seg.ensemble[i].clone())
                .collect(),
        };
        order.sort_by_key(|b| avoid.contains(b));
        order
    }

    /// Where the segment of `entry` ends (exclusive), if another follows.
    pub(super) fn segment_end(&self, entry: i64) -> Option<i64> {
        let (i, _) = self.segment_of(entry);
        self.segments.get(i + 1).map(|s| s.first_entry)
    }

    /// How many consecutive entries from `entry` on, within its segment, `bookie` holds (0:
    /// not `entry`). Round-robin placement gives the bookie at write-set position k of `entry`
    /// the entries `entry ..= entry + k` of that stretch; where every position holds every
    /// entry (E == Qw), the rest of the segment (`i64::MAX` in the last one).
    pub(super) fn held_from(&self, entry: i64, bookie: &str) -> i64 {
        let (_, seg) = self.segment_of(entry);
        let e = seg.ensemble.len() as i64;
        let Some(index) = seg.ensemble.iter().position(|b| b == bookie) else {
            return 0;
        };
        let end = self.segment_end(entry);
        if self.qw as i64 >= e {
            return end.map_or(i64::MAX, |end| end - entry);
        }
        let k = (index as i64 - entry).rem_euclid(e.max(1));
        if k >= self.qw as i64 {
            return 0;
        }
        let run = k + 1;
        end.map_or(run, |end| run.min(end - entry))
    }

    /// The distance between consecutive entries one batched stream reads in the segment of
    /// `entry`: E where entries are striped (every entry of a write-set start has the same
    /// write set), 1 where every position holds every entry (E == Qw).
    pub(super) fn stride(&self, entry: i64) -> i64 {
        let e = self.segment_of(entry).1.ensemble.len();
        if e > self.qw {
            e as i64
        } else {
            1
        }
    }

    /// Whether `entry` is one the read wants: its write set holds a position of `held_by`
    /// (empty: every entry).
    pub(super) fn wanted(&self, entry: i64, held_by: &[usize]) -> bool {
        if held_by.is_empty() {
            return true;
        }
        let e = self.segment_of(entry).1.ensemble.len();
        write_set(entry, e, self.qw.min(e)).any(|i| held_by.contains(&i))
    }

    /// Checks that `held_by` names positions of every ensemble of the plan.
    pub(super) fn check_held_by(&self, held_by: &[usize]) -> Result<(), LedgerError> {
        let smallest = self.segments.iter().map(|s| s.ensemble.len()).min();
        match held_by.iter().find(|i| smallest.is_some_and(|e| **i >= e)) {
            Some(i) => Err(LedgerError::InvalidArgument(format!(
                "ensemble position {i} is outside the ledger's ensembles of {} bookies",
                smallest.unwrap_or(0)
            ))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::DigestType;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("b{i}")).collect()
    }

    fn seg(first_entry: i64, ensemble: &[String]) -> Segment {
        Segment {
            first_entry,
            ensemble: ensemble.to_vec(),
        }
    }

    fn plan(qw: usize, segments: Vec<Segment>, orders: Vec<Vec<Vec<usize>>>) -> ReadPlan {
        let dm = DigestManager::new(9, b"", DigestType::Crc32c);
        ReadPlan::new(9, qw, dm, segments, orders, 5 << 20).unwrap()
    }

    #[test]
    fn plans_are_checked_once() {
        let e = names(3);
        let dm = || DigestManager::new(1, b"", DigestType::Crc32c);
        assert!(ReadPlan::new(1, 2, dm(), vec![seg(1, &e)], vec![], 1).is_err());
        assert!(ReadPlan::new(1, 2, dm(), vec![seg(0, &e), seg(0, &e)], vec![], 1).is_err());
        assert!(ReadPlan::new(1, 4, dm(), vec![seg(0, &e)], vec![], 1).is_err());
        assert!(ReadPlan::new(1, 2, dm(), vec![seg(0, &e)], vec![vec![vec![3]]], 1).is_err());
    }

    #[test]
    fn replicas_follow_the_given_read_order_with_avoided_bookies_last() {
        let ensemble: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let mut avoid = HashSet::new();
        // Write-set order by default: entry 2 lives on indexes 2 and 0.
        let p = plan(2, vec![seg(0, &ensemble)], Vec::new());
        assert_eq!(p.replicas(2, &avoid), vec!["c", "a"]);
        let p = plan(
            2,
            vec![seg(0, &ensemble)],
            vec![vec![vec![1, 0], vec![2, 1], vec![0, 2]]],
        );
        assert_eq!(p.replicas(2, &avoid), vec!["a", "c"]);
        assert_eq!(p.replicas(4, &avoid), vec!["c", "b"]);
        avoid.insert("a".to_string());
        assert_eq!(p.replicas(2, &avoid), vec!["c", "a"]);
    }

    #[test]
    fn a_bookie_holds_the_entries_up_to_its_write_set_position() {
        // E=3, Qw=2: entry 0 lives on b0 (position 0) and b1 (position 1).
        let p = plan(2, vec![seg(0, &names(3)), seg(10, &names(3))], Vec::new());
        assert_eq!(p.held_from(0, "b0"), 1);
        assert_eq!(p.held_from(0, "b1"), 2);
        assert_eq!(p.held_from(0, "b2"), 0);
        assert_eq!(p.held_from(4, "b2"), 2); // 4 and 5 (write sets {1,2} and {2,0})
        assert_eq!(p.held_from(9, "b1"), 1); // the segment ends at 10
        assert_eq!(p.held_from(0, "elsewhere"), 0);
        // E == Qw: every bookie holds the rest of its segment.
        let p = plan(3, vec![seg(0, &names(3)), seg(10, &names(3))], Vec::new());
        assert_eq!(p.held_from(4, "b0"), 6);
        assert_eq!(p.held_from(12, "b2"), i64::MAX);
        assert_eq!((p.stride(0), p.stride(12)), (1, 1));
        let p = plan(2, vec![seg(0, &names(2)), seg(10, &names(3))], Vec::new());
        assert_eq!((p.stride(9), p.stride(10)), (1, 3));
    }
}
