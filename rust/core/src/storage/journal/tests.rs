//! The journal over real files: groups acknowledged and replayed in order, old files removed
//! or reused after checkpoints, failed writes and syncs survived, torn tails cut.

use super::*;
use crate::fs;
use bytes::Bytes;
use std::sync::mpsc;
use std::time::Duration;

#[derive(Default)]
struct Collect(Mutex<Vec<(usize, Mark)>>);
impl Applier for Collect {
    fn apply(&self, _journal: usize, ops: &[JournalOp], mark: Mark) -> Result<()> {
        self.0.lock().push((ops.len(), mark));
        Ok(())
    }
}

fn cfg() -> JournalConfig {
    crate::testing::journal_config()
}

fn add(j: &Journal, ledger: u64, entry: u64, data: &[u8]) -> mpsc::Receiver<Result<()>> {
    let (tx, rx) = mpsc::channel();
    j.submit(
        JournalOp::entry(ledger, entry, Bytes::copy_from_slice(data)),
        Some(Arc::from(&b"key"[..])),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    )
    .unwrap();
    rx
}

#[test]
fn groups_are_acknowledged_and_replayed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let applier = Arc::new(Collect::default());
    let j = Journal::start(0, dir.path().into(), cfg(), 1, applier.clone()).unwrap();
    let waits: Vec<_> = (0..100).map(|e| add(&j, 7, e, b"data")).collect();
    for w in waits {
        w.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    }
    j.shutdown();
    // One key record plus 100 entries, in fewer groups than entries.
    let applied = applier.0.lock().clone();
    assert_eq!(applied.iter().map(|(n, _)| n).sum::<usize>(), 101);
    assert!(applied.len() < 100);
    assert_eq!(j.stats.entries.get(), 100);

    let mut seen = Vec::new();
    let end = replay(dir.path(), Mark::default(), false, |ops, _| {
        seen.extend(ops.iter().cloned());
        Ok(())
    })
    .unwrap();
    assert_eq!(end.next_file_id, 2);
    assert!(matches!(seen[0], JournalOp::Key { ledger: 7, .. }));
    for (i, op) in seen[1..].iter().enumerate() {
        assert!(matches!(op, JournalOp::Entry { entry, .. } if *entry == i as u64));
    }
}

/// Timed checkpoints remove old files in the background, one batch at a time; explicit
/// ones before they return; shutdown joins the background batch (the stop between steps
/// is `fs::remove_file_in_steps`'s test).
#[test]
fn old_files_are_removed_in_the_background_one_batch_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (j, applier) = journal_of_small_files(dir.path(), 40);
    let files = || list_journal_ids(dir.path()).unwrap();
    let mark = applier.0.lock().last().unwrap().1;
    let before = files().len();
    assert!(before > 8, "{before} files");
    // Stand-in for a batch still being cut down: a thread that has not finished.
    let (release, held) = mpsc::channel::<()>();
    *j.removal.remover.lock() = Some(std::thread::spawn(move || {
        let _ = held.recv();
        Ok(())
    }));
    assert_eq!(j.remove_old_files(mark.file_id, 2, false).unwrap(), 0);
    assert_eq!(files().len(), before);
    release.send(()).unwrap();
    while !j.removal.remover.lock().as_ref().unwrap().is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let doomed = j.remove_old_files(mark.file_id, 2, false).unwrap();
    assert_eq!(doomed, (mark.file_id - 1) as usize - 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    while files().len() > before - doomed {
        assert!(Instant::now() < deadline, "still {:?}", files());
        std::thread::sleep(Duration::from_millis(5));
    }
    // Explicit: done on return.
    assert_eq!(j.remove_old_files(mark.file_id, 0, true).unwrap(), 2);
    assert_eq!(files().first(), Some(&mark.file_id));
    j.shutdown();
    assert!(j.removal.remover.lock().is_none());
}

/// `journalSyncData=false`: a steady stream of adds (a group every few milliseconds, never
/// a pause as long as the interval) still has its file synced every
/// `journalPageCacheFlushIntervalMSec`, not only when the file fills up.
#[test]
fn unsynced_journals_are_synced_every_interval_under_steady_adds() {
    let dir = tempfile::tempdir().unwrap();
    let applier = Arc::new(Collect::default());
    let c = JournalConfig {
        sync_data: false,
        page_cache_flush_interval: Duration::from_millis(50),
        ..crate::testing::journal_config()
    };
    let j = Journal::start(0, dir.path().into(), c, 1, applier).unwrap();
    let started = std::time::Instant::now();
    let mut e = 0;
    while started.elapsed() < Duration::from_millis(800) {
        add(&j, 3, e, b"data").recv().unwrap().unwrap();
        e += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    // About 16 intervals went by; a timer restarted by each group would have synced none.
    let syncs = j.stats.syncs.get();
    j.shutdown();
    assert!(
        syncs >= 5,
        "{syncs} syncs in 800 ms of adds at a 50 ms interval"
    );
}

/// A journal of 4 KiB files holding `entries` acknowledged 1,000-byte entries of ledger 1.
fn journal_of_small_files(dir: &std::path::Path, entries: u64) -> (Journal, Arc<Collect>) {
    let applier = Arc::new(Collect::default());
    let c = JournalConfig {
        max_file_size: 4096,
        ..crate::testing::journal_config()
    };
    let j = Journal::start(0, dir.into(), c, 1, applier.clone()).unwrap();
    for e in 0..entries {
        add(&j, 1, e, &[e as u8; 1000]).recv().unwrap().unwrap();
    }
    (j, applier)
}

#[test]
fn replay_starts_at_the_mark_and_rollover_creates_new_files() {
    let dir = tempfile::tempdir().unwrap();
    let (j, applier) = journal_of_small_files(dir.path(), 20);
    j.shutdown();
    let ids = list_journal_ids(dir.path()).unwrap();
    assert!(ids.len() > 3, "expected rollovers, got {ids:?}");
    let mark_after_9 = applier.0.lock()[9].1;
    let mut entries = Vec::new();
    replay(dir.path(), mark_after_9, false, |ops, _| {
        for op in ops {
            if let JournalOp::Entry { entry, .. } = op {
                entries.push(*entry);
            }
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(entries, (10..20).collect::<Vec<_>>());
    assert_eq!(
        j.remove_old_files(mark_after_9.file_id, 0, true).unwrap(),
        (mark_after_9.file_id - 1) as usize
    );
}

/// Entries of sizes that end groups anywhere in a block, with writes that fail (a full
/// disk) now and then: every acknowledged entry replays with its bytes, in order. Through
/// the page cache a failed write is held and written again, so every entry is acknowledged;
/// in direct mode (the sync thread writes, each write rewriting the partial last block) it
/// fails its groups, as a failed sync does, and the journal goes on in a new file.
fn acknowledged_entries_replay_after_failed_writes(direct_io: bool) {
    let dir = tempfile::tempdir().unwrap();
    let applier = Arc::new(Collect::default());
    let c = JournalConfig {
        direct_io,
        // In direct mode each failed write moves the journal to a new file; a rollover for
        // size could also race the sync thread's write for the one injected failure.
        max_file_size: if direct_io { 64 << 20 } else { 256 << 10 },
        ..crate::testing::journal_config()
    };
    let j = Journal::start(0, dir.path().into(), c, 1, applier.clone()).unwrap();
    let data = |e: u64| vec![(e % 251) as u8; 1 + (e as usize * 7919) % 20_000];
    let mut acked = Vec::new();
    let mut refused = 0;
    for e in 0..120u64 {
        let fault = (e % 40 == 17).then(|| {
            fs::inject_fault(fs::Fault {
                path_prefix: dir.path().to_path_buf(),
                ops: vec![fs::Op::Write],
                action: fs::FaultAction::Fail(libc::ENOSPC),
                times: Some(1),
            })
        });
        // A few at once, so groups hold several entries.
        let ids: Vec<u64> = (0..3).map(|k| e * 3 + k).collect();
        let waits: Vec<_> = ids.iter().map(|id| add(&j, 5, *id, &data(*id))).collect();
        let refused_before = refused;
        for (id, w) in ids.into_iter().zip(waits) {
            match w.recv_timeout(Duration::from_secs(10)).unwrap() {
                Ok(()) => acked.push(id),
                Err(_) => refused += 1,
            }
        }
        if let Some(id) = fault {
            fs::remove_fault(id);
        }
        if refused > refused_before {
            // Refused while the journal moves to a new file (a retry interval at most; nothing
            // outside the writer shows when it has, so this is a pause, not a wait).
            std::thread::sleep(RETRY_INTERVAL * 2);
        }
    }
    j.shutdown();
    assert!(
        j.stats.failures.get() >= 3,
        "the injected write failures happened"
    );
    assert!(j.stats.rollovers.get() > 2, "groups crossed journal files");
    if direct_io {
        assert!(refused > 0, "failed direct writes fail their groups");
    } else {
        assert_eq!(refused, 0, "failed page-cache writes are held and retried");
    }
    assert!(acked.len() > 300, "{} acknowledged", acked.len());
    let mut seen = Vec::new();
    replay(dir.path(), Mark::default(), false, |ops, _| {
        for op in ops {
            if let JournalOp::Entry { entry, data: d, .. } = op {
                assert_eq!(d[..], data(*entry)[..], "entry {entry}");
                seen.push(*entry);
            }
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, acked);
}

#[test]
fn acknowledged_entries_replay_after_failed_writes_direct() {
    acknowledged_entries_replay_after_failed_writes(true);
}

#[test]
fn acknowledged_entries_replay_after_failed_writes_page_cache() {
    acknowledged_entries_replay_after_failed_writes(false);
}

#[test]
fn torn_tail_of_newest_file_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::start(0, dir.path().into(), cfg(), 1, Arc::new(Collect::default())).unwrap();
    for e in 0..5 {
        add(&j, 1, e, b"0123456789").recv().unwrap().unwrap();
    }
    j.shutdown();
    let path = journal_path(dir.path(), 1);
    let (recs, end, _) = scan_file(&path).unwrap();
    let last = recs.last().unwrap().clone();
    assert_eq!(end, last.offset + last.size);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(last.offset + last.size - 3).unwrap();
    let mut n = 0;
    replay(dir.path(), Mark::default(), false, |ops, _| {
        n += ops
            .iter()
            .filter(|o| matches!(o, JournalOp::Entry { .. }))
            .count();
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 4);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), last.offset);
}

/// Entries replayed from `from`, with their bytes.
fn replayed_entries(dir: &std::path::Path, from: Mark) -> Vec<(u64, Bytes)> {
    let mut entries = Vec::new();
    replay(dir, from, false, |ops, _| {
        for op in ops {
            if let JournalOp::Entry { entry, data, .. } = op {
                entries.push((*entry, data.clone()));
            }
        }
        Ok(())
    })
    .unwrap();
    entries
}

fn inode(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// With `journalReuseFiles`, rollovers after a checkpoint take the files it let go (the
/// same inodes under new ids) instead of creating files, and everything written to the
/// reused files replays, nothing of their previous life.
#[test]
fn rollovers_reuse_the_files_a_checkpoint_let_go() {
    for direct_io in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let applier = Arc::new(Collect::default());
        let c = JournalConfig {
            max_file_size: 4096,
            direct_io,
            ..cfg()
        };
        let j = Journal::start(0, dir.path().into(), c, 1, applier.clone()).unwrap();
        let data = |e: u64| vec![e as u8; 700 + (e as usize * 37) % 600];
        for e in 0..20 {
            add(&j, 1, e, &data(e)).recv().unwrap().unwrap();
        }
        let mark = applier.0.lock().last().unwrap().1;
        let before: Vec<u64> = list_journal_ids(dir.path()).unwrap();
        assert!(mark.file_id > 4, "expected rollovers, mark at {mark:?}");
        let removed = j.remove_old_files(mark.file_id, 3, true).unwrap();
        assert_eq!(removed, (mark.file_id - 1) as usize - 3);
        let kept: Vec<u64> = before
            .iter()
            .copied()
            .filter(|id| *id < mark.file_id)
            .skip(removed)
            .collect();
        let kept_inodes: HashSet<u64> = kept
            .iter()
            .map(|id| inode(&journal_path(dir.path(), *id)))
            .collect();
        for e in 20..40 {
            add(&j, 1, e, &data(e)).recv().unwrap().unwrap();
        }
        j.shutdown();
        let ids = list_journal_ids(dir.path()).unwrap();
        for id in &kept {
            assert!(!ids.contains(id), "{id} was kept, not reused: {ids:?}");
        }
        let reused: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| kept_inodes.contains(&inode(&journal_path(dir.path(), *id))))
            .collect();
        assert_eq!(reused.len(), kept.len(), "direct {direct_io}: {ids:?}");
        assert!(reused.iter().all(|id| *id > mark.file_id));
        let entries = replayed_entries(dir.path(), mark);
        let numbers: Vec<u64> = entries.iter().map(|(e, _)| *e).collect();
        assert_eq!(numbers, (20..40).collect::<Vec<_>>(), "direct {direct_io}");
        for (e, bytes) in entries {
            assert_eq!(&bytes[..], &data(e)[..]);
        }
    }
}

/// A reused file whose end mark was lost (a crash in the middle of a write that had
/// covered it) still ends where its new records end: the old records after them are whole,
/// with valid checksums, even at a record boundary, but tagged with the file's old id.
#[test]
fn a_reused_file_ends_where_its_new_records_end() {
    let dir = tempfile::tempdir().unwrap();
    let op = |e: u64| JournalOp::entry(5, e, Bytes::from(vec![e as u8; 100]));
    let mut old = OpenJournal::create(dir.path(), 1, 0, false, 1 << 16).unwrap();
    for e in 0..10 {
        old.append(&op(e));
    }
    old.write_pending(0).unwrap();
    let old_bytes = std::fs::read(journal_path(dir.path(), 1)).unwrap();
    drop(old);

    let mut reused = OpenJournal::reuse(dir.path(), 1, 2, false, 1 << 16).unwrap();
    assert!(!journal_path(dir.path(), 1).exists());
    let path = journal_path(dir.path(), 2);
    assert!(replayed_entries(dir.path(), Mark::default()).is_empty());
    for e in 100..103 {
        reused.append(&op(e));
    }
    reused.write_pending(0).unwrap();
    let end = reused.written as usize;
    drop(reused);
    let (recs, scanned_end, why) = scan_file(&path).unwrap();
    assert_eq!((recs.len(), scanned_end as usize), (3, end), "{why}");
    // Through the page cache the write ends with zeros to a page boundary: an end mark,
    // then padding that makes its last page whole (no read of the old page first).
    let after = std::fs::read(&path).unwrap();
    assert!(after[end..end.div_ceil(4096) * 4096]
        .iter()
        .all(|b| *b == 0));
    // The crash: what the write put after the new records (end mark, padding) was lost,
    // and the old file's bytes are there again.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &old_bytes[end..], end as u64).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let entries = replayed_entries(dir.path(), Mark::default());
    let numbers: Vec<u64> = entries.iter().map(|(e, _)| *e).collect();
    assert_eq!(numbers, vec![100, 101, 102]);
    // Nothing was cut: that end is not damage.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    let (recs, scanned_end, why) = scan_file(&path).unwrap();
    assert_eq!((recs.len(), scanned_end as usize), (3, end));
    assert!(why.contains("reused"), "{why}");

    // Followed by a newer file, it is not taken for a damaged one either.
    let mut newer = OpenJournal::create(dir.path(), 3, 0, false, 1 << 16).unwrap();
    newer.append(&op(200));
    newer.write_pending(0).unwrap();
    drop(newer);
    let numbers: Vec<u64> = replayed_entries(dir.path(), Mark::default())
        .iter()
        .map(|(e, _)| *e)
        .collect();
    assert_eq!(numbers, vec![100, 101, 102, 200]);
}

/// A journal of format 2 (no tags) reused after an upgrade: its old records end with a kind
/// byte after the entry's data. Entries whose data ends in zeros end like a small id would;
/// the tag is mixed so that they are not taken for records of the reused file.
#[test]
fn a_reused_format_2_file_ends_where_its_new_records_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut old = crate::record::file_header(file::JOURNAL_MAGIC, 2, 1).to_vec();
    for e in 0..10u64 {
        let mut data = vec![2u8; 97]; // read as format 3, the kind byte is a 2: an entry
        data.extend_from_slice(&[0, 0, 0]);
        crate::record::append_record(
            &mut old,
            &[&5u64.to_be_bytes(), &e.to_be_bytes(), &data, &[2]],
        );
    }
    std::fs::write(journal_path(dir.path(), 1), &old).unwrap();

    let mut reused = OpenJournal::reuse(dir.path(), 1, 2, false, 1 << 16).unwrap();
    // New records as long as the old ones, so that the old ones start where the new end.
    let op = |e: u64| JournalOp::entry(5, e, Bytes::from(vec![9u8; 96]));
    for e in 100..103 {
        reused.append(&op(e));
    }
    reused.write_pending(0).unwrap();
    let end = reused.written as usize;
    drop(reused);
    let record = (end - crate::record::FILE_HEADER_LEN) / 3;
    assert_eq!((old.len() - crate::record::FILE_HEADER_LEN) % record, 0);
    // The crash: the end mark is lost, the old records follow whole.
    let path = journal_path(dir.path(), 2);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &old[end..], end as u64).unwrap();
    let numbers: Vec<u64> = replayed_entries(dir.path(), Mark::default())
        .iter()
        .map(|(e, _)| *e)
        .collect();
    assert_eq!(numbers, vec![100, 101, 102]);
}

/// Files written under a larger `journalMaxSizeMB` are not reused after it was lowered
/// (each would keep its old size for ever); they wait to be removed as backups.
#[test]
fn files_longer_than_the_limit_allows_are_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let start = |max_file_size: u64, first: u64| {
        let c = JournalConfig {
            max_file_size,
            prealloc_size: 0,
            ..cfg()
        };
        let applier = Arc::new(Collect::default());
        let j = Journal::start(0, dir.path().into(), c, first, applier.clone()).unwrap();
        (j, applier)
    };
    let (j, applier) = start(64 << 10, 1);
    for e in 0..100 {
        add(&j, 1, e, &[1u8; 3000]).recv().unwrap().unwrap();
    }
    j.shutdown();
    let big: Vec<u64> = list_journal_ids(dir.path()).unwrap();
    assert!(big.len() >= 4, "{big:?}");
    let big_inodes: HashSet<u64> = big
        .iter()
        .map(|id| inode(&journal_path(dir.path(), *id)))
        .collect();
    let next = applier.0.lock().last().unwrap().1.file_id + 1;

    let (j, _) = start(4096, next);
    j.remove_old_files(next, 10, true).unwrap();
    for e in 100..120 {
        add(&j, 1, e, &[1u8; 3000]).recv().unwrap().unwrap();
    }
    j.shutdown();
    let ids = list_journal_ids(dir.path()).unwrap();
    assert!(ids.len() > big.len() + 3, "expected rollovers: {ids:?}");
    for id in ids.iter().filter(|id| **id >= next) {
        assert!(!big_inodes.contains(&inode(&journal_path(dir.path(), *id))));
    }
}

/// A journal whose group wait would outlast any test: only adaptive group commit (or the size
/// thresholds) can end its groups.
fn adaptive_cfg(direct_io: bool) -> JournalConfig {
    JournalConfig {
        max_group_wait: Duration::from_secs(600),
        adaptive_group_writes: true,
        direct_io,
        ..cfg()
    }
}

#[test]
fn a_lone_add_waits_for_one_sync_not_for_the_group_wait() {
    for direct_io in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let applier = Arc::new(Collect::default());
        let j = Journal::start(0, dir.path().into(), adaptive_cfg(direct_io), 1, applier).unwrap();
        for e in 0..3 {
            add(&j, 3, e, b"lone")
                .recv_timeout(Duration::from_secs(30))
                .expect("acknowledged without the 600 s group wait")
                .unwrap();
        }
        assert_eq!(j.stats.flush_max_wait.get(), 0);
        assert_eq!(j.stats.flush_sync_idle.get(), 3, "each add its own group");
        assert_eq!(j.stats.syncs.get(), 3);
        j.shutdown();
    }
}

#[test]
fn groups_grow_by_themselves_while_a_sync_is_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    // Every sync of this journal slow: the adds sent during one form the next group.
    let slow = fs::inject_fault(fs::Fault {
        path_prefix: dir.path().to_path_buf(),
        ops: vec![fs::Op::Sync],
        action: fs::FaultAction::Delay(Duration::from_millis(50)),
        times: None,
    });
    let applier = Arc::new(Collect::default());
    let j = Journal::start(0, dir.path().into(), adaptive_cfg(true), 1, applier).unwrap();
    let waits: Vec<_> = (0..300).map(|e| add(&j, 9, e, b"busy")).collect();
    for w in waits {
        w.recv_timeout(Duration::from_secs(60)).unwrap().unwrap();
    }
    fs::remove_fault(slow);
    let syncs = j.stats.syncs.get();
    assert!(syncs < 30, "300 adds in {syncs} syncs: groups did not grow");
    assert_eq!(j.stats.flush_max_wait.get(), 0);
    j.shutdown();
}

/// An add is acknowledged only once the fdatasync that covers it has returned, and with that
/// sync's outcome: a slow sync delays the acknowledgement by at least its delay, a failed one
/// fails the add. In both group-commit modes and both write paths.
#[test]
fn no_add_is_acknowledged_before_its_sync_returns() {
    const SLOW: Duration = Duration::from_millis(300);
    for direct_io in [true, false] {
        for adaptive in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let c = JournalConfig {
                adaptive_group_writes: adaptive,
                direct_io,
                ..cfg()
            };
            let j =
                Journal::start(0, dir.path().into(), c, 1, Arc::new(Collect::default())).unwrap();
            let slow = fs::inject_fault(fs::Fault {
                path_prefix: dir.path().to_path_buf(),
                ops: vec![fs::Op::Sync],
                action: fs::FaultAction::Delay(SLOW),
                times: None,
            });
            let sent = Instant::now();
            let ack = add(&j, 4, 0, b"slow").recv_timeout(Duration::from_secs(30));
            let waited = sent.elapsed();
            ack.unwrap().unwrap();
            assert!(fs::fault_hits(slow) >= 1, "the add's group was synced");
            // A lower bound only: the injected delay is slept before the sync is made.
            assert!(
                waited >= SLOW,
                "acknowledged after {waited:?}, before its sync returned"
            );
            fs::remove_fault(slow);

            let failing = fs::inject_fault(fs::Fault {
                path_prefix: dir.path().to_path_buf(),
                ops: vec![fs::Op::Sync],
                action: fs::FaultAction::Fail(libc::EIO),
                times: Some(1),
            });
            let outcome = add(&j, 4, 1, b"lost")
                .recv_timeout(Duration::from_secs(30))
                .unwrap();
            assert!(
                outcome.is_err(),
                "an add whose sync failed was acknowledged"
            );
            fs::remove_fault(failing);
            j.shutdown();
        }
    }
}

/// Records the (ledger, entry) of every entry applied: applying follows the sync, so what is
/// here is durable.
#[derive(Default)]
struct AppliedEntries(Mutex<Vec<(u64, u64)>>);
impl Applier for AppliedEntries {
    fn apply(&self, _journal: usize, ops: &[JournalOp], _mark: Mark) -> Result<()> {
        let mut applied = self.0.lock();
        for op in ops {
            if let JournalOp::Entry { ledger, entry, .. } = op {
                applied.push((*ledger, *entry));
            }
        }
        Ok(())
    }
}

fn add_deferred_sync(j: &Journal, ledger: u64, entry: u64) -> mpsc::Receiver<Result<()>> {
    let (tx, rx) = mpsc::channel();
    j.submit_deferred_sync(
        JournalOp::entry(ledger, entry, Bytes::from_static(b"deferred")),
        Some(Arc::from(&b"key"[..])),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
        true,
    )
    .unwrap();
    rx
}

fn force(j: &Journal, ledger: u64) -> mpsc::Receiver<Result<()>> {
    let (tx, rx) = mpsc::channel();
    j.force(
        ledger,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    )
    .unwrap();
    rx
}

/// Deferred sync (BookKeeper's `ackBeforeSync`): the add is acknowledged once written, before
/// its sync, and a sync that then fails does not take the acknowledgement back; the force
/// that follows reports that failure. In both group-commit modes and both write paths.
#[test]
fn a_deferred_sync_add_is_acknowledged_before_its_sync_and_a_force_reports_the_sync() {
    for direct_io in [true, false] {
        for adaptive in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let c = JournalConfig {
                adaptive_group_writes: adaptive,
                direct_io,
                ..cfg()
            };
            let applied = Arc::new(AppliedEntries::default());
            let j = Journal::start(0, dir.path().into(), c, 1, applied.clone()).unwrap();
            let failing = fs::inject_fault(fs::Fault {
                path_prefix: dir.path().to_path_buf(),
                ops: vec![fs::Op::Sync],
                action: fs::FaultAction::Fail(libc::EIO),
                times: Some(1),
            });
            let ack = add_deferred_sync(&j, 5, 0).recv_timeout(Duration::from_secs(30));
            ack.unwrap()
                .expect("acknowledged once written, whatever its sync does");
            let forced = force(&j, 5).recv_timeout(Duration::from_secs(30)).unwrap();
            assert!(forced.is_err(), "a force after a failed sync succeeded");
            assert!(
                applied.0.lock().is_empty(),
                "an entry whose sync failed was applied"
            );
            // The journal writes again (a new file), but the lost entry stays lost: a later
            // force of the ledger fails too, while other ledgers' forces succeed.
            let again = force(&j, 5).recv_timeout(Duration::from_secs(30)).unwrap();
            assert!(again.is_err(), "a second force hid the lost entry");
            let other = force(&j, 8).recv_timeout(Duration::from_secs(30)).unwrap();
            other.expect("a ledger without lost entries forces once the journal recovered");
            fs::remove_fault(failing);
            j.shutdown();
        }
    }
}

/// FORCE_LEDGER's journal half: a force is completed only after the fdatasync covering every
/// entry queued before it returned (the entry is applied, which follows the sync, and the slow
/// sync was made), however slow that sync is; normal adds queued with it keep their order.
#[test]
fn a_force_is_answered_only_after_the_sync_covering_earlier_deferred_adds() {
    const SLOW: Duration = Duration::from_millis(300);
    for direct_io in [true, false] {
        for adaptive in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let c = JournalConfig {
                adaptive_group_writes: adaptive,
                direct_io,
                ..cfg()
            };
            let applied = Arc::new(AppliedEntries::default());
            let j = Journal::start(0, dir.path().into(), c, 1, applied.clone()).unwrap();
            // A force with nothing queued still completes (after one sync of nothing new).
            force(&j, 6)
                .recv_timeout(Duration::from_secs(30))
                .unwrap()
                .unwrap();
            let slow = fs::inject_fault(fs::Fault {
                path_prefix: dir.path().to_path_buf(),
                ops: vec![fs::Op::Sync],
                action: fs::FaultAction::Delay(SLOW),
                times: None,
            });
            let sent = Instant::now();
            let acks: Vec<_> = (0..5).map(|e| add_deferred_sync(&j, 6, e)).collect();
            let normal = add(&j, 7, 0, b"normal");
            let forced = force(&j, 6);
            for ack in acks {
                ack.recv_timeout(Duration::from_secs(30)).unwrap().unwrap();
            }
            forced
                .recv_timeout(Duration::from_secs(30))
                .unwrap()
                .unwrap();
            let waited = sent.elapsed();
            assert!(
                fs::fault_hits(slow) >= 1,
                "the deferred adds' group was synced"
            );
            // A lower bound only: the injected delay is slept before the sync is made.
            assert!(
                waited >= SLOW,
                "forced after {waited:?}, before the sync returned"
            );
            let durable = applied.0.lock().clone();
            for e in 0..5 {
                assert!(
                    durable.contains(&(6, e)),
                    "entry {e} not durable at the force"
                );
            }
            assert!(durable.contains(&(7, 0)));
            normal
                .recv_timeout(Duration::from_secs(30))
                .unwrap()
                .unwrap();
            fs::remove_fault(slow);
            j.shutdown();
            let replayed = replayed_entries(dir.path(), Mark::default());
            assert_eq!(replayed.len(), 6, "every forced entry is in the journal");
        }
    }
}
