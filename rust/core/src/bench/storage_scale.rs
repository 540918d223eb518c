//! Storage-at-scale kernels: fill a `LedgerStorage` with many small entries written
//! interleaved over many ledgers (as a busy bookie receives them), and time index lookups.
//! They measure; they never serve.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::storage::LedgerStorage;

/// Adds `entries` entries of `payload_size` bytes, entry `i` going to ledger `i % ledgers`
/// as that ledger's entry `i / ledgers`; returns the time until every add is durable. Fails
/// on the first failed add.
pub fn fill(
    storage: &LedgerStorage,
    ledgers: u64,
    entries: u64,
    payload_size: usize,
) -> Result<Duration, String> {
    let ledgers = ledgers.max(1);
    let data = Bytes::from(vec![0x5Au8; payload_size]);
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    for i in 0..entries {
        let (ledger, entry) = (i % ledgers + 1, i / ledgers);
        let (done_c, failed_c) = (done.clone(), failed.clone());
        storage
            .add_entry(
                ledger,
                entry,
                b"bench",
                data.clone(),
                false,
                Box::new(move |r| {
                    if r.is_err() {
                        failed_c.fetch_add(1, Ordering::Relaxed);
                    }
                    done_c.fetch_add(1, Ordering::Release);
                }),
            )
            .map_err(|e| format!("add {ledger}/{entry}: {e}"))?;
        if failed.load(Ordering::Relaxed) > 0 {
            return Err("an add failed".into());
        }
    }
    while done.load(Ordering::Acquire) < entries {
        std::thread::sleep(Duration::from_millis(1));
    }
    if failed.load(Ordering::Relaxed) > 0 {
        return Err("an add failed".into());
    }
    Ok(started.elapsed())
}

/// Looks up `count` entries in the index (locations only, no entry data), entry ids drawn
/// uniformly from `0..span` of ledgers `1..=ledgers`; returns the time taken and how many
/// were found.
pub fn lookups(
    storage: &LedgerStorage,
    ledgers: u64,
    span: u64,
    count: u64,
) -> Result<(Duration, u64), String> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut found = 0u64;
    let started = Instant::now();
    for _ in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let ledger = x % ledgers.max(1) + 1;
        let entry = (x >> 20) % span.max(1);
        if storage
            .index_lookup(ledger, entry)
            .map_err(|e| format!("lookup {ledger}/{entry}: {e}"))?
        {
            found += 1;
        }
    }
    Ok((started.elapsed(), found))
}
