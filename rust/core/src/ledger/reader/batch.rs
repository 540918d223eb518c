//! Batched reads of one segment, striped (E > Qw) or not (E == Qw): one read engine for both.
//!
//! Round-robin placement puts every entry of one write-set start `r` (`entry mod E == r`) on
//! the same Qw bookies. So each start is one stream read from its first replica in read order
//! by batch requests ([`Fetch`]), the starts in parallel, each bookie sending its share once:
//! strided requests (`FLAG_STRIDED_READ`, a pybkx extension: entries `s, s + E, ...`) where
//! entries are striped, and where every bookie holds every entry the segment is one stream of
//! plain BP-62 requests (stride 1). A replica that fails, lacks an entry or ignores the stride
//! hands the rest of its stream to the next replica. Bookies known to ignore strides (Java's)
//! are read as runs instead: from entry `s` the bookie at write-set position k holds
//! `s ..= s + k`, so runs of up to Qw entries, one plain BP-62 request each. Whatever is still
//! missing or came back corrupt is read entry by entry with replica fail-over ([`single`]),
//! which also gives the precise error. Entries are placed by position (the bookie confirms the
//! stride in its response), their ids checked by the digest, and merged in entry order a
//! [`Window`] at a time. Planning never touches the network: it is unit-tested below.
//!
//! [`single`]: super::single

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use super::fetch::{Fetch, Requests};
use super::order::by_health;
use super::plan::{ReadOptions, ReadPlan};
use super::single::{read_each, task_failed};
use super::verify::ReadEntry;
use super::window::{Window, WINDOW_ENTRIES};
use crate::bookie_conn::BookieClient;
use crate::ledger::error::LedgerError;

/// Reads `first..=last`, all in one segment, appending the entries to `out` in order. Returns
/// false when bookies dropped the connection on every batch request (bookies without BP-62);
/// `out` then holds a prefix of the range and the caller reads the rest singly.
pub(super) async fn read(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    opts: &ReadOptions,
    first: i64,
    last: i64,
    out: &mut Vec<ReadEntry>,
) -> Result<bool, LedgerError> {
    let ctx = Ctx { client, plan, opts };
    let stride = plan.stride(first);
    // Bookies that timed out or were unreachable in this read: tried last from then on.
    let mut failing: HashSet<String> = HashSet::new();
    let mut start = first;
    while start <= last {
        let end = last.min(start + WINDOW_ENTRIES - 1);
        let wants = (!opts.held_by.is_empty()).then_some(|e| plan.wanted(e, &opts.held_by));
        let mut window = Window::new(start, end, wants);
        let mut requests = Requests::default();
        ctx.streams(stride, &mut window, &mut failing, &mut requests)
            .await?;
        if requests.all_dropped() {
            return Ok(false);
        }
        ctx.runs(&mut window, &mut failing, &mut requests).await?;
        if requests.all_dropped() {
            return Ok(false);
        }
        ctx.singles(&mut window, &failing).await?;
        window.drain_into(plan.ledger, out)?;
        start = end + 1;
    }
    Ok(true)
}

struct Ctx<'a> {
    client: &'a Arc<BookieClient>,
    plan: &'a ReadPlan,
    opts: &'a ReadOptions,
}

impl Ctx<'_> {
    /// Replicas of `entry` in read order, rearranged by bookie health, unregistered and
    /// failing bookies last.
    fn order(&self, entry: i64, failing: &HashSet<String>) -> Vec<String> {
        let mut order = self.plan.replicas(entry, &self.opts.avoid);
        by_health(self.client, &mut order, &self.opts.avoid);
        order.sort_by_key(|b| failing.contains(b));
        order
    }

    fn fetch(
        &self,
        replicas: Vec<String>,
        (next, last): (i64, i64),
        step: i64,
        window: &Window,
    ) -> Fetch {
        Fetch {
            client: self.client.clone(),
            ledger: self.plan.ledger,
            digest: self.plan.digest.clone(),
            max_bytes: self.plan.max_batch_bytes,
            flags: self.opts.flags,
            master_key: self.opts.master_key.clone(),
            replicas,
            next,
            last,
            step,
            window_last: window.last(),
        }
    }

    /// One stream per write-set start, all at once (one stream in all with stride 1); strided
    /// streams only from replicas not known to ignore strides.
    async fn streams(
        &self,
        stride: i64,
        window: &mut Window,
        failing: &mut HashSet<String>,
        requests: &mut Requests,
    ) -> Result<(), LedgerError> {
        let mut fetches = Vec::new();
        for bounds in stream_bounds(window.first, window.last(), stride) {
            // Within a segment every entry of a start has the same write set.
            if !window.wants(bounds.0) {
                continue;
            }
            let replicas: Vec<String> = self
                .order(bounds.0, failing)
                .into_iter()
                .filter(|b| stride == 1 || self.client.strided_reads(b) != Some(false))
                .collect();
            if !replicas.is_empty() {
                fetches.push(self.fetch(replicas, bounds, stride, window));
            }
        }
        if fetches.len() == 1 {
            // One stream (a whole segment): no task to hand it to and wake this one from.
            if let Some(fetch) = fetches.pop() {
                window.absorb(fetch.run().await, failing, requests);
            }
            return Ok(());
        }
        let tasks: Vec<_> = fetches.into_iter().map(|f| tokio::spawn(f.run())).collect();
        for task in tasks {
            window.absorb(task.await.map_err(task_failed)?, failing, requests);
        }
        Ok(())
    }

    /// Runs of missing entries that one bookie holds, up to `opts.window` requests in flight.
    async fn runs(
        &self,
        window: &mut Window,
        failing: &mut HashSet<String>,
        requests: &mut Requests,
    ) -> Result<(), LedgerError> {
        let missing = window.missing();
        if missing.is_empty() {
            return Ok(());
        }
        let planned = plan_runs(self.plan, &missing, |entry| {
            self.order(entry, failing)
                .into_iter()
                .filter(|b| {
                    !failing.contains(b)
                        && !self.opts.avoid.contains(b)
                        && !window.returned_corrupt(entry, b)
                })
                .collect()
        });
        let mut planned = planned.into_iter();
        let mut inflight = VecDeque::new();
        loop {
            while inflight.len() < self.opts.window.max(1) {
                let Some(run) = planned.next() else { break };
                let bounds = (run.first, run.first + run.count - 1);
                let fetch = self.fetch(vec![run.bookie], bounds, 1, window);
                inflight.push_back(tokio::spawn(fetch.run()));
            }
            let Some(task) = inflight.pop_front() else {
                return Ok(());
            };
            window.absorb(task.await.map_err(task_failed)?, failing, requests);
        }
    }

    /// Every entry still missing, one READ each with replica fail-over: corrupt copies and
    /// failing bookies last.
    async fn singles(
        &self,
        window: &mut Window,
        failing: &HashSet<String>,
    ) -> Result<(), LedgerError> {
        let each: Vec<(i64, Vec<String>)> = window
            .missing()
            .into_iter()
            .map(|entry| {
                let mut order = self.order(entry, failing);
                order.sort_by_key(|b| window.returned_corrupt(entry, b));
                (entry, order)
            })
            .collect();
        if each.is_empty() {
            return Ok(());
        }
        let n = each.len();
        for entry in read_each(self.client, self.plan, self.opts, each.into_iter(), n).await? {
            window.offer(entry);
        }
        Ok(())
    }
}

/// The first and last entry of each write-set start within `first..=last`: `stride` streams
/// (one with stride 1).
fn stream_bounds(first: i64, last: i64, stride: i64) -> Vec<(i64, i64)> {
    (first..=last.min(first + stride - 1))
        .map(|start| (start, start + (last - start) / stride * stride))
        .collect()
}

/// Consecutive entries to read from one bookie with one plain batch request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    bookie: String,
    first: i64,
    count: i64,
}

/// Plans runs over the `missing` entries (ascending): from each, the candidate that holds the
/// most of the consecutive missing entries (the earlier in `candidates` order on a tie). Only
/// runs of two or more: a lone entry is left to a single read.
fn plan_runs(
    plan: &ReadPlan,
    missing: &[i64],
    candidates: impl Fn(i64) -> Vec<String>,
) -> Vec<Run> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < missing.len() {
        let first = missing[i];
        let gap = missing[i..]
            .iter()
            .enumerate()
            .take_while(|(k, e)| **e == first + *k as i64)
            .count() as i64;
        let mut best: Option<(i64, String)> = None;
        for bookie in candidates(first) {
            let held = plan.held_from(first, &bookie).min(gap);
            if best.as_ref().is_none_or(|(n, _)| held > *n) {
                best = Some((held, bookie));
            }
        }
        match best {
            Some((count, bookie)) if count >= 2 => {
                runs.push(Run {
                    bookie,
                    first,
                    count,
                });
                i += count as usize;
            }
            _ => i += 1,
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::digest::{DigestManager, DigestType};
    use crate::ledger::reader::plan::Segment;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("b{i}")).collect()
    }

    fn run(bookie: &str, first: i64, count: i64) -> Run {
        Run {
            bookie: bookie.into(),
            first,
            count,
        }
    }

    fn read_plan(qw: usize, segments: Vec<(i64, Vec<String>)>) -> ReadPlan {
        let segments = segments.into_iter().map(Segment::from).collect();
        let digest = DigestManager::new(7, b"", DigestType::Crc32c);
        ReadPlan::new(7, qw, digest, segments, Vec::new(), 5 << 20).unwrap()
    }

    #[test]
    fn each_write_set_start_is_one_stream() {
        assert_eq!(stream_bounds(0, 9, 3), vec![(0, 9), (1, 7), (2, 8)]);
        assert_eq!(stream_bounds(4, 5, 3), vec![(4, 4), (5, 5)]);
        assert_eq!(stream_bounds(7, 7, 5), vec![(7, 7)]);
        // Every bookie holds every entry: one stream.
        assert_eq!(stream_bounds(3, 900, 1), vec![(3, 900)]);
    }

    #[test]
    fn runs_take_the_last_replica_of_each_write_set() {
        let p = read_plan(2, vec![(0, names(3))]);
        let all: Vec<i64> = (0..7).collect();
        let runs = plan_runs(&p, &all, |e| p.replicas(e, &HashSet::new()));
        assert_eq!(
            runs,
            vec![run("b1", 0, 2), run("b0", 2, 2), run("b2", 4, 2)] // 6 alone: a single read
        );
        // E=5, Qw=3: runs of three, every bookie in turn.
        let p = read_plan(3, vec![(0, names(5))]);
        let all: Vec<i64> = (0..10).collect();
        let runs = plan_runs(&p, &all, |e| p.replicas(e, &HashSet::new()));
        assert_eq!(
            runs,
            vec![run("b2", 0, 3), run("b0", 3, 3), run("b3", 6, 3)]
        );
        // E == Qw: one run of everything missing, up to the segment's end.
        let p = read_plan(3, vec![(0, names(3)), (8, names(3))]);
        let all: Vec<i64> = (2..12).collect();
        let runs = plan_runs(&p, &all, |e| p.replicas(e, &HashSet::new()));
        assert_eq!(runs, vec![run("b2", 2, 6), run("b2", 8, 4)]);
    }

    #[test]
    fn runs_stop_at_gaps_and_skip_excluded_bookies() {
        let p = read_plan(2, vec![(0, names(3))]);
        // 2 and 3 are held together only by b0; without it, two singles remain.
        let runs = plan_runs(&p, &[2, 3, 7, 8], |e| {
            p.replicas(e, &HashSet::new())
                .into_iter()
                .filter(|b| b != "b0")
                .collect()
        });
        assert_eq!(runs, vec![run("b2", 7, 2)]);
        assert!(plan_runs(&p, &[1, 3, 5], |e| p.replicas(e, &HashSet::new())).is_empty());
    }
}
