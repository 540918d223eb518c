//! `LedgerEntry`: one entry read from a ledger, its payload lent to Python without a copy. It
//! never reads or verifies: readers hand it verified entries.

use bytes::Bytes;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyBytes;

use pybkx_core::ledger::ReadEntry;

use crate::buffer::fill_view;
use crate::digest::PyDigestManager;

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
    pub(crate) fn from_read(ledger_id: i64, e: &ReadEntry) -> Self {
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
