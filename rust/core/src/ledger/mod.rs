//! The client's per-ledger quorum engine: a [`writer`] that sends each entry to its write set
//! and releases completions in entry-id order once Qa bookies acknowledged, and a [`reader`]
//! that fetches ranges with replica failover, digest checks and BP-62 batch reads. It never
//! decides which bookies to use: bookie failures are reported as events, and the control plane
//! answers with `change_ensemble` after updating the metadata.

pub mod columns;
pub mod reader;
pub mod stats;
pub mod writer;

pub use reader::{
    check_range, read_range, ReadEntry, ReadOptions, ReadPlan, Segment, MAX_READ_ENTRIES,
};
pub use stats::{client_stats, ClientStats};
pub use writer::{AppendDone, BookieFailure, FailureSink, LedgerWriter, WriterSpec};

use crate::bookie_conn::ClientError;
use crate::protocol;

/// Why a write or read failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LedgerError {
    /// A bookie error that no other bookie can fix (fenced, unauthorized, request too large).
    #[error("{0}")]
    Bookie(ClientError),
    #[error("ledger {0} is fenced: another client recovered it")]
    Fenced(i64),
    #[error("ledger writer failed: {0}")]
    WriterFailed(String),
    #[error("ledger writer is closed")]
    Closed,
    #[error("entry {entry} of ledger {ledger} could not be read from any bookie ({last})")]
    ReadFailed {
        ledger: i64,
        entry: i64,
        last: String,
        /// Every replica answered that it has no such entry (or ledger).
        missing: bool,
    },
    #[error("entry {entry} of ledger {ledger}: every copy is corrupt ({bookies})")]
    Digest {
        ledger: i64,
        entry: i64,
        bookies: String,
    },
    /// A caller's argument the engine cannot work with (quorums, ranges, sizes).
    #[error("{0}")]
    InvalidArgument(String),
    /// The control plane stopped the writer; it keeps the cause (for example "no bookie to
    /// replace a failed one") to hand back to every caller.
    #[error("{0}")]
    Stopped(std::sync::Arc<dyn std::error::Error + Send + Sync>),
    /// A blocking wait was interrupted (a signal); the operation may still complete.
    #[error("interrupted")]
    Interrupted,
}

/// Write set of `entry` in an ensemble of `e` with write quorum `qw`.
pub fn write_set(entry: i64, e: usize, qw: usize) -> impl Iterator<Item = usize> {
    let e64 = e.max(1) as i64;
    (0..qw as i64).map(move |i| (entry + i).rem_euclid(e64) as usize)
}

/// BookKeeper's rule for quorums: E >= Qw >= Qa >= 1.
pub fn check_quorums(e: usize, qw: usize, qa: usize) -> Result<(), LedgerError> {
    if e >= qw && qw >= qa && qa >= 1 {
        Ok(())
    } else {
        Err(LedgerError::InvalidArgument(format!(
            "need ensemble size >= write quorum >= ack quorum >= 1, got {e}/{qw}/{qa}"
        )))
    }
}

/// Flags of a ledger-recovery add (as the Java client sends them).
pub const RECOVERY_ADD_FLAGS: u16 = protocol::FLAG_RECOVERY_ADD | protocol::FLAG_HIGH_PRIORITY;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::bookie_conn::BookieClient;
    use crate::digest::{master_key, DigestManager, DigestType};
    use crate::done;
    use crate::runtime::runtime;
    use crate::testing::{client_config, test_bookie};

    fn plan(segments: Vec<Segment>, orders: Vec<Vec<Vec<usize>>>) -> ReadPlan {
        let dm = DigestManager::new(9, b"", DigestType::Crc32c);
        ReadPlan::new(9, 2, dm, segments, orders, 5 << 20).unwrap()
    }

    fn seg(first_entry: i64, ensemble: &[String]) -> Segment {
        Segment {
            first_entry,
            ensemble: ensemble.to_vec(),
        }
    }

    #[test]
    fn plans_are_checked_once() {
        let e: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let dm = || DigestManager::new(1, b"", DigestType::Crc32c);
        assert!(ReadPlan::new(1, 2, dm(), vec![seg(1, &e)], vec![], 1).is_err());
        assert!(ReadPlan::new(1, 2, dm(), vec![seg(0, &e), seg(0, &e)], vec![], 1).is_err());
        assert!(ReadPlan::new(1, 4, dm(), vec![seg(0, &e)], vec![], 1).is_err());
        assert!(ReadPlan::new(1, 2, dm(), vec![seg(0, &e)], vec![vec![vec![3]]], 1).is_err());
        assert!(check_range(5, 4).is_err());
        assert!(check_range(0, MAX_READ_ENTRIES).is_err());
        assert!(check_range(0, MAX_READ_ENTRIES - 1).is_ok());
        assert!(check_quorums(3, 2, 2).is_ok());
        assert!(check_quorums(2, 3, 2).is_err());
        assert!(check_quorums(3, 2, 0).is_err());
    }

    #[test]
    fn replicas_follow_the_given_read_order_with_avoided_bookies_last() {
        let ensemble: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let mut avoid = HashSet::new();
        // Write-set order by default: entry 2 lives on indexes 2 and 0.
        let p = plan(vec![seg(0, &ensemble)], Vec::new());
        assert_eq!(p.replicas(2, &avoid), vec!["c", "a"]);
        let p = plan(
            vec![seg(0, &ensemble)],
            vec![vec![vec![1, 0], vec![2, 1], vec![0, 2]]],
        );
        assert_eq!(p.replicas(2, &avoid), vec!["a", "c"]);
        assert_eq!(p.replicas(4, &avoid), vec!["c", "b"]);
        avoid.insert("a".to_string());
        assert_eq!(p.replicas(2, &avoid), vec!["c", "a"]);
    }

    #[test]
    fn writer_survives_a_bookie_failure_through_an_ensemble_change() {
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
        let servers: Vec<_> = dirs.iter().map(|d| test_bookie(d.path()).1).collect();
        let addrs: Vec<String> = servers.iter().map(|s| s.local_addr().to_string()).collect();
        let client = Arc::new(BookieClient::new(client_config()));
        let dm = DigestManager::new(9, b"", DigestType::Crc32c);
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
        let plan = plan(
            vec![seg(0, &addrs[..3]), seg(lac + 1, &ensemble)],
            Vec::new(),
        );
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
}
