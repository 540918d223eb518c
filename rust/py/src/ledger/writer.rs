//! `LedgerWriter` (quorum appends of one open ledger) and `FailureQueue`, where the writers of
//! one client put the bookie failures the control plane acts on (`BookieFailure`). Wrappers
//! only: the writing is `pybkx_core::ledger::LedgerWriter`'s.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use pyo3::prelude::*;

use pybkx_core::digest;
use pybkx_core::ledger::{
    BookieFailure, FailureSink, LedgerError, LedgerWriter, WriterSpec, RECOVERY_ADD_FLAGS,
};
use pybkx_core::protocol::FLAG_NONE;

use crate::bookie_conn::PyBookieClient;
use crate::digest::digest_manager;
use crate::errors::{BkError, BkResult, RaisedByPython};
use crate::future::Future;
use crate::util::{deadline, payload, SignalCheck, SIGNAL_CHECK};

/// A bookie of a writer's ensemble that failed an add; see `_core.pyi`.
#[pyclass(name = "BookieFailure", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyBookieFailure {
    ledger_id: i64,
    writer_id: u64,
    index: usize,
    bookie: String,
    error: String,
}

impl From<BookieFailure> for PyBookieFailure {
    fn from(f: BookieFailure) -> Self {
        PyBookieFailure {
            ledger_id: f.ledger,
            writer_id: f.writer_id,
            index: f.index,
            bookie: f.bookie,
            error: f.error,
        }
    }
}

#[pymethods]
impl PyBookieFailure {
    fn __repr__(&self) -> String {
        format!(
            "BookieFailure(ledger_id={}, writer_id={}, index={}, bookie={:?}, error={:?})",
            self.ledger_id, self.writer_id, self.index, self.bookie, self.error
        )
    }
}

/// Bookie failures of every writer of one client, in the order they happened; see `_core.pyi`.
/// Holds at most E events per writer between ensemble changes (a writer reports a slot once).
#[pyclass(name = "FailureQueue", module = "pybkx._core", frozen)]
pub(crate) struct PyFailureQueue {
    tx: Sender<BookieFailure>,
    rx: Receiver<BookieFailure>,
    closed: AtomicBool,
    next_writer_id: AtomicU64,
}

#[pymethods]
impl PyFailureQueue {
    #[new]
    fn new() -> Self {
        // Bounded by the writers: each reports a failed slot once until its next ensemble
        // change, so at most E events per writer of this client.
        let (tx, rx) = crossbeam_channel::unbounded();
        PyFailureQueue {
            tx,
            rx,
            closed: AtomicBool::new(false),
            next_writer_id: AtomicU64::new(1),
        }
    }

    /// The next failure, waiting up to `timeout` seconds (None: until one comes or the queue
    /// is closed); None if none came.
    #[pyo3(signature = (timeout = None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyBookieFailure>> {
        let until = deadline(timeout)?;
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Ok(None);
            }
            let slice = Instant::now() + SIGNAL_CHECK;
            let wake = until.map_or(slice, |u| u.min(slice));
            if let Ok(f) = py.detach(|| self.rx.recv_deadline(wake)) {
                return Ok(Some(f.into()));
            }
            py.check_signals()?;
            if until.is_some_and(|u| Instant::now() >= u) {
                return Ok(None);
            }
        }
    }

    /// Wakes waiting `next` calls (they return None) and refuses to wait again.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

impl PyFailureQueue {
    fn sink(&self) -> FailureSink {
        let tx = self.tx.clone();
        Arc::new(move |f| {
            let _ = tx.send(f);
        })
    }
}

/// The writer of one open ledger (quorum writes, in-order completion); see `_core.pyi`.
#[pyclass(name = "LedgerWriter", module = "pybkx._core", frozen)]
pub(crate) struct PyLedgerWriter {
    inner: Arc<LedgerWriter>,
    throttle: usize,
}

impl PyLedgerWriter {
    /// Runs a blocking core wait with the GIL released; a signal ends it with its exception.
    fn interruptible<T>(
        py: Python<'_>,
        f: impl FnOnce(&dyn Fn() -> bool) -> Result<T, LedgerError> + Send,
    ) -> PyResult<T>
    where
        T: Send,
    {
        let sig = SignalCheck::default();
        match py.detach(|| f(&|| sig.interrupted())) {
            Ok(v) => Ok(v),
            Err(LedgerError::Interrupted) => Err(sig
                .take()
                .unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err("interrupted"))),
            Err(e) => Err(BkError::from(e).into()),
        }
    }
}

#[pymethods]
impl PyLedgerWriter {
    #[new]
    #[pyo3(signature = (
        client, ledger_id, write_quorum_size, ack_quorum_size, password, digest_type, ensemble,
        failures, *, next_entry_id = 0, length = 0, recovery = false, throttle = 5000,
        adv = false, explicit_lac_interval_ms = 0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        client: PyRef<'_, PyBookieClient>,
        ledger_id: i64,
        write_quorum_size: usize,
        ack_quorum_size: usize,
        password: &[u8],
        digest_type: &str,
        ensemble: Vec<String>,
        failures: PyRef<'_, PyFailureQueue>,
        next_entry_id: i64,
        length: i64,
        recovery: bool,
        throttle: usize,
        adv: bool,
        explicit_lac_interval_ms: u64,
    ) -> BkResult<Self> {
        let spec = WriterSpec {
            ledger: ledger_id,
            writer_id: failures.next_writer_id.fetch_add(1, Ordering::Relaxed),
            qw: write_quorum_size,
            qa: ack_quorum_size,
            master_key: Bytes::copy_from_slice(&digest::master_key(password)),
            digest: digest_manager(ledger_id, password, digest_type)?,
            ensemble,
            next_entry: next_entry_id,
            length,
            flags: if recovery {
                RECOVERY_ADD_FLAGS
            } else {
                FLAG_NONE
            },
        };
        let inner = if adv {
            LedgerWriter::new_adv(client.inner.clone(), spec, failures.sink())?
        } else {
            LedgerWriter::new(client.inner.clone(), spec, failures.sink())?
        };
        if explicit_lac_interval_ms > 0 {
            inner.start_explicit_lac_flush(Duration::from_millis(explicit_lac_interval_ms))?;
        }
        Ok(PyLedgerWriter {
            inner,
            throttle: throttle.max(1),
        })
    }

    /// The id failures of this writer carry in the `FailureQueue`.
    #[getter]
    fn writer_id(&self) -> u64 {
        self.inner.writer_id()
    }

    /// The largest payload one append may carry.
    #[getter]
    fn max_payload(&self) -> usize {
        self.inner.max_payload()
    }

    /// Starts an append (at `entry_id`, which must be the next one, if given); the future
    /// gives its entry id. Waits (interruptibly) while `throttle` appends are pending.
    #[pyo3(signature = (payload, entry_id = None))]
    fn append(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        entry_id: Option<i64>,
    ) -> PyResult<Py<Future>> {
        let data = crate::util::payload(payload)?;
        let (fut, completer) = Future::pending(py)?;
        let (inner, throttle) = (self.inner.clone(), self.throttle);
        // One release of the GIL for both the wait for room and the send (which may wait for
        // room on the connection): half the GIL traffic of a pipelined append.
        Self::interruptible(py, move |interrupt| {
            inner.wait_for_room(throttle, interrupt)?;
            inner.append_with_id(entry_id, data, completer.into_done());
            Ok(())
        })?;
        Ok(fut)
    }

    /// Starts an adv append of entry `entry_id` (an adv writer only); the future gives the id
    /// once it and every lower id are acknowledged. Waits (interruptibly) while `throttle`
    /// appends are pending.
    fn append_adv(
        &self,
        py: Python<'_>,
        entry_id: i64,
        payload: &Bound<'_, PyAny>,
    ) -> PyResult<Py<Future>> {
        let data = crate::util::payload(payload)?;
        let (fut, completer) = Future::pending(py)?;
        let (inner, throttle) = (self.inner.clone(), self.throttle);
        Self::interruptible(py, move |interrupt| {
            inner.wait_for_room(throttle, interrupt)?;
            inner.append_adv(entry_id, data, completer.into_done());
            Ok(())
        })?;
        Ok(fut)
    }

    /// Appends every payload pipelined (at most `throttle` pending) and returns the last entry
    /// id once all are acknowledged.
    fn append_many(&self, py: Python<'_>, payloads: Vec<Bound<'_, PyAny>>) -> PyResult<i64> {
        let data = payloads
            .iter()
            .map(payload)
            .collect::<PyResult<Vec<Bytes>>>()?;
        let (inner, throttle) = (self.inner.clone(), self.throttle);
        Self::interruptible(py, |interrupt| {
            inner.append_all_blocking(data, throttle, interrupt)
        })
    }

    /// Freezes the LAC for an ensemble change; returns LAC + 1 (where the new segment starts).
    fn begin_change(&self) -> i64 {
        self.inner.begin_change()
    }

    /// Ends a begun change without a new ensemble (appends complete again).
    fn cancel_change(&self, py: Python<'_>) {
        let inner = self.inner.clone();
        py.detach(move || inner.cancel_change());
    }

    fn change_ensemble(
        &self,
        py: Python<'_>,
        first_entry_id: i64,
        ensemble: Vec<String>,
    ) -> BkResult<()> {
        let inner = self.inner.clone();
        py.detach(move || inner.change_ensemble(first_entry_id, ensemble))?;
        Ok(())
    }

    /// Fails every pending and later append with `exception` (its class and message).
    fn fail(&self, py: Python<'_>, exception: &Bound<'_, PyAny>) -> PyResult<()> {
        let error = RaisedByPython::capture(exception)?;
        // Failing runs the completions of every pending append; none may wait for the GIL.
        let inner = self.inner.clone();
        py.detach(move || inner.fail(error));
        Ok(())
    }

    /// A future done once nothing is pending (or the writer failed).
    fn when_drained(&self, py: Python<'_>) -> PyResult<Py<Future>> {
        let (fut, completer) = Future::pending(py)?;
        self.inner.when_drained(Box::new(move |()| {
            completer.complete(Ok(Box::new(())));
        }));
        Ok(fut)
    }

    fn close(&self) {
        self.inner.close();
    }

    #[getter]
    fn last_add_confirmed(&self) -> i64 {
        self.inner.positions().0
    }

    #[getter]
    fn length(&self) -> i64 {
        self.inner.positions().1
    }

    #[getter]
    fn next_entry_id(&self) -> i64 {
        self.inner.positions().2
    }

    #[getter]
    fn ensemble(&self) -> Vec<String> {
        self.inner.ensemble()
    }

    /// Makes every later add carry BookKeeper's `WriteFlag.DEFERRED_SYNC` (V3 only): the LAC
    /// then advances only by `force`. Before the first append.
    fn enable_deferred_sync(&self) -> BkResult<()> {
        Ok(self.inner.enable_deferred_sync()?)
    }

    /// Whether adds carry `WriteFlag.DEFERRED_SYNC`.
    #[getter]
    fn deferred_sync(&self) -> bool {
        self.inner.is_deferred_sync()
    }

    /// FORCE_LEDGER to every bookie of the ensemble; the future gives the LAC it confirmed.
    fn force(&self, py: Python<'_>) -> PyResult<Py<Future>> {
        let (fut, completer) = Future::pending(py)?;
        let inner = self.inner.clone();
        // Its completion may run at once (an error), and never waits for the GIL.
        py.detach(move || inner.force(completer.into_done()));
        Ok(fut)
    }

    /// The error that stopped the writer, raised; None if it is healthy.
    fn check(&self) -> BkResult<()> {
        match self.inner.fatal() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}
