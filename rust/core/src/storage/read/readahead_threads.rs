//! The read-ahead threads (`entryLogReadAheadThreads`): they read a scan's next runs from logs
//! read directly, several at once, into the read-ahead cache; they never decide what to read.
//!
//! Where entry logs are read through the page cache, a scan's next runs are hinted to the
//! kernel (`posix_fadvise(WILLNEED)`), which reads them asynchronously. Direct reads bypass the
//! kernel's read-ahead, so a scan of a cold ledger written interleaved with others read one run
//! at a time: each a few hundred KiB, one request in flight, and the device idle while the
//! reader handled what it got. Here a few threads read the next runs, in pieces of at most
//! `READ_AHEAD_IO_BYTES`, several at once, into the read-ahead cache; a read that reaches
//! entries still on their way waits for them rather than reading them again.
//!
//! Bounded: the job queue holds `2 × threads` reads, each at most `READ_AHEAD_IO_BYTES` (one
//! record may exceed it alone); a job that finds the queue full is not read ahead (the scan
//! reads it itself). How far ahead a scan reads is bounded by its share of the read-ahead cache.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::readahead_cache::ReadAheadCache;
use crate::metrics::Counter;
use crate::record::RECORD_HEADER_LEN;
use crate::storage::entrylog::{EntryLogger, Location};

/// One read ahead covers at most this many bytes of back-to-back records.
const READ_AHEAD_IO_BYTES: u64 = 1 << 20;

/// How long a read waits for entries another thread is reading ahead before reading them
/// itself (that read normally takes milliseconds; a stalled device would stall either read).
pub(super) const READ_AHEAD_WAIT: Duration = Duration::from_secs(2);

/// Work for a read-ahead thread.
pub(in crate::storage) enum AheadJob {
    /// Read these entries of a ledger (back to back in one log) into the read-ahead cache;
    /// `generation` is the cache's when they were located.
    Read {
        ledger: u64,
        generation: u64,
        items: Vec<(u64, Location)>,
    },
    /// The storage is closing: the thread ends.
    Stop,
}

/// The read-ahead threads' queue.
pub(super) struct AheadQueue {
    jobs: Sender<AheadJob>,
    threads: usize,
}

impl AheadQueue {
    /// A queue for `threads` threads, and the end they read from.
    pub(super) fn new(threads: usize) -> (AheadQueue, Receiver<AheadJob>) {
        let (jobs, rx) = crossbeam_channel::bounded(2 * threads);
        (AheadQueue { jobs, threads }, rx)
    }

    /// Hands a run of `ledger`'s back-to-back records to the read-ahead threads, in pieces of
    /// at most `READ_AHEAD_IO_BYTES`. Returns how many of the run's entries were handed over
    /// (a full queue, or entries already on their way, end it early).
    pub(super) fn hand(
        &self,
        cache: &ReadAheadCache,
        ledger: u64,
        generation: u64,
        run: &[(u64, Location)],
    ) -> usize {
        let mut handed = 0;
        while handed < run.len() {
            let mut end = handed;
            let mut bytes = 0u64;
            while end < run.len() && (end == handed || bytes < READ_AHEAD_IO_BYTES) {
                bytes += (RECORD_HEADER_LEN + run[end].1.len as usize) as u64;
                end += 1;
            }
            let piece = run[handed..end].to_vec();
            let (first, last) = (piece[0].0, piece[piece.len() - 1].0);
            if !cache.expect(ledger, first, last) {
                break;
            }
            let job = AheadJob::Read {
                ledger,
                generation,
                items: piece,
            };
            match self.jobs.try_send(job) {
                Ok(()) => handed = end,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    cache.arrived(ledger, first, last);
                    break;
                }
            }
        }
        handed
    }

    /// Tells every thread to end once the jobs queued before are read.
    pub(super) fn stop(&self) {
        for _ in 0..self.threads {
            // Each thread takes one and ends; jobs queued before it are read first.
            let _ = self.jobs.send(AheadJob::Stop);
        }
    }
}

/// A read-ahead thread: reads what it is handed from `entrylog` into `cache` (counting the
/// entries in `read_ahead_entries`) until told to stop. A failed read keeps the entries before
/// the failure and leaves the rest to the scan's own read, which reports the failure (and
/// counts a corrupt copy).
pub(in crate::storage) fn run_read_ahead(
    entrylog: &EntryLogger,
    cache: &ReadAheadCache,
    read_ahead_entries: &Counter,
    jobs: Receiver<AheadJob>,
) {
    for job in jobs {
        let AheadJob::Read {
            ledger,
            generation,
            items,
        } = job
        else {
            return;
        };
        let (first, last) = (items[0].0, items[items.len() - 1].0);
        // Even if the read panics, the entries stop being on their way: no scan waits for
        // them again.
        let _arrival = Arrival {
            cache,
            ledger,
            first,
            last,
        };
        let (read, err) = entrylog.read_run(ledger, &items);
        if let Some(e) = err {
            log::debug!("reading ahead entries {first}..={last} of ledger {ledger}: {e}");
        }
        let n = read.len();
        cache.keep(read_ahead_entries, ledger, generation, &items[..n], read);
    }
}

/// Marks a read ahead as ended when dropped.
struct Arrival<'a> {
    cache: &'a ReadAheadCache,
    ledger: u64,
    first: u64,
    last: u64,
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.cache.arrived(self.ledger, self.first, self.last);
    }
}
