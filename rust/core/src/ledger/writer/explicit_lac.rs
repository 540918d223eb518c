//! The explicit-LAC flush of one writer (BookKeeper's `ExplicitLacFlushPolicyImpl`): every
//! `explicitLacInterval` a task on the client's runtime sends WRITE_LAC to the current ensemble
//! when the writer's LAC moved past what its last add carried, so readers of an idle ledger
//! see the last entries. It never changes what the writer sends or completes.
//!
//! Bounds: one WRITE_LAC per bookie of the ensemble per interval, each ending at the add timeout,
//! so at most E x (add timeout / interval) are outstanding; the task ends when the writer closes,
//! fails or is dropped.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::LedgerWriter;
use crate::bookie_conn::ReplyResult;
use crate::done::Done;
use crate::ledger::error::LedgerError;
use crate::ledger::stats::client_stats;

/// What the flush last did, as BookKeeper's policy keeps it: the LAC it last sent or saw carried.
struct FlushState {
    explicit_lac: i64,
}

impl LedgerWriter {
    /// Starts the flush every `interval` (BookKeeper's `explicitLacInterval`; V3 clients only:
    /// WRITE_LAC has no V2 form, and a bookie reads a connection as V2 for good after its
    /// first V2 frame). Stops when the writer is closed or fails.
    pub fn start_explicit_lac_flush(&self, interval: Duration) -> Result<(), LedgerError> {
        if interval.is_zero() {
            return Err(LedgerError::InvalidArgument(
                "explicitLacInterval must be positive to flush".into(),
            ));
        }
        if self.client.config().use_v2_wire_protocol {
            return Err(LedgerError::InvalidArgument(
                "explicit LAC needs V3 (WRITE_LAC is a V3 request): set useV2WireProtocol=false"
                    .into(),
            ));
        }
        let runtime = crate::runtime::runtime()
            .map_err(|e| LedgerError::WriterFailed(format!("no runtime: {e}")))?;
        let me = self.me.clone();
        let stop = self.lac_flush_stop.clone();
        runtime.spawn(async move {
            let mut flush = FlushState { explicit_lac: -1 };
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = stop.notified() => break,
                }
                let Some(writer) = me.upgrade() else { break };
                if !writer.flush_explicit_lac(&mut flush) {
                    break;
                }
            }
        });
        Ok(())
    }

    /// One turn of BookKeeper's policy; false once the writer no longer writes.
    fn flush_explicit_lac(&self, flush: &mut FlushState) -> bool {
        let (lac, ensemble) = {
            let st = self.state.lock();
            if st.closed || st.fatal.is_some() {
                return false;
            }
            (st.lac, st.ensemble.clone())
        };
        // Progress carried by adds since the last turn: readers see it without a WRITE_LAC.
        let piggybacked = self.piggybacked_lac.load(Ordering::Relaxed);
        if flush.explicit_lac < piggybacked {
            flush.explicit_lac = piggybacked;
            return true;
        }
        if lac <= flush.explicit_lac {
            return true;
        }
        let body = self.digest.package_lac(lac);
        for bookie in ensemble {
            let request = self.client.write_lac_request(
                &bookie,
                self.ledger,
                lac,
                self.master_key.clone(),
                body.clone(),
            );
            let ledger = self.ledger;
            let started = crate::metrics::start();
            let done: Done<ReplyResult> = Box::new(move |result| {
                client_stats()
                    .write_lac
                    .record_between(result.is_ok(), started, Instant::now());
                // As BookKeeper's: a failed WRITE_LAC is only logged; the next add or turn
                // carries the LAC again.
                if let Err(e) = result {
                    log::debug!("ledger {ledger}: WRITE_LAC {lac} to {bookie} failed: {e}");
                }
            });
            self.client.send(request, done);
        }
        flush.explicit_lac = lac;
        true
    }
}

/// Tells a running flush to stop at once (closing the writer stops it at its next turn anyway).
pub(super) fn stop_flush(stop: &Arc<tokio::sync::Notify>) {
    stop.notify_one();
}
