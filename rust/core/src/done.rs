//! Completions: the one way an asynchronous operation of this crate reports its outcome.
//! It owns the callback type and two ways to wait on one; it never decides what an outcome means.
//!
//! Every operation that finishes later (a journalled add, a bookie reply, a quorum-acknowledged
//! append) takes a [`Done`] and calls it exactly once. Async code turns one into a future with
//! [`channel`]; blocking code into a waiter with [`blocking`]; the Python binding completes its
//! own future type, so no thread or task is spent per operation just to wait.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// Called exactly once with the outcome of an operation.
pub type Done<T> = Box<dyn FnOnce(T) + Send + 'static>;

/// A completion and the future that resolves when it is called (`Err` if it is dropped uncalled).
pub fn channel<T: Send + 'static>() -> (Done<T>, oneshot::Receiver<T>) {
    let (tx, rx) = oneshot::channel();
    (
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
        rx,
    )
}

/// A completion and a waiter that blocks the calling thread until it is called.
pub fn blocking<T: Send + 'static>() -> (Done<T>, Waiter<T>) {
    // The queue parks its waiter at once (crossbeam's would spin and yield first).
    let (tx, rx) = crate::queue::bounded(1);
    (
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
        Waiter(rx),
    )
}

/// Blocks until its completion is called.
pub struct Waiter<T>(crate::queue::Receiver<T>);

impl<T> Waiter<T> {
    /// The outcome; None if the completion was dropped without being called.
    pub fn wait(self) -> Option<T> {
        self.0.recv().ok()
    }

    /// The outcome if it arrives by `deadline`; `Err(self)` to wait again later.
    pub fn wait_until(self, deadline: Instant) -> Result<Option<T>, Self> {
        match self.0.recv_deadline(deadline) {
            Ok(v) => Ok(Some(v)),
            Err(crate::queue::RecvTimeoutError::Disconnected) => Ok(None),
            Err(crate::queue::RecvTimeoutError::Timeout) => Err(self),
        }
    }

    /// As [`wait_until`](Self::wait_until) with a relative timeout.
    pub fn wait_for(self, timeout: Duration) -> Result<Option<T>, Self> {
        self.wait_until(Instant::now() + timeout)
    }
}
