//! The read engine against real bookies on loopback: which requests a read sends (counted by
//! the bookies' server metrics), fail-over past stopped bookies and corrupt copies, segments,
//! `held_by`, whole and striped segments alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::digest::{master_key, DigestManager, DigestType};
use crate::ledger::stats::client_stats;
use crate::ledger::{FailureSink, LedgerWriter, WriterSpec};
use crate::protocol::FLAG_RECOVERY_ADD;
use crate::runtime::runtime;
use crate::testing::{client_config, test_bookie, TestBookie};

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

/// (single READs, BATCH_READ_ENTRYs) one bookie answered, from its server metrics. A macro,
/// not a function: the ledger engine names no server type, even in tests.
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
    /// Checks the (single READs, BATCH_READ_ENTRYs) the bookies served so far. A request is
    /// counted once its response is written, just after the client may have it, and a read
    /// sends nothing once it returned: wait (at most 10 s) for the counts to reach `expected`.
    #[track_caller]
    fn expect_requests(&self, expected: (u64, u64)) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut counts = self.counts();
        while (counts.0 < expected.0 || counts.1 < expected.1) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            counts = self.counts();
        }
        assert_eq!(counts, expected, "(single reads, batch reads) served");
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

/// Stores a copy of `entry` whose digest does not match on `bookie` (a recovery add replaces
/// what a bookie stores).
fn corrupt_copy(client: &Arc<BookieClient>, bookie: &str, entry: i64) {
    let good = digest().package(entry, entry - 1, 0, &payload(entry));
    let mut bad = good.to_vec();
    *bad.last_mut().unwrap() ^= 0xFF;
    let add = client.add_request(
        bookie,
        LEDGER,
        entry,
        Bytes::copy_from_slice(&master_key(b"")),
        Bytes::from(bad),
        FLAG_RECOVERY_ADD,
    );
    runtime().unwrap().block_on(client.send_async(add)).unwrap();
}

#[test]
fn check_range_refuses_bad_and_huge_ranges() {
    assert!(check_range(5, 4).is_err());
    assert!(check_range(-1, 4).is_err());
    assert!(check_range(0, MAX_READ_ENTRIES).is_err());
    assert!(check_range(0, MAX_READ_ENTRIES - 1).is_ok());
}

#[test]
fn each_write_set_start_comes_from_one_bookie_in_one_request() {
    let b = bookies(5);
    let client = Arc::new(BookieClient::new(client_config()));
    write(&client, &b.addrs, 2, 1000);
    let plan = read_plan(2, vec![(0, b.addrs.clone())]);
    assert!(read_all(&client, &plan, 1000));
    // E=5, Qw=2: five strided requests, no single read.
    b.expect_requests((0, 5));
    for a in &b.addrs {
        assert_eq!(client.strided_reads(a), Some(true));
    }
    // Bookies that ignore strides (as Java's do) are read as runs of Qw entries.
    for a in &b.addrs {
        client.note_strides_ignored(a);
    }
    assert!(read_all(&client, &plan, 1000));
    b.expect_requests((0, 5 + 500));
}

#[test]
fn a_whole_segment_is_one_stream_of_plain_batch_reads() {
    let b = bookies(3);
    let client = Arc::new(BookieClient::new(client_config()));
    write(&client, &b.addrs, 3, 1000);
    let plan = read_plan(3, vec![(0, b.addrs.clone())]);
    assert!(read_all(&client, &plan, 1000));
    b.expect_requests((0, 1));
    // Plain batch reads whatever the bookies do with strides.
    for a in &b.addrs {
        client.note_strides_ignored(a);
    }
    assert!(read_all(&client, &plan, 1000));
    b.expect_requests((0, 2));
    // A corrupt copy on the first replica: the rest of its answer is kept, that entry read
    // again from another replica.
    corrupt_copy(&client, &b.addrs[0], 400);
    assert!(read_all(&client, &plan, 1000));
    b.expect_requests((1, 3));
    // The first replica stopped: its stream goes to the next one.
    b.servers[0].1.stop(Duration::from_millis(10));
    let client = Arc::new(BookieClient::new(client_config()));
    assert!(read_all(&client, &plan, 1000));
    b.expect_requests((1, 4));
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
    b.expect_requests((0, 3));
}

#[test]
fn a_corrupt_copy_is_read_again_from_another_replica() {
    let b = bookies(3);
    let client = Arc::new(BookieClient::new(client_config()));
    write(&client, &b.addrs, 2, 300);
    // Entry 100 lives on bookies 1 and 2 (100 mod 3 = 1); bookie 1 gets a corrupt copy.
    corrupt_copy(&client, &b.addrs[1], 100);
    let plan = read_plan(2, vec![(0, b.addrs.clone())]);
    assert!(read_all(&client, &plan, 300));
    b.expect_requests((1, 3));
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
    b.expect_requests((0, 6));
    assert_eq!(batch_and_single!(b.servers[3].1.stats()).1, 1);
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
    b.expect_requests((0, 2));
    // Two lost positions, a range not starting at 0, and single reads alike.
    let held: Vec<i64> = (3..=904).filter(|e| [1, 2, 3].contains(&(e % 5))).collect();
    assert_eq!(read_held(&client, &plan, true, &[2, 3], (3, 904)), held);
    b.expect_requests((0, 2 + 3));
    let held: Vec<i64> = (3..=40).filter(|e| [1, 2, 3].contains(&(e % 5))).collect();
    assert_eq!(read_held(&client, &plan, false, &[2, 3], (3, 40)), held);
    let singles = held.len() as u64;
    b.expect_requests((singles, 5));
    // Bookies that ignore strides: runs of the held starts (0 and 1 of every 5, on
    // position 1's bookie), one request each.
    for a in &b.addrs {
        client.note_strides_ignored(a);
    }
    let held: Vec<i64> = (0..1000).filter(|e| e % 5 <= 1).collect();
    assert_eq!(read_held(&client, &plan, true, &[1], (0, 999)), held);
    b.expect_requests((singles, 5 + 200));
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

/// A bookie that takes connections and never answers, as a SIGSTOPped one does: the kernel
/// completes connects into the listener's backlog and buffers the requests.
fn silent_bookie() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

fn read_some(client: &Arc<BookieClient>, plan: &ReadPlan, batch: bool, n: i64) {
    let opts = ReadOptions {
        batch,
        window: 8,
        ..ReadOptions::default()
    };
    let (entries, _) = runtime()
        .unwrap()
        .block_on(read_range(client, plan, &opts, 0, n - 1))
        .unwrap();
    let ids: Vec<i64> = entries.iter().map(|e| e.entry_id).collect();
    assert_eq!(ids, (0..n).collect::<Vec<_>>());
}

#[test]
fn a_silent_replica_is_joined_by_the_next_and_then_read_last() {
    let b = bookies(3);
    let writer_client = Arc::new(BookieClient::new(client_config()));
    write(&writer_client, &b.addrs, 3, 300);
    let (_listener, silent) = silent_bookie();
    // The silent bookie stands first in entry 0's write set, in the place of bookie 0.
    let ensemble = vec![silent.clone(), b.addrs[1].clone(), b.addrs[2].clone()];
    let plan = read_plan(3, vec![(0, ensemble)]);
    let client = Arc::new(BookieClient::new(client_config()));
    let spec = Some(Duration::from_millis(50));
    client
        .set_read_policy(crate::config::ReadPolicy {
            first_speculative_timeout: spec,
            max_speculative_timeout: Duration::from_millis(50),
            ..crate::config::ReadPolicy::default()
        })
        .unwrap();
    let speculated = client_stats().speculative_reads.get();
    // The batch request to the silent bookie stays outstanding (the read timeout is 5 s); a
    // speculative one to the next replica answers and the stream goes on there.
    read_some(&client, &plan, true, 300);
    assert!(client_stats().speculative_reads.get() > speculated);
    let health = client.bookie_health(&silent);
    assert!(health.slow_answers >= 1, "{health:?}");
    assert!(
        health.pending >= 1,
        "the silent bookie's request is still outstanding"
    );
    // Now slow, it goes last: single reads (a third of them would start there) send it nothing.
    // Longer waits from here, so that a loaded machine's slow healthy answer does not reach it.
    client
        .set_read_policy(crate::config::ReadPolicy {
            first_speculative_timeout: Some(Duration::from_millis(500)),
            max_speculative_timeout: Duration::from_secs(5),
            ..crate::config::ReadPolicy::default()
        })
        .unwrap();
    let pending = health.pending;
    read_some(&client, &plan, false, 30);
    assert_eq!(client.bookie_health(&silent).pending, pending);
    assert_eq!(client.bookie_health(&b.addrs[1]).pending, 0);
}

#[test]
fn without_speculation_a_silent_replica_costs_a_timeout_and_is_then_read_last() {
    let b = bookies(3);
    let writer_client = Arc::new(BookieClient::new(client_config()));
    write(&writer_client, &b.addrs, 3, 30);
    let (_listener, silent) = silent_bookie();
    let ensemble = vec![silent.clone(), b.addrs[1].clone(), b.addrs[2].clone()];
    let plan = read_plan(3, vec![(0, ensemble)]);
    let client = Arc::new(BookieClient::new(crate::config::ClientConfig {
        read_timeout: Duration::from_millis(1000),
        ..client_config()
    }));
    client
        .set_read_policy(crate::config::ReadPolicy {
            first_speculative_timeout: None,
            ..crate::config::ReadPolicy::default()
        })
        .unwrap();
    read_some(&client, &plan, false, 30);
    let health = client.bookie_health(&silent);
    assert!(health.failures >= 1, "{health:?}");
    assert_eq!(health.slow_answers, 0);
    assert_eq!(health.pending, 0, "timed out, nothing outstanding");
    read_some(&client, &plan, false, 30);
    let after = client.bookie_health(&silent);
    assert_eq!(
        (after.failures, after.pending),
        (health.failures, 0),
        "asked nothing more"
    );
}
