//! Behaviour of the disk's lifecycle over a real storage: garbage collection of fully deleted
//! entry logs, compaction, the disk-pressure rules of the timed compactions, and the tier mover
//! over two tiers whose top one has a small quota.

use std::path::Path;

use bytes::Bytes;

use crate::config::{DirsConfig, StorageConfig};
use crate::error::StorageError;
use crate::storage::tests::{add, read_all, small_cache_config, wait};
use crate::storage::{DiskPressure, GcReport, LedgerStorage, LAST_ENTRY};

#[test]
fn gc_removes_entry_logs_whose_ledgers_are_all_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_cache_config(dir.path());
    let s = LedgerStorage::open(cfg.clone()).unwrap();
    // Ledger 1 fills its own logs (256 KiB each), then ledger 2 (and 3, which stays) follow.
    for e in 0..40 {
        add(&s, 1, e, &[1u8; 20_000]).unwrap();
    }
    s.checkpoint().unwrap();
    for e in 0..40 {
        add(&s, 2, e, &[2u8; 20_000]).unwrap();
        add(&s, 3, e, &[3u8; 20_000]).unwrap();
    }
    s.checkpoint().unwrap();
    let logs_before = s.entry_log_ledgers().unwrap().len();
    assert_eq!(
        s.gc_entry_logs().unwrap(),
        GcReport::default(),
        "nothing is deleted yet"
    );
    wait(|d| s.delete_ledger(1, d)).unwrap();
    let GcReport {
        logs_removed: removed,
        bytes_freed: bytes,
    } = s.gc_entry_logs().unwrap();
    assert!(removed >= 2, "ledger 1's own logs go: {removed}");
    assert!(bytes >= 40 * 20_000 * 3 / 4, "{bytes}");
    assert_eq!(
        s.entry_log_ledgers().unwrap().len(),
        logs_before - removed as usize
    );
    wait(|d| s.delete_ledger(2, d)).unwrap();
    // Logs shared by ledgers 2 and 3 stay while 3 lives.
    s.gc_entry_logs().unwrap();
    for e in 0..40 {
        assert_eq!(&s.read_entry(3, e).unwrap()[..], &[3u8; 20_000][..]);
    }
    s.crash();
    let s = LedgerStorage::open(cfg).unwrap();
    assert_eq!(s.list_ledgers(), vec![3]);
    for e in 0..40 {
        assert_eq!(&s.read_entry(3, e).unwrap()[..], &[3u8; 20_000][..]);
    }
}

/// The scheduler collects by itself every `gcWaitTime`: a deleted ledger's own logs go
/// without anyone asking.
#[test]
fn timed_gc_removes_the_logs_of_deleted_ledgers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::config::StorageConfig {
        gc_wait: std::time::Duration::from_millis(20),
        ..small_cache_config(dir.path())
    };
    let s = LedgerStorage::open(cfg).unwrap();
    for e in 0..40 {
        add(&s, 1, e, &[1u8; 20_000]).unwrap();
    }
    s.checkpoint().unwrap();
    for e in 0..40 {
        add(&s, 2, e, &[2u8; 20_000]).unwrap();
    }
    s.checkpoint().unwrap();
    wait(|d| s.delete_ledger(1, d)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while s.parts.stats.gc_logs_removed.get() < 2 {
        assert!(std::time::Instant::now() < deadline, "no timed collection");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for e in 0..40 {
        assert_eq!(&s.read_entry(2, e).unwrap()[..], &[2u8; 20_000][..]);
    }
}

fn three_ledger_payload(l: u64, e: u64) -> Vec<u8> {
    vec![(l * 7 + e) as u8; 10_000]
}

/// Entries 0..80 of ledgers 1, 2 and 3, interleaved, a checkpoint every 10 of each: several
/// sealed entry logs holding a third of each ledger's bytes.
fn fill_three_ledgers(s: &LedgerStorage) {
    for round in 0..8u64 {
        for l in 1..=3u64 {
            for e in round * 10..round * 10 + 10 {
                add(s, l, e, &three_ledger_payload(l, e)).unwrap();
            }
        }
        s.checkpoint().unwrap();
    }
}

#[test]
fn full_disks_suspend_timed_compaction_unless_forced_gc_is_allowed() {
    for force in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::StorageConfig {
            // The cadence of forced passes.
            flush_interval: std::time::Duration::from_millis(20),
            // Due at every look of the scheduler: only the disk pressure decides.
            minor_compaction_interval: std::time::Duration::from_millis(20),
            major_compaction_interval: std::time::Duration::from_millis(20),
            // A third stays live: minor compaction takes it too.
            minor_compaction_threshold: 0.5,
            force_gc_when_no_space: force,
            ..small_cache_config(dir.path())
        };
        let s = LedgerStorage::open(cfg).unwrap();
        // Full from the start: every compaction the scheduler starts from now on follows it
        // (while nothing is deleted, any that ran before compacts nothing).
        s.set_disk_pressure(DiskPressure::Full);
        let data = three_ledger_payload;
        fill_three_ledgers(&s);
        let before = s.parts.stats.compacted_logs.get();
        wait(|d| s.delete_ledger(1, d)).unwrap();
        wait(|d| s.delete_ledger(2, d)).unwrap();
        let compacted = || s.parts.stats.compacted_logs.get() > before;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        if force {
            // Space is short and forcing is allowed: compacted by the next forced pass.
            while !compacted() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(compacted(), "forced compaction while full");
        } else {
            // Suspended over 15 of the scheduler's intervals (a window in which nothing may
            // happen, not a wait for something), then resumed when the disks have room.
            std::thread::sleep(std::time::Duration::from_millis(300));
            assert!(
                !compacted(),
                "no compaction while a ledger directory is full"
            );
            s.set_disk_pressure(DiskPressure::AlmostFull);
            while !compacted() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(
                compacted(),
                "minor compaction resumes when only almost full"
            );
        }
        for e in 0..80 {
            assert_eq!(&s.read_entry(3, e).unwrap()[..], &data(3, e)[..]);
        }
    }
}

#[test]
fn compaction_rewrites_live_entries_and_frees_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_cache_config(dir.path());
    let s = LedgerStorage::open(cfg.clone()).unwrap();
    let data = three_ledger_payload;
    fill_three_ledgers(&s);
    wait(|d| s.delete_ledger(1, d)).unwrap();
    wait(|d| s.delete_ledger(2, d)).unwrap();
    // Every sealed log (256 KiB) holds at least one 10 KB entry of the live ledger: none is
    // as empty as 3%. (How much of a log is live depends on where its ends fall.)
    assert_eq!(
        s.compact(0.03).unwrap().logs_compacted,
        0,
        "ledger 3 is live"
    );
    let report = s.compact(0.5).unwrap();
    assert!(report.logs_compacted >= 2, "{report:?}");
    assert!(report.bytes_freed > 2 * report.bytes_moved, "{report:?}");
    let check = |s: &LedgerStorage| {
        assert_eq!(s.entry_ids(3).unwrap(), (0..80).collect::<Vec<_>>());
        for e in 0..80 {
            assert_eq!(&s.read_entry(3, e).unwrap()[..], &data(3, e)[..]);
        }
        assert_eq!(read_all(s, 3).len(), 80);
    };
    check(&s);
    s.crash();
    let s = LedgerStorage::open(cfg).unwrap();
    check(&s);
}

// The tier mover.

const QUOTA: u64 = 1 << 20;

fn config(dir: &Path, promote: bool) -> StorageConfig {
    StorageConfig {
        ledger_dirs: vec![dir.join("ssd"), dir.join("hdd")],
        index_dirs: vec![dir.join("index")],
        log_size_limit: 64 << 10,
        write_cache_bytes: 1 << 20,
        // The expected placements count logs of page-cache writes (direct I/O pads each
        // log's header and flushes to blocks, which moves where the top tier fills up);
        // moves of direct-written logs are tested in `entrylog::moves`.
        entry_log_direct_io: false,
        dirs: DirsConfig {
            tiers: vec![0, 1],
            quotas: vec![Some(QUOTA), None],
            allocator: "GreedyAllocator".into(),
            promote_on_read: promote,
            ..Default::default()
        },
        ..crate::testing::storage_config(dir)
    }
}

fn add_payload(s: &LedgerStorage, l: u64, e: u64) {
    LedgerStorage::wait_for(|d| s.add_entry(l, e, b"k", Bytes::from(payload(l, e)), false, d))
        .unwrap();
}

fn payload(l: u64, e: u64) -> Vec<u8> {
    vec![(l * 7 + e) as u8; 3000 + (e as usize % 5) * 100]
}

fn tier_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("current"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Writes ledgers 1..=n, 100 entries each, one after the other, checkpointing after each.
fn write_ledgers(s: &LedgerStorage, ledgers: std::ops::RangeInclusive<u64>) {
    for l in ledgers {
        for e in 0..100 {
            add_payload(s, l, e);
        }
        s.checkpoint().unwrap();
        s.move_entry_logs().unwrap();
    }
}

fn tier_of_ledger(s: &LedgerStorage, dir: &Path, ledger: u64) -> Vec<bool> {
    let maps = s.entry_log_ledgers().unwrap();
    let homes = s.entry_log_dirs();
    maps.iter()
        .filter(|(_, m)| m.contains_key(&ledger))
        .map(|(id, _)| homes[id].starts_with(dir.join("ssd")))
        .collect()
}

#[test]
fn demotion_keeps_the_top_tier_under_its_quota_with_the_hot_logs_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = LedgerStorage::open(config(dir.path(), false)).unwrap();
    // About 3 MiB: three times the top tier's quota.
    write_ledgers(&s, 1..=10);
    assert!(tier_bytes(&dir.path().join("ssd")) <= QUOTA);
    assert!(s.parts.stats.tier_demotions.get() > 0);
    assert!(s.parts.stats.tier_moved_bytes.get() > QUOTA / 4);
    // The first ledger's logs went down, the last one's are on top.
    assert!(tier_of_ledger(&s, dir.path(), 1).iter().all(|top| !top));
    assert!(tier_of_ledger(&s, dir.path(), 10).iter().all(|top| *top));
    for l in 1..=10 {
        for e in 0..100 {
            assert_eq!(&s.read_entry(l, e).unwrap()[..], &payload(l, e)[..]);
        }
    }
    // Reopened: every log is found where it went.
    drop(s);
    let s = LedgerStorage::open(config(dir.path(), false)).unwrap();
    for l in 1..=10 {
        assert_eq!(
            &s.read_entry(l, LAST_ENTRY).unwrap()[..],
            &payload(l, 99)[..]
        );
    }
}

#[test]
fn a_demoted_log_read_again_is_promoted_when_the_top_tier_has_room() {
    let dir = tempfile::tempdir().unwrap();
    let s = LedgerStorage::open(config(dir.path(), true)).unwrap();
    write_ledgers(&s, 1..=10);
    assert!(tier_of_ledger(&s, dir.path(), 1).iter().all(|top| !top));
    // Make room on top: the newest ledgers go.
    for l in 6..=10 {
        LedgerStorage::wait_for(|d| s.delete_ledger(l, d)).unwrap();
    }
    s.checkpoint().unwrap();
    s.gc_entry_logs().unwrap();
    for e in 0..100 {
        s.read_entry(1, e).unwrap();
    }
    let report = s.move_entry_logs().unwrap();
    assert!(report.promoted > 0, "{report:?}");
    assert!(tier_of_ledger(&s, dir.path(), 1).iter().any(|top| *top));
    for e in 0..100 {
        assert_eq!(&s.read_entry(1, e).unwrap()[..], &payload(1, e)[..]);
    }
    assert!(matches!(s.read_entry(7, 0), Err(StorageError::NoLedger(7))));
}

fn compaction_gauges(s: &LedgerStorage) -> [u64; 5] {
    let flat = crate::metrics::flat(&s.metrics());
    let get = |name: &str| flat.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
    [
        get("pybkx_compaction_started_ms"),
        get("pybkx_compaction_logs_planned"),
        get("pybkx_compaction_logs_done"),
        get("pybkx_compaction_bytes_planned"),
        get("pybkx_compaction_bytes_done"),
    ]
}

#[test]
fn a_running_compaction_shows_its_progress_and_clears_it_when_done() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::config::StorageConfig {
        // Paced (bytes scanned per second) so that a run lasts long enough to be watched.
        compaction_rate_bytes: 1 << 20,
        ..small_cache_config(dir.path())
    };
    let s = std::sync::Arc::new(LedgerStorage::open(cfg).unwrap());
    fill_three_ledgers(&s);
    wait(|d| s.delete_ledger(1, d)).unwrap();
    wait(|d| s.delete_ledger(2, d)).unwrap();
    assert_eq!(compaction_gauges(&s), [0; 5], "none runs yet");
    let running = {
        let s = s.clone();
        std::thread::spawn(move || s.compact(0.5))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = [0; 5];
    while std::time::Instant::now() < deadline && !running.is_finished() {
        seen = compaction_gauges(&s);
        if seen[2] >= 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let report = running.join().unwrap().unwrap();
    let [started, planned, done, bytes_planned, bytes_done] = seen;
    assert!(started > 0, "{seen:?}");
    assert!(
        planned >= report.logs_compacted && done >= 1 && done <= planned,
        "{seen:?}"
    );
    assert!(
        bytes_planned > 0 && bytes_done > 0 && bytes_done <= bytes_planned,
        "{seen:?}"
    );
    assert_eq!(compaction_gauges(&s), [0; 5], "cleared once it ended");
}

/// Entries packaged as a client sends them (CRC32C digest), spread over several sealed logs.
fn scrub_fixture(dir: &Path) -> (LedgerStorage, Vec<Bytes>) {
    let s = LedgerStorage::open(small_cache_config(dir)).unwrap();
    let dm = crate::digest::DigestManager::new(7, b"", crate::digest::DigestType::Crc32c);
    let entries: Vec<Bytes> = (0..60i64)
        .map(|e| dm.package(e, e - 1, 0, &vec![(e % 251) as u8; 10_000]))
        .collect();
    for (e, data) in entries.iter().enumerate() {
        add(&s, 7, e as u64, data).unwrap();
    }
    // Indexed: the scrubber checks the entries the index points at.
    s.checkpoint().unwrap();
    (s, entries)
}

#[test]
fn scrub_verifies_every_indexed_entry_of_the_sealed_logs() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = scrub_fixture(dir.path());
    let r = s.scrub(0).unwrap();
    assert_eq!(r.entries_verified, 60, "{r:?}");
    assert_eq!(r.corrupt_entries, 0);
    assert!(r.complete);
    assert!(r.bytes_scrubbed >= 60 * 10_000, "{r:?}");
}

#[test]
fn scrub_finds_a_bit_flip_and_a_truncated_log_and_reports_each_once() {
    use crate::storage::ScrubCheck;
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = scrub_fixture(dir.path());
    let logs = s.entry_log_dirs();
    let mut ids: Vec<u32> = logs.keys().copied().collect();
    ids.sort_unstable();
    let path = |id: u32| logs[&id].join(crate::storage::entrylog::log_name(id));
    // A bit flip in the middle of the first log, and the second log cut in half.
    let first = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path(ids[0]))
        .unwrap();
    let mut byte = [0u8; 1];
    first.read_exact_at(&mut byte, 20_000).unwrap();
    first.write_all_at(&[byte[0] ^ 0x10], 20_000).unwrap();
    let second = std::fs::OpenOptions::new()
        .write(true)
        .open(path(ids[1]))
        .unwrap();
    let len = second.metadata().unwrap().len();
    second.set_len(len / 2).unwrap();
    let r = s.scrub(0).unwrap();
    let checks: Vec<ScrubCheck> = r.findings.iter().map(|f| f.check).collect();
    assert!(checks.contains(&ScrubCheck::Record), "{r:?}");
    assert!(checks.contains(&ScrubCheck::Missing), "{r:?}");
    assert_eq!(r.corrupt_entries as usize, r.findings.len());
    let pending = s.take_scrub_findings();
    assert_eq!(pending.len(), r.findings.len());
    // A second run finds them again but queues no duplicate of what is still pending.
    s.scrub(0).unwrap();
    s.scrub(0).unwrap();
    assert_eq!(s.take_scrub_findings().len(), r.findings.len());
    // A damaged entry is never served.
    for f in &r.findings {
        assert!(s.read_entry(f.ledger, f.entry).is_err());
    }
}

#[test]
fn scrub_refuses_reads_of_an_entry_whose_header_names_another_entry() {
    let dir = tempfile::tempdir().unwrap();
    let s = LedgerStorage::open(small_cache_config(dir.path())).unwrap();
    let dm = crate::digest::DigestManager::new(7, b"", crate::digest::DigestType::Crc32c);
    // Entry 1 holds entry 0's bytes: whole as a record, wrong as an entry.
    add(&s, 7, 0, &dm.package(0, -1, 0, b"zero")).unwrap();
    add(&s, 7, 1, &dm.package(0, -1, 0, b"zero")).unwrap();
    s.checkpoint().unwrap();
    assert!(s.read_entry(7, 1).is_ok());
    let r = s.scrub(0).unwrap();
    assert_eq!(r.corrupt_entries, 1, "{r:?}");
    assert!(s.read_entry(7, 1).is_err(), "refused until repaired");
    add(&s, 7, 1, &dm.package(1, 0, 0, b"one")).unwrap();
    s.scrub_repaired(7, 1);
    assert!(s.read_entry(7, 1).is_ok());
}

#[test]
fn a_paced_scrub_reads_at_most_its_rate() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = scrub_fixture(dir.path());
    let rate = 2_000_000u64;
    let started = std::time::Instant::now();
    let r = s.scrub(rate).unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    // A count over the measured window: bytes read <= rate * elapsed + one read (rate / 4).
    assert!(
        (r.bytes_scrubbed as f64) <= rate as f64 * elapsed + (rate / 4) as f64,
        "{} bytes in {elapsed} s",
        r.bytes_scrubbed
    );
}
