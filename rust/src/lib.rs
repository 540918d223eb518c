//! PyO3 bindings only: thin wrappers that convert arguments, release the GIL around blocking
//! work and map errors to `pybkx.errors`. No storage logic lives here.

pub mod config;
pub mod entrylog;
pub mod error;
pub mod index;
pub mod journal;
pub mod record;
pub mod storage;

use std::path::PathBuf;

use bytes::Bytes;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

use crate::config::{ConfValue, StorageConfig};
use crate::error::StorageError;
use crate::journal::Completion;
use crate::storage::{RangeLimits, LAST_ENTRY};

/// The `pybkx.errors` class BookKeeper users expect for each storage error.
fn storage_err(e: StorageError) -> PyErr {
    let name = match &e {
        StorageError::NoLedger(_) => "NoSuchLedgerExistsException",
        StorageError::NoEntry { .. } => "NoSuchEntryException",
        StorageError::Fenced(_) => "LedgerFencedException",
        StorageError::Unauthorized(_) => "UnauthorizedAccessException",
        StorageError::InvalidArgument(m) => return PyValueError::new_err(m.clone()),
        StorageError::Io { .. } | StorageError::Corruption(_) => "BookieIOException",
        StorageError::Locked(_) | StorageError::Closed => "BookieException",
    };
    Python::attach(|py| {
        let class = py
            .import("pybkx.errors")
            .and_then(|m| m.getattr(name))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match class {
            Ok(cls) => PyErr::from_type(cls, e.to_string()),
            Err(_) => PyRuntimeError::new_err(e.to_string()),
        }
    })
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
    inner: storage::LedgerStorage,
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
        Ok(PyLedgerStorage { inner })
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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLedgerStorage>()?;
    m.add_function(wrap_pyfunction!(scan_journal, m)?)?;
    Ok(())
}
