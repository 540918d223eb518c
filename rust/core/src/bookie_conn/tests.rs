//! Per-bookie connections against a real server on loopback: every request kind over V2 and V3,
//! fencing, timeouts, unreachable bookies, the bound on queued bytes.

use super::*;
use crate::digest::{master_key, DigestManager, DigestType};
use crate::protocol::Status;
use crate::testing::{client_config, test_bookie};

fn wait(send: impl FnOnce(Done<ReplyResult>)) -> ReplyResult {
    let (done, waiter) = done::blocking();
    send(done);
    waiter.wait().unwrap_or(Err(ClientError::Closed))
}

#[test]
fn a_stopping_server_answers_a_waiting_long_poll_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_storage, server) = test_bookie(dir.path());
    let addr = server.local_addr().to_string();
    let client = BookieClient::new(ClientConfig {
        use_v2_wire_protocol: false,
        ..client_config()
    });
    let key = Bytes::copy_from_slice(&master_key(b"pw"));
    let dm = DigestManager::new(4, b"pw", DigestType::Crc32c);
    let added = wait(|d| {
        client.send(
            client.add_request(&addr, 4, 0, key, dm.package(0, -1, 5, b"hello"), 0),
            d,
        )
    });
    assert_eq!(added, Ok(Reply::Added));
    // Waits for an entry past 0 that never comes (up to a minute).
    let (tx, rx) = std::sync::mpsc::channel();
    client.send(
        client.long_poll_request(&addr, 4, 0, Duration::from_secs(60)),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    let early = rx.recv_timeout(Duration::from_millis(300));
    assert!(early.is_err(), "answered before the stop: {early:?}");
    let stopping = std::time::Instant::now();
    server.stop(Duration::from_secs(30));
    // Before: the waiting read held its connection until the drain deadline (30 s here).
    assert!(
        stopping.elapsed() < Duration::from_secs(15),
        "stop took {:?}",
        stopping.elapsed()
    );
    let answer = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(answer, Ok(Reply::LastAddConfirmed { .. })),
        "{answer:?}"
    );
}

#[test]
fn add_read_batch_and_fence_through_a_real_server() {
    round_trips(true);
}

#[test]
fn the_same_over_v3_with_batch_reads_on_a_v2_connection() {
    round_trips(false);
}

fn round_trips(use_v2_wire_protocol: bool) {
    let t = RoundTrips::start(use_v2_wire_protocol);
    t.single_reads();
    t.batch_reads();
    t.fencing_and_keys();
    t.server.stop(Duration::from_secs(1));
}

/// A bookie on loopback holding 50 entries of ledger 3, and the clients of a round trip.
struct RoundTrips {
    _dir: tempfile::TempDir,
    server: crate::testing::TestServer,
    addr: String,
    client: BookieClient,
    /// Batch reads are V2 requests, and a bookie reads a connection as V2 for good after its
    /// first V2 frame: a V3 client's batches go on a V2 connection of their own.
    v2_client: Option<BookieClient>,
    key: Bytes,
    dm: DigestManager,
}

impl RoundTrips {
    fn start(use_v2_wire_protocol: bool) -> RoundTrips {
        let dir = tempfile::tempdir().unwrap();
        let (_storage, server) = test_bookie(dir.path());
        let addr = server.local_addr().to_string();
        let client = BookieClient::new(ClientConfig {
            use_v2_wire_protocol,
            ..client_config()
        });
        let v2_client = (!use_v2_wire_protocol).then(|| BookieClient::new(client_config()));
        let t = RoundTrips {
            _dir: dir,
            server,
            addr,
            client,
            v2_client,
            key: Bytes::copy_from_slice(&master_key(b"pw")),
            dm: DigestManager::new(3, b"pw", DigestType::Crc32c),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        for e in 0..50 {
            let body = t.dm.package(e, e - 1, (e + 1) * 5, b"hello");
            let tx = tx.clone();
            t.client.send(
                t.client.add_request(&t.addr, 3, e, t.key.clone(), body, 0),
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            );
        }
        for _ in 0..50 {
            assert_eq!(rx.recv().unwrap(), Ok(Reply::Added));
        }
        t
    }

    fn batcher(&self) -> &BookieClient {
        self.v2_client.as_ref().unwrap_or(&self.client)
    }

    fn read(&self, ledger: i64, entry: i64) -> ReplyResult {
        let c = &self.client;
        wait(|d| c.send(c.read_request(&self.addr, ledger, entry, 0, None), d))
    }

    /// A strided batch read of ledger 3 from entry 3.
    fn strided(&self, stride: i32, count: i32, flags: u16, key: Option<Bytes>) -> ReplyResult {
        let b = self.batcher();
        let req = b.batch_read_request(&self.addr, 3, 3, count, 1 << 20, flags, key, Some(stride));
        wait(|d| b.send(req, d))
    }

    fn single_reads(&self) {
        let Ok(Reply::Entry(e)) = self.read(3, 7) else {
            panic!("read failed");
        };
        let payload = self.dm.verify(&e, Some(7)).unwrap().payload;
        assert_eq!(payload, Bytes::from_static(b"hello"));
        let Ok(Reply::Entry(last)) = self.read(3, -1) else {
            panic!("read -1 failed");
        };
        assert_eq!(self.dm.verify(&last, None).unwrap().entry_id, 49);
        let missing = self.read(3, 99).unwrap_err();
        assert_eq!(missing.status(), Some(Status::NoEntry));
        let no_ledger = self.read(4, 0).unwrap_err();
        assert_eq!(no_ledger.status(), Some(Status::NoLedger));
    }

    fn batch_reads(&self) {
        let b = self.batcher();
        let request = b.batch_read_request(&self.addr, 3, 10, 5, 1 << 20, 0, None, None);
        let Ok(Reply::Entries(batch)) = wait(|d| b.send(request, d)) else {
            panic!("batch read failed");
        };
        assert_eq!(batch.len(), 5);
        assert_eq!(b.strided_reads(&self.addr), None);
        // Strided (pybkx's extension): every seventh entry from 3 up to the last, 45.
        let Ok(Reply::StridedEntries(every7th)) = self.strided(7, 100, 0, None) else {
            panic!("strided batch read failed");
        };
        let ids: Vec<i64> = every7th
            .iter()
            .map(|e| self.dm.verify(e, None).unwrap().entry_id)
            .collect();
        assert_eq!(ids, vec![3, 10, 17, 24, 31, 38, 45]);
        assert_eq!(b.strided_reads(&self.addr), Some(true));
        let bad_stride = self.strided(0, 100, 0, None).unwrap_err();
        assert_eq!(bad_stride.status(), Some(Status::BadRequest));
    }

    /// A fencing read, then a normal add is refused and a recovery add accepted; a wrong key
    /// is refused.
    fn fencing_and_keys(&self) {
        let (c, addr, key) = (&self.client, self.addr.as_str(), &self.key);
        let add = |entry: i64, key: &Bytes, body: &Bytes, flags: u16| {
            wait(|d| {
                c.send(
                    c.add_request(addr, 3, entry, key.clone(), body.clone(), flags),
                    d,
                )
            })
        };
        let fence = protocol::FLAG_DO_FENCING;
        let fencing_read = c.read_request(addr, 3, -1, fence, Some(key.clone()));
        assert!(wait(|d| c.send(fencing_read, d)).is_ok());
        let body = self.dm.package(50, 49, 255, b"hello");
        let refused = add(50, key, &body, 0);
        assert_eq!(refused.unwrap_err().status(), Some(Status::Fenced));
        // A fencing strided read carries the key, then the stride.
        let Ok(Reply::StridedEntries(fenced)) = self.strided(7, 2, fence, Some(key.clone())) else {
            panic!("fencing strided read failed");
        };
        assert_eq!(self.dm.verify(&fenced[1], None).unwrap().entry_id, 10);
        let recovery = protocol::FLAG_RECOVERY_ADD;
        assert_eq!(add(50, key, &body, recovery), Ok(Reply::Added));
        let wrong = Bytes::copy_from_slice(&master_key(b"nope"));
        let unauthorized = add(51, &wrong, &self.dm.package(51, 50, 260, b"x"), 0);
        assert_eq!(
            unauthorized.unwrap_err().status(),
            Some(Status::Unauthorized)
        );
    }
}

#[test]
fn unreachable_bookie_fails_fast_and_requests_time_out() {
    let client = BookieClient::new(ClientConfig {
        connect_timeout: Duration::from_millis(500),
        ..client_config()
    });
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    assert!(matches!(
        wait(|d| client.send(client.read_request(&addr, 1, 0, 0, None), d)),
        Err(ClientError::Unavailable { .. })
    ));

    // A listener that never answers: the request times out.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let client = BookieClient::new(ClientConfig {
        read_timeout: Duration::from_millis(300),
        ..client_config()
    });
    assert!(matches!(
        wait(|d| client.send(client.read_request(&addr, 1, 0, 0, None), d)),
        Err(ClientError::Timeout { .. })
    ));
}

#[test]
fn oversized_requests_fail_at_once_and_a_full_queue_makes_senders_wait() {
    // A peer that accepts but never reads: the socket buffers fill, then the queue.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let client = BookieClient::new(ClientConfig {
        add_timeout: Duration::from_millis(100),
        max_frame_size: 64 << 10,
        write_buffer_high_water_mark: 128 << 10,
        ..client_config()
    });
    let key = Bytes::from_static(&[0u8; 20]);
    let too_big = Bytes::from(vec![0u8; 64 << 10]);
    assert!(matches!(
        wait(|d| client.send(client.add_request(&addr, 1, 0, key.clone(), too_big, 0), d)),
        Err(ClientError::TooLarge { .. })
    ));
    // Far more than socket buffers plus the high-water mark: later sends find no room and
    // time out instead of queueing without bound.
    let body = Bytes::from(vec![7u8; 60 << 10]);
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    for e in 0..150 {
        let tx = tx.clone();
        client.send(
            client.add_request(&addr, 1, e, key.clone(), body.clone(), 0),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
    }
    drop(tx);
    let outcomes: Vec<ReplyResult> = rx.iter().collect();
    assert_eq!(outcomes.len(), 150);
    assert!(outcomes
        .iter()
        .all(|r| matches!(r, Err(ClientError::Timeout { .. }))));
    assert!(*client.connection(&addr).unwrap().queued.lock() <= (128 << 10) + (64 << 10));
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn failures_are_counted_per_bookie_and_only_timeouts_and_bad_answers_toward_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let (_storage, server) = test_bookie(dir.path());
    let good = server.local_addr().to_string();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let quiet = silent.local_addr().unwrap().to_string();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = closed.local_addr().unwrap().to_string();
    drop(closed);
    let client = BookieClient::new(ClientConfig {
        read_timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_millis(500),
        ..client_config()
    });
    let read = |bookie: &str| wait(|d| client.send(client.read_request(bookie, 9, 0, 0, None), d));
    // An expected answer (no such ledger), a refused connection, two timeouts.
    assert_eq!(read(&good).unwrap_err().status(), Some(Status::NoLedger));
    assert!(matches!(read(&down), Err(ClientError::Unavailable { .. })));
    for _ in 0..2 {
        assert!(matches!(read(&quiet), Err(ClientError::Timeout { .. })));
    }
    assert_eq!(client.failure_count(&good), 1);
    assert_eq!(client.failure_count(&down), 1);
    assert_eq!(client.failure_count(&quiet), 2);
    assert_eq!(client.failure_count("127.0.0.1:1"), 0);
    // Only the timeouts count toward quarantine, and taking them resets them.
    assert_eq!(client.take_error_counts(), vec![(quiet.clone(), 2)]);
    assert!(client.take_error_counts().is_empty());
    assert_eq!(
        client.failure_count(&quiet),
        2,
        "the running count is never reset"
    );
    server.stop(Duration::from_secs(1));
}
