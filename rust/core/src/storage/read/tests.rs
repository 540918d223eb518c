//! Behaviour of the read path over a real storage: range reads by BookKeeper's batch rules,
//! the rest of a run read ahead, read-ahead threads ahead of a scan, reads racing compaction,
//! corrupt records met reading ahead.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::config::StorageConfig;
use crate::error::{Result, StorageError};
use crate::storage::tests::{add, open, read_all, small_cache_config, wait};
use crate::storage::{LedgerStorage, RangeLimits};

#[test]
fn range_reads_follow_batch_read_rules() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    for e in 0..10 {
        add(&s, 2, e, &[e as u8; 100]).unwrap();
    }
    add(&s, 2, 12, b"after a gap").unwrap();
    let lim = |c, b| RangeLimits {
        max_count: c,
        max_bytes: b,
        per_entry_overhead: 4,
        stride: 1,
    };
    assert_eq!(s.read_range(2, 0, lim(0, usize::MAX)).unwrap().len(), 10);
    assert_eq!(s.read_range(2, 0, lim(3, usize::MAX)).unwrap().len(), 3);
    assert_eq!(s.read_range(2, 0, lim(0, 312)).unwrap().len(), 3);
    assert_eq!(s.read_range(2, 0, lim(0, 311)).unwrap().len(), 2);
    assert_eq!(s.read_range(2, 5, lim(0, 1)).unwrap().len(), 1);
    assert!(matches!(
        s.read_range(2, 10, lim(0, 1000)),
        Err(StorageError::NoEntry { entry: 10, .. })
    ));
    assert!(matches!(
        s.read_range(3, 0, lim(0, 1000)),
        Err(StorageError::NoLedger(3))
    ));
    // Strided: every third entry from 1 stops at the missing 10; from 0 it steps over the gap
    // (9, then 12): only the entries asked for count.
    let strided = |first, stride, c| {
        let limits = RangeLimits {
            stride,
            ..lim(c, usize::MAX)
        };
        s.read_range(2, first, limits).unwrap()
    };
    let ids = |v: Vec<Bytes>| -> Vec<u8> { v.iter().map(|e| e[0]).collect() };
    assert_eq!(ids(strided(1, 3, 0)), vec![1, 4, 7]);
    assert_eq!(ids(strided(0, 3, 0)), vec![0, 3, 6, 9, b'a']);
    assert_eq!(ids(strided(0, 3, 2)), vec![0, 3]);
    assert_eq!(ids(strided(2, 5, 0)), vec![2, 7, b'a']);
}

/// A flush that spans two entry logs indexes a ledger's entries in both through one segment;
/// once compaction moves the second log's entries and deletes it, a range read that starts in
/// the first log must not follow that segment into the deleted one (it read a "missing" log,
/// cut the batch short and counted a corruption).
#[test]
fn range_reads_follow_entries_that_compaction_moved_out_of_a_flush() {
    for direct in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::StorageConfig {
            entry_log_direct_io: direct,
            entry_log_direct_reads: direct,
            ..small_cache_config(dir.path())
        };
        let s = LedgerStorage::open(cfg).unwrap();
        let live = |e: u64| vec![(e % 251) as u8; 10_000];
        // One flush, sorted by ledger: ledger 3's 30 entries (300 KB) roll over the 256 KiB
        // log limit, and ledger 4's dead weight follows them, filling the second log (sealed
        // when the rest of ledger 4 rolls over into a third).
        for e in 0..30 {
            add(&s, 3, e, &live(e)).unwrap();
        }
        for e in 0..30 {
            add(&s, 4, e, &[4u8; 10_000]).unwrap();
        }
        s.checkpoint().unwrap();
        wait(|d| s.delete_ledger(4, d)).unwrap();
        let report = s.compact(0.5).unwrap();
        assert!(report.logs_compacted >= 1, "{report:?}");
        let corruptions = s.parts.stats.corrupt_entries.get();
        let got = read_all(&s, 3);
        assert_eq!(got.len(), 30, "direct I/O {direct}");
        for (e, data) in got.iter().enumerate() {
            assert_eq!(&data[..], &live(e as u64)[..]);
        }
        assert_eq!(s.parts.stats.corrupt_entries.get(), corruptions);
    }
}

/// A batch read that ends inside a run of the ledger's records reads the rest of the run with it
/// (one I/O per run): the next batch is served from the read-ahead cache.
#[test]
fn a_batch_that_ends_inside_a_run_reads_the_rest_ahead() {
    for direct_reads in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::StorageConfig {
            entry_log_direct_reads: direct_reads,
            ..small_cache_config(dir.path())
        };
        let s = LedgerStorage::open(cfg).unwrap();
        // 30 entries of 6,000 bytes: one run within one log (the logs roll over at 256 KiB here),
        // and the first batch's one read, its rest included, is large enough to be direct.
        let data = |e: u64| vec![(e % 241) as u8; 6_000];
        for e in 0..30 {
            add(&s, 9, e, &data(e)).unwrap();
        }
        s.checkpoint().unwrap();
        let batch = |first: u64| {
            let limits = RangeLimits {
                max_count: 10,
                max_bytes: usize::MAX,
                per_entry_overhead: 0,
                stride: 1,
            };
            s.read_range(9, first, limits).unwrap()
        };
        let first = batch(0);
        assert_eq!(first.len(), 10);
        let ahead = s.parts.stats.read_ahead_entries.get();
        assert!(ahead > 0, "the run's rest was read ahead");
        let second = batch(10);
        assert_eq!(second.len(), 10);
        for (e, got) in (0..).zip(first.iter().chain(&second)) {
            assert_eq!(
                &got[..],
                &data(e)[..],
                "entry {e}, direct reads {direct_reads}"
            );
        }
        // The second batch took its entries from the read-ahead cache: no entry-log read, so
        // nothing more read ahead.
        assert!(
            s.parts.reader.read_ahead.take(9, 10).is_none(),
            "taken by the batch"
        );
        assert_eq!(s.parts.stats.read_ahead_entries.get(), ahead);
    }
}

/// Reads racing compaction: a read that found an entry in the index just before compaction
/// removed its log looks again, and is answered with the entry (never a "missing log"
/// corruption, a short batch or an error).
#[test]
fn reads_racing_compaction_find_the_moved_entries() {
    for direct_reads in [false, true] {
        reads_racing_compaction(direct_reads);
    }
}

fn reads_racing_compaction(direct_reads: bool) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::config::StorageConfig {
        entry_log_direct_reads: direct_reads,
        ..small_cache_config(dir.path())
    };
    let s = Arc::new(LedgerStorage::open(cfg).unwrap());
    let live = |e: u64| vec![(e % 251) as u8; 10_000];
    for e in 0..30 {
        add(&s, 3, e, &live(e)).unwrap();
    }
    s.checkpoint().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if r == 0 {
                        let got = read_all(&s, 3);
                        assert_eq!(got.len(), 30, "after {reads} reads");
                        for (e, data) in got.iter().enumerate() {
                            assert_eq!(&data[..], &live(e as u64)[..]);
                        }
                    } else if r == 1 {
                        // Batches that end inside a run take the run's rest ahead.
                        let mut e = 0u64;
                        while e < 30 {
                            let limits = RangeLimits {
                                max_count: 7,
                                max_bytes: usize::MAX,
                                per_entry_overhead: 0,
                                stride: 1,
                            };
                            let got = s.read_range(3, e, limits).unwrap();
                            assert!(!got.is_empty());
                            for data in &got {
                                assert_eq!(&data[..], &live(e)[..], "entry {e}");
                                e += 1;
                            }
                        }
                    } else {
                        let e = reads % 30;
                        assert_eq!(&s.read_entry(3, e).unwrap()[..], &live(e)[..]);
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let mut compacted = 0;
    for round in 0..40u64 {
        // Dead weight beside ledger 3's entries, so that each compaction moves them again.
        let dead = 100 + round;
        for e in 0..30 {
            add(&s, dead, e, &[7u8; 10_000]).unwrap();
        }
        s.checkpoint().unwrap();
        wait(|d| s.delete_ledger(dead, d)).unwrap();
        compacted += s.compact(0.9).unwrap().logs_compacted;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert!(compacted >= 20, "{compacted}");
    assert_eq!(s.parts.stats.corrupt_entries.get(), 0);
}

/// Ledgers 1..=3 written interleaved in `rounds` flushes of 20 entries of 8,000 bytes each (a
/// 160 KB run per ledger per flush), entries telling their ledger and id; the storage closed.
fn three_interleaved_ledgers(dir: &Path, threads: usize, rounds: u64) -> StorageConfig {
    let cfg = crate::config::StorageConfig {
        read_ahead_threads: threads,
        log_size_limit: 64 << 20,
        ..small_cache_config(dir)
    };
    let s = LedgerStorage::open(cfg.clone()).unwrap();
    for round in 0..rounds {
        for l in 1..=3u64 {
            for e in round * 20..round * 20 + 20 {
                add(&s, l, e, &scan_payload(l, e)).unwrap();
            }
        }
        s.checkpoint().unwrap();
    }
    s.close().unwrap();
    cfg
}

fn scan_payload(l: u64, e: u64) -> Vec<u8> {
    format!("<ledger {l} entry {e:05}>")
        .into_bytes()
        .into_iter()
        .cycle()
        .take(8_000)
        .collect()
}

fn batch_of(s: &LedgerStorage, ledger: u64, first: u64, count: usize) -> Result<Vec<Bytes>> {
    let limits = RangeLimits {
        max_count: count,
        max_bytes: usize::MAX,
        per_entry_overhead: 0,
        stride: 1,
    };
    s.read_range(ledger, first, limits)
}

/// Whether this machine's file system takes direct reads of the storage's first entry log (the
/// read-ahead threads read only logs that are read directly).
fn reads_directly(s: &LedgerStorage) -> bool {
    s.parts.stores.entrylog.reads_directly(0) || s.parts.stores.entrylog.reads_directly(1)
}

/// With direct reads the kernel reads nothing ahead: the read-ahead threads read a scanned
/// ledger's next runs (each in another place, between the other ledgers' runs) into the
/// read-ahead cache while the scan is served, and the scan takes them from there.
#[test]
fn a_scan_of_a_ledger_among_others_is_read_ahead_by_the_threads() {
    for threads in [4, 0] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = three_interleaved_ledgers(dir.path(), threads, 12);
        let s = LedgerStorage::open(cfg.clone()).unwrap();
        if !reads_directly(&s) {
            eprintln!("this file system refuses O_DIRECT: nothing to read ahead directly");
            return;
        }
        // One batch, exactly the first run (so nothing of the run is left to take along).
        let first = batch_of(&s, 2, 0, 20).unwrap();
        assert_eq!(first.len(), 20);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        if threads > 0 {
            // The next runs arrive in the read-ahead cache, read by the threads.
            while s.parts.stats.read_ahead_entries.get() < 40 {
                assert!(std::time::Instant::now() < deadline, "nothing read ahead");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        } else {
            // No thread reads anything in the background: what the scan read is all there is.
            assert_eq!(s.parts.stats.read_ahead_entries.get(), 0, "no threads");
        }
        let mut got = first;
        while got.len() < 240 {
            let batch = batch_of(&s, 2, got.len() as u64, 20).unwrap();
            assert!(!batch.is_empty());
            got.extend(batch);
        }
        for (e, data) in (0..).zip(&got) {
            assert_eq!(
                &data[..],
                &scan_payload(2, e)[..],
                "entry {e}, {threads} threads"
            );
        }
        if threads > 0 {
            // Most of the scan came from the threads' reads, not the scan's own.
            assert!(
                s.parts.stats.read_ahead_entries.get() >= 160,
                "{} entries read ahead",
                s.parts.stats.read_ahead_entries.get()
            );
        }
        // Single reads of another ledger: the same.
        for e in 0..240 {
            assert_eq!(&s.read_entry(3, e).unwrap()[..], &scan_payload(3, e)[..]);
        }
        assert_eq!(s.parts.stats.corrupt_entries.get(), 0);
        // Closing with reads ahead in flight waits for them and ends the threads.
        batch_of(&s, 1, 0, 20).unwrap();
        s.close().unwrap();
        // A strided scan (one write set's entries) is not read ahead: the threads would read
        // the entries between its own for nothing.
        let s = LedgerStorage::open(cfg.clone()).unwrap();
        let strided = RangeLimits {
            max_count: 10,
            max_bytes: usize::MAX,
            per_entry_overhead: 0,
            stride: 2,
        };
        let mut next = 0;
        while next < 240 {
            let got = s.read_range(1, next, strided).unwrap();
            for data in &got {
                assert_eq!(&data[..], &scan_payload(1, next)[..]);
                next += 2;
            }
        }
        // Closing waits for every read the threads were handed: none may have read a thing.
        s.close().unwrap();
        assert_eq!(s.parts.stats.read_ahead_entries.get(), 0, "strided");
    }
}

/// A corrupt record among the entries read ahead: the thread keeps the entries before it and
/// leaves the rest to the scan, whose own read finds the corruption, counts it and reports it.
#[test]
fn a_corrupt_record_met_reading_ahead_is_the_scan_s_to_report() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = three_interleaved_ledgers(dir.path(), 4, 6);
    let bad = scan_payload(2, 50);
    let mut corrupted = false;
    for log in walk_files(&dir.path().join("l")) {
        if log.extension().is_some_and(|x| x == "log") {
            let mut content = std::fs::read(&log).unwrap();
            if let Some(at) = content.windows(bad.len()).position(|w| w == bad) {
                content[at + bad.len() / 2] ^= 0xFF;
                std::fs::write(&log, content).unwrap();
                corrupted = true;
            }
        }
    }
    assert!(
        corrupted,
        "entry 50 of ledger 2 not found in the entry logs"
    );
    let s = LedgerStorage::open(cfg).unwrap();
    let mut next = 0u64;
    let failure = loop {
        match batch_of(&s, 2, next, 20) {
            Ok(batch) => {
                for data in &batch {
                    assert_eq!(&data[..], &scan_payload(2, next)[..], "entry {next}");
                    next += 1;
                }
            }
            Err(e) => break e,
        }
    };
    assert_eq!(next, 50, "every entry before the corrupt one was read");
    assert!(matches!(failure, StorageError::Corruption(_)), "{failure}");
    assert!(s.parts.stats.corrupt_entries.get() >= 1);
    // The entries after it are still read.
    let after = batch_of(&s, 2, 51, 20).unwrap();
    assert_eq!(&after[0][..], &scan_payload(2, 51)[..]);
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for ent in std::fs::read_dir(dir).unwrap() {
        let path = ent.unwrap().path();
        if path.is_dir() {
            files.extend(walk_files(&path));
        } else {
            files.push(path);
        }
    }
    files
}
