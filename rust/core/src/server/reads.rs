//! The read pool: plain reads (READ_ENTRY, BATCH_READ_ENTRY, not fencing, not long-poll) run on
//! `numReadWorkerThreads` threads of their own, taken from the connections in turn. It owns the
//! fairness between clients' reads and keeps reads off the tasks that read adds; it never
//! decides what a read returns.
//!
//! Why: served inline, a client with hundreds of batch reads buffered kept a runtime worker (and
//! its disk waits) while another client's adds waited to be read, and clients with more
//! connections or deeper pipelines took more of the bookie. Here every connection with reads
//! waiting holds one place in a round-robin queue: a worker serves one connection's reads for
//! at most one turn, then the connection goes to the back. Adds never wait in this queue, and
//! the threads bound the CPU reads take to their number.
//!
//! Bounds: a connection's waiting reads are bounded by its read slots
//! (`maxPendingReadRequestsPerThread`, taken before a read is queued); the round-robin queue
//! holds each connection at most once. A connection whose responses are not being read (past
//! `serverWriteBufferHighWaterMark`, or the server's total budget) is parked: its reads wait
//! unread until its writer drains below the mark, so a client that never reads its replies
//! still costs the bookie about one high-water mark of responses, as with inline reads.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The longest a worker serves one connection's reads before it takes the next connection.
const TURN: Duration = Duration::from_micros(200);
/// Reads a connection may have waiting before it stops reading requests (it reads again below
/// half). Served inline, a read's response counted against the connection's write buffer before
/// the next request was read; queued, it cannot (its size is unknown), so the connection's
/// reader is held back by the count instead: a client's pipeline waits in its own socket, not in
/// the bookie, and a connection whose responses are not read stops reading requests.
pub(super) const MAX_WAITING_READS: usize = 64;

/// A read to run: it reads and sends its response through its connection's outbox.
pub(super) type ReadJob = Box<dyn FnOnce() + Send>;

/// Where a connection's reads stand in the pool.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
enum Place {
    /// No read waiting.
    #[default]
    Idle,
    /// Reads waiting, not handed to the workers yet: the connection's reader hands them over
    /// ([`ReadPool::hand_over`]) once it stops taking requests for a moment (its buffer is
    /// empty, it yields or pauses), so a pipelined client's requests wake a worker once per
    /// socket read, not once per request.
    Pending,
    /// In the round-robin queue, or being served by a worker (never both, never twice).
    Queued,
    /// Reads waiting, but its responses are not being read: out of the queue until its writer
    /// drains.
    Parked,
}

/// One connection's reads waiting for a worker.
#[derive(Default)]
pub(super) struct ConnReads {
    inner: Mutex<ConnInner>,
    /// Reads queued and not yet started (read without the lock by the connection's reader).
    waiting: AtomicUsize,
}

impl ConnReads {
    /// Whether the connection must stop reading requests until its reads are served.
    pub(super) fn backed_up(&self) -> bool {
        self.waiting.load(Ordering::Acquire) >= MAX_WAITING_READS
    }

    /// Whether a connection held back by [`backed_up`](Self::backed_up) may read again.
    pub(super) fn still_backed_up(&self) -> bool {
        self.waiting.load(Ordering::Acquire) >= MAX_WAITING_READS / 2
    }
}

#[derive(Default)]
struct ConnInner {
    jobs: VecDeque<ReadJob>,
    place: Place,
    /// The connection ends: its reads are served whatever its write buffer holds, so that the
    /// writer (which waits for every pending response) can finish.
    closing: bool,
}

/// A connection as the pool sees it (the connection implements it; the pool knows nothing
/// else of the server).
pub(super) trait ReadingConnection: Send + Sync {
    /// Its reads waiting for the pool.
    fn waiting_reads(&self) -> &ConnReads;
    /// Whether its responses wait unread past its mark (or the server's budget).
    fn responses_unread(&self) -> bool;
    /// Wakes its reader, which may be held back by [`ConnReads::backed_up`].
    fn wake_reader(&self);
}

/// A connection in the round-robin queue.
type Waiting = Arc<dyn ReadingConnection>;

struct Shared {
    queue: Mutex<RunQueue>,
    wake: Condvar,
}

#[derive(Default)]
struct RunQueue {
    /// Bounded by the number of connections: each is in it at most once.
    ready: VecDeque<Waiting>,
    stopping: bool,
}

/// The read threads of one server.
pub(crate) struct ReadPool {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl ReadPool {
    /// Starts `threads` read workers (at least one), each at `nice` (added to the process's
    /// niceness; 0 leaves it).
    pub(super) fn start(threads: usize, nice: i32) -> std::io::Result<ReadPool> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(RunQueue::default()),
            wake: Condvar::new(),
        });
        let mut handles = Vec::with_capacity(threads.max(1));
        for i in 0..threads.max(1) {
            let mine = shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("pybkx-read-{i}"))
                .spawn(move || {
                    lower_priority(nice);
                    work(&mine)
                });
            match handle {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let pool = ReadPool {
                        shared,
                        threads: Mutex::new(handles),
                    };
                    pool.stop();
                    return Err(e);
                }
            }
        }
        Ok(ReadPool {
            shared,
            threads: Mutex::new(handles),
        })
    }

    /// Queues a read of the connection whose reads are `reads`; it runs after the connection's
    /// earlier reads, once the connection's reader calls [`hand_over`](Self::hand_over).
    pub(super) fn submit(&self, reads: &ConnReads, job: ReadJob) {
        let mut inner = reads.inner.lock();
        inner.jobs.push_back(job);
        reads.waiting.fetch_add(1, Ordering::AcqRel);
        if inner.place == Place::Idle {
            inner.place = Place::Pending;
        }
    }

    /// Hands the reads the connection's reader queued since it last did to the workers.
    pub(super) fn hand_over(&self, conn: &Waiting) {
        let mut inner = conn.waiting_reads().inner.lock();
        if inner.place == Place::Pending {
            inner.place = Place::Queued;
            drop(inner);
            self.enqueue(conn.clone());
        }
    }

    /// The connection's writer drained some responses: a parked connection whose buffer is
    /// below the mark again (or that is closing) goes back in the queue.
    pub(super) fn resume(&self, conn: &Waiting) {
        let mut inner = conn.waiting_reads().inner.lock();
        if inner.place == Place::Parked && (inner.closing || !conn.responses_unread()) {
            inner.place = Place::Queued;
            drop(inner);
            self.enqueue(conn.clone());
        }
    }

    /// The connection reads no more requests: its waiting reads are served even if its client
    /// does not read them, so that its writer can end.
    pub(super) fn closing(&self, conn: &Waiting) {
        conn.waiting_reads().inner.lock().closing = true;
        self.hand_over(conn);
        self.resume(conn);
    }

    fn enqueue(&self, waiting: Waiting) {
        self.shared.queue.lock().ready.push_back(waiting);
        self.shared.wake.notify_one();
    }

    /// Stops the workers once they finish the read in hand; reads still waiting are dropped
    /// (their connections are gone by then). Idempotent.
    pub(super) fn stop(&self) {
        let left = {
            let mut q = self.shared.queue.lock();
            q.stopping = true;
            std::mem::take(&mut q.ready)
        };
        self.shared.wake.notify_all();
        for handle in self.threads.lock().drain(..) {
            let _ = handle.join();
        }
        // Dropped here, outside the queue's lock: each holds the server's state.
        for waiting in left {
            let reads = waiting.waiting_reads();
            reads.inner.lock().jobs.clear();
            reads.waiting.store(0, Ordering::Release);
        }
    }
}

/// Lowers the calling thread's CPU priority by `nice`: on a busy machine the threads that
/// read adds and journal them then take the CPU first, and reads take what is left (on an idle
/// one nothing changes). Linux's niceness is per thread; failure (not allowed, not Linux) only
/// logs.
fn lower_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions; setpriority on our own thread id only changes
        // this thread's niceness.
        let rc = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, current.saturating_add(nice))
        };
        if rc != 0 {
            log::warn!(
                "read thread: cannot change its niceness by {nice}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    log::warn!("read thread: niceness is only set on Linux; {nice} ignored");
}

fn work(shared: &Shared) {
    loop {
        let waiting = {
            let mut q = shared.queue.lock();
            loop {
                if q.stopping {
                    return;
                }
                if let Some(w) = q.ready.pop_front() {
                    break w;
                }
                shared.wake.wait(&mut q);
            }
        };
        if serve_turn(&waiting) {
            let mut q = shared.queue.lock();
            if q.stopping {
                return;
            }
            q.ready.push_back(waiting);
            // Another worker may be asleep while this one serves the next connection.
            shared.wake.notify_one();
        }
    }
}

/// Serves one connection's reads for at most a turn; true if it has more and goes to the back
/// of the queue.
fn serve_turn(waiting: &Waiting) -> bool {
    let started = Instant::now();
    loop {
        let job = {
            let mut inner = waiting.waiting_reads().inner.lock();
            if !inner.closing && waiting.responses_unread() {
                inner.place = Place::Parked;
                return false;
            }
            match inner.jobs.pop_front() {
                Some(job) => job,
                None => {
                    inner.place = Place::Idle;
                    return false;
                }
            }
        };
        let reads = waiting.waiting_reads();
        if reads.waiting.fetch_sub(1, Ordering::AcqRel) == MAX_WAITING_READS / 2 {
            // The connection's reader may be held back: it reads again now.
            waiting.wake_reader();
        }
        job();
        if started.elapsed() >= TURN {
            let mut inner = reads.inner.lock();
            if inner.jobs.is_empty() {
                inner.place = Place::Idle;
                return false;
            }
            return true;
        }
    }
}
