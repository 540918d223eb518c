//! One stream of batch requests: entries `next, next + step, ... ..= last` from the first
//! replica that serves them, request after request (BP-62's BATCH_READ_ENTRY; strided, pybkx's
//! `FLAG_STRIDED_READ`, when `step > 1`), each request raced ([`Race`]: a replica slow to
//! answer is joined by the next, and the stream goes on with whichever answered), moving to the
//! next replica when one fails, lacks an entry or ignores the stride. It keeps what verifies and notes what does not; it never reads
//! an entry singly (the batched read above sends what is still missing to single reads).

use std::sync::Arc;

use bytes::Bytes;

use super::race::Race;
use super::verify::{log_corrupt, verify, ReadEntry, LOG_TARGET};
use crate::bookie_conn::{BookieClient, ClientError, Reply};
use crate::digest::DigestManager;

/// What the batch requests of a read came to: whether the bookies answer them at all.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Requests {
    pub(super) replied: usize,
    pub(super) dropped: usize,
}

impl Requests {
    /// Every batch request lost its connection and none was answered: what bookies without
    /// BP-62 do with opcode 7 (or every replica is down, which single reads will tell).
    pub(super) fn all_dropped(&self) -> bool {
        self.replied == 0 && self.dropped > 0
    }
}

/// What one fetch brought back.
#[derive(Default)]
pub(super) struct Fetched {
    pub(super) entries: Vec<ReadEntry>,
    /// `(entry, bookie)` of every copy that failed its digest check.
    pub(super) corrupt: Vec<(i64, String)>,
    /// Bookies that timed out or were unreachable.
    pub(super) failing: Vec<String>,
    pub(super) requests: Requests,
}

/// Entries `next, next + step, ... ..= last` of one ledger, from `replicas` in order.
pub(super) struct Fetch {
    pub(super) client: Arc<BookieClient>,
    pub(super) ledger: i64,
    pub(super) digest: DigestManager,
    pub(super) max_bytes: i64,
    pub(super) flags: u16,
    pub(super) master_key: Option<Bytes>,
    pub(super) replicas: Vec<String>,
    pub(super) next: i64,
    pub(super) last: i64,
    pub(super) step: i64,
    /// Consecutive entries up to here are kept from a bookie that ignored the stride.
    pub(super) window_last: i64,
}

impl Fetch {
    pub(super) async fn run(mut self) -> Fetched {
        let mut got = Fetched::default();
        let mut at = 0;
        while self.next <= self.last && at < self.replicas.len() {
            at = self.request(&mut got, at).await;
        }
        got
    }

    /// One batch request from `next`, raced across the replicas from `at` on (a replica slow
    /// to answer is joined by the next); returns the replica the stream goes on with: the one
    /// that answered, or past those that failed.
    async fn request(&mut self, got: &mut Fetched, at: usize) -> usize {
        let mut race = Race::new(self.client.clone(), self.replicas[at..].to_vec());
        loop {
            let (next, count) = (self.next, self.count());
            let request = |bookie: &str| {
                self.client.batch_read_request(
                    bookie,
                    self.ledger,
                    next,
                    count,
                    self.max_bytes,
                    self.flags,
                    self.master_key.clone(),
                    (self.step > 1).then_some(self.step as i32),
                )
            };
            let Some((i, reply)) = race.next(&request).await else {
                return self.replicas.len();
            };
            let bookie = race.replicas()[i].clone();
            if self.answered(got, &bookie, reply) {
                race.finish(i);
                return at + i;
            }
            if self.next != next {
                // Entries were taken from a bookie that ignored the stride: the rest of this
                // start goes to the replica after it.
                return at + i + 1;
            }
            // A failure: a replica still outstanding may answer, or the next one is asked.
        }
    }

    /// Entries left from `next` to `last`, as a request's count.
    fn count(&self) -> i32 {
        ((self.last - self.next) / self.step + 1).min(i32::MAX as i64) as i32
    }

    /// Takes one reply from `bookie`; false when the rest of the stream must go to the next
    /// replica.
    fn answered(
        &mut self,
        got: &mut Fetched,
        bookie: &str,
        reply: Result<Reply, ClientError>,
    ) -> bool {
        match reply {
            Ok(Reply::StridedEntries(bodies)) if !bodies.is_empty() => {
                got.requests.replied += 1;
                let n = self.take(got, bookie, bodies, self.step, self.last);
                self.next += n * self.step;
                true
            }
            Ok(Reply::Entries(bodies)) if !bodies.is_empty() => {
                got.requests.replied += 1;
                if self.step == 1 {
                    let n = self.take(got, bookie, bodies, 1, self.last);
                    self.next += n;
                    return true;
                }
                // No stride acknowledged: consecutive entries from `next`, as good as any;
                // the rest of this start goes to the next replica.
                self.client.note_strides_ignored(bookie);
                self.take(got, bookie, bodies, 1, self.window_last);
                self.next += self.step;
                false
            }
            Ok(_) => false,
            Err(e) => {
                log::debug!(
                    target: LOG_TARGET,
                    "ledger {}: batch read from {bookie} at entry {}: {e}",
                    self.ledger,
                    self.next
                );
                if matches!(e, ClientError::Unavailable { .. }) {
                    got.requests.dropped += 1;
                }
                if matches!(
                    e,
                    ClientError::Unavailable { .. } | ClientError::Timeout { .. }
                ) {
                    got.failing.push(bookie.to_string());
                }
                false
            }
        }
    }

    /// Keeps the verified entries of a reply whose entry `i` is `next + i * step`, up to
    /// `last`, noting corrupt copies; returns how many entries the reply held.
    fn take(
        &self,
        got: &mut Fetched,
        bookie: &str,
        bodies: Vec<Bytes>,
        step: i64,
        last: i64,
    ) -> i64 {
        let held = bodies.len() as i64;
        got.entries.reserve(bodies.len());
        for (i, body) in bodies.into_iter().enumerate() {
            let entry = self.next + i as i64 * step;
            if entry > last {
                break;
            }
            match verify(&self.digest, body, entry) {
                Ok(v) => got.entries.push(v),
                Err(e) => {
                    log_corrupt(self.ledger, entry, bookie, &e);
                    got.corrupt.push((entry, bookie.to_string()));
                }
            }
        }
        held
    }
}
