//! `DigestManager` and `master_key`: BookKeeper's entry packaging and keys, for tools and tests.

use bytes::Bytes;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use pybkx_core::digest::{self, DigestManager, DigestType};

use crate::errors::BkResult;

pub(crate) fn digest_manager(
    ledger_id: i64,
    password: &[u8],
    digest_type: &str,
) -> PyResult<DigestManager> {
    let kind = DigestType::from_name(digest_type).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown digest type {digest_type:?}; use CRC32, CRC32C, HMAC (MAC) or DUMMY"
        ))
    })?;
    Ok(DigestManager::new(ledger_id, password, kind))
}

/// Packages and verifies entries as BookKeeper's DigestManager does; see `_core.pyi`.
#[pyclass(name = "DigestManager", module = "pybkx._core", frozen)]
pub(crate) struct PyDigestManager {
    inner: DigestManager,
}

impl PyDigestManager {
    pub(crate) fn inner(&self) -> &DigestManager {
        &self.inner
    }
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
    ) -> PyResult<Bound<'py, PyBytes>> {
        PyBytes::new_with(py, self.inner.packaged_len(payload.len()), |out| {
            self.inner
                .package_to_slice(entry_id, last_add_confirmed, length, payload, out);
            Ok(())
        })
    }

    #[pyo3(signature = (entry, entry_id = None))]
    fn verify(
        &self,
        py: Python<'_>,
        entry: &[u8],
        entry_id: Option<i64>,
    ) -> BkResult<PyVerifiedEntry> {
        verify(py, &self.inner, entry, entry_id)
    }

    /// A WRITE_LAC body for `lac`: see `_core.pyi`.
    fn package_lac<'py>(&self, py: Python<'py>, lac: i64) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.package_lac(lac))
    }

    /// The LAC of an explicit-LAC body, its digest checked: see `_core.pyi`.
    fn verify_lac(&self, body: &[u8]) -> BkResult<i64> {
        Ok(self.inner.verify_lac(body)?)
    }
}

/// What `verify` found in a stored entry: see `_core.pyi`.
#[pyclass(name = "VerifiedEntry", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyVerifiedEntry {
    entry_id: i64,
    last_add_confirmed: i64,
    ledger_length: i64,
    payload: Py<PyBytes>,
}

/// Checks a stored entry's digest (and its id, if given).
pub(crate) fn verify(
    py: Python<'_>,
    digest: &DigestManager,
    entry: &[u8],
    entry_id: Option<i64>,
) -> BkResult<PyVerifiedEntry> {
    let v = digest.verify(&Bytes::copy_from_slice(entry), entry_id)?;
    Ok(PyVerifiedEntry {
        entry_id: v.entry_id,
        last_add_confirmed: v.last_add_confirmed,
        ledger_length: v.length,
        payload: PyBytes::new(py, &v.payload).unbind(),
    })
}

/// BookKeeper's ledger master key: SHA-1("ledger" + password).
#[pyfunction]
pub(crate) fn master_key<'py>(py: Python<'py>, password: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &digest::master_key(password))
}
