//! PyO3 bindings only: thin wrappers that convert arguments, release the GIL around blocking
//! work and map errors to `pybkx.errors`. No storage logic lives here.

pub mod client;
pub mod config;
pub mod digest;
pub mod entrylog;
pub mod error;
pub mod index;
pub mod journal;
pub mod ledger;
pub mod loadgen;
pub mod microbench;
pub mod protocol;
pub mod record;
pub mod runtime;
pub mod server;
pub mod storage;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::client::{ClientConfig, ClientError, Reply, ReplyResult};
use crate::config::{ConfValue, StorageConfig};
use crate::digest::{DigestManager, DigestType};
use crate::error::StorageError;
use crate::journal::Completion;
use crate::ledger::LedgerError;
use crate::storage::{RangeLimits, LAST_ENTRY};

/// An instance of the `pybkx.errors` class `name` (RuntimeError if the module is missing).
fn bk_error(name: &str, message: String) -> PyErr {
    Python::attach(|py| {
        let class = py
            .import("pybkx.errors")
            .and_then(|m| m.getattr(name))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match class {
            Ok(cls) => PyErr::from_type(cls, message),
            Err(_) => PyRuntimeError::new_err(message),
        }
    })
}

/// The `pybkx.errors` class BookKeeper users expect for each storage error.
fn storage_err(e: StorageError) -> PyErr {
    let name = match &e {
        StorageError::NoLedger(_) => "NoSuchLedgerExistsException",
        StorageError::NoEntry { .. } => "NoSuchEntryException",
        StorageError::Fenced(_) => "LedgerFencedException",
        StorageError::Unauthorized(_) => "UnauthorizedAccessException",
        StorageError::InvalidArgument(m) => return PyValueError::new_err(m.clone()),
        StorageError::Io { .. } | StorageError::Corruption(_) => "BookieIOException",
        StorageError::Locked(_) | StorageError::Closed | StorageError::QueueFull => {
            "BookieException"
        }
    };
    bk_error(name, e.to_string())
}

/// The exception the Java client raises for a per-bookie failure: V2 result codes map as in
/// its V2 status translation (EBADREQ/EIO and unknown codes fall back to the operation's
/// generic exception); code 107 maps to DataUnknownException although the Java V2 client
/// cannot decode it.
fn client_err(e: &ClientError) -> PyErr {
    use protocol::rc;
    let name = match e {
        ClientError::Bookie { rc: code, op, .. } => match *code {
            rc::ENOLEDGER => "NoSuchLedgerExistsException",
            rc::ENOENTRY => "NoSuchEntryException",
            rc::EUA => "UnauthorizedAccessException",
            rc::EBADVERSION => "ProtocolVersionException",
            rc::EFENCED => "LedgerFencedException",
            rc::EREADONLY => "WriteOnReadOnlyBookieException",
            rc::ETOOMANYREQUESTS => "TooManyRequestsException",
            rc::EUNKNOWNLEDGERSTATE => "DataUnknownException",
            _ if *op == "add" => "WriteException",
            _ => "ReadException",
        },
        ClientError::Timeout { .. } => "TimeoutException",
        ClientError::Unavailable { .. } => "BookieHandleNotAvailableException",
        ClientError::Closed => "ClientClosedException",
    };
    bk_error(name, e.to_string())
}

fn non_negative(what: &str, id: i64) -> PyResult<u64> {
    u64::try_from(id).map_err(|_| PyValueError::new_err(format!("{what} must be >= 0, got {id}")))
}

/// Runs `submit` and blocks until its completion reports.
fn wait(submit: impl FnOnce(Completion) -> error::Result<()>) -> error::Result<()> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    submit(Box::new(move |r| {
        let _ = tx.send(r);
    }))?;
    // A completion dropped unsent means the journal stopped before taking the request.
    rx.recv().unwrap_or(Err(StorageError::Closed))
}

fn conf_value(key: &str, v: &Bound<'_, PyAny>) -> PyResult<ConfValue> {
    if v.is_instance_of::<PyBool>() {
        return Ok(ConfValue::Bool(v.extract()?));
    }
    if let Ok(n) = v.extract::<i64>() {
        return Ok(ConfValue::Int(n));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(ConfValue::Str(v.extract()?));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for item in v.try_iter()? {
            let p: PathBuf = item?.extract().map_err(|_| {
                PyValueError::new_err(format!("configuration {key}: expected paths in the list"))
            })?;
            items.push(p.display().to_string());
        }
        return Ok(ConfValue::List(items));
    }
    if let Ok(p) = v.extract::<PathBuf>() {
        return Ok(ConfValue::Str(p.display().to_string()));
    }
    Err(PyValueError::new_err(format!(
        "configuration {key}: unsupported value {}",
        v.repr()?
    )))
}

/// A bookie's ledger storage (journal + entry logs + index); see `_core.pyi`.
#[pyclass(name = "LedgerStorage", module = "pybkx._core", frozen)]
struct PyLedgerStorage {
    inner: Arc<storage::LedgerStorage>,
}

#[pymethods]
impl PyLedgerStorage {
    #[new]
    #[pyo3(signature = (**config))]
    fn new(py: Python<'_>, config: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut pairs = Vec::new();
        if let Some(cfg) = config {
            for (k, v) in cfg.iter() {
                let key: String = k.extract()?;
                let value = conf_value(&key, &v)?;
                pairs.push((key, value));
            }
        }
        let cfg = StorageConfig::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.clone())))
            .map_err(storage_err)?;
        let inner = py
            .detach(|| storage::LedgerStorage::open(cfg))
            .map_err(storage_err)?;
        Ok(PyLedgerStorage {
            inner: Arc::new(inner),
        })
    }

    #[pyo3(signature = (ledger_id, entry_id, data, master_key = None, recovery = false))]
    fn add_entry(
        &self,
        py: Python<'_>,
        ledger_id: i64,
        entry_id: i64,
        data: PyBackedBytes,
        master_key: Option<&[u8]>,
        recovery: bool,
    ) -> PyResult<()> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let entry = non_negative("entry_id", entry_id)?;
        let key = master_key.unwrap_or_default().to_vec();
        let data = Bytes::from_owner(data);
        py.detach(|| {
            wait(|done| {
                self.inner
                    .add_entry(ledger, entry, &key, data, recovery, done)
            })
        })
        .map_err(storage_err)
    }

    #[pyo3(signature = (ledger_id, entries, master_key = None, recovery = false))]
    fn add_entries(
        &self,
        py: Python<'_>,
        ledger_id: i64,
        entries: Vec<(i64, PyBackedBytes)>,
        master_key: Option<&[u8]>,
        recovery: bool,
    ) -> PyResult<()> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let key = master_key.unwrap_or_default().to_vec();
        let items = entries
            .into_iter()
            .map(|(e, d)| Ok((non_negative("entry_id", e)?, Bytes::from_owner(d))))
            .collect::<PyResult<Vec<_>>>()?;
        py.detach(|| {
            let (tx, rx) = crossbeam_channel::unbounded();
            let mut submitted = 0usize;
            let mut failure = None;
            for (entry, data) in items {
                let tx = tx.clone();
                let done: Completion = Box::new(move |r| {
                    let _ = tx.send(r);
                });
                match self
                    .inner
                    .add_entry(ledger, entry, &key, data, recovery, done)
                {
                    Ok(()) => submitted += 1,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            drop(tx);
            for _ in 0..submitted {
                match rx.recv() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        failure.get_or_insert(e);
                    }
                    Err(_) => {
                        failure.get_or_insert(StorageError::Closed);
                        break;
                    }
                }
            }
            failure.map_or(Ok(()), Err)
        })
        .map_err(storage_err)
    }

    fn read_entry<'py>(
        &self,
        py: Python<'py>,
        ledger_id: i64,
        entry_id: i64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let entry = if entry_id == -1 {
            LAST_ENTRY
        } else {
            non_negative("entry_id", entry_id)?
        };
        let data = py
            .detach(|| self.inner.read_entry(ledger, entry))
            .map_err(storage_err)?;
        Ok(PyBytes::new(py, &data))
    }

    fn read_range<'py>(
        &self,
        py: Python<'py>,
        ledger_id: i64,
        first_entry_id: i64,
        max_count: i64,
        max_bytes: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let first = non_negative("first_entry_id", first_entry_id)?;
        let limits = RangeLimits {
            max_count: usize::try_from(max_count).unwrap_or(0),
            max_bytes: usize::try_from(max_bytes).unwrap_or(0),
            per_entry_overhead: 0,
        };
        let entries = py
            .detach(|| self.inner.read_range(ledger, first, limits))
            .map_err(storage_err)?;
        PyList::new(py, entries.iter().map(|e| PyBytes::new(py, e)))
    }

    fn last_entry_id(&self, ledger_id: i64) -> PyResult<i64> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        self.inner
            .last_entry_id(ledger)
            .map(|e| e as i64)
            .map_err(storage_err)
    }

    #[pyo3(signature = (ledger_id, master_key = None))]
    fn fence(&self, py: Python<'_>, ledger_id: i64, master_key: Option<&[u8]>) -> PyResult<bool> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let key = master_key.unwrap_or_default().to_vec();
        py.detach(|| {
            let mut was = false;
            wait(|done| {
                was = self.inner.fence(ledger, &key, done)?;
                Ok(())
            })
            .map(|_| was)
        })
        .map_err(storage_err)
    }

    fn is_fenced(&self, ledger_id: i64) -> PyResult<bool> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        self.inner.is_fenced(ledger).map_err(storage_err)
    }

    #[pyo3(signature = (ledger_id, lac, master_key = None))]
    fn set_explicit_lac(
        &self,
        py: Python<'_>,
        ledger_id: i64,
        lac: &[u8],
        master_key: Option<&[u8]>,
    ) -> PyResult<()> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let key = master_key.unwrap_or_default().to_vec();
        let lac = Bytes::copy_from_slice(lac);
        py.detach(|| wait(|done| self.inner.set_explicit_lac(ledger, &key, lac, done)))
            .map_err(storage_err)
    }

    fn get_explicit_lac<'py>(
        &self,
        py: Python<'py>,
        ledger_id: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let lac = self.inner.explicit_lac(ledger).map_err(storage_err)?;
        Ok(lac.map(|b| PyBytes::new(py, &b)))
    }

    fn read_master_key<'py>(
        &self,
        py: Python<'py>,
        ledger_id: i64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let key = self.inner.master_key(ledger).map_err(storage_err)?;
        Ok(PyBytes::new(py, &key))
    }

    fn ledger_exists(&self, ledger_id: i64) -> bool {
        u64::try_from(ledger_id).is_ok_and(|l| self.inner.ledger_exists(l))
    }

    fn list_ledgers(&self) -> Vec<u64> {
        self.inner.list_ledgers()
    }

    fn delete_ledger(&self, py: Python<'_>, ledger_id: i64) -> PyResult<()> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        py.detach(|| wait(|done| self.inner.delete_ledger(ledger, done)))
            .map_err(storage_err)
    }

    fn checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.checkpoint()).map_err(storage_err)
    }

    fn entry_log_ledgers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let maps = py
            .detach(|| self.inner.entry_log_ledgers())
            .map_err(storage_err)?;
        let out = PyDict::new(py);
        for (log_id, map) in maps {
            let d = PyDict::new(py);
            for (ledger, bytes) in map {
                d.set_item(ledger, bytes)?;
            }
            out.set_item(log_id, d)?;
        }
        Ok(out)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.inner.stats() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.close()).map_err(storage_err)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }
}

/// Decodes one journal file for tools (like BookKeeper's `readjournal`).
#[pyfunction]
fn scan_journal<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyList>> {
    let (records, end, reason) = py
        .detach(|| journal::scan_file(&path))
        .map_err(storage_err)?;
    let out = PyList::empty(py);
    for r in records {
        let d = PyDict::new(py);
        d.set_item("offset", r.offset)?;
        d.set_item("size", r.size)?;
        d.set_item("kind", r.kind)?;
        d.set_item("ledger_id", r.ledger)?;
        d.set_item("entry_id", r.entry)?;
        out.append(d)?;
    }
    let d = PyDict::new(py);
    d.set_item("offset", end)?;
    d.set_item("size", 0)?;
    d.set_item("kind", "end")?;
    d.set_item("reason", reason)?;
    out.append(d)?;
    Ok(out)
}

/// The V2 bookie server; see `_core.pyi`.
#[pyclass(name = "BookieServer", module = "pybkx._core", frozen)]
struct PyBookieServer {
    inner: server::BookieServer,
}

#[pymethods]
impl PyBookieServer {
    #[new]
    #[pyo3(signature = (
        storage, host = "0.0.0.0".to_string(), port = 3181, *, max_frame_size = 5 << 20,
        max_pending_adds = 10_000, max_pending_reads = 10_000, max_batch_read_size = 5 << 20,
        read_only = false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        storage: PyRef<'_, PyLedgerStorage>,
        host: String,
        port: u16,
        max_frame_size: usize,
        max_pending_adds: usize,
        max_pending_reads: usize,
        max_batch_read_size: usize,
        read_only: bool,
    ) -> PyResult<Self> {
        if max_frame_size < 64 || max_pending_adds == 0 || max_pending_reads == 0 {
            return Err(PyValueError::new_err(
                "max_frame_size must be >= 64 and the pending limits > 0",
            ));
        }
        let cfg = server::ServerConfig {
            host,
            port,
            max_frame_size,
            max_pending_adds,
            max_pending_reads,
            max_batch_read_size,
            read_only,
        };
        let storage = storage.inner.clone();
        let inner = py.detach(|| server::BookieServer::start(storage, cfg))?;
        Ok(PyBookieServer { inner })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.inner.local_addr().port()
    }

    fn set_read_only(&self, read_only: bool) {
        self.inner.set_read_only(read_only);
    }

    fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    #[pyo3(signature = (drain_timeout_ms = 10_000))]
    fn stop(&self, py: Python<'_>, drain_timeout_ms: u64) {
        py.detach(|| self.inner.stop(Duration::from_millis(drain_timeout_ms)));
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = self.inner.stats();
        let d = PyDict::new(py);
        for (k, v) in [
            ("connections_accepted", &s.connections_accepted),
            ("connections_active", &s.connections_active),
            ("add_entry_requests", &s.add_entry_requests),
            ("read_entry_requests", &s.read_entry_requests),
            ("batch_read_entry_requests", &s.batch_read_entry_requests),
            ("read_entry_fence_requests", &s.read_entry_fence_requests),
            ("auth_requests", &s.auth_requests),
            ("rejected_requests", &s.rejected_requests),
            ("protocol_errors", &s.protocol_errors),
        ] {
            d.set_item(k, v.load(Relaxed))?;
        }
        Ok(d)
    }
}

enum FutureState {
    Waiting(oneshot::Receiver<ReplyResult>),
    Done(ReplyResult),
}

/// The pending result of one request to a bookie; see `_core.pyi`.
#[pyclass(name = "BookieFuture", module = "pybkx._core", frozen)]
struct PyBookieFuture {
    state: Mutex<FutureState>,
}

impl PyBookieFuture {
    fn new(rx: oneshot::Receiver<ReplyResult>) -> Self {
        PyBookieFuture {
            state: Mutex::new(FutureState::Waiting(rx)),
        }
    }
}

#[pymethods]
impl PyBookieFuture {
    #[pyo3(signature = (timeout = None))]
    fn result(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        let wait = match timeout {
            Some(t) if !(t >= 0.0 && t.is_finite()) => {
                return Err(PyValueError::new_err(
                    "timeout must be a finite number >= 0",
                ))
            }
            Some(t) => Some(Duration::from_secs_f64(t)),
            None => None,
        };
        let outcome: Option<ReplyResult> = py.detach(|| -> PyResult<Option<ReplyResult>> {
            let mut state = self.state.lock();
            if let FutureState::Waiting(rx) = &mut *state {
                let rt = runtime::runtime()?;
                let got = match wait {
                    None => rt.block_on(rx),
                    // The timer must be created inside the runtime's context.
                    Some(d) => match rt.block_on(async { tokio::time::timeout(d, rx).await }) {
                        Ok(r) => r,
                        Err(_) => return Ok(None),
                    },
                };
                *state = FutureState::Done(got.unwrap_or(Err(ClientError::Closed)));
            }
            match &*state {
                FutureState::Done(r) => Ok(Some(r.clone())),
                FutureState::Waiting(_) => Ok(None),
            }
        })?;
        match outcome {
            None => Err(bk_error(
                "TimeoutException",
                "the bookie request did not complete within the wait".to_string(),
            )),
            Some(Err(e)) => Err(client_err(&e)),
            Some(Ok(Reply::Added)) => Ok(py.None()),
            Some(Ok(Reply::Entry(b))) => Ok(PyBytes::new(py, &b).into_any().unbind()),
            Some(Ok(Reply::Entries(v))) => {
                Ok(PyList::new(py, v.iter().map(|b| PyBytes::new(py, b)))?
                    .into_any()
                    .unbind())
            }
        }
    }

    fn done(&self) -> bool {
        let mut state = self.state.lock();
        if let FutureState::Waiting(rx) = &mut *state {
            match rx.try_recv() {
                Ok(r) => *state = FutureState::Done(r),
                Err(oneshot::error::TryRecvError::Empty) => return false,
                Err(oneshot::error::TryRecvError::Closed) => {
                    *state = FutureState::Done(Err(ClientError::Closed))
                }
            }
        }
        true
    }
}

fn flags_of(flags: i64) -> PyResult<u16> {
    u16::try_from(flags).map_err(|_| PyValueError::new_err(format!("flags {flags} out of range")))
}

/// Pipelined V2 connections to bookies; see `_core.pyi`.
#[pyclass(name = "BookieClient", module = "pybkx._core", frozen)]
struct PyBookieClient {
    inner: Arc<client::BookieClient>,
}

#[pymethods]
impl PyBookieClient {
    #[new]
    #[pyo3(signature = (
        *, add_entry_timeout_sec = 5.0, read_entry_timeout_sec = 5.0,
        connect_timeout_ms = 10_000, max_frame_size = 5 << 20
    ))]
    fn new(
        add_entry_timeout_sec: f64,
        read_entry_timeout_sec: f64,
        connect_timeout_ms: u64,
        max_frame_size: usize,
    ) -> PyResult<Self> {
        let secs = |name: &str, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(PyValueError::new_err(format!("{name} must be > 0")))
            }
        };
        Ok(PyBookieClient {
            inner: Arc::new(client::BookieClient::new(ClientConfig {
                add_timeout: secs("add_entry_timeout_sec", add_entry_timeout_sec)?,
                read_timeout: secs("read_entry_timeout_sec", read_entry_timeout_sec)?,
                connect_timeout: Duration::from_millis(connect_timeout_ms.max(1)),
                max_frame_size,
            })),
        })
    }

    #[pyo3(signature = (bookie, ledger_id, entry_id, master_key, entry, flags = 0))]
    fn add(
        &self,
        bookie: &str,
        ledger_id: i64,
        entry_id: i64,
        master_key: &[u8],
        entry: PyBackedBytes,
        flags: i64,
    ) -> PyResult<PyBookieFuture> {
        let rx = self.inner.add(
            bookie,
            ledger_id,
            entry_id,
            Bytes::copy_from_slice(master_key),
            Bytes::from_owner(entry),
            flags_of(flags)?,
        );
        Ok(PyBookieFuture::new(rx))
    }

    #[pyo3(signature = (bookie, ledger_id, entry_id, flags = 0, master_key = None))]
    fn read(
        &self,
        bookie: &str,
        ledger_id: i64,
        entry_id: i64,
        flags: i64,
        master_key: Option<&[u8]>,
    ) -> PyResult<PyBookieFuture> {
        let rx = self.inner.read(
            bookie,
            ledger_id,
            entry_id,
            flags_of(flags)?,
            master_key.map(Bytes::copy_from_slice),
        );
        Ok(PyBookieFuture::new(rx))
    }

    #[pyo3(signature = (
        bookie, ledger_id, start_entry_id, max_count, max_size, flags = 0, master_key = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn batch_read(
        &self,
        bookie: &str,
        ledger_id: i64,
        start_entry_id: i64,
        max_count: i32,
        max_size: i64,
        flags: i64,
        master_key: Option<&[u8]>,
    ) -> PyResult<PyBookieFuture> {
        let rx = self.inner.batch_read(
            bookie,
            ledger_id,
            start_entry_id,
            max_count,
            max_size,
            flags_of(flags)?,
            master_key.map(Bytes::copy_from_slice),
        );
        Ok(PyBookieFuture::new(rx))
    }

    fn close(&self) {
        self.inner.close();
    }
}

/// The exception a ledger operation's failure maps to.
fn ledger_err(e: &LedgerError) -> PyErr {
    match e {
        LedgerError::Bookie(c) => client_err(c),
        LedgerError::Fenced(_) => bk_error("LedgerFencedException", e.to_string()),
        LedgerError::WriterFailed(_) => bk_error("WriteException", e.to_string()),
        LedgerError::Closed => bk_error("LedgerClosedException", e.to_string()),
        LedgerError::ReadFailed { missing: true, .. } => {
            bk_error("NoSuchEntryException", e.to_string())
        }
        LedgerError::ReadFailed { .. } => bk_error("ReadException", e.to_string()),
        LedgerError::Digest { .. } => bk_error("DigestMatchException", e.to_string()),
        LedgerError::Raised { exception, message } => bk_error(exception, message.clone()),
    }
}

fn digest_manager(ledger_id: i64, password: &[u8], digest_type: &str) -> PyResult<DigestManager> {
    let kind = DigestType::from_name(digest_type).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown digest type {digest_type:?}; use CRC32, CRC32C, HMAC (MAC) or DUMMY"
        ))
    })?;
    Ok(DigestManager::new(ledger_id, password, kind))
}

/// The pending entry id of one append; see `_core.pyi`.
#[pyclass(name = "AppendFuture", module = "pybkx._core", frozen)]
struct PyAppendFuture {
    state: Mutex<Option<oneshot::Receiver<Result<i64, LedgerError>>>>,
    done: Mutex<Option<Result<i64, LedgerError>>>,
}

impl PyAppendFuture {
    fn new(rx: oneshot::Receiver<Result<i64, LedgerError>>) -> Self {
        PyAppendFuture {
            state: Mutex::new(Some(rx)),
            done: Mutex::new(None),
        }
    }

    fn wait(&self, wait: Option<Duration>) -> PyResult<Option<Result<i64, LedgerError>>> {
        let mut done = self.done.lock();
        if done.is_none() {
            let mut state = self.state.lock();
            if let Some(rx) = state.as_mut() {
                let rt = runtime::runtime()?;
                let got = match wait {
                    None => rt.block_on(rx),
                    Some(d) => match rt.block_on(async { tokio::time::timeout(d, rx).await }) {
                        Ok(r) => r,
                        Err(_) => return Ok(None),
                    },
                };
                *done = Some(got.unwrap_or(Err(LedgerError::Closed)));
                *state = None;
            }
        }
        Ok(done.clone())
    }
}

#[pymethods]
impl PyAppendFuture {
    #[pyo3(signature = (timeout = None))]
    fn result(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<i64> {
        let wait = timeout.map(|t| Duration::from_secs_f64(t.max(0.0)));
        match py.detach(|| self.wait(wait))? {
            None => Err(bk_error(
                "TimeoutException",
                "the append did not complete within the wait".to_string(),
            )),
            Some(Ok(id)) => Ok(id),
            Some(Err(e)) => Err(ledger_err(&e)),
        }
    }

    fn done(&self) -> bool {
        if self.done.lock().is_some() {
            return true;
        }
        let mut state = self.state.lock();
        if let Some(rx) = state.as_mut() {
            match rx.try_recv() {
                Ok(r) => {
                    *self.done.lock() = Some(r);
                    *state = None;
                    true
                }
                Err(oneshot::error::TryRecvError::Empty) => false,
                Err(oneshot::error::TryRecvError::Closed) => {
                    *self.done.lock() = Some(Err(LedgerError::Closed));
                    *state = None;
                    true
                }
            }
        } else {
            true
        }
    }
}

/// The writer of one open ledger (quorum writes, in-order completion); see `_core.pyi`.
#[pyclass(name = "LedgerWriter", module = "pybkx._core", frozen)]
struct PyLedgerWriter {
    inner: Arc<ledger::LedgerWriter>,
    throttle: usize,
}

#[pymethods]
impl PyLedgerWriter {
    #[new]
    #[pyo3(signature = (
        client, ledger_id, write_quorum_size, ack_quorum_size, password, digest_type, ensemble,
        *, next_entry_id = 0, length = 0, recovery = false, throttle = 5000
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
        next_entry_id: i64,
        length: i64,
        recovery: bool,
        throttle: usize,
    ) -> PyResult<Self> {
        let e = ensemble.len();
        if !(e >= write_quorum_size && write_quorum_size >= ack_quorum_size && ack_quorum_size >= 1)
        {
            return Err(bk_error(
                "IncorrectParameterException",
                format!(
                    "need ensemble >= write quorum >= ack quorum >= 1, got {e}/{write_quorum_size}/{ack_quorum_size}"
                ),
            ));
        }
        let digest = digest_manager(ledger_id, password, digest_type)?;
        let key = Bytes::copy_from_slice(&digest::master_key(password));
        let flags = if recovery {
            ledger::RECOVERY_ADD_FLAGS
        } else {
            protocol::FLAG_NONE
        };
        Ok(PyLedgerWriter {
            inner: ledger::LedgerWriter::new(
                client.inner.clone(),
                ledger_id,
                write_quorum_size,
                ack_quorum_size,
                key,
                digest,
                ensemble,
                next_entry_id,
                length,
                flags,
            ),
            throttle: throttle.max(1),
        })
    }

    #[pyo3(signature = (payload, entry_id = None))]
    fn append(&self, py: Python<'_>, payload: &[u8], entry_id: Option<i64>) -> PyAppendFuture {
        let inner = self.inner.clone();
        let throttle = self.throttle;
        py.detach(move || inner.wait_for_room(throttle));
        PyAppendFuture::new(self.inner.append_with_id(entry_id, payload))
    }

    fn append_many(&self, py: Python<'_>, payloads: Vec<PyBackedBytes>) -> PyResult<i64> {
        let inner = self.inner.clone();
        let throttle = self.throttle;
        let result = py.detach(move || -> PyResult<Result<i64, LedgerError>> {
            let rt = runtime::runtime()?;
            let mut receivers: std::collections::VecDeque<
                oneshot::Receiver<Result<i64, LedgerError>>,
            > = std::collections::VecDeque::new();
            let mut last = inner.positions().0;
            for p in &payloads {
                // Keep at most `throttle` appends outstanding, as BookKeeper's client does.
                if receivers.len() >= throttle {
                    if let Some(rx) = receivers.pop_front() {
                        match rt.block_on(rx).unwrap_or(Err(LedgerError::Closed)) {
                            Ok(id) => last = id,
                            Err(e) => return Ok(Err(e)),
                        }
                    }
                }
                receivers.push_back(inner.append(p));
            }
            Ok(rt.block_on(async move {
                for rx in receivers {
                    last = rx.await.unwrap_or(Err(LedgerError::Closed))?;
                }
                Ok(last)
            }))
        })?;
        result.map_err(|e| ledger_err(&e))
    }

    /// The next bookie failure needing an ensemble change: (index, bookie, error), or None.
    fn next_failure(
        &self,
        py: Python<'_>,
        timeout: f64,
    ) -> PyResult<Option<(usize, String, String)>> {
        let inner = self.inner.clone();
        let wait = Duration::from_secs_f64(timeout.max(0.0));
        let f = py.detach(move || -> PyResult<_> {
            Ok(runtime::runtime()?.block_on(async move { inner.next_failure(wait).await }))
        })?;
        Ok(f.map(|f| (f.index, f.bookie, f.error)))
    }

    fn change_ensemble(&self, first_entry_id: i64, ensemble: Vec<String>) -> PyResult<()> {
        self.inner
            .change_ensemble(first_entry_id, ensemble)
            .map_err(|e| ledger_err(&e))
    }

    /// Fail every pending and later append with the `pybkx.errors` class named `exception`.
    fn fail(&self, exception: String, message: String) {
        self.inner.fail(LedgerError::Raised { exception, message });
    }

    #[pyo3(signature = (timeout = None))]
    fn wait_drained(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let rx = self.inner.drained();
        let wait = timeout.map(|t| Duration::from_secs_f64(t.max(0.0)));
        py.detach(move || -> PyResult<bool> {
            let rt = runtime::runtime()?;
            Ok(match wait {
                None => rt.block_on(rx).is_ok(),
                Some(d) => rt
                    .block_on(async { tokio::time::timeout(d, rx).await })
                    .is_ok_and(|r| r.is_ok()),
            })
        })
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
    fn check(&self) -> PyResult<()> {
        match self.inner.fatal() {
            Some(e) => Err(ledger_err(&e)),
            None => Ok(()),
        }
    }
}

/// Reads and verifies entries `first..=last` of a ledger; see `_core.pyi`.
#[pyfunction]
#[pyo3(signature = (
    client, ledger_id, write_quorum_size, password, digest_type, segments, first, last, *,
    batch = true, max_batch_bytes = 5 << 20, avoid = Vec::new(), orders = Vec::new(), flags = 0,
    master_key = None, window = 64
))]
#[allow(clippy::too_many_arguments)]
fn read_entries<'py>(
    py: Python<'py>,
    client: PyRef<'_, PyBookieClient>,
    ledger_id: i64,
    write_quorum_size: usize,
    password: &[u8],
    digest_type: &str,
    segments: Vec<(i64, Vec<String>)>,
    first: i64,
    last: i64,
    batch: bool,
    max_batch_bytes: i64,
    avoid: Vec<String>,
    orders: Vec<Vec<Vec<usize>>>,
    flags: i64,
    master_key: Option<&[u8]>,
    window: usize,
) -> PyResult<(Bound<'py, PyList>, bool)> {
    if segments.is_empty() || segments[0].0 != 0 {
        return Err(PyValueError::new_err(
            "segments must start with one at entry 0",
        ));
    }
    for (seg, per_start) in segments.iter().zip(&orders) {
        if per_start.iter().flatten().any(|i| *i >= seg.1.len()) {
            return Err(PyValueError::new_err(
                "a read order names an index outside its ensemble",
            ));
        }
    }
    let plan = ledger::ReadPlan {
        ledger: ledger_id,
        qw: write_quorum_size,
        digest: digest_manager(ledger_id, password, digest_type)?,
        segments: segments
            .into_iter()
            .map(|(first_entry, ensemble)| ledger::Segment {
                first_entry,
                ensemble,
            })
            .collect(),
        batch,
        max_batch_bytes,
        avoid: avoid.into_iter().collect(),
        orders,
        flags: flags_of(flags)?,
        master_key: master_key.map(Bytes::copy_from_slice),
    };
    let client = client.inner.clone();
    let result = py.detach(move || -> PyResult<_> {
        let rt = runtime::runtime()?;
        Ok(rt
            .block_on(async move { ledger::read_range(&client, &plan, first, last, window).await }))
    })?;
    let (entries, batch_ok) = result.map_err(|e| ledger_err(&e))?;
    let list = PyList::empty(py);
    for e in entries {
        list.append((e.entry_id, e.lac, e.length, PyBytes::new(py, &e.payload)))?;
    }
    Ok((list, batch_ok))
}

/// Packages and verifies entries as BookKeeper's DigestManager does; see `_core.pyi`.
#[pyclass(name = "DigestManager", module = "pybkx._core", frozen)]
struct PyDigestManager {
    inner: DigestManager,
}

#[pymethods]
impl PyDigestManager {
    #[new]
    fn new(ledger_id: i64, password: &[u8], digest_type: &str) -> PyResult<Self> {
        Ok(PyDigestManager {
            inner: digest_manager(ledger_id, password, digest_type)?,
        })
    }

    fn package<'py>(
        &self,
        py: Python<'py>,
        entry_id: i64,
        last_add_confirmed: i64,
        length: i64,
        payload: &[u8],
    ) -> Bound<'py, PyBytes> {
        PyBytes::new(
            py,
            &self
                .inner
                .package(entry_id, last_add_confirmed, length, payload),
        )
    }

    #[pyo3(signature = (entry, entry_id = None))]
    fn verify<'py>(
        &self,
        py: Python<'py>,
        entry: &[u8],
        entry_id: Option<i64>,
    ) -> PyResult<(i64, i64, i64, Bound<'py, PyBytes>)> {
        let v = self
            .inner
            .verify(&Bytes::copy_from_slice(entry), entry_id)
            .map_err(|e| bk_error("DigestMatchException", e.to_string()))?;
        Ok((
            v.entry_id,
            v.last_add_confirmed,
            v.length,
            PyBytes::new(py, &v.payload),
        ))
    }
}

/// Drives one bookie with a window of requests in flight (benchmarks); see `_core.pyi`.
#[pyfunction]
#[pyo3(signature = (bookie, workload, *, in_flight = 64, ledger_id = 1, ledgers = 1,
                    count = 100_000, payload_size = 100, batch = None, connections = 1,
                    rate = None))]
#[allow(clippy::too_many_arguments)]
fn run_load<'py>(
    py: Python<'py>,
    bookie: String,
    workload: &str,
    in_flight: usize,
    ledger_id: i64,
    ledgers: u32,
    count: u64,
    payload_size: usize,
    batch: Option<u32>,
    connections: usize,
    rate: Option<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    let work = match workload {
        "add" => loadgen::Workload::Adds {
            first_ledger: ledger_id,
            ledgers,
            count,
            payload: payload_size,
        },
        "read" => loadgen::Workload::Reads {
            ledger: ledger_id,
            count,
            batch,
        },
        other => {
            return Err(PyValueError::new_err(format!(
                "workload must be 'add' or 'read', not {other:?}"
            )))
        }
    };
    let report = py
        .detach(|| {
            let opts = loadgen::LoadOptions {
                in_flight,
                connections,
                rate_per_s: rate,
            };
            loadgen::run_with(&bookie, work, opts)
        })
        .map_err(|e| client_err(&e))?;
    let d = PyDict::new(py);
    d.set_item("requests", report.requests)?;
    d.set_item("entries", report.entries)?;
    d.set_item("bytes", report.bytes)?;
    d.set_item("errors", report.errors)?;
    d.set_item("seconds", report.elapsed.as_secs_f64())?;
    for (name, q) in [("p50_us", 0.5), ("p99_us", 0.99), ("p999_us", 0.999)] {
        d.set_item(name, report.percentile_us(q))?;
    }
    Ok(d)
}

/// Times `iterations` runs of one micro-benchmark kernel in Rust (GIL released); seconds.
#[pyfunction]
fn micro_kernel(
    py: Python<'_>,
    kernel: &str,
    payload_size: usize,
    iterations: u64,
) -> PyResult<f64> {
    let kernel = kernel.to_string();
    py.detach(|| microbench::run(&kernel, payload_size, iterations))
        .map(|d| d.as_secs_f64())
        .map_err(PyValueError::new_err)
}

/// The micro-benchmark kernels: name -> what one iteration does.
#[pyfunction]
fn micro_kernels() -> Vec<(&'static str, &'static str)> {
    microbench::KERNELS.to_vec()
}

/// BookKeeper's ledger master key: SHA-1("ledger" + password).
#[pyfunction]
fn master_key<'py>(py: Python<'py>, password: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &digest::master_key(password))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Rust-side log records (closed connections, replay warnings, I/O failures) go to stderr,
    // filtered by PYBKX_LOG (default "warn"). Not bridged to Python logging: a bridge would take
    // the GIL from journal threads, which can deadlock with a Python thread waiting on them.
    let _ = env_logger::Builder::from_env(env_logger::Env::new().filter_or("PYBKX_LOG", "warn"))
        .try_init();
    m.add_class::<PyLedgerStorage>()?;
    m.add_class::<PyBookieServer>()?;
    m.add_class::<PyBookieClient>()?;
    m.add_class::<PyBookieFuture>()?;
    m.add_class::<PyDigestManager>()?;
    m.add_class::<PyLedgerWriter>()?;
    m.add_class::<PyAppendFuture>()?;
    m.add_function(wrap_pyfunction!(read_entries, m)?)?;
    m.add_function(wrap_pyfunction!(scan_journal, m)?)?;
    m.add_function(wrap_pyfunction!(master_key, m)?)?;
    m.add_function(wrap_pyfunction!(run_load, m)?)?;
    m.add_function(wrap_pyfunction!(micro_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(micro_kernels, m)?)?;
    m.add("FLAG_NONE", protocol::FLAG_NONE)?;
    m.add("FLAG_DO_FENCING", protocol::FLAG_DO_FENCING)?;
    m.add("FLAG_RECOVERY_ADD", protocol::FLAG_RECOVERY_ADD)?;
    m.add("FLAG_HIGH_PRIORITY", protocol::FLAG_HIGH_PRIORITY)?;
    Ok(())
}
