//! Batched reads of a striped segment (E > Qw), where no bookie holds every entry.
//!
//! Round-robin placement puts every entry of one write-set start `r` (`entry mod E == r`) on
//! the same Qw bookies. So each start is read from its first replica in read order with one
//! strided BATCH_READ_ENTRY (`FLAG_STRIDED_READ`, a pybkx extension: entries `s, s + E, ...`),
//! the E starts in parallel, each bookie sending its share once. A replica that fails, lacks an
//! entry or ignores the stride hands the rest of its start to the next replica. Bookies known to
//! ignore strides (Java's) are read as runs instead: from entry `s` the bookie at write-set
//! position k holds `s ..= s + k`, so runs of up to Qw entries, one plain BP-62 request each.
//! Whatever is still missing or came back corrupt is read entry by entry with replica failover
//! (`ReadOne`), which also gives the precise error. Entries are placed by position (the bookie
//! confirms the stride in its response), their ids checked by the digest, and merged in entry
//! order a window at a time. Planning never touches the network: it is unit-tested below.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use super::{read_each, task_failed, verify, ReadEntry, ReadOptions, ReadPlan};
use crate::bookie_conn::{BookieClient, ClientError, Reply};
use crate::digest::DigestManager;
use crate::ledger::LedgerError;

/// Entries planned and merged at once: the merge buffer of one read stays this small whatever
/// its range.
const WINDOW_ENTRIES: i64 = 1 << 16;

/// Reads `first..=last`, all in one striped segment, appending the entries to `out` in order.
/// Returns false when bookies dropped the connection on every batch request (bookies without
/// BP-62); `out` then holds a prefix of the range and the caller reads the rest singly.
pub(super) async fn read(
    client: &Arc<BookieClient>,
    plan: &ReadPlan,
    opts: &ReadOptions,
    first: i64,
    last: i64,
    out: &mut Vec<ReadEntry>,
) -> Result<bool, LedgerError> {
    let ctx = Ctx { client, plan, opts };
    let stride = plan.segment_of(first).1.ensemble.len() as i64;
    // Bookies that timed out or were unreachable in this read: tried last from then on.
    let mut failing: HashSet<String> = HashSet::new();
    let mut start = first;
    while start <= last {
        let end = last.min(start + WINDOW_ENTRIES - 1);
        let mut window = Window::new(start, end, |e| plan.wanted(e, &opts.held_by));
        let mut requests = Requests::default();
        ctx.strided(stride, &mut window, &mut failing, &mut requests)
            .await?;
        if requests.all_dropped() {
            return Ok(false);
        }
        ctx.runs(&mut window, &mut failing, &mut requests).await?;
        if requests.all_dropped() {
            return Ok(false);
        }
        ctx.singles(&mut window, &failing).await?;
        out.extend(window.into_entries(plan.ledger)?);
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
    /// Replicas of `entry` in read order, unregistered and failing bookies last.
    fn order(&self, entry: i64, failing: &HashSet<String>) -> Vec<String> {
        let mut order = self.plan.replicas(entry, &self.opts.avoid);
        order.sort_by_key(|b| failing.contains(b));
        order
    }

    fn fetch(
        &self,
        replicas: Vec<String>,
        next: i64,
        last: i64,
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

    /// One strided stream per write-set start, all at once, from replicas not known to ignore
    /// strides.
    async fn strided(
        &self,
        stride: i64,
        window: &mut Window,
        failing: &mut HashSet<String>,
        requests: &mut Requests,
    ) -> Result<(), LedgerError> {
        let last = window.last();
        let mut tasks = Vec::new();
        for (start, stream_last) in stream_bounds(window.first, last, stride) {
            // Within a segment every entry of a start has the same write set.
            if !window.wants(start) {
                continue;
            }
            let replicas: Vec<String> = self
                .order(start, failing)
                .into_iter()
                .filter(|b| self.client.strided_reads(b) != Some(false))
                .collect();
            if !replicas.is_empty() {
                let fetch = self.fetch(replicas, start, stream_last, stride, window);
                tasks.push(tokio::spawn(fetch.run()));
            }
        }
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
                let last = run.first + run.count - 1;
                let fetch = self.fetch(vec![run.bookie], run.first, last, 1, window);
                inflight.push_back(tokio::spawn(fetch.run()));
            }
            let Some(task) = inflight.pop_front() else {
                return Ok(());
            };
            window.absorb(task.await.map_err(task_failed)?, failing, requests);
        }
    }

    /// Every entry still missing, one READ each with replica failover: corrupt copies and
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

/// The first and last entry of each write-set start within `first..=last`.
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

/// What the batch requests of one window came to: whether the bookies answer them at all.
#[derive(Debug, Default, Clone, Copy)]
struct Requests {
    replied: usize,
    dropped: usize,
}

impl Requests {
    /// Every batch request lost its connection and none was answered: what bookies without
    /// BP-62 do with opcode 7 (or every replica is down, which single reads will tell).
    fn all_dropped(&self) -> bool {
        self.replied == 0 && self.dropped > 0
    }
}

/// The entries of one window as they arrive, in entry order.
struct Window {
    first: i64,
    slots: Vec<Option<ReadEntry>>,
    /// Per slot, whether the read wants that entry; the others are neither read nor kept.
    wanted: Vec<bool>,
    /// Entry -> bookies that returned a copy failing its digest check.
    corrupt: HashMap<i64, Vec<String>>,
}

impl Window {
    /// A window over `first..=last` keeping the entries `wants`.
    fn new(first: i64, last: i64, wants: impl Fn(i64) -> bool) -> Window {
        let slots = (last - first + 1).max(0) as usize;
        Window {
            first,
            slots: vec![None; slots],
            wanted: (first..=last).map(wants).collect(),
            corrupt: HashMap::new(),
        }
    }

    fn last(&self) -> i64 {
        self.first + self.slots.len() as i64 - 1
    }

    fn wants(&self, entry: i64) -> bool {
        usize::try_from(entry - self.first)
            .ok()
            .and_then(|i| self.wanted.get(i).copied())
            .unwrap_or(false)
    }

    /// Keeps a verified entry if the window wants it and it is not in yet.
    fn offer(&mut self, entry: ReadEntry) {
        let Ok(i) = usize::try_from(entry.entry_id - self.first) else {
            return;
        };
        if self.wanted.get(i) != Some(&true) {
            return;
        }
        if let Some(slot @ None) = self.slots.get_mut(i) {
            *slot = Some(entry);
        }
    }

    /// The wanted entries not read yet, ascending.
    fn missing(&self) -> Vec<i64> {
        let first = self.first;
        (first..)
            .zip(self.slots.iter().zip(&self.wanted))
            .filter_map(|(e, (slot, wanted))| (*wanted && slot.is_none()).then_some(e))
            .collect()
    }

    fn returned_corrupt(&self, entry: i64, bookie: &str) -> bool {
        self.corrupt
            .get(&entry)
            .is_some_and(|bookies| bookies.iter().any(|b| b == bookie))
    }

    fn absorb(&mut self, got: Fetched, failing: &mut HashSet<String>, requests: &mut Requests) {
        for entry in got.entries {
            self.offer(entry);
        }
        for (entry, bookie) in got.corrupt {
            self.corrupt.entry(entry).or_default().push(bookie);
        }
        failing.extend(got.failing);
        requests.replied += got.requests.replied;
        requests.dropped += got.requests.dropped;
    }

    /// The wanted entries in order; every one must be filled.
    fn into_entries(self, ledger: i64) -> Result<Vec<ReadEntry>, LedgerError> {
        let first = self.first;
        (first..)
            .zip(self.slots.into_iter().zip(self.wanted))
            .filter(|(_, (_, wanted))| *wanted)
            .map(|(entry, (slot, _))| {
                slot.ok_or_else(|| LedgerError::ReadFailed {
                    ledger,
                    entry,
                    last: "not read".into(),
                    missing: false,
                })
            })
            .collect()
    }
}

/// What one fetch brought back.
#[derive(Default)]
struct Fetched {
    entries: Vec<ReadEntry>,
    corrupt: Vec<(i64, String)>,
    failing: Vec<String>,
    requests: Requests,
}

/// Entries `next, next + step, ... ..= last` from the first replica that serves them, batch
/// request after batch request (strided when `step > 1`), moving to the next replica when one
/// fails, lacks an entry, or ignores the stride.
struct Fetch {
    client: Arc<BookieClient>,
    ledger: i64,
    digest: DigestManager,
    max_bytes: i64,
    flags: u16,
    master_key: Option<Bytes>,
    replicas: Vec<String>,
    next: i64,
    last: i64,
    step: i64,
    /// Consecutive entries up to here are kept from a bookie that ignored the stride.
    window_last: i64,
}

impl Fetch {
    async fn run(mut self) -> Fetched {
        let mut got = Fetched::default();
        let mut at = 0;
        while self.next <= self.last && at < self.replicas.len() {
            let bookie = self.replicas[at].as_str();
            let count = ((self.last - self.next) / self.step + 1).min(i32::MAX as i64) as i32;
            let request = self.client.batch_read_request(
                bookie,
                self.ledger,
                self.next,
                count,
                self.max_bytes,
                self.flags,
                self.master_key.clone(),
                (self.step > 1).then_some(self.step as i32),
            );
            match self.client.send_async(request).await {
                Ok(Reply::StridedEntries(bodies)) if !bodies.is_empty() => {
                    got.requests.replied += 1;
                    let n = self.take(&mut got, bookie, &bodies, self.step, self.last);
                    self.next += n * self.step;
                }
                Ok(Reply::Entries(bodies)) if !bodies.is_empty() => {
                    got.requests.replied += 1;
                    if self.step == 1 {
                        let n = self.take(&mut got, bookie, &bodies, 1, self.last);
                        self.next += n;
                    } else {
                        // No stride acknowledged: consecutive entries from `next`, as good as
                        // any; the rest of this start goes to the next replica.
                        self.client.note_strides_ignored(bookie);
                        self.take(&mut got, bookie, &bodies, 1, self.window_last);
                        self.next += self.step;
                        at += 1;
                    }
                }
                Ok(_) => at += 1,
                Err(e) => {
                    log::debug!(
                        "ledger {}: batch read from {bookie} at entry {}: {e}",
                        self.ledger,
                        self.next
                    );
                    if matches!(e, ClientError::Unavailable { .. }) {
                        got.requests.dropped += 1;
                    }
                    if matches!(
                        e,
                        ClientError::Unavailable { .. } | ClientError::Timeout { .. }
                    ) {
                        got.failing.push(bookie.to_string());
                    }
                    at += 1;
                }
            }
        }
        got
    }

    /// Keeps the verified entries of a reply whose entry `i` is `next + i * step`, up to
    /// `last`, noting corrupt copies; returns how many entries the reply held.
    fn take(&self, got: &mut Fetched, bookie: &str, bodies: &[Bytes], step: i64, last: i64) -> i64 {
        for (i, body) in bodies.iter().enumerate() {
            let entry = self.next + i as i64 * step;
            if entry > last {
                break;
            }
            match verify(&self.digest, body.clone(), entry) {
                Ok(v) => got.entries.push(v),
                Err(e) => {
                    log::warn!("ledger {}: entry {entry} from {bookie}: {e}", self.ledger);
                    got.corrupt.push((entry, bookie.to_string()));
                }
            }
        }
        bodies.len() as i64
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::digest::{master_key, DigestType};
    use crate::ledger::{read_range, FailureSink, LedgerWriter, Segment, WriterSpec};
    use crate::protocol::FLAG_RECOVERY_ADD;
    use crate::runtime::runtime;
    use crate::testing::{client_config, test_bookie, TestBookie};

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

    #[test]
    fn each_write_set_start_is_one_stream() {
        assert_eq!(stream_bounds(0, 9, 3), vec![(0, 9), (1, 7), (2, 8)]);
        assert_eq!(stream_bounds(4, 5, 3), vec![(4, 4), (5, 5)]);
        assert_eq!(stream_bounds(7, 7, 5), vec![(7, 7)]);
    }

    #[test]
    fn a_bookie_holds_the_entries_up_to_its_write_set_position() {
        // E=3, Qw=2: entry 0 lives on b0 (position 0) and b1 (position 1).
        let p = read_plan(2, vec![(0, names(3)), (10, names(3))]);
        assert_eq!(p.held_from(0, "b0"), 1);
        assert_eq!(p.held_from(0, "b1"), 2);
        assert_eq!(p.held_from(0, "b2"), 0);
        assert_eq!(p.held_from(4, "b2"), 2); // 4 and 5 (write sets {1,2} and {2,0})
        assert_eq!(p.held_from(9, "b1"), 1); // the segment ends at 10
        assert_eq!(p.held_from(0, "elsewhere"), 0);
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

    #[test]
    fn a_window_keeps_the_first_copy_of_its_own_entries_in_order() {
        let entry = |id: i64, payload: &'static [u8]| ReadEntry {
            entry_id: id,
            lac: id - 1,
            length: 0,
            payload: Bytes::from_static(payload),
        };
        let mut w = Window::new(10, 13, |_| true);
        assert_eq!(w.missing(), vec![10, 11, 12, 13]);
        w.offer(entry(12, b"a"));
        w.offer(entry(12, b"b"));
        w.offer(entry(9, b"x"));
        w.offer(entry(14, b"x"));
        assert_eq!(w.missing(), vec![10, 11, 13]);
        let mut failing = HashSet::new();
        let mut requests = Requests::default();
        w.absorb(
            Fetched {
                entries: vec![entry(13, b"d"), entry(10, b"c")],
                corrupt: vec![(11, "b1".into())],
                failing: vec!["b2".into()],
                requests: Requests {
                    replied: 0,
                    dropped: 1,
                },
            },
            &mut failing,
            &mut requests,
        );
        assert!(w.returned_corrupt(11, "b1") && !w.returned_corrupt(11, "b0"));
        assert!(failing.contains("b2") && requests.all_dropped());
        assert!(matches!(
            Window::new(10, 13, |_| true).into_entries(1),
            Err(LedgerError::ReadFailed { entry: 10, .. })
        ));
        w.offer(entry(11, b"e"));
        let got = w.into_entries(1).unwrap();
        let ids: Vec<i64> = got.iter().map(|e| e.entry_id).collect();
        assert_eq!(ids, vec![10, 11, 12, 13]);
        assert_eq!(got[2].payload, Bytes::from_static(b"a"));
    }

    /// Bookies on loopback, each with its own directory.
    struct Bookies {
        _dirs: Vec<tempfile::TempDir>,
        servers: Vec<TestBookie>,
        addrs: Vec<String>,
    }

    fn bookies(n: usize) -> Bookies {
        let dirs: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
        let servers: Vec<_> = dirs.iter().map(|d| test_bookie(d.path())).collect();
        let addrs = servers
            .iter()
            .map(|(_, s)| s.local_addr().to_string())
            .collect();
        Bookies {
            _dirs: dirs,
            servers,
            addrs,
        }
    }

    /// (single READs, BATCH_READ_ENTRYs) one bookie answered, from its server metrics. A
    /// macro, not a function: the ledger engine names no server type, even in tests.
    macro_rules! batch_and_single {
        ($stats:expr) => {{
            let st = $stats;
            let reads = st.read_entry_request.ok.snapshot().count
                + st.read_entry_request.failed.snapshot().count;
            let batches = st.batch_read_entry_request.snapshot().count;
            (reads - batches, batches)
        }};
    }

    impl Bookies {
        /// (single READs, BATCH_READ_ENTRYs) the bookies served so far. A request is
        /// counted once its response is written, just after the client may have it: wait
        /// until the counts stop moving.
        fn requests(&self) -> (u64, u64) {
            let mut last = self.counts();
            for _ in 0..40 {
                std::thread::sleep(std::time::Duration::from_millis(25));
                let now = self.counts();
                if now == last {
                    break;
                }
                last = now;
            }
            last
        }

        fn counts(&self) -> (u64, u64) {
            self.servers
                .iter()
                .map(|(_, s)| batch_and_single!(s.stats()))
                .fold((0, 0), |(r, b), (r2, b2)| (r + r2, b + b2))
        }
    }

    const LEDGER: i64 = 7;

    fn digest() -> DigestManager {
        DigestManager::new(LEDGER, b"", DigestType::Crc32c)
    }

    fn payload(e: i64) -> Bytes {
        Bytes::from(format!("entry {e} ").repeat(1 + e as usize % 7))
    }

    /// Writes `n` entries with quorum `qw` over `ensemble`.
    fn write(client: &Arc<BookieClient>, ensemble: &[String], qw: usize, n: i64) {
        let sink: FailureSink = Arc::new(|f| panic!("no bookie may fail here: {f:?}"));
        let spec = WriterSpec {
            ledger: LEDGER,
            writer_id: 1,
            qw,
            qa: qw,
            master_key: Bytes::copy_from_slice(&master_key(b"")),
            digest: digest(),
            ensemble: ensemble.to_vec(),
            next_entry: 0,
            length: 0,
            flags: 0,
        };
        let writer = LedgerWriter::new(client.clone(), spec, sink).unwrap();
        let last = writer
            .append_all_blocking((0..n).map(payload), 64, &|| false)
            .unwrap();
        assert_eq!(last, n - 1);
    }

    fn read_all(client: &Arc<BookieClient>, plan: &ReadPlan, n: i64) -> bool {
        let opts = ReadOptions {
            batch: true,
            window: 16,
            ..ReadOptions::default()
        };
        let (entries, batch_ok) = runtime()
            .unwrap()
            .block_on(read_range(client, plan, &opts, 0, n - 1))
            .unwrap();
        let ids: Vec<i64> = entries.iter().map(|e| e.entry_id).collect();
        assert_eq!(ids, (0..n).collect::<Vec<_>>());
        for e in &entries {
            assert_eq!(e.payload, payload(e.entry_id), "entry {}", e.entry_id);
        }
        batch_ok
    }

    fn read_plan(qw: usize, segments: Vec<(i64, Vec<String>)>) -> ReadPlan {
        let segments = segments.into_iter().map(Segment::from).collect();
        ReadPlan::new(LEDGER, qw, digest(), segments, Vec::new(), 5 << 20).unwrap()
    }

    #[test]
    fn each_write_set_start_comes_from_one_bookie_in_one_request() {
        let b = bookies(5);
        let client = Arc::new(BookieClient::new(client_config()));
        write(&client, &b.addrs, 2, 1000);
        let plan = read_plan(2, vec![(0, b.addrs.clone())]);
        assert!(read_all(&client, &plan, 1000));
        // E=5, Qw=2: five strided requests, no single read.
        assert_eq!(b.requests(), (0, 5));
        for a in &b.addrs {
            assert_eq!(client.strided_reads(a), Some(true));
        }
        // Bookies that ignore strides (as Java's do) are read as runs of Qw entries.
        for a in &b.addrs {
            client.note_strides_ignored(a);
        }
        assert!(read_all(&client, &plan, 1000));
        assert_eq!(b.requests(), (0, 5 + 500));
    }

    #[test]
    fn a_stopped_bookie_hands_its_stream_to_the_next_replica() {
        let b = bookies(3);
        let writer_client = Arc::new(BookieClient::new(client_config()));
        write(&writer_client, &b.addrs, 2, 600);
        b.servers[1].1.stop(Duration::from_millis(10));
        let client = Arc::new(BookieClient::new(client_config()));
        let plan = read_plan(2, vec![(0, b.addrs.clone())]);
        assert!(read_all(&client, &plan, 600));
        // Three streams; the one of bookie 1 moves to bookie 2. No single reads.
        let (singles, batches) = b.requests();
        assert_eq!((singles, batches), (0, 3));
    }

    #[test]
    fn a_corrupt_copy_is_read_again_from_another_replica() {
        let b = bookies(3);
        let client = Arc::new(BookieClient::new(client_config()));
        write(&client, &b.addrs, 2, 300);
        // Entry 100 lives on bookies 1 and 2 (100 mod 3 = 1); bookie 1 gets a copy whose
        // digest does not match (a recovery add replaces what a bookie stores).
        let good = digest().package(100, 99, 0, &payload(100));
        let mut bad = good.to_vec();
        *bad.last_mut().unwrap() ^= 0xFF;
        let add = client.add_request(
            &b.addrs[1],
            LEDGER,
            100,
            Bytes::copy_from_slice(&master_key(b"")),
            Bytes::from(bad),
            FLAG_RECOVERY_ADD,
        );
        runtime().unwrap().block_on(client.send_async(add)).unwrap();
        let plan = read_plan(2, vec![(0, b.addrs.clone())]);
        assert!(read_all(&client, &plan, 300));
        assert_eq!(b.requests(), (1, 3));
    }

    #[test]
    fn segments_are_read_each_with_their_own_ensemble() {
        let b = bookies(4);
        let client = Arc::new(BookieClient::new(client_config()));
        write(&client, &b.addrs[..3], 2, 200);
        // A second segment from entry 120 on bookies 3, 1, 2 holds the same bytes there: the
        // reads of 120.. must go to its ensemble (bookie 0 holds entries of positions 0 and 2
        // of 120.. too, but bookie 3 is asked for position 0).
        let second = vec![b.addrs[3].clone(), b.addrs[1].clone(), b.addrs[2].clone()];
        let sink: FailureSink = Arc::new(|f| panic!("no bookie may fail here: {f:?}"));
        let spec = WriterSpec {
            ledger: LEDGER,
            writer_id: 2,
            qw: 2,
            qa: 2,
            master_key: Bytes::copy_from_slice(&master_key(b"")),
            digest: digest(),
            ensemble: second.clone(),
            next_entry: 120,
            length: 0,
            flags: FLAG_RECOVERY_ADD,
        };
        let writer = LedgerWriter::new(client.clone(), spec, sink).unwrap();
        writer
            .append_all_blocking((120..200).map(payload), 64, &|| false)
            .unwrap();
        let plan = read_plan(2, vec![(0, b.addrs[..3].to_vec()), (120, second)]);
        assert!(read_all(&client, &plan, 200));
        assert_eq!(b.requests(), (0, 6));
        assert_eq!(batch_and_single!(b.servers[3].1.stats()).1, 1);
    }

    #[test]
    fn a_window_neither_wants_nor_keeps_the_entries_it_was_not_asked_for() {
        let entry = |id: i64| ReadEntry {
            entry_id: id,
            lac: id - 1,
            length: 0,
            payload: Bytes::new(),
        };
        let mut w = Window::new(10, 15, |e| e % 3 != 0);
        assert!(!w.wants(12) && w.wants(13) && !w.wants(9) && !w.wants(16));
        assert_eq!(w.missing(), vec![10, 11, 13, 14]);
        for id in 10..=15 {
            w.offer(entry(id));
        }
        let ids: Vec<i64> = w
            .into_entries(1)
            .unwrap()
            .iter()
            .map(|e| e.entry_id)
            .collect();
        assert_eq!(ids, vec![10, 11, 13, 14]);
    }

    /// Reads `first..=last` keeping the entries held by `held_by`, checking their payloads.
    fn read_held(
        client: &Arc<BookieClient>,
        plan: &ReadPlan,
        batch: bool,
        held_by: &[usize],
        (first, last): (i64, i64),
    ) -> Vec<i64> {
        let opts = ReadOptions {
            batch,
            window: 16,
            held_by: held_by.to_vec(),
            ..ReadOptions::default()
        };
        let (entries, _) = runtime()
            .unwrap()
            .block_on(read_range(client, plan, &opts, first, last))
            .unwrap();
        for e in &entries {
            assert_eq!(e.payload, payload(e.entry_id), "entry {}", e.entry_id);
        }
        entries.iter().map(|e| e.entry_id).collect()
    }

    #[test]
    fn a_copy_of_a_lost_bookie_reads_only_the_write_sets_it_held() {
        let b = bookies(5);
        let client = Arc::new(BookieClient::new(client_config()));
        write(&client, &b.addrs, 2, 1000);
        let plan = read_plan(2, vec![(0, b.addrs.clone())]);
        // E=5, Qw=2: position 1 is in the write sets of starts 0 and 1 only.
        let held: Vec<i64> = (0..1000).filter(|e| e % 5 <= 1).collect();
        assert_eq!(read_held(&client, &plan, true, &[1], (0, 999)), held);
        assert_eq!(b.requests(), (0, 2));
        // Two lost positions, a range not starting at 0, and single reads alike.
        let held: Vec<i64> = (3..=904).filter(|e| [1, 2, 3].contains(&(e % 5))).collect();
        assert_eq!(read_held(&client, &plan, true, &[2, 3], (3, 904)), held);
        assert_eq!(b.requests(), (0, 2 + 3));
        let held: Vec<i64> = (3..=40).filter(|e| [1, 2, 3].contains(&(e % 5))).collect();
        assert_eq!(read_held(&client, &plan, false, &[2, 3], (3, 40)), held);
        let singles = held.len() as u64;
        assert_eq!(b.requests(), (singles, 5));
        // Bookies that ignore strides: runs of the held starts (0 and 1 of every 5, on
        // position 1's bookie), one request each.
        for a in &b.addrs {
            client.note_strides_ignored(a);
        }
        let held: Vec<i64> = (0..1000).filter(|e| e % 5 <= 1).collect();
        assert_eq!(read_held(&client, &plan, true, &[1], (0, 999)), held);
        assert_eq!(b.requests(), (singles, 5 + 200));
        // A position outside the ensemble is refused before anything is sent.
        let opts = ReadOptions {
            batch: true,
            held_by: vec![5],
            ..ReadOptions::default()
        };
        let refused = runtime()
            .unwrap()
            .block_on(read_range(&client, &plan, &opts, 0, 9));
        assert!(matches!(refused, Err(LedgerError::InvalidArgument(_))));
    }

    #[test]
    fn every_entry_of_a_segment_that_is_not_striped_is_held_by_each_position() {
        let b = bookies(2);
        let client = Arc::new(BookieClient::new(client_config()));
        write(&client, &b.addrs, 2, 50);
        let plan = read_plan(2, vec![(0, b.addrs.clone())]);
        assert_eq!(
            read_held(&client, &plan, true, &[0], (0, 49)),
            (0..50).collect::<Vec<_>>()
        );
    }
}
