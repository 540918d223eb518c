//! The adv and explicit-LAC parts of the writer against in-process bookies: out-of-order adds
//! completed in id order within the throttle, BookKeeper's errors for bad ids, and the
//! WRITE_LAC flush reaching every bookie of an idle writer's ensemble.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::bookie_conn::BookieClient;
use crate::digest::{master_key, DigestManager, DigestType};
use crate::done;
use crate::ledger::{FailureSink, LedgerError, LedgerWriter, WriterSpec};
use crate::testing::{client_config, test_bookie, TestBookie};

fn bookies(n: usize) -> (Vec<tempfile::TempDir>, Vec<TestBookie>, Vec<String>) {
    let dirs: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
    let bookies: Vec<_> = dirs.iter().map(|d| test_bookie(d.path())).collect();
    let addrs = bookies
        .iter()
        .map(|b| b.1.local_addr().to_string())
        .collect();
    (dirs, bookies, addrs)
}

fn spec(ledger: i64, ensemble: Vec<String>) -> WriterSpec {
    WriterSpec {
        ledger,
        writer_id: 1,
        qw: 2,
        qa: 2,
        master_key: Bytes::copy_from_slice(&master_key(b"")),
        digest: DigestManager::new(ledger, b"", DigestType::Crc32c),
        ensemble,
        next_entry: 0,
        length: 0,
        flags: 0,
    }
}

fn no_failures() -> FailureSink {
    Arc::new(|_| {})
}

#[test]
fn adv_adds_out_of_order_complete_in_id_order_within_the_throttle() {
    let (_dirs, _bookies, addrs) = bookies(3);
    let client = Arc::new(BookieClient::new(client_config()));
    let writer = LedgerWriter::new_adv(client, spec(11, addrs), no_failures()).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let add = |id: i64| {
        let (d, w) = done::blocking();
        let order = order.clone();
        writer.append_adv(
            id,
            Bytes::from(format!("e{id}")),
            Box::new(move |r| {
                if let Ok(id) = &r {
                    order.lock().push(*id);
                }
                d(r)
            }),
        );
        w
    };
    let later: Vec<_> = [4, 2, 3, 1].into_iter().map(add).collect();
    // Four pending behind the missing entry 0: a throttle of 4 is full, and stays full.
    let started = Instant::now();
    let waited = writer.wait_for_room(4, &|| started.elapsed() > Duration::from_millis(300));
    assert!(matches!(waited, Err(LedgerError::Interrupted)));
    assert_eq!(writer.positions().0, -1);
    assert!(matches!(
        add(3).wait(),
        Some(Err(LedgerError::DuplicateEntryId { entry: 3, .. }))
    ));
    assert_eq!(add(0).wait().unwrap().unwrap(), 0);
    for w in later {
        assert!(w.wait().unwrap().is_ok());
    }
    assert_eq!(*order.lock(), vec![0, 1, 2, 3, 4]);
    assert_eq!(writer.positions().0, 4);
    assert!(matches!(
        add(-1).wait(),
        Some(Err(LedgerError::DuplicateEntryId { .. }))
    ));
    // An adv writer refuses an append without an id; a plain one refuses append_adv.
    let (d, w) = done::blocking();
    writer.append(Bytes::from_static(b"x"), d);
    assert!(matches!(
        w.wait(),
        Some(Err(LedgerError::InvalidArgument(_)))
    ));
}

#[test]
fn the_explicit_lac_flush_tells_the_bookies_an_idle_writers_lac() {
    let (_dirs, bookies, addrs) = bookies(3);
    let config = crate::config::ClientConfig {
        use_v2_wire_protocol: false,
        ..client_config()
    };
    let client = Arc::new(BookieClient::new(config));
    let writer = LedgerWriter::new(client, spec(12, addrs), no_failures()).unwrap();
    writer
        .start_explicit_lac_flush(Duration::from_millis(20))
        .unwrap();
    for i in 0..5 {
        let (d, w) = done::blocking();
        writer.append(Bytes::from(format!("e{i}")), d);
        assert_eq!(w.wait().unwrap().unwrap(), i);
    }
    let digest = DigestManager::new(12, b"", DigestType::Crc32c);
    let lac_on = |b: &TestBookie| {
        b.0.explicit_lac(12)
            .ok()
            .flatten()
            .and_then(|body| digest.verify_lac(&body).ok())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !bookies.iter().all(|b| lac_on(b) == Some(4)) {
        assert!(
            Instant::now() < deadline,
            "no explicit LAC 4 on every bookie"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The last entry carries LAC 3; the bookie reports 4 once the explicit LAC is in, as
    // BookKeeper's bookie does (what a long-poll read waits on).
    for b in &bookies {
        assert_eq!(b.0.last_add_confirmed(12).ok(), Some(4));
    }
    writer.close();
}
