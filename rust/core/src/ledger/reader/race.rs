//! One request raced across the replicas of its entries (BookKeeper's speculative reads): sent
//! to the first replica; when no answer came within `speculativeReadTimeout` the same request
//! goes to the next replica too, the wait growing by the backoff up to
//! `maxSpeculativeReadTimeout`, while the earlier ones stay outstanding. Answers come back in
//! the order they arrive; an error with nothing outstanding sends to the next replica at once.
//! Replicas outrun by a later one are noted slow. It never judges an answer: the caller does.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::bookie_conn::{BookieClient, Outgoing, ReplyResult};
use crate::config::ReadPolicy;
use crate::ledger::stats::client_stats;

type Answer = (usize, ReplyResult);
type Pending = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// One request, raced across `replicas` in order.
pub(super) struct Race {
    client: Arc<BookieClient>,
    replicas: Vec<String>,
    policy: ReadPolicy,
    /// Replicas `..sent` were asked.
    sent: usize,
    /// Requests not answered yet, at most one per replica.
    inflight: Vec<Pending>,
    outstanding: Vec<bool>,
    /// The wait before the next speculative request (None: speculative reads off).
    wait: Option<Duration>,
    speculate_at: Option<Instant>,
}

enum Step {
    Answer(Answer),
    Speculate,
}

impl Race {
    pub(super) fn new(client: Arc<BookieClient>, replicas: Vec<String>) -> Race {
        let policy = client.read_policy();
        let n = replicas.len();
        Race {
            client,
            replicas,
            policy,
            sent: 0,
            inflight: Vec::with_capacity(n),
            outstanding: vec![false; n],
            wait: policy.first_speculative_timeout,
            speculate_at: None,
        }
    }

    /// The replicas raced, in order (answers name them by index).
    pub(super) fn replicas(&self) -> &[String] {
        &self.replicas
    }

    /// The next answer, `(replica index, reply)`, in the order they arrive; `request` builds
    /// the request for a replica. None once every replica was asked and answered.
    pub(super) async fn next(
        &mut self,
        request: &(dyn Fn(&str) -> Outgoing + Sync),
    ) -> Option<Answer> {
        if self.inflight.is_empty() {
            if self.sent >= self.replicas.len() {
                return None;
            }
            self.send(request);
        }
        loop {
            let deadline = self
                .speculate_at
                .filter(|_| self.sent < self.replicas.len());
            let step = {
                let inflight = &mut self.inflight;
                let answers = poll_fn(|cx| poll_first(inflight, cx));
                match deadline {
                    Some(at) => tokio::select! {
                        answer = answers => Step::Answer(answer),
                        () = tokio::time::sleep_until(at) => Step::Speculate,
                    },
                    None => Step::Answer(answers.await),
                }
            };
            match step {
                Step::Answer(answer) => {
                    self.outstanding[answer.0] = false;
                    return Some(answer);
                }
                Step::Speculate => {
                    client_stats().speculative_reads.inc();
                    self.wait = self.wait.map(|w| self.policy.next_speculative_timeout(w));
                    self.send(request);
                }
            }
        }
    }

    /// A good answer came from `winner`: replicas asked before it and still silent were slow.
    pub(super) fn finish(self, winner: usize) {
        for (i, bookie) in self.replicas.iter().enumerate().take(winner) {
            if self.outstanding[i] {
                self.client.note_slow(bookie);
            }
        }
    }

    /// Sends to the next replica and arms the speculative timer.
    fn send(&mut self, request: &(dyn Fn(&str) -> Outgoing + Sync)) {
        let i = self.sent;
        self.sent += 1;
        self.outstanding[i] = true;
        let out = request(&self.replicas[i]);
        let client = self.client.clone();
        self.inflight
            .push(Box::pin(async move { (i, client.send_async(out).await) }));
        self.speculate_at = self.wait.map(|w| Instant::now() + w);
    }
}

/// The first of `inflight` to complete, removed from it.
fn poll_first(inflight: &mut Vec<Pending>, cx: &mut Context<'_>) -> Poll<Answer> {
    for i in 0..inflight.len() {
        if let Poll::Ready(answer) = inflight[i].as_mut().poll(cx) {
            drop(inflight.swap_remove(i));
            return Poll::Ready(answer);
        }
    }
    Poll::Pending
}
