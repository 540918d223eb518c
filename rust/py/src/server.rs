//! `BookieServer`: the bookie's network server over a `LedgerStorage`, for the bookie process.

use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use pybkx_core::server::{BookieServer, StartError};
use pybkx_core::tls::{ServerTls, ServerTlsSettings};

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
    /// `pybkx.config.ServerConfig`) and, given `tls` (a `pybkx.config.tls.ServerTlsMaterial`),
    /// answers START_TLS; given `authorized_roles`, serves a connection only once its client
    /// certificate's first role is one of them; given `sasl` (a
    /// `pybkx.config.jaas.BookieSasl`), only once its SASL DIGEST-MD5 exchange succeeded.
    /// Raises OSError if it cannot listen, ValueError for limits that cannot work, TLS
    /// material that cannot be used or an allowed-ids pattern that does not compile.
    #[new]
    #[pyo3(signature = (storage, config, host, port, tls = None, authorized_roles = None, sasl = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        storage: PyRef<'_, PyLedgerStorage>,
        config: &Bound<'_, PyAny>,
        host: String,
        port: u16,
        tls: Option<&Bound<'_, PyAny>>,
        authorized_roles: Option<Vec<String>>,
        sasl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut cfg = server_config(config, host, port)?;
        cfg.authorized_roles = authorized_roles;
        if let Some(sasl) = sasl {
            let users: std::collections::HashMap<String, String> =
                sasl.getattr("users")?.extract()?;
            let allowed: String = sasl.getattr("allowed_ids")?.extract()?;
            let policy = pybkx_core::sasl::ServerPolicy::new(users, &allowed)
                .map_err(PyValueError::new_err)?;
            cfg.sasl = Some(std::sync::Arc::new(policy));
        }
        if let Some(material) = tls {
            let settings = tls_settings(material)?;
            let server_tls = ServerTls::new(&settings)
                .map_err(|e| PyValueError::new_err(format!("TLS: {e}")))?;
            cfg.tls = Some(std::sync::Arc::new(server_tls));
        }
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

    /// Replaces the TLS material for handshakes from now on. Raises ValueError if it cannot be
    /// used (the current material stays) or if the server was started without TLS.
    fn reload_tls(&self, tls: &Bound<'_, PyAny>) -> PyResult<()> {
        let settings = tls_settings(tls)?;
        let current = self
            .inner
            .tls()
            .ok_or_else(|| PyValueError::new_err("the server was started without TLS"))?;
        current
            .reload(&settings)
            .map_err(|e| PyValueError::new_err(format!("TLS: {e}")))
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

/// The attributes of a `pybkx.config.tls.ServerTlsMaterial`.
#[derive(FromPyObject)]
struct TlsAttrs {
    #[pyo3(attribute("chain"))]
    chain: Vec<Vec<u8>>,
    #[pyo3(attribute("key"))]
    key: Vec<u8>,
    #[pyo3(attribute("client_roots"))]
    client_roots: Option<Vec<Vec<u8>>>,
    #[pyo3(attribute("protocols"))]
    protocols: Vec<String>,
    #[pyo3(attribute("cipher_suites"))]
    cipher_suites: Vec<String>,
}

fn tls_settings(material: &Bound<'_, PyAny>) -> PyResult<ServerTlsSettings> {
    let a: TlsAttrs = material.extract()?;
    Ok(ServerTlsSettings {
        chain: a.chain,
        key_pkcs8: a.key,
        client_roots: a.client_roots,
        protocols: a.protocols,
        cipher_suites: a.cipher_suites,
    })
}
