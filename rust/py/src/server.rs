//! `BookieServer`: the bookie's network server over a `LedgerStorage`, for the bookie process.

use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use pybkx_core::server::{BookieServer, StartError};

use crate::config::server_config;
use crate::storage::PyLedgerStorage;

/// The bookie server; see `_core.pyi`.
#[pyclass(name = "BookieServer", module = "pybkx._core", frozen)]
pub(crate) struct PyBookieServer {
    inner: BookieServer,
}

#[pymethods]
impl PyBookieServer {
    /// Listens on `host:port` (0: any free port) with the limits of `config` (a
    /// `pybkx.config.ServerConfig`). Raises OSError if it cannot listen, ValueError for limits
    /// that cannot work.
    #[new]
    fn new(
        py: Python<'_>,
        storage: PyRef<'_, PyLedgerStorage>,
        config: &Bound<'_, PyAny>,
        host: String,
        port: u16,
    ) -> PyResult<Self> {
        let cfg = server_config(config, host, port)?;
        let storage = storage.inner.clone();
        let inner = py
            .detach(|| BookieServer::start(storage, cfg))
            .map_err(|e| match e {
                StartError::Config(e) => PyValueError::new_err(e.to_string()),
                StartError::Io(e) => {
                    PyOSError::new_err((e.raw_os_error().unwrap_or(0), e.to_string()))
                }
            })?;
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

    fn set_high_priority_writes(&self, available: bool) {
        self.inner.set_high_priority_writes(available);
    }

    fn high_priority_writes(&self) -> bool {
        self.inner.high_priority_writes()
    }

    #[pyo3(signature = (drain_timeout_ms = 10_000))]
    fn stop(&self, py: Python<'_>, drain_timeout_ms: u64) {
        py.detach(|| self.inner.stop(Duration::from_millis(drain_timeout_ms)));
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::metrics::flat_dict(py, &self.inner.metrics())
    }

    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        crate::metrics::metrics_list(py, self.inner.metrics())
    }
}
