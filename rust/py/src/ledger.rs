//! The per-ledger engine for Python: `LedgerWriter` (quorum appends), `ReadPlan` (reads of one
//! metadata version), `FailureQueue` (bookie failures for the control plane to act on) and the
//! `LedgerEntry` type reads return. Wrappers only: the logic is in `pybkx_core::ledger`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList};

use pybkx_core::digest;
use pybkx_core::ledger::{
    self, check_range, columns, BookieFailure, FailureSink, LedgerError, LedgerWriter, ReadEntry,
    ReadOptions, ReadPlan, Segment, WriterSpec, RECOVERY_ADD_FLAGS,
};
use pybkx_core::protocol::FLAG_NONE;
use pybkx_core::runtime::runtime;

use crate::bookie_conn::{flags_of, PyBookieClient};
use crate::buffer::{fill_view, PyBuffer};
use crate::digest::{digest_manager, verify, PyDigestManager, VerifiedTuple};
use crate::errors::{BkError, BkResult, RaisedByPython};
use crate::future::{Future, ToPy};
use crate::util::{deadline, payload, SignalCheck, SIGNAL_CHECK};

/// Raises IncorrectParameterException unless E >= Qw >= Qa >= 1.
#[pyfunction]
pub(crate) fn check_quorums(
    ensemble_size: usize,
    write_quorum_size: usize,
    ack_quorum_size: usize,
) -> BkResult<()> {
    ledger::check_quorums(ensemble_size, write_quorum_size, ack_quorum_size)?;
    Ok(())
}

/// One entry read from a ledger; see `_core.pyi`. The payload stays the Rust buffer the
/// bookie's reply arrived in: `memoryview(entry)` lends it without a copy, `entry.payload`
/// makes one `bytes` on first use and keeps it.
#[pyclass(name = "LedgerEntry", module = "pybkx._core", frozen, eq)]
pub(crate) struct PyLedgerEntry {
    #[pyo3(get)]
    ledger_id: i64,
    #[pyo3(get)]
    entry_id: i64,
    data: Bytes,
    payload: PyOnceLock<Py<PyBytes>>,
    /// The LAC the writer piggy-backed in this entry.
    #[pyo3(get)]
    last_add_confirmed: i64,
    /// The ledger's length (bytes of all entries) up to and including this one.
    #[pyo3(get)]
    ledger_length: i64,
}

impl PyLedgerEntry {
    fn from_read(ledger_id: i64, e: &ReadEntry) -> Self {
        PyLedgerEntry {
            ledger_id,
            entry_id: e.entry_id,
            data: e.payload.clone(),
            payload: PyOnceLock::new(),
            last_add_confirmed: e.lac,
            ledger_length: e.length,
        }
    }
}

impl PartialEq for PyLedgerEntry {
    fn eq(&self, other: &Self) -> bool {
        self.ledger_id == other.ledger_id
            && self.entry_id == other.entry_id
            && self.data == other.data
    }
}

#[pymethods]
impl PyLedgerEntry {
    #[new]
    #[pyo3(signature = (ledger_id, entry_id, payload, last_add_confirmed = -1, ledger_length = 0))]
    fn new(
        ledger_id: i64,
        entry_id: i64,
        payload: &Bound<'_, PyAny>,
        last_add_confirmed: i64,
        ledger_length: i64,
    ) -> PyResult<Self> {
        Ok(PyLedgerEntry {
            ledger_id,
            entry_id,
            data: crate::util::payload(payload)?,
            payload: PyOnceLock::new(),
            last_add_confirmed,
            ledger_length,
        })
    }

    /// This entry packaged again by `digest` as its writer sent it: the payload is copied once,
    /// straight from the read's buffer into the new `bytes` (a recovery copy's add).
    fn packaged<'py>(
        &self,
        py: Python<'py>,
        digest: PyRef<'py, PyDigestManager>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let manager = digest.inner();
        if manager.ledger_id() != self.ledger_id {
            return Err(PyValueError::new_err(format!(
                "entry {} is of ledger {}, the DigestManager packages ledger {}",
                self.entry_id,
                self.ledger_id,
                manager.ledger_id()
            )));
        }
        PyBytes::new_with(py, manager.packaged_len(self.data.len()), |out| {
            manager.package_to_slice(
                self.entry_id,
                self.last_add_confirmed,
                self.ledger_length,
                &self.data,
                out,
            );
            Ok(())
        })
    }

    /// The payload as `bytes` (made once, on first use).
    #[getter]
    fn payload(&self, py: Python<'_>) -> Py<PyBytes> {
        self.payload
            .get_or_init(py, || PyBytes::new(py, &self.data).unbind())
            .clone_ref(py)
    }

    fn __bytes__(&self, py: Python<'_>) -> Py<PyBytes> {
        self.payload(py)
    }

    fn __len__(&self) -> usize {
        self.data.len()
    }

    unsafe fn __getbuffer__(
        slf: PyRef<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::os::raw::c_int,
    ) -> PyResult<()> {
        // SAFETY: the entry is frozen and owns `data` as long as the view references it.
        unsafe { fill_view(slf.py(), slf.as_ptr(), &slf.data, view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}

    fn __repr__(&self) -> String {
        format!(
            "LedgerEntry(ledger_id={}, entry_id={}, payload=<{} bytes>)",
            self.ledger_id,
            self.entry_id,
            self.data.len()
        )
    }
}

/// The entries of one read and whether batch reads still look supported.
struct ReadResult {
    ledger: i64,
    entries: Vec<ReadEntry>,
    batch_ok: bool,
}

impl ToPy for ReadResult {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let list = PyList::empty(py);
        for e in &self.entries {
            list.append(Py::new(py, PyLedgerEntry::from_read(self.ledger, e))?)?;
        }
        Ok((list, self.batch_ok).into_pyobject(py)?.into_any().unbind())
    }
}

/// A failure as Python sees it: `(ledger_id, writer_id, index, bookie, error)`.
type FailureTuple = (i64, u64, usize, String, String);

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
        let (tx, rx) = crossbeam_channel::unbounded();
        PyFailureQueue {
            tx,
            rx,
            closed: AtomicBool::new(false),
            next_writer_id: AtomicU64::new(1),
        }
    }

    /// The next failure as `(ledger_id, writer_id, index, bookie, error)`, waiting up to
    /// `timeout` seconds (None: until one comes or the queue is closed); None if none came.
    #[pyo3(signature = (timeout = None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<FailureTuple>> {
        let until = deadline(timeout)?;
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Ok(None);
            }
            let slice = Instant::now() + SIGNAL_CHECK;
            let wake = until.map_or(slice, |u| u.min(slice));
            if let Ok(f) = py.detach(|| self.rx.recv_deadline(wake)) {
                return Ok(Some((f.ledger, f.writer_id, f.index, f.bookie, f.error)));
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
        failures, *, next_entry_id = 0, length = 0, recovery = false, throttle = 5000
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
        Ok(PyLedgerWriter {
            inner: LedgerWriter::new(client.inner.clone(), spec, failures.sink())?,
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

    /// The error that stopped the writer, raised; None if it is healthy.
    fn check(&self) -> BkResult<()> {
        match self.inner.fatal() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// How to read one version of a ledger's metadata; see `_core.pyi`.
#[pyclass(name = "ReadPlan", module = "pybkx._core", frozen)]
pub(crate) struct PyReadPlan {
    client: Arc<pybkx_core::bookie_conn::BookieClient>,
    plan: Arc<ReadPlan>,
}

#[pymethods]
impl PyReadPlan {
    #[new]
    #[pyo3(signature = (
        client, ledger_id, write_quorum_size, password, digest_type, segments, *,
        orders = Vec::new(), max_batch_bytes = 5 << 20
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        client: PyRef<'_, PyBookieClient>,
        ledger_id: i64,
        write_quorum_size: usize,
        password: &[u8],
        digest_type: &str,
        segments: Vec<(i64, Vec<String>)>,
        orders: Vec<Vec<Vec<usize>>>,
        max_batch_bytes: i64,
    ) -> BkResult<Self> {
        let segments = segments.into_iter().map(Segment::from).collect();
        let plan = ReadPlan::new(
            ledger_id,
            write_quorum_size,
            digest_manager(ledger_id, password, digest_type)?,
            segments,
            orders,
            max_batch_bytes,
        )?;
        Ok(PyReadPlan {
            client: client.inner.clone(),
            plan: Arc::new(plan),
        })
    }

    /// Checks an entry as a bookie stored it: `(entry_id, lac, ledger_length, payload)`.
    /// Raises DigestMatchException (also for another entry id than `entry_id`, if given).
    #[pyo3(signature = (entry, entry_id = None))]
    fn verify<'py>(
        &self,
        py: Python<'py>,
        entry: &[u8],
        entry_id: Option<i64>,
    ) -> BkResult<VerifiedTuple<'py>> {
        verify(py, self.plan.digest(), entry, entry_id)
    }

    /// Reads and verifies entries `first..=last` (with `held_by`, only those whose write set
    /// holds one of those ensemble positions); the future gives `(entries, batch_ok)`.
    /// Raises IncorrectParameterException at once for a bad range, and through the future for
    /// a position outside the ledger's ensembles.
    #[pyo3(signature = (
        first, last, *, batch = true, avoid = Vec::new(), flags = 0, master_key = None,
        window = 64, held_by = Vec::new()
    ))]
    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        py: Python<'_>,
        first: i64,
        last: i64,
        batch: bool,
        avoid: Vec<String>,
        flags: i64,
        master_key: Option<&[u8]>,
        window: usize,
        held_by: Vec<usize>,
    ) -> PyResult<Py<Future>> {
        let mut opts = read_options(first, last, batch, avoid, window)?;
        opts.flags = flags_of(flags)?;
        opts.master_key = master_key.map(Bytes::copy_from_slice);
        opts.held_by = held_by;
        self.spawn_read(py, first, last, opts, |ledger, entries, batch_ok| {
            Ok(ReadResult {
                ledger,
                entries,
                batch_ok,
            })
        })
    }

    /// Reads entries `first..=last` as columns; the future gives `(rows, entry_ids, offsets,
    /// payloads, batch_ok)`, the three columns as `Buffer`s in Arrow's `int64` and `binary`
    /// layouts. Raises IncorrectParameterException for a bad range, or (through the future)
    /// for payloads above 2 GiB in all.
    #[pyo3(signature = (first, last, *, batch = true, avoid = Vec::new(), window = 64))]
    fn read_columns(
        &self,
        py: Python<'_>,
        first: i64,
        last: i64,
        batch: bool,
        avoid: Vec<String>,
        window: usize,
    ) -> PyResult<Py<Future>> {
        let opts = read_options(first, last, batch, avoid, window)?;
        self.spawn_read(py, first, last, opts, |_, entries, batch_ok| {
            Ok(ColumnsResult {
                columns: columns::pack(&entries)?,
                batch_ok,
            })
        })
    }
}

impl PyReadPlan {
    /// Reads `first..=last` on the runtime and completes the future with `finish(ledger,
    /// entries, batch_ok)`, run there too (off the interpreter's thread).
    fn spawn_read<T: ToPy + 'static>(
        &self,
        py: Python<'_>,
        first: i64,
        last: i64,
        opts: ReadOptions,
        finish: impl FnOnce(i64, Vec<ReadEntry>, bool) -> Result<T, LedgerError> + Send + 'static,
    ) -> PyResult<Py<Future>> {
        let rt = runtime().map_err(|e| PyOSError::new_err(e.to_string()))?;
        let (fut, completer) = Future::pending(py)?;
        let (client, plan) = (self.client.clone(), self.plan.clone());
        let done = completer.into_done::<T, LedgerError>();
        rt.spawn(async move {
            let r = ledger::read_range(&client, &plan, &opts, first, last).await;
            done(r.and_then(|(entries, batch_ok)| finish(plan.ledger_id(), entries, batch_ok)));
        });
        Ok(fut)
    }
}

/// The options of one read; raises IncorrectParameterException at once for a bad range.
/// The options of a plain read of `first..=last` (no flags, key or position filter).
fn read_options(
    first: i64,
    last: i64,
    batch: bool,
    avoid: Vec<String>,
    window: usize,
) -> PyResult<ReadOptions> {
    check_range(first, last).map_err(BkError::from)?;
    Ok(ReadOptions {
        batch,
        avoid: avoid.into_iter().collect::<HashSet<_>>(),
        window,
        ..ReadOptions::default()
    })
}

/// The columns of one read and whether batch reads still look supported.
struct ColumnsResult {
    columns: columns::Columns,
    batch_ok: bool,
}

impl ToPy for ColumnsResult {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let c = &self.columns;
        let buffer = |b: &Bytes| Py::new(py, PyBuffer::new(b.clone()));
        Ok((
            c.rows,
            buffer(&c.entry_ids)?,
            buffer(&c.offsets)?,
            buffer(&c.payloads)?,
            self.batch_ok,
        )
            .into_pyobject(py)?
            .into_any()
            .unbind())
    }
}
