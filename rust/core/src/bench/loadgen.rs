//! A load generator for benchmarks: drives one bookie over V2 with a fixed window of requests
//! in flight (optionally paced to a fixed rate) and records latencies. It only measures; it
//! never checks data beyond result codes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::bookie_conn::{BookieClient, ClientError, Outgoing, Reply, ReplyResult};
use crate::config::ClientConfig;
use crate::digest::{master_key, DigestManager, DigestType};
use crate::done;
use crate::runtime::runtime;

/// What a run did and how long its requests took.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub requests: u64,
    pub entries: u64,
    pub bytes: u64,
    pub errors: u64,
    pub elapsed: Duration,
    /// Request latencies in microseconds, sorted.
    pub latencies_us: Vec<u32>,
}

impl LoadReport {
    pub fn percentile_us(&self, q: f64) -> u32 {
        if self.latencies_us.is_empty() {
            return 0;
        }
        let i = ((self.latencies_us.len() - 1) as f64 * q).round() as usize;
        self.latencies_us[i]
    }
}

/// What to send.
#[derive(Debug, Clone, Copy)]
pub enum Workload {
    /// `count` adds of `payload` bytes over `ledgers` ledgers (ids from `first_ledger`),
    /// entry ids from 0 in each.
    Adds {
        first_ledger: i64,
        ledgers: u32,
        count: u64,
        payload: usize,
    },
    /// Reads of entries `0..count` of `ledger`: single READs, or batches of `batch` entries.
    Reads {
        ledger: i64,
        count: u64,
        batch: Option<u32>,
    },
}

/// How to send it.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Requests outstanding at most (at least 1).
    pub in_flight: usize,
    /// TCP connections to the bookie (at least 1). Adds of one ledger always share one
    /// connection (so they arrive in entry order); reads go round robin.
    pub connections: usize,
    /// Requests per second to send at (open loop), or `None` to send as fast as the window
    /// allows (closed loop). When paced, a request's latency counts from the time it was due,
    /// so a bookie that falls behind is charged for the wait (no coordinated omission).
    pub rate_per_s: Option<f64>,
    /// Send adds and reads as V3 (protobuf) requests instead of V2 frames.
    pub v3: bool,
    /// Connect with START_TLS and run every request inside TLS.
    pub tls: Option<std::sync::Arc<crate::tls::ClientTls>>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            in_flight: 64,
            connections: 1,
            rate_per_s: None,
            v3: false,
            tls: None,
        }
    }
}

/// One request in flight: when it counts from, and its reply.
type Pending = (Instant, oneshot::Receiver<ReplyResult>);

/// One run: its window of requests in flight (FIFO) and what settled so far.
struct Run {
    opts: LoadOptions,
    started: Instant,
    window: VecDeque<Pending>,
    report: LoadReport,
    latencies: Vec<u32>,
}

impl Run {
    fn new(opts: LoadOptions) -> Run {
        Run {
            opts,
            started: Instant::now(),
            window: VecDeque::new(),
            report: LoadReport::default(),
            latencies: Vec::new(),
        }
    }

    /// Accounts one settled request.
    fn settle(&mut self, since: Instant, r: Option<ReplyResult>) {
        let report = &mut self.report;
        self.latencies
            .push(since.elapsed().as_micros().min(u32::MAX as u128) as u32);
        match r {
            Some(Ok(Reply::Added)) => report.entries += 1,
            Some(Ok(Reply::Entry(b))) => {
                report.entries += 1;
                report.bytes += b.len() as u64;
            }
            Some(Ok(Reply::Entries(v) | Reply::StridedEntries(v))) => {
                report.entries += v.len() as u64;
                report.bytes += v.iter().map(|b| b.len() as u64).sum::<u64>();
            }
            _ => report.errors += 1,
        }
    }

    /// Settles whatever already arrived at the front of the window.
    fn settle_arrived(&mut self) {
        while let Some((since, rx)) = self.window.front_mut() {
            let since = *since;
            let r = match rx.try_recv() {
                Ok(r) => Some(r),
                Err(oneshot::error::TryRecvError::Closed) => None,
                Err(oneshot::error::TryRecvError::Empty) => break,
            };
            self.window.pop_front();
            self.settle(since, r);
        }
    }

    /// Waits until request number `i` may be sent: a free slot in the window and, when paced,
    /// its due time. Replies are settled in the order sent, each as soon as it and all earlier
    /// ones are in. Returns the instant the request's latency counts from.
    async fn wait_turn(&mut self, i: u64) -> Instant {
        let due = self
            .opts
            .rate_per_s
            .map(|rate| self.started + Duration::from_secs_f64(i as f64 / rate));
        loop {
            self.settle_arrived();
            let full = self.window.len() >= self.opts.in_flight;
            let wait_until = due.filter(|t| Instant::now() < *t);
            if !full && wait_until.is_none() {
                return due.unwrap_or_else(Instant::now);
            }
            let front = self.window.front_mut().map(|(_, rx)| rx);
            let got = match (front, wait_until) {
                (Some(rx), Some(t)) => tokio::select! {
                    r = rx => Some(r.ok()),
                    _ = tokio::time::sleep_until(t.into()) => None,
                },
                (Some(rx), None) => Some(rx.await.ok()),
                (None, Some(t)) => {
                    tokio::time::sleep_until(t.into()).await;
                    None
                }
                (None, None) => return due.unwrap_or_else(Instant::now),
            };
            if let Some(r) = got {
                if let Some((since, _)) = self.window.pop_front() {
                    self.settle(since, r);
                }
            }
        }
    }

    /// Sends `request` on `client`, its latency counting from `since`.
    fn send(&mut self, client: &BookieClient, request: Outgoing, since: Instant) {
        let (d, rx) = done::channel();
        client.send(request, d);
        self.window.push_back((since, rx));
        self.report.requests += 1;
    }

    /// `count` adds of `payload` bytes spread over `ledgers` ledgers from `first_ledger`; a
    /// ledger's adds always on the same connection.
    async fn adds(
        &mut self,
        to: &Target<'_>,
        first_ledger: i64,
        ledgers: u32,
        count: u64,
        payload: usize,
    ) {
        let ledgers = ledgers.max(1) as u64;
        let data = vec![b'x'; payload];
        let managers: Vec<DigestManager> = (0..ledgers)
            .map(|l| DigestManager::new(first_ledger + l as i64, b"", DigestType::Crc32c))
            .collect();
        for i in 0..count {
            let since = self.wait_turn(i).await;
            let l = i % ledgers;
            let entry = (i / ledgers) as i64;
            let length = (entry + 1) * payload as i64;
            let body = managers[l as usize].package(entry, entry - 1, length, &data);
            self.report.bytes += payload as u64;
            let client = &to.clients[l as usize % to.clients.len()];
            let request = client.add_request(
                to.bookie,
                first_ledger + l as i64,
                entry,
                to.key.clone(),
                body,
                0,
            );
            self.send(client, request, since);
        }
    }

    /// Entries `0..count` of `ledger`: single READs, or batches of `batch` entries, round robin
    /// over the connections.
    async fn reads(&mut self, to: &Target<'_>, ledger: i64, count: u64, batch: Option<u32>) {
        let step = batch.map_or(1, |b| b.max(1) as u64);
        let mut next = 0u64;
        let mut i = 0u64;
        while next < count {
            let since = self.wait_turn(i).await;
            let client = &to.clients[i as usize % to.clients.len()];
            let request = match batch {
                None => client.read_request(to.bookie, ledger, next as i64, 0, None),
                Some(b) => {
                    let n = b.min((count - next) as u32) as i32;
                    client.batch_read_request(
                        to.bookie,
                        ledger,
                        next as i64,
                        n,
                        5 << 20,
                        0,
                        None,
                        None,
                    )
                }
            };
            self.send(client, request, since);
            next += step;
            i += 1;
        }
    }

    /// Waits for every request still in flight.
    async fn drain(&mut self) {
        while let Some((since, rx)) = self.window.pop_front() {
            let r = rx.await.ok();
            self.settle(since, r);
        }
    }
}

/// Where a run sends: the bookie, one client per connection, the ledgers' key.
struct Target<'a> {
    bookie: &'a str,
    clients: Vec<BookieClient>,
    key: Bytes,
}

/// Parses a workload as the Python API names it: `"add"` (adds of `payload` bytes over
/// `ledgers` ledgers from `ledger`) or `"read"` (reads of `ledger`, batched by `batch`).
pub fn parse_workload(
    name: &str,
    ledger: i64,
    ledgers: u32,
    count: u64,
    payload: usize,
    batch: Option<u32>,
) -> Result<Workload, String> {
    match name {
        "add" => Ok(Workload::Adds {
            first_ledger: ledger,
            ledgers,
            count,
            payload,
        }),
        "read" => Ok(Workload::Reads {
            ledger,
            count,
            batch,
        }),
        other => Err(format!("workload must be 'add' or 'read', not {other:?}")),
    }
}

/// Runs `workload` against `bookie` as `opts` says. Blocking.
pub fn run_with(
    bookie: &str,
    workload: Workload,
    opts: LoadOptions,
) -> Result<LoadReport, ClientError> {
    let rt = runtime().map_err(|e| ClientError::Unavailable {
        bookie: bookie.to_string(),
        why: e.to_string(),
    })?;
    let opts = LoadOptions {
        in_flight: opts.in_flight.max(1),
        connections: opts.connections.max(1),
        rate_per_s: opts.rate_per_s.filter(|r| r.is_finite() && *r > 0.0),
        v3: opts.v3,
        tls: opts.tls,
    };
    // One BookieClient holds one connection per bookie: one client per connection.
    let clients = (0..opts.connections)
        .map(|_| {
            BookieClient::new(ClientConfig {
                add_timeout: Duration::from_secs(30),
                read_timeout: Duration::from_secs(30),
                connect_timeout: Duration::from_secs(10),
                max_frame_size: 5 << 20,
                // Enough for the window of any run: the generator is bounded by `in_flight`.
                write_buffer_high_water_mark: 64 << 20,
                use_v2_wire_protocol: !opts.v3,
                tls: opts.tls.clone(),
                start_tls_timeout: Duration::from_secs(10),
                sasl: None,
            })
        })
        .collect();
    let to = Target {
        bookie,
        clients,
        key: Bytes::copy_from_slice(&master_key(b"")),
    };
    let mut run = Run::new(opts);
    rt.block_on(async {
        match workload {
            Workload::Adds {
                first_ledger,
                ledgers,
                count,
                payload,
            } => run.adds(&to, first_ledger, ledgers, count, payload).await,
            Workload::Reads {
                ledger,
                count,
                batch,
            } => run.reads(&to, ledger, count, batch).await,
        }
        run.drain().await;
    });
    let mut report = run.report;
    report.elapsed = run.started.elapsed();
    if let Workload::Adds { .. } = workload {
        // Adds count payload bytes as sent; keep only the acknowledged entries' share.
        report.bytes = report.bytes * report.entries / report.requests.max(1);
    }
    run.latencies.sort_unstable();
    report.latencies_us = run.latencies;
    for client in &to.clients {
        client.close();
    }
    Ok(report)
}
