//! Behaviour of `LedgerStorage`: reopen after crashes, fencing and keys, range reads,
//! deletes, directory locks.

use super::*;
use std::path::Path;
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
