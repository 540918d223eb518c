//! A load generator for benchmarks: drives one bookie over V2 with a fixed window of requests
//! in flight and records latencies. It only measures; it never checks data beyond result codes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::client::{BookieClient, ClientConfig, ClientError, Reply, ReplyResult};
use crate::digest::{master_key, DigestManager, DigestType};
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

/// Runs `workload` against `bookie` with `in_flight` requests outstanding. Blocking.
pub fn run(bookie: &str, workload: Workload, in_flight: usize) -> Result<LoadReport, ClientError> {
    let rt = runtime().map_err(|e| ClientError::Unavailable {
        bookie: bookie.to_string(),
        why: e.to_string(),
    })?;
    let client = BookieClient::new(ClientConfig {
        add_timeout: Duration::from_secs(30),
        read_timeout: Duration::from_secs(30),
        ..ClientConfig::default()
    });
    let key = Bytes::copy_from_slice(&master_key(b""));
    let in_flight = in_flight.max(1);
    let mut report = LoadReport::default();
    let mut window: VecDeque<(Instant, oneshot::Receiver<ReplyResult>)> = VecDeque::new();
    let mut latencies = Vec::new();
    let started = Instant::now();
    rt.block_on(async {
        let mut settle = |sent: Instant, r: Option<ReplyResult>, report: &mut LoadReport| {
            latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
            match r {
                Some(Ok(Reply::Added)) => report.entries += 1,
                Some(Ok(Reply::Entry(b))) => {
                    report.entries += 1;
                    report.bytes += b.len() as u64;
                }
                Some(Ok(Reply::Entries(v))) => {
                    report.entries += v.len() as u64;
                    report.bytes += v.iter().map(|b| b.len() as u64).sum::<u64>();
                }
                _ => report.errors += 1,
            }
        };
        match workload {
            Workload::Adds {
                first_ledger,
                ledgers,
                count,
                payload,
            } => {
                let ledgers = ledgers.max(1) as u64;
                let data = vec![b'x'; payload];
                let managers: Vec<DigestManager> = (0..ledgers)
                    .map(|l| DigestManager::new(first_ledger + l as i64, b"", DigestType::Crc32c))
                    .collect();
                for i in 0..count {
                    if window.len() >= in_flight {
                        if let Some((t, rx)) = window.pop_front() {
                            let r = rx.await.ok();
                            settle(t, r, &mut report);
                        }
                    }
                    let l = i % ledgers;
                    let entry = (i / ledgers) as i64;
                    let body = managers[l as usize].package(
                        entry,
                        entry - 1,
                        (entry + 1) * payload as i64,
                        &data,
                    );
                    report.bytes += payload as u64;
                    let rx =
                        client.add(bookie, first_ledger + l as i64, entry, key.clone(), body, 0);
                    window.push_back((Instant::now(), rx));
                    report.requests += 1;
                }
            }
            Workload::Reads {
                ledger,
                count,
                batch,
            } => {
                let step = batch.map_or(1, |b| b.max(1) as u64);
                let mut next = 0u64;
                while next < count {
                    if window.len() >= in_flight {
                        if let Some((t, rx)) = window.pop_front() {
                            let r = rx.await.ok();
                            settle(t, r, &mut report);
                        }
                    }
                    let rx = match batch {
                        None => client.read(bookie, ledger, next as i64, 0, None),
                        Some(b) => client.batch_read(
                            bookie,
                            ledger,
                            next as i64,
                            b.min((count - next) as u32) as i32,
                            5 << 20,
                            0,
                            None,
                        ),
                    };
                    window.push_back((Instant::now(), rx));
                    report.requests += 1;
                    next += step;
                }
            }
        }
        while let Some((t, rx)) = window.pop_front() {
            let r = rx.await.ok();
            settle(t, r, &mut report);
        }
    });
    report.elapsed = started.elapsed();
    if let Workload::Adds { .. } = workload {
        // Adds count payload bytes as sent; keep only the acknowledged entries' share.
        report.bytes = report.bytes * report.entries / report.requests.max(1);
    }
    latencies.sort_unstable();
    report.latencies_us = latencies;
    client.close();
    Ok(report)
}
