//! Entry logs over real files: append, read and rollover with sealed maps, direct and page-cache
//! writes and reads, seals that fail at rollover, corrupt records, removed logs freed in steps.

use bytes::Bytes;

use super::log_file::DIRECT_READ_MIN_BYTES;
use super::*;
use crate::record::be_u64;
use crate::record::FILE_HEADER_LEN;
use crate::storage::dirs::RoundRobinAllocator;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

fn dirs_of(paths: &[PathBuf]) -> Arc<LedgerDirs> {
    Arc::new(LedgerDirs::new(
        paths.to_vec(),
        Box::<RoundRobinAllocator>::default(),
    ))
}

fn list_log_ids(dir: &std::path::Path) -> Result<Vec<u64>> {
    fs::list_hex_ids(dir, ".log")
}

/// Runs a test with page-cache writes and with direct I/O.
fn both_modes(test: impl Fn(bool)) {
    test(false);
    test(true);
}

/// Descriptors of this process open on `path` after its unlink.
#[test]
fn a_removed_log_is_freed_in_steps_once_its_readers_let_go() {
    use crate::testing::open_descriptors_of_deleted;
    let d = tempfile::tempdir().unwrap();
    let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 20, 4096, false).unwrap();
    let mut locs = Vec::new();
    let data = vec![7u8; 100_000];
    for e in 0..30u64 {
        el.append([(1u64, e, &data[..])], &mut locs).unwrap();
    }
    el.flush().unwrap();
    let first = locs[0].log_id();
    assert_ne!(el.active_id(), Some(first));
    let path = d.path().join(log_name(first));
    let reader = el.file(first).unwrap(); // a read in progress
    el.remove_log(first).unwrap();
    assert!(!path.exists());
    // The releaser waits for the reader: both descriptors stay open and the log whole (a
    // window in which a releaser that did not wait would cut the file, not a wait).
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(open_descriptors_of_deleted(&path), 2);
    let at = locs[9];
    let mut got = vec![0u8; at.data_len()];
    reader
        .file
        .read_exact_at(
            &mut got,
            at.offset() + (RECORD_HEADER_LEN as u64) + at.len as u64 - data.len() as u64,
        )
        .unwrap();
    assert_eq!(got, data);
    drop(reader);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while open_descriptors_of_deleted(&path) > 0 || el.releaser.pending() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the removed log is still open"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_seal_that_fails_at_rollover_is_retried_by_every_sync_until_it_succeeds() {
    both_modes(seal_failure_at_rollover);
}

fn seal_failure_at_rollover(direct: bool) {
    let d = tempfile::tempdir().unwrap();
    let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 4096, 4096, direct).unwrap();
    let mut locs = Vec::new();
    el.append([(1u64, 0u64, &[1u8; 1000][..])], &mut locs)
        .unwrap();
    el.flush().unwrap();
    let first = el.active_id().unwrap();
    let first_path = d.path().join(log_name(first));
    // The disk refuses to sync the first log: its seal at the next rollover fails.
    let fault = fs::inject_fault(fs::Fault {
        path_prefix: first_path.clone(),
        ops: vec![fs::Op::Sync],
        action: fs::FaultAction::Fail(libc::ENOSPC),
        times: None,
    });
    let rolled = el.append([(1u64, 1u64, &[2u8; 4000][..])], &mut locs);
    assert!(rolled.is_err(), "the rollover's seal failed");
    // Not durable: a checkpoint must not pass while the old log is unsealed.
    assert!(el.sync().is_err());
    assert!(el.sync().is_err());
    fs::remove_fault(fault);
    el.append([(1u64, 1u64, &[2u8; 4000][..])], &mut locs)
        .unwrap();
    el.flush().unwrap();
    el.sync().unwrap();
    assert_ne!(el.active_id(), Some(first));
    // Sealed now: the map is in the header, and the entries read back.
    let mut header = [0u8; FILE_HEADER_LEN];
    std::fs::File::open(&first_path)
        .unwrap()
        .read_exact_at(&mut header, 0)
        .unwrap();
    assert_ne!(be_u64(&header[24..32]), 0, "ledgers map offset written");
    assert_eq!(
        read_ledgers_map(&first_path).unwrap().get(&1).copied(),
        Some(1000 + ENTRY_RECORD_OVERHEAD as u64)
    );
    assert_eq!(&el.read(1, 0, locs[0]).unwrap()[..], &[1u8; 1000][..]);
    el.close().unwrap();
}

#[test]
fn append_read_and_rollover_with_sealed_maps() {
    both_modes(append_read_and_rollover);
}

fn append_read_and_rollover(direct: bool) {
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let dirs = vec![d1.path().to_path_buf(), d2.path().to_path_buf()];
    let el = EntryLogger::open(dirs_of(&dirs), 8192, 4096, direct).unwrap();
    let mut locs = Vec::new();
    let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 500]).collect();
    el.append(
        payloads
            .iter()
            .enumerate()
            .map(|(i, p)| (1 + (i as u64 % 2), i as u64, p.as_slice())),
        &mut locs,
    )
    .unwrap();
    el.flush().unwrap();
    for (i, at) in locs.iter().enumerate() {
        let got = el.read(1 + (i as u64 % 2), i as u64, *at).unwrap();
        assert_eq!(&got[..], &payloads[i][..]);
    }
    // A location read as the wrong entry is detected, not misread.
    assert!(el.read(1, 99, locs[0]).is_err());
    assert!(el.rollovers.get() >= 2);
    el.close().unwrap();
    let maps = el.ledgers_maps().unwrap();
    assert!(maps.len() >= 3);
    let total: u64 = maps.values().flat_map(|m| m.values()).sum();
    assert_eq!(total, 40 * (500 + ENTRY_RECORD_OVERHEAD as u64));
    assert!(!list_log_ids(d1.path()).unwrap().is_empty());
    assert!(!list_log_ids(d2.path()).unwrap().is_empty());

    // Reopened, new logs take new ids and old data stays readable.
    let el = EntryLogger::open(dirs_of(&dirs), 8192, 4096, direct).unwrap();
    assert_eq!(&el.read(1, 0, locs[0]).unwrap()[..], &payloads[0][..]);
    let mut more = Vec::new();
    el.append([(3u64, 0u64, &b"x"[..])], &mut more).unwrap();
    assert!(more[0].log_id() > locs.last().unwrap().log_id());
}

#[test]
fn unsealed_log_map_is_rebuilt_by_scanning() {
    both_modes(unsealed_map_rebuilt);
}

fn unsealed_map_rebuilt(direct: bool) {
    let d = tempfile::tempdir().unwrap();
    let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 20, 4096, direct).unwrap();
    let mut locs = Vec::new();
    el.append(
        [(5u64, 0u64, &[1u8; 100][..]), (6, 0, &[2u8; 50][..])],
        &mut locs,
    )
    .unwrap();
    el.flush().unwrap();
    // Simulate a crash: never sealed.
    let path = d.path().join(log_name(locs[0].log_id()));
    let map = read_ledgers_map(&path).unwrap();
    assert_eq!(map[&5], 100 + ENTRY_RECORD_OVERHEAD as u64);
    assert_eq!(map[&6], 50 + ENTRY_RECORD_OVERHEAD as u64);
    // A log cut before its header was written holds nothing.
    let empty = d.path().join(log_name(999));
    std::fs::File::create(&empty).unwrap();
    assert!(read_ledgers_map(&empty).unwrap().is_empty());
}

#[test]
fn corrupt_record_is_reported_on_read() {
    both_modes(corrupt_record_reported);
}

fn corrupt_record_reported(direct: bool) {
    let d = tempfile::tempdir().unwrap();
    let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 20, 4096, direct).unwrap();
    let mut locs = Vec::new();
    el.append([(1u64, 0u64, &[9u8; 64][..])], &mut locs)
        .unwrap();
    el.flush().unwrap();
    let path = d.path().join(log_name(locs[0].log_id()));
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0xFF], locs[0].offset() + 40).unwrap();
    assert!(matches!(
        el.read(1, 0, locs[0]),
        Err(StorageError::Corruption(_))
    ));
}

/// Direct mode: whatever mix of sizes and flushes, every published end is a block boundary,
/// every entry reads back, and scans and ledgers maps see the entries and not the padding.
#[test]
fn direct_writes_pad_each_flush_to_a_block_and_scans_skip_the_padding() {
    let d = tempfile::tempdir().unwrap();
    let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 30, 4096, true).unwrap();
    let mut want = Vec::new();
    let mut locs = Vec::new();
    let mut seed = 7u64;
    for round in 0..40u64 {
        let batch: Vec<(u64, u64, Vec<u8>)> = (0..(round % 9 + 1))
            .map(|i| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let len = (seed >> 33) as usize % 70_000;
                (round % 3, round * 100 + i, vec![(seed >> 20) as u8; len])
            })
            .collect();
        el.append(
            batch.iter().map(|(l, e, p)| (*l, *e, p.as_slice())),
            &mut locs,
        )
        .unwrap();
        el.flush().unwrap();
        want.extend(batch);
        let active = el.active.lock();
        let log = active.as_ref().unwrap();
        assert!(log.is_direct(), "this file system does direct I/O");
        assert!(log.buf.is_empty());
        assert_eq!(log.end % crate::aligned::DIRECT_ALIGN as u64, 0);
    }
    for ((l, e, p), at) in want.iter().zip(&locs) {
        assert_eq!(&el.read(*l, *e, *at).unwrap()[..], &p[..]);
    }
    let path = d.path().join(log_name(locs[0].log_id()));
    let mut scanned = Vec::new();
    scan_entries(&path, |l, e, _, data| scanned.push((l, e, data.to_vec()))).unwrap();
    assert_eq!(scanned, want);
    let expected_map = |m: &LedgersMap| {
        (0..3).all(|l| {
            let bytes: u64 = want
                .iter()
                .filter(|(wl, _, _)| *wl == l)
                .map(|(_, _, p)| (p.len() + ENTRY_RECORD_OVERHEAD) as u64)
                .sum();
            m.get(&l).copied().unwrap_or(0) == bytes
        }) && m.len() == 3
    };
    assert!(
        expected_map(&read_ledgers_map(&path).unwrap()),
        "scanned map"
    );
    el.close().unwrap();
    assert!(
        expected_map(&read_ledgers_map(&path).unwrap()),
        "sealed map"
    );
}

/// An entry too large for the room a log has after its header goes into that log, in
/// either mode: no empty log is sealed for it (a direct log's header takes a whole block).
#[test]
fn an_entry_larger_than_a_fresh_log_goes_into_it() {
    both_modes(|direct| {
        let d = tempfile::tempdir().unwrap();
        let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 8192, 4096, direct).unwrap();
        let mut locs = Vec::new();
        for e in 0..3u64 {
            el.append([(1u64, e, &[e as u8; 7000][..])], &mut locs)
                .unwrap();
        }
        el.close().unwrap();
        assert_eq!(el.rollovers.get(), 2, "one log per entry, none empty");
        let maps = el.ledgers_maps().unwrap();
        assert_eq!(maps.len(), 3);
        assert!(maps.values().all(|m| m.len() == 1));
        for (e, at) in locs.iter().enumerate() {
            assert_eq!(
                &el.read(1, e as u64, *at).unwrap()[..],
                &[e as u8; 7000][..]
            );
        }
    });
}

/// A file system that refuses a direct write loses nothing: the log goes on through the
/// page cache. A direct write that fails (a full disk) is retried with the same bytes.
#[test]
fn a_refused_or_failed_direct_write_loses_nothing() {
    let d = tempfile::tempdir().unwrap();
    let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 30, 4096, true).unwrap();
    let mut locs = Vec::new();
    el.append([(1u64, 0u64, &[1u8; 3000][..])], &mut locs)
        .unwrap();
    el.flush().unwrap();
    let path = d.path().join(log_name(locs[0].log_id()));
    let fail_once = |errno| {
        fs::inject_fault(fs::Fault {
            path_prefix: path.clone(),
            ops: vec![fs::Op::Write],
            action: fs::FaultAction::Fail(errno),
            times: Some(1),
        })
    };
    fail_once(libc::ENOSPC);
    el.append([(1u64, 1u64, &[2u8; 5000][..])], &mut locs)
        .unwrap();
    assert!(el.flush().is_err(), "the disk was full");
    el.flush().unwrap();
    fail_once(libc::EINVAL);
    el.append([(1u64, 2u64, &[3u8; 7000][..])], &mut locs)
        .unwrap();
    el.flush().unwrap();
    assert!(!el.active.lock().as_ref().unwrap().is_direct());
    // Back to the page cache's write size (`writeBufferSizeBytes`, 4096 here): a record
    // past it is written at once, without waiting for the 1 MiB of a direct write.
    el.append([(1u64, 3u64, &[4u8; 5000][..])], &mut locs)
        .unwrap();
    assert!(el.active.lock().as_ref().unwrap().buf.is_empty());
    el.flush().unwrap();
    for (i, (at, fill)) in locs.iter().zip([1u8, 2, 3, 4]).enumerate() {
        let got = el.read(1, i as u64, *at).unwrap();
        assert!(!got.is_empty() && got.iter().all(|b| *b == fill));
    }
    el.close().unwrap();
    let mut entries = Vec::new();
    scan_entries(&path, |_, e, _, _| entries.push(e)).unwrap();
    assert_eq!(entries, vec![0, 1, 2, 3]);
}

/// Entries of varied sizes from 1 to 200,000 bytes, appended in a few flushes.
fn varied_entries(el: &EntryLogger, count: u64) -> (Vec<Vec<u8>>, Vec<Location>) {
    let mut data = Vec::new();
    let mut locs = Vec::new();
    for e in 0..count {
        let len = 1 + (e as usize * 7919) % 200_000;
        data.push((0..len).map(|i| (i as u64 ^ e) as u8).collect::<Vec<u8>>());
        el.append([(5u64, e, &data[e as usize][..])], &mut locs)
            .unwrap();
        if e % 5 == 4 {
            el.flush().unwrap();
        }
    }
    el.flush().unwrap();
    (data, locs)
}

fn read_all(el: &EntryLogger, locs: &[Location]) -> Vec<Bytes> {
    let items: Vec<(u64, Location)> = (0..).zip(locs.iter().copied()).collect();
    let (got, err) = el.read_run(5, &items);
    assert!(err.is_none(), "{err:?}");
    got
}

/// Large reads go around the page cache where the file system allows it, and return what
/// the page cache would: within blocks, across them, and up to a log's unaligned end (a log
/// written through the page cache, then read by a logger with direct reads on).
#[test]
fn large_reads_with_direct_io_return_the_bytes_written() {
    for written_directly in [true, false] {
        let d = tempfile::tempdir().unwrap();
        let dirs = dirs_of(&[d.path().to_path_buf()]);
        let el = EntryLogger::open(dirs.clone(), 1 << 30, 4096, written_directly).unwrap();
        let (data, locs) = varied_entries(&el, 23);
        el.close().unwrap();
        let el = EntryLogger::open(dirs, 1 << 30, 4096, true)
            .unwrap()
            .with_direct_reads(true);
        let log = el.file(locs[0].log_id()).unwrap();
        let fs_does_direct = fs::open_direct_read(&log.path).unwrap().is_some();
        assert_eq!(log.direct_for(1 << 20).is_some(), fs_does_direct);
        assert!(log.direct_for(DIRECT_READ_MIN_BYTES - 1).is_none());
        let got = read_all(&el, &locs);
        assert_eq!(got.len(), data.len());
        for (g, want) in got.iter().zip(&data) {
            assert_eq!(&g[..], &want[..]);
        }
        // One entry at a time: small ones through the page cache, large ones directly.
        for (e, at) in locs.iter().enumerate() {
            assert_eq!(&el.read(5, e as u64, *at).unwrap()[..], &data[e][..]);
        }
    }
}

/// A strided read wants every other record. Through the page cache each is read alone;
/// with direct reads the records between are read along, so that the run is one read large
/// enough to go around the page cache.
#[test]
fn direct_reads_take_the_records_between_wanted_ones_along() {
    for direct_reads in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 30, 4096, true)
            .unwrap()
            .with_direct_reads(direct_reads);
        let data = |e: u64| vec![(e % 251) as u8; 20_000];
        let mut locs = Vec::new();
        for e in 0..20 {
            el.append([(5u64, e, &data(e)[..])], &mut locs).unwrap();
        }
        el.flush().unwrap();
        let path = d.path().join(log_name(locs[0].log_id()));
        let direct = direct_reads && fs::open_direct_read(&path).unwrap().is_some();
        let wanted: Vec<(u64, Location)> =
            (0..20).step_by(2).map(|e| (e, locs[e as usize])).collect();
        let reads = fs::inject_fault(fs::Fault {
            path_prefix: path.clone(),
            ops: vec![fs::Op::Read],
            action: fs::FaultAction::Delay(std::time::Duration::ZERO),
            times: None,
        });
        let (got, err) = el.read_run(5, &wanted);
        let calls = fs::fault_hits(reads);
        fs::remove_fault(reads);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got.len(), wanted.len());
        for ((e, _), g) in wanted.iter().zip(&got) {
            assert_eq!(
                &g[..],
                &data(*e)[..],
                "entry {e}, direct reads {direct_reads}"
            );
        }
        assert_eq!(
            calls,
            if direct { 1 } else { 10 },
            "direct reads {direct_reads}"
        );
    }
}

/// A direct read the file system refuses (EINVAL) is served by the page cache; one that
/// fails is an error, never bytes of another kind.
#[test]
fn a_refused_direct_read_falls_back_and_a_failed_one_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let el = EntryLogger::open(dirs_of(&[d.path().to_path_buf()]), 1 << 30, 4096, true)
        .unwrap()
        .with_direct_reads(true);
    let (data, locs) = varied_entries(&el, 12);
    let path = d.path().join(log_name(locs[0].log_id()));
    if fs::open_direct_read(&path).unwrap().is_none() {
        // No direct reads here: the injected EINVAL would fail the page-cache read itself.
        return;
    }
    let fail_reads = |errno, times| {
        fs::inject_fault(fs::Fault {
            path_prefix: path.clone(),
            ops: vec![fs::Op::Read],
            action: fs::FaultAction::Fail(errno),
            times: Some(times),
        })
    };
    fail_reads(libc::EINVAL, 1);
    let got = read_all(&el, &locs);
    assert!(got.iter().zip(&data).all(|(g, w)| g[..] == w[..]));
    let failing = fail_reads(libc::EIO, 2);
    let items: Vec<(u64, Location)> = (0..).zip(locs.iter().copied()).collect();
    let (_, err) = el.read_run(5, &items);
    assert!(matches!(err, Some(StorageError::Io { .. })), "{err:?}");
    fs::remove_fault(failing);
    assert_eq!(read_all(&el, &locs).len(), data.len());
}

/// A full disk at rollover: every failed attempt to start the next log (one per checkpoint
/// while the disk stays full) leaves no file behind and gives its id back, and nothing written
/// before is lost once there is room again.
#[test]
fn a_log_that_cannot_be_started_leaves_no_empty_file() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_path_buf();
    let el = EntryLogger::open(dirs_of(std::slice::from_ref(&dir)), 64 << 10, 4096, false).unwrap();
    let mut locs = Vec::new();
    let data = vec![9u8; 40_000];
    el.append([(1u64, 0u64, &data[..])], &mut locs).unwrap();
    el.flush().unwrap();
    let full = fs::inject_fault(fs::Fault {
        path_prefix: dir.clone(),
        ops: vec![fs::Op::Write],
        action: fs::FaultAction::Fail(libc::ENOSPC),
        times: None,
    });
    for attempt in 1..=20u64 {
        // The first attempt fails sealing the full log, the others starting the next one.
        assert!(el.append([(1u64, attempt, &data[..])], &mut locs).is_err());
    }
    assert_eq!(
        list_log_ids(&dir).unwrap().len(),
        1,
        "no empty log per failed attempt"
    );
    fs::remove_fault(full);
    let mut more = Vec::new();
    el.append([(1u64, 1u64, &data[..])], &mut more).unwrap();
    el.flush().unwrap();
    el.sync().unwrap();
    assert_eq!(
        more[0].log_id(),
        locs[0].log_id() + 1,
        "the id was given back"
    );
    assert_eq!(list_log_ids(&dir).unwrap().len(), 2);
    assert_eq!(&el.read(1, 0, locs[0]).unwrap()[..], &data[..]);
    assert_eq!(&el.read(1, 1, more[0]).unwrap()[..], &data[..]);
}
