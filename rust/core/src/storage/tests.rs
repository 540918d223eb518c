//! Behaviour of `LedgerStorage`: reopen after crashes, fencing and keys, range reads,
//! deletes, directory locks.

use super::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

fn open(dir: &Path) -> LedgerStorage {
    LedgerStorage::open(crate::testing::storage_config(dir)).unwrap()
}

fn wait(f: impl FnOnce(Completion) -> Result<()>) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    f(Box::new(move |r| {
        let _ = tx.send(r);
    }))?;
    rx.recv().map_err(|_| StorageError::Closed)?
}

fn add(s: &LedgerStorage, l: u64, e: u64, data: &[u8]) -> Result<()> {
    wait(|d| s.add_entry(l, e, b"key", Bytes::copy_from_slice(data), false, d))
}

#[test]
fn entries_survive_reopen_with_and_without_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        for e in 0..100 {
            add(&s, 1, e, format!("entry-{e}").as_bytes()).unwrap();
        }
        s.checkpoint().unwrap();
        for e in 100..150 {
            add(&s, 1, e, format!("entry-{e}").as_bytes()).unwrap();
        }
        // Leak the storage as a crash would: no close, no final checkpoint.
        std::mem::forget(s);
    }
    // The forgotten instance still holds the directory locks in this process; release them
    // the way process death would, by closing every descriptor named LOCK is not possible
    // here, so reopen through fresh directories copied from the crashed ones.
    let copy = tempfile::tempdir().unwrap();
    copy_tree(dir.path(), copy.path());
    let s = open(copy.path());
    for e in 0..150 {
        assert_eq!(
            &s.read_entry(1, e).unwrap()[..],
            format!("entry-{e}").as_bytes()
        );
    }
    assert_eq!(s.last_entry_id(1).unwrap(), 149);
    assert_eq!(&s.read_entry(1, LAST_ENTRY).unwrap()[..], b"entry-149");
}

fn copy_tree(from: &Path, to: &Path) {
    for ent in std::fs::read_dir(from).unwrap() {
        let ent = ent.unwrap();
        let target = to.join(ent.file_name());
        if ent.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&ent.path(), &target);
        } else {
            std::fs::copy(ent.path(), target).unwrap();
        }
    }
}

#[test]
fn fence_and_keys_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    add(&s, 5, 0, b"a").unwrap();
    assert!(matches!(
        wait(|d| s.add_entry(5, 1, b"other", Bytes::from_static(b"b"), false, d)),
        Err(StorageError::Unauthorized(5))
    ));
    assert!(!wait_fence(&s, 5).unwrap());
    assert!(matches!(add(&s, 5, 1, b"b"), Err(StorageError::Fenced(5))));
    wait(|d| s.add_entry(5, 1, b"key", Bytes::from_static(b"b"), true, d)).unwrap();
    assert!(wait_fence(&s, 5).unwrap());
    s.close().unwrap();
    let s = open(dir.path());
    assert!(s.is_fenced(5).unwrap());
    assert!(matches!(add(&s, 5, 2, b"c"), Err(StorageError::Fenced(5))));
    assert_eq!(&s.read_entry(5, 1).unwrap()[..], b"b");
}

fn wait_fence(s: &LedgerStorage, l: u64) -> Result<bool> {
    let (tx, rx) = mpsc::channel();
    let was = s.fence(
        l,
        b"key",
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    )?;
    rx.recv().map_err(|_| StorageError::Closed)??;
    Ok(was)
}

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

#[test]
fn deleted_ledger_stays_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    add(&s, 9, 0, b"x").unwrap();
    add(&s, 10, 0, b"y").unwrap();
    s.checkpoint().unwrap();
    wait(|d| s.delete_ledger(9, d)).unwrap();
    assert!(!s.ledger_exists(9));
    s.close().unwrap();
    let s = open(dir.path());
    assert!(!s.ledger_exists(9));
    assert_eq!(s.list_ledgers(), vec![10]);
}

#[test]
fn second_open_of_the_same_directories_fails() {
    let dir = tempfile::tempdir().unwrap();
    let _s = open(dir.path());
    assert!(matches!(
        LedgerStorage::open(crate::testing::storage_config(dir.path())),
        Err(StorageError::Locked(_))
    ));
}

impl LedgerStorage {
    /// A crash as far as the files can tell: the threads stop where they are, nothing is
    /// flushed or checkpointed, buffered entry-log bytes are lost, the locks are released.
    fn crash(self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.stop_threads();
        for j in &self.inner.journals {
            j.shutdown();
        }
        self.inner.locks.lock().clear();
    }
}

fn small_cache_config(dir: &Path) -> crate::config::StorageConfig {
    crate::config::StorageConfig {
        write_cache_bytes: 1 << 20,
        index_cache_bytes: 64 << 10,
        log_size_limit: 256 << 10,
        ..crate::testing::storage_config(dir)
    }
}

fn entry_payload(l: u64, e: u64, salt: u64) -> Vec<u8> {
    let len = 1 + ((l * 31 + e * 17 + salt) % 40_000) as usize;
    let mut v = vec![(e % 251) as u8; len];
    v[0] = l as u8;
    v
}

#[test]
fn entries_move_from_the_write_cache_to_segments_and_merge_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_cache_config(dir.path());
    let s = LedgerStorage::open(cfg.clone()).unwrap();
    for round in 0..20u64 {
        for l in 1..=3u64 {
            for e in round * 10..round * 10 + 10 {
                add(&s, l, e, &entry_payload(l, e, 0)).unwrap();
            }
        }
        s.checkpoint().unwrap();
    }
    // Merges run in the background: wait until a level-1 segment exists.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while s
        .inner
        .shared
        .segments
        .snapshot()
        .iter()
        .all(|g| g.level == 0)
    {
        assert!(std::time::Instant::now() < deadline, "no merge happened");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for l in 1..=3u64 {
        assert_eq!(s.entry_ids(l).unwrap(), (0..200).collect::<Vec<_>>());
        for e in 0..200 {
            assert_eq!(
                &s.read_entry(l, e).unwrap()[..],
                &entry_payload(l, e, 0)[..]
            );
        }
    }
    assert!(s.inner.stats.read_ahead_entries.get() > 0);
    s.close().unwrap();
    let s = LedgerStorage::open(cfg).unwrap();
    assert!(s.inner.shared.segments.snapshot().len() < 20);
    assert_eq!(read_all(&s, 2).len(), 200);
}

/// Segments merged away are unlinked at once, but a lookup that holds them keeps reading them
/// whole; their blocks are freed (in steps, by the releaser) only after it lets go.
#[test]
fn merged_away_segments_are_freed_once_lookups_let_go() {
    use crate::testing::open_descriptors_of_deleted;
    let dir = tempfile::tempdir().unwrap();
    let s = LedgerStorage::open(small_cache_config(dir.path())).unwrap();
    let segments = &s.inner.shared.segments;
    let mut round = 0u64;
    let add_round = |round: &mut u64| {
        for e in *round * 10..*round * 10 + 10 {
            add(&s, 1, e, &entry_payload(1, e, 0)).unwrap();
        }
        s.checkpoint().unwrap();
        *round += 1;
    };
    while segments.snapshot().len() < 2 {
        add_round(&mut round);
    }
    let held = segments.snapshot(); // a lookup in progress
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while held.iter().all(|g| g.path().exists()) {
        assert!(std::time::Instant::now() < deadline, "no merge took them");
        add_round(&mut round);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let gone: Vec<_> = held
        .iter()
        .filter(|g| !g.path().exists())
        .map(|g| g.path().to_path_buf())
        .collect();
    // The segment's own descriptor and the releaser's stay open while the lookup holds it.
    std::thread::sleep(std::time::Duration::from_millis(50));
    for path in &gone {
        assert_eq!(open_descriptors_of_deleted(path), 2, "{}", path.display());
    }
    drop(held);
    while gone.iter().any(|p| open_descriptors_of_deleted(p) > 0) || segments.releasing() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a merged-away segment is still open"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let entries = round * 10;
    assert_eq!(s.entry_ids(1).unwrap(), (0..entries).collect::<Vec<_>>());
}

/// Every entry of the ledger from 0 by one unbounded range read.
fn read_all(s: &LedgerStorage, ledger: u64) -> Vec<Bytes> {
    let unbounded = RangeLimits {
        max_count: 0,
        max_bytes: usize::MAX,
        per_entry_overhead: 0,
        stride: 1,
    };
    s.read_range(ledger, 0, unbounded).unwrap()
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, HashMap};

    #[derive(Debug, Clone)]
    enum Op {
        Add { ledger: u64, count: u64 },
        Delete { ledger: u64 },
        Checkpoint,
        Crash,
        Restart,
        Compact,
        Gc,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (1..5u64, 1..40u64).prop_map(|(ledger, count)| Op::Add { ledger, count }),
            1 => (1..5u64).prop_map(|ledger| Op::Delete { ledger }),
            2 => Just(Op::Checkpoint),
            1 => Just(Op::Crash),
            1 => Just(Op::Restart),
            1 => Just(Op::Compact),
            1 => Just(Op::Gc),
        ]
    }

    fn check(s: &LedgerStorage, model: &HashMap<u64, BTreeMap<u64, Vec<u8>>>) {
        let mut ledgers: Vec<u64> = model.keys().copied().collect();
        ledgers.sort_unstable();
        assert_eq!(s.list_ledgers(), ledgers);
        for (l, entries) in model {
            assert_eq!(
                s.entry_ids(*l).unwrap(),
                entries.keys().copied().collect::<Vec<_>>()
            );
            assert_eq!(s.last_entry_id(*l).ok(), entries.keys().last().copied());
            for (e, data) in entries {
                assert_eq!(&s.read_entry(*l, *e).unwrap()[..], &data[..], "{l}/{e}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

        /// The index after any sequence of adds, deletes, checkpoints, compactions, garbage
        /// collections, crashes and restarts equals a model of what was acknowledged.
        #[test]
        fn index_equals_the_model(ops in proptest::collection::vec(op(), 1..40)) {
            let dir = tempfile::tempdir().unwrap();
            let cfg = small_cache_config(dir.path());
            let mut s = Some(LedgerStorage::open(cfg.clone()).unwrap());
            let mut model: HashMap<u64, BTreeMap<u64, Vec<u8>>> = HashMap::new();
            let mut salt = 0u64;
            for op in ops {
                let st = s.as_ref().unwrap();
                match op {
                    Op::Add { ledger, count } => {
                        salt += 1;
                        let m = model.entry(ledger).or_default();
                        let first = m.keys().last().map_or(0, |e| e + 1);
                        for e in first..first + count {
                            let data = entry_payload(ledger, e, salt);
                            add(st, ledger, e, &data).unwrap();
                            m.insert(e, data);
                        }
                    }
                    Op::Delete { ledger } => {
                        let r = wait(|d| st.delete_ledger(ledger, d));
                        prop_assert_eq!(r.is_ok(), model.remove(&ledger).is_some());
                    }
                    Op::Checkpoint => st.checkpoint().unwrap(),
                    Op::Compact => {
                        st.checkpoint().unwrap();
                        st.compact(0.9).unwrap();
                    }
                    Op::Gc => {
                        st.gc_entry_logs().unwrap();
                    }
                    Op::Crash => {
                        s.take().unwrap().crash();
                        s = Some(LedgerStorage::open(cfg.clone()).unwrap());
                    }
                    Op::Restart => {
                        s.take().unwrap().close().unwrap();
                        s = Some(LedgerStorage::open(cfg.clone()).unwrap());
                    }
                }
                check(s.as_ref().unwrap(), &model);
            }
            s.take().unwrap().crash();
            let s = LedgerStorage::open(cfg).unwrap();
            check(&s, &model);
        }
    }
}

#[test]
fn a_ledger_deleted_and_created_again_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_cache_config(dir.path());
    let s = LedgerStorage::open(cfg.clone()).unwrap();
    add(&s, 4, 0, b"old").unwrap();
    wait(|d| s.delete_ledger(4, d)).unwrap();
    add(&s, 4, 0, b"new").unwrap();
    assert_eq!(s.entry_ids(4).unwrap(), vec![0]);
    s.crash();
    let s = LedgerStorage::open(cfg).unwrap();
    assert_eq!(s.list_ledgers(), vec![4]);
    assert_eq!(&s.read_entry(4, 0).unwrap()[..], b"new");
    assert_eq!(s.entry_ids(4).unwrap(), vec![0]);
}

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
    assert_eq!(s.gc_entry_logs().unwrap(), (0, 0), "nothing is deleted yet");
    wait(|d| s.delete_ledger(1, d)).unwrap();
    let (removed, bytes) = s.gc_entry_logs().unwrap();
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

/// Steady adds fill a small write cache many times per `flushInterval`: those flushes must not
/// hold off the checkpoints, which alone trim the journal (and run GC, compaction and merges).
#[test]
fn checkpoints_keep_their_interval_while_the_write_cache_flushes_often() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::config::StorageConfig {
        flush_interval: std::time::Duration::from_millis(100),
        ..small_cache_config(dir.path())
    };
    cfg.journal.max_file_size = 1 << 20;
    cfg.journal.prealloc_size = 64 << 10;
    cfg.journal.max_backups = 1;
    let s = LedgerStorage::open(cfg).unwrap();
    let started = std::time::Instant::now();
    let mut e = 0;
    while started.elapsed() < std::time::Duration::from_millis(1500) {
        add(&s, 1, e, &[7u8; 32 << 10]).unwrap();
        e += 1;
    }
    let checkpoints = s.inner.stats.checkpoints.get();
    let journals = std::fs::read_dir(dir.path().join("j/current"))
        .unwrap()
        .filter(|f| {
            f.as_ref()
                .is_ok_and(|f| f.file_name().to_string_lossy().ends_with(".txn"))
        })
        .count();
    // The cache (1 MiB) asks for a flush every 16 adds of 32 KiB; a journal file holds 32.
    assert!(e > 300, "only {e} adds in 1.5 s");
    assert!(
        checkpoints >= 5,
        "{checkpoints} checkpoints in 1.5 s at a 100 ms interval"
    );
    assert!(
        journals <= 6,
        "{journals} journal files kept for {e} entries"
    );
    for entry in (0..e).step_by(97) {
        assert_eq!(&s.read_entry(1, entry).unwrap()[..], &[7u8; 32 << 10][..]);
    }
    s.close().unwrap();
}

#[test]
fn full_disks_suspend_timed_compaction_unless_forced_gc_is_allowed() {
    for force in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::StorageConfig {
            flush_interval: std::time::Duration::from_millis(20),
            // Due at every checkpoint: only the disk pressure decides.
            minor_compaction_interval: std::time::Duration::from_millis(1),
            major_compaction_interval: std::time::Duration::from_millis(1),
            // A third stays live: minor compaction takes it too.
            minor_compaction_threshold: 0.5,
            force_gc_when_no_space: force,
            ..small_cache_config(dir.path())
        };
        let s = LedgerStorage::open(cfg).unwrap();
        let data = three_ledger_payload;
        fill_three_ledgers(&s);
        s.set_disk_pressure(DiskPressure::Full);
        std::thread::sleep(std::time::Duration::from_millis(100)); // a running pass ends
        let before = s.inner.stats.compacted_logs.get();
        wait(|d| s.delete_ledger(1, d)).unwrap();
        wait(|d| s.delete_ledger(2, d)).unwrap();
        let compacted = || s.inner.stats.compacted_logs.get() > before;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        if force {
            // Space is short and forcing is allowed: compacted at the next checkpoints.
            while !compacted() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(compacted(), "forced compaction while full");
        } else {
            // Suspended for 15 checkpoints, then resumed when the disks have room.
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
        let corruptions = s.inner.stats.corrupt_entries.get();
        let got = read_all(&s, 3);
        assert_eq!(got.len(), 30, "direct I/O {direct}");
        for (e, data) in got.iter().enumerate() {
            assert_eq!(&data[..], &live(e as u64)[..]);
        }
        assert_eq!(s.inner.stats.corrupt_entries.get(), corruptions);
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
        let ahead = s.inner.stats.read_ahead_entries.get();
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
            s.inner.shared.read_ahead.take(9, 10).is_none(),
            "taken by the batch"
        );
        assert_eq!(s.inner.stats.read_ahead_entries.get(), ahead);
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
    assert_eq!(s.inner.stats.corrupt_entries.get(), 0);
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
    s.inner.shared.entrylog.reads_directly(0) || s.inner.shared.entrylog.reads_directly(1)
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
            while s.inner.stats.read_ahead_entries.get() < 40 {
                assert!(std::time::Instant::now() < deadline, "nothing read ahead");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        } else {
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert_eq!(s.inner.stats.read_ahead_entries.get(), 0, "no threads");
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
                s.inner.stats.read_ahead_entries.get() >= 160,
                "{} entries read ahead",
                s.inner.stats.read_ahead_entries.get()
            );
        }
        // Single reads of another ledger: the same.
        for e in 0..240 {
            assert_eq!(&s.read_entry(3, e).unwrap()[..], &scan_payload(3, e)[..]);
        }
        assert_eq!(s.inner.stats.corrupt_entries.get(), 0);
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
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(s.inner.stats.read_ahead_entries.get(), 0, "strided");
        s.close().unwrap();
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
    assert!(s.inner.stats.corrupt_entries.get() >= 1);
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
