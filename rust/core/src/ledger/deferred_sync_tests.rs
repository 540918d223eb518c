//! DEFERRED_SYNC adds and FORCE_LEDGER as the ledger engine sends them, through a real server
//! on loopback with faults on its journal's syncs: a deferred-sync add is answered before its sync (a failing sync does not
//! fail it), FORCE_LEDGER only after the sync covering the ledger's earlier entries (a slow
//! sync delays it, a failing one makes it EIO), and unknown write-flag bits are ignored.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::bookie_conn::{BookieClient, ClientError, Outgoing, Reply, ReplyResult};
use crate::digest::{master_key, DigestManager, DigestType};
use crate::done;
use crate::fs;
use crate::protocol::v3::WRITE_FLAG_DEFERRED_SYNC;
use crate::protocol::Status;
use crate::testing::{client_config, test_bookie};

fn wait(client: &BookieClient, request: Outgoing) -> ReplyResult {
    let (d, waiter) = done::blocking();
    client.send(request, d);
    waiter.wait().unwrap_or(Err(ClientError::Closed))
}

struct Bookie {
    dir: tempfile::TempDir,
    server: crate::testing::TestServer,
    addr: String,
    client: BookieClient,
    key: Bytes,
    dm: DigestManager,
}

impl Bookie {
    fn start() -> Bookie {
        let dir = tempfile::tempdir().unwrap();
        let (_storage, server) = test_bookie(dir.path());
        let addr = server.local_addr().to_string();
        let client = BookieClient::new(crate::config::ClientConfig {
            use_v2_wire_protocol: false,
            ..client_config()
        });
        Bookie {
            dir,
            server,
            addr,
            client,
            key: Bytes::copy_from_slice(&master_key(b"pw")),
            dm: DigestManager::new(11, b"pw", DigestType::Crc32c),
        }
    }

    fn add(&self, entry: i64, write_flags: i32) -> ReplyResult {
        let body = self.dm.package(entry, -1, (entry + 1) * 4, b"data");
        let request = self.client.add_request_with_write_flags(
            &self.addr,
            11,
            entry,
            self.key.clone(),
            body,
            0,
            write_flags,
        );
        wait(&self.client, request)
    }

    fn force(&self) -> ReplyResult {
        wait(
            &self.client,
            self.client.force_ledger_request(&self.addr, 11),
        )
    }

    fn read(&self, entry: i64) -> ReplyResult {
        let request = self.client.read_request(&self.addr, 11, entry, 0, None);
        wait(&self.client, request)
    }

    fn sync_fault(&self, action: fs::FaultAction, times: Option<u64>) -> u64 {
        fs::inject_fault(fs::Fault {
            path_prefix: self.dir.path().join("j"),
            ops: vec![fs::Op::Sync],
            action,
            times,
        })
    }
}

fn is_status(r: &ReplyResult, want: Status) -> bool {
    matches!(r, Err(ClientError::Bookie { status, .. }) if *status == want)
}

#[test]
fn a_deferred_sync_add_is_answered_before_its_sync_and_force_ledger_reports_the_sync() {
    let b = Bookie::start();
    assert_eq!(b.add(0, 0), Ok(Reply::Added));
    assert_eq!(b.force(), Ok(Reply::Done));
    // The next sync fails: a deferred-sync add is answered OK all the same (it was written)...
    let failing = b.sync_fault(fs::FaultAction::Fail(libc::EIO), Some(1));
    assert_eq!(b.add(1, WRITE_FLAG_DEFERRED_SYNC), Ok(Reply::Added));
    // ...and the force that follows answers EIO, now and later (the entry may be lost).
    assert!(
        is_status(&b.force(), Status::Io),
        "a force hid a failed sync"
    );
    assert!(is_status(&b.force(), Status::Io));
    fs::remove_fault(failing);

    // Unknown bits are ignored, as BookKeeper's `WriteFlag.getWriteFlags` does: such an add
    // waits for its sync, and a failed sync fails it.
    let failing = b.sync_fault(fs::FaultAction::Fail(libc::EIO), Some(1));
    let normal = b.add(2, 0b110);
    assert!(
        normal.is_err(),
        "an add with unknown flag bits did not wait for its sync"
    );
    fs::remove_fault(failing);
    b.server.stop(Duration::from_secs(1));
}

#[test]
fn force_ledger_is_answered_only_after_the_sync_of_the_ledgers_earlier_entries() {
    const SLOW: Duration = Duration::from_millis(300);
    let b = Bookie::start();
    let slow = b.sync_fault(fs::FaultAction::Delay(SLOW), None);
    let sent = Instant::now();
    for e in 0..5 {
        assert_eq!(b.add(e, WRITE_FLAG_DEFERRED_SYNC), Ok(Reply::Added));
    }
    assert_eq!(b.force(), Ok(Reply::Done));
    let waited = sent.elapsed();
    assert!(fs::fault_hits(slow) >= 1, "the deferred adds were synced");
    // A lower bound only: the injected delay is slept before the sync is made.
    assert!(waited >= SLOW, "FORCE_LEDGER answered after {waited:?}");
    // Durable entries are applied before the force is answered: all readable now.
    for e in 0..5 {
        assert!(matches!(b.read(e), Ok(Reply::Entry(_))), "entry {e}");
    }
    fs::remove_fault(slow);
    b.server.stop(Duration::from_secs(1));
}
