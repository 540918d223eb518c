//! The ledger engine as one piece: a writer's appends read back through the read engine,
//! across an ensemble change.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::bookie_conn::BookieClient;
use crate::digest::{master_key, DigestManager, DigestType};
use crate::done;
use crate::runtime::runtime;
use crate::testing::{client_config, test_bookie};

fn plan(segments: Vec<Segment>) -> ReadPlan {
    let dm = DigestManager::new(9, b"", DigestType::Crc32c);
    ReadPlan::new(9, 2, dm, segments, Vec::new(), 5 << 20).unwrap()
}

fn seg(first_entry: i64, ensemble: &[String]) -> Segment {
    Segment {
        first_entry,
        ensemble: ensemble.to_vec(),
    }
}

#[test]
fn writer_survives_a_bookie_failure_through_an_ensemble_change() {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let servers: Vec<_> = dirs.iter().map(|d| test_bookie(d.path()).1).collect();
    let addrs: Vec<String> = servers.iter().map(|s| s.local_addr().to_string()).collect();
    let client = Arc::new(BookieClient::new(client_config()));
    let dm = DigestManager::new(9, b"", DigestType::Crc32c);
    // Bounded by the writer: it reports each failed slot once until the next ensemble change,
    // so at most E (3) events.
    let (failures_tx, failures) = crossbeam_channel::unbounded();
    let sink: FailureSink = Arc::new(move |f| {
        let _ = failures_tx.send(f);
    });
    let spec = WriterSpec {
        ledger: 9,
        writer_id: 1,
        qw: 2,
        qa: 2,
        master_key: Bytes::copy_from_slice(&master_key(b"")),
        digest: dm.clone(),
        ensemble: addrs[..3].to_vec(),
        next_entry: 0,
        length: 0,
        flags: 0,
    };
    let writer = LedgerWriter::new(client.clone(), spec, sink).unwrap();
    let append = |i: i64| {
        let (d, w) = done::blocking();
        writer.append(Bytes::from(format!("e{i}")), d);
        w
    };
    let first: Vec<_> = (0..100).map(append).collect();
    for (i, w) in first.into_iter().enumerate() {
        assert_eq!(w.wait().unwrap().unwrap(), i as i64);
    }
    servers[1].stop(Duration::from_millis(10));
    let more: Vec<_> = (100..200).map(append).collect();
    let failure = failures
        .recv_timeout(Duration::from_secs(10))
        .expect("a failure event");
    assert_eq!(
        (failure.index, failure.ledger, failure.writer_id),
        (1, 9, 1)
    );
    let first_of_new = writer.begin_change();
    let lac = first_of_new - 1;
    let mut ensemble = addrs[..3].to_vec();
    ensemble[1] = addrs[3].clone();
    writer
        .change_ensemble(first_of_new, ensemble.clone())
        .unwrap();
    for (i, w) in more.into_iter().enumerate() {
        assert_eq!(w.wait().unwrap().unwrap(), 100 + i as i64);
    }
    let plan = plan(vec![seg(0, &addrs[..3]), seg(lac + 1, &ensemble)]);
    let opts = ReadOptions {
        window: 16,
        ..ReadOptions::default()
    };
    let (entries, _) = runtime()
        .unwrap()
        .block_on(read_range(&client, &plan, &opts, 0, 199))
        .unwrap();
    assert_eq!(entries.len(), 200);
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.payload, Bytes::from(format!("e{i}")));
    }
    // An entry over the frame limit fails at once, and the ledger goes on.
    let (d, w) = done::blocking();
    writer.append(Bytes::from(vec![0u8; 6 << 20]), d);
    assert!(matches!(
        w.wait(),
        Some(Err(LedgerError::InvalidArgument(_)))
    ));
    assert_eq!(append(200).wait().unwrap().unwrap(), 200);
    let total = writer
        .append_all_blocking((0..50).map(|i| Bytes::from(format!("b{i}"))), 8, &|| false)
        .unwrap();
    assert_eq!(total, 250);
}
