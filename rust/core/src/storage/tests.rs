//! Behaviour of `LedgerStorage` as a whole: reopen after crashes, fencing and keys, deletes,
//! directory locks, the write cache flushed into segments and merged, checkpoints; and the
//! helpers the read and lifecycle tests share.

use super::*;
use crate::error::StorageError;
use std::path::Path;
use std::sync::mpsc;

pub(super) fn open(dir: &Path) -> LedgerStorage {
    LedgerStorage::open(crate::testing::storage_config(dir)).unwrap()
}

pub(super) fn wait(f: impl FnOnce(Completion) -> Result<()>) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    f(Box::new(move |r| {
        let _ = tx.send(r);
    }))?;
    rx.recv().map_err(|_| StorageError::Closed)?
}

pub(super) fn add(s: &LedgerStorage, l: u64, e: u64, data: &[u8]) -> Result<()> {
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

pub(super) fn copy_tree(from: &Path, to: &Path) {
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
    pub(super) fn crash(self) {
        self.parts.crash();
    }
}

pub(super) fn small_cache_config(dir: &Path) -> crate::config::StorageConfig {
    crate::config::StorageConfig {
        write_cache_bytes: 1 << 20,
        index_cache_bytes: 64 << 10,
        log_size_limit: 256 << 10,
        ..crate::testing::storage_config(dir)
    }
}

pub(super) fn entry_payload(l: u64, e: u64, salt: u64) -> Vec<u8> {
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
        .parts
        .stores
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
    assert!(s.parts.stats.read_ahead_entries.get() > 0);
    s.close().unwrap();
    let s = LedgerStorage::open(cfg).unwrap();
    assert!(s.parts.stores.segments.snapshot().len() < 20);
    assert_eq!(read_all(&s, 2).len(), 200);
}

/// Segments merged away are unlinked at once, but a lookup that holds them keeps reading them
/// whole; their blocks are freed (in steps, by the releaser) only after it lets go.
#[test]
fn merged_away_segments_are_freed_once_lookups_let_go() {
    use crate::testing::open_descriptors_of_deleted;
    let dir = tempfile::tempdir().unwrap();
    let s = LedgerStorage::open(small_cache_config(dir.path())).unwrap();
    let segments = &s.parts.stores.segments;
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
    // The segment's own descriptor and the releaser's (opened before the unlink) stay open
    // while the lookup holds it: a window in which a releaser that did not wait would close
    // them, not a wait for something.
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
pub(super) fn read_all(s: &LedgerStorage, ledger: u64) -> Vec<Bytes> {
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
    let checkpoints = s.parts.stats.checkpoints.get();
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
