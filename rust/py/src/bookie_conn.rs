//! `BookieClient`: pipelined connections to bookies, each request a `Future`. Used by the
//! ledger client (through `LedgerWriter` and `ReadPlan`) and directly by recovery and tools.

use std::sync::Arc;

use bytes::Bytes;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use pybkx_core::bookie_conn::{BookieClient, Outgoing, Reply};
use pybkx_core::tls::{ClientTls, ClientTlsSettings};

use crate::config::{client_config, read_policy};
use crate::future::{Future, ToPy};
use crate::util::payload;

/// What `BookieClient.long_poll_lac` gives: see `_core.pyi`.
#[pyclass(name = "LongPollResult", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyLongPollResult {
    lac: i64,
    next_entry: Option<Py<PyBytes>>,
}

/// What `BookieClient.read_lac` gives: see `_core.pyi`.
#[pyclass(name = "ReadLacResult", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyReadLacResult {
    lac_body: Option<Py<PyBytes>>,
    last_entry: Option<Py<PyBytes>>,
}

/// What `BookieClient.bookie_health` gives: see `_core.pyi`.
#[pyclass(name = "BookieHealth", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyBookieHealth {
    pending_requests: u64,
    ms_since_failure: Option<u64>,
    ms_since_slow: Option<u64>,
    failures: u64,
    slow_answers: u64,
}

/// What `BookieClient.get_bookie_info` gives: see `_core.pyi`.
#[pyclass(name = "BookieInfo", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyBookieInfo {
    total_disk_capacity: i64,
    free_disk_space: i64,
}

impl ToPy for Reply {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let bytes = |b: &Option<Bytes>| b.as_ref().map(|b| PyBytes::new(py, b).unbind());
        Ok(match self {
            Reply::Added | Reply::Done => py.None(),
            Reply::Entry(b) => PyBytes::new(py, b).into_any().unbind(),
            Reply::Entries(v) | Reply::StridedEntries(v) => {
                PyList::new(py, v.iter().map(|b| PyBytes::new(py, b)))?
                    .into_any()
                    .unbind()
            }
            Reply::LastAddConfirmed { lac, next } => {
                let result = PyLongPollResult {
                    lac: *lac,
                    next_entry: bytes(next),
                };
                Py::new(py, result)?.into_any()
            }
            Reply::Lac {
                lac_body,
                last_entry,
            } => {
                let result = PyReadLacResult {
                    lac_body: bytes(lac_body),
                    last_entry: bytes(last_entry),
                };
                Py::new(py, result)?.into_any()
            }
            Reply::BookieInfo {
                total_disk_capacity,
                free_disk_space,
            } => {
                let info = PyBookieInfo {
                    total_disk_capacity: *total_disk_capacity,
                    free_disk_space: *free_disk_space,
                };
                Py::new(py, info)?.into_any()
            }
            Reply::EntryRuns(runs) => PyList::new(py, runs.iter().copied())?.into_any().unbind(),
        })
    }
}

pub(crate) fn flags_of(flags: i64) -> PyResult<u16> {
    u16::try_from(flags).map_err(|_| PyValueError::new_err(format!("flags {flags} out of range")))
}

/// Pipelined V2 connections to bookies; see `_core.pyi`.
#[pyclass(name = "BookieClient", module = "pybkx._core", frozen)]
pub(crate) struct PyBookieClient {
    pub(crate) inner: Arc<BookieClient>,
}

impl PyBookieClient {
    /// Sends `request` (waiting for room with the GIL released); its future is returned.
    fn submit(&self, py: Python<'_>, request: Outgoing) -> PyResult<Py<Future>> {
        let (fut, completer) = Future::pending(py)?;
        let client = self.inner.clone();
        py.detach(move || client.send(request, completer.into_done()));
        Ok(fut)
    }
}

impl PyBookieClient {
    /// Refuses a V3-only request on a V2 client: a bookie reads a connection as V2 for good
    /// after its first V2 frame (and as V3 after a V3 one), so the protocols never mix.
    fn require_v3(&self, op: &str) -> PyResult<()> {
        if self.inner.config().use_v2_wire_protocol {
            return Err(crate::errors::IncorrectParameterException::new_err(
                format!("{op} is a V3 request and this client speaks V2 (useV2WireProtocol=true)"),
            ));
        }
        Ok(())
    }
}

#[pymethods]
impl PyBookieClient {
    /// Connections configured by `config` (a `pybkx.config.ClientConfig`), over TLS when
    /// given `tls` (a `pybkx.config.tls.ClientTlsMaterial`), authenticated by SASL
    /// DIGEST-MD5 when given `sasl` (a `pybkx.config.jaas.ClientSasl`). Raises ValueError for
    /// settings or TLS material that cannot be used, and when `config` asks for TLS or SASL
    /// but no material or credentials are given (never plaintext or unauthenticated where
    /// security was asked for).
    #[new]
    #[pyo3(signature = (config, tls = None, sasl = None))]
    fn new(
        config: &Bound<'_, PyAny>,
        tls: Option<&Bound<'_, PyAny>>,
        sasl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let asks_for_tls = !config.getattr("tls_provider_factory_class")?.is_none();
        if asks_for_tls && tls.is_none() {
            return Err(PyValueError::new_err(
                "the configuration sets tlsProviderFactoryClass but no TLS material was given: \
                 pass pybkx.config.tls.client_tls_material(config)",
            ));
        }
        let asks_for_sasl = !config
            .getattr("client_auth_provider_factory_class")?
            .is_none();
        if asks_for_sasl && sasl.is_none() {
            return Err(PyValueError::new_err(
                "the configuration sets clientAuthProviderFactoryClass but no SASL credentials \
                 were given: pass pybkx.config.security.client_sasl_credentials(config)",
            ));
        }
        let mut cfg = client_config(config)?;
        if let Some(sasl) = sasl {
            cfg.sasl = Some(pybkx_core::sasl::Credentials {
                username: sasl.getattr("username")?.extract()?,
                password: sasl.getattr("password")?.extract()?,
            });
        }
        if let Some(material) = tls {
            let client_tls = ClientTls::new(&client_tls_settings(material)?)
                .map_err(|e| PyValueError::new_err(format!("TLS: {e}")))?;
            cfg.tls = Some(Arc::new(client_tls));
        }
        let inner = BookieClient::new(cfg);
        inner
            .set_read_policy(read_policy(config)?)
            .map_err(PyValueError::new_err)?;
        Ok(PyBookieClient {
            inner: Arc::new(inner),
        })
    }

    /// The client's figures of one bookie now: see `_core.pyi`.
    fn bookie_health(&self, bookie: &str) -> PyBookieHealth {
        let f = self.inner.bookie_health(bookie);
        let ms = |d: Option<std::time::Duration>| d.map(|d| d.as_millis() as u64);
        PyBookieHealth {
            pending_requests: f.pending,
            ms_since_failure: ms(f.since_failure),
            ms_since_slow: ms(f.since_slow),
            failures: f.failures,
            slow_answers: f.slow_answers,
        }
    }

    #[pyo3(signature = (bookie, ledger_id, entry_id, master_key, entry, flags = 0))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        py: Python<'_>,
        bookie: &str,
        ledger_id: i64,
        entry_id: i64,
        master_key: &[u8],
        entry: &Bound<'_, PyAny>,
        flags: i64,
    ) -> PyResult<Py<Future>> {
        let key = Bytes::copy_from_slice(master_key);
        let request = self.inner.add_request(
            bookie,
            ledger_id,
            entry_id,
            key,
            payload(entry)?,
            flags_of(flags)?,
        );
        self.submit(py, request)
    }

    #[pyo3(signature = (bookie, ledger_id, entry_id, flags = 0, master_key = None))]
    fn read(
        &self,
        py: Python<'_>,
        bookie: &str,
        ledger_id: i64,
        entry_id: i64,
        flags: i64,
        master_key: Option<&[u8]>,
    ) -> PyResult<Py<Future>> {
        let key = master_key.map(Bytes::copy_from_slice);
        let request = self
            .inner
            .read_request(bookie, ledger_id, entry_id, flags_of(flags)?, key);
        self.submit(py, request)
    }

    #[pyo3(signature = (
        bookie, ledger_id, start_entry_id, max_count, max_size, flags = 0, master_key = None,
        *, stride = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn batch_read(
        &self,
        py: Python<'_>,
        bookie: &str,
        ledger_id: i64,
        start_entry_id: i64,
        max_count: i32,
        max_size: i64,
        flags: i64,
        master_key: Option<&[u8]>,
        stride: Option<i32>,
    ) -> PyResult<Py<Future>> {
        if !self.inner.config().use_v2_wire_protocol {
            // A bookie (Java's, and pybkx's alike) reads a connection as V2 for good after its
            // first V2 frame: a V2 batch frame would break this V3 connection, so it is refused.
            return Err(crate::errors::IncorrectParameterException::new_err(
                "BATCH_READ_ENTRY is a V2 request and this client speaks V3 \
                 (useV2WireProtocol=false): read entries one at a time",
            ));
        }
        let key = master_key.map(Bytes::copy_from_slice);
        let request = self.inner.batch_read_request(
            bookie,
            ledger_id,
            start_entry_id,
            max_count,
            max_size,
            flags_of(flags)?,
            key,
            stride,
        );
        self.submit(py, request)
    }

    /// Long-poll READ (V3): see `_core.pyi`.
    fn long_poll_lac(
        &self,
        py: Python<'_>,
        bookie: &str,
        ledger_id: i64,
        previous_lac: i64,
        timeout_ms: u64,
    ) -> PyResult<Py<Future>> {
        if self.inner.config().use_v2_wire_protocol {
            return Err(crate::errors::IncorrectParameterException::new_err(
                "long-poll LAC reads are V3 requests and this client speaks V2 \
                 (useV2WireProtocol=true): poll read_last_add_confirmed instead",
            ));
        }
        let wait = std::time::Duration::from_millis(timeout_ms);
        let request = self
            .inner
            .long_poll_request(bookie, ledger_id, previous_lac, wait);
        self.submit(py, request)
    }

    /// V3 READ_LAC: see `_core.pyi`.
    fn read_lac(&self, py: Python<'_>, bookie: &str, ledger_id: i64) -> PyResult<Py<Future>> {
        self.require_v3("READ_LAC")?;
        let request = self.inner.read_lac_request(bookie, ledger_id);
        self.submit(py, request)
    }

    /// V3 WRITE_LAC: see `_core.pyi`.
    fn write_lac(
        &self,
        py: Python<'_>,
        bookie: &str,
        ledger_id: i64,
        lac: i64,
        master_key: &[u8],
        body: &Bound<'_, PyAny>,
    ) -> PyResult<Py<Future>> {
        self.require_v3("WRITE_LAC")?;
        let key = Bytes::copy_from_slice(master_key);
        let request = self
            .inner
            .write_lac_request(bookie, ledger_id, lac, key, payload(body)?);
        self.submit(py, request)
    }

    /// V3 GET_BOOKIE_INFO: see `_core.pyi`.
    fn get_bookie_info(&self, py: Python<'_>, bookie: &str) -> PyResult<Py<Future>> {
        self.require_v3("GET_BOOKIE_INFO")?;
        let request = self.inner.bookie_info_request(bookie);
        self.submit(py, request)
    }

    /// V3 FORCE_LEDGER: see `_core.pyi`.
    fn force_ledger(&self, py: Python<'_>, bookie: &str, ledger_id: i64) -> PyResult<Py<Future>> {
        self.require_v3("FORCE_LEDGER")?;
        let request = self.inner.force_ledger_request(bookie, ledger_id);
        self.submit(py, request)
    }

    /// V3 GET_LIST_OF_ENTRIES_OF_LEDGER: see `_core.pyi`.
    fn get_list_of_entries(
        &self,
        py: Python<'_>,
        bookie: &str,
        ledger_id: i64,
    ) -> PyResult<Py<Future>> {
        self.require_v3("GET_LIST_OF_ENTRIES_OF_LEDGER")?;
        let request = self.inner.list_entries_request(bookie, ledger_id);
        self.submit(py, request)
    }

    /// Per-bookie error counts toward quarantine, taken and reset: see `_core.pyi`.
    fn take_error_counts(&self) -> std::collections::HashMap<String, u64> {
        self.inner.take_error_counts().into_iter().collect()
    }

    /// Every failed request to `bookie` so far: see `_core.pyi`.
    fn failure_count(&self, bookie: &str) -> u64 {
        self.inner.failure_count(bookie)
    }

    fn close(&self) {
        self.inner.close();
    }
}

/// The attributes of a `pybkx.config.tls.ClientTlsMaterial`.
#[derive(FromPyObject)]
struct ClientTlsAttrs {
    #[pyo3(attribute("roots"))]
    roots: Vec<Vec<u8>>,
    #[pyo3(attribute("identity"))]
    identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
    #[pyo3(attribute("verify_hostname"))]
    verify_hostname: bool,
    #[pyo3(attribute("protocols"))]
    protocols: Vec<String>,
    #[pyo3(attribute("cipher_suites"))]
    cipher_suites: Vec<String>,
}

pub(crate) fn client_tls_settings(material: &Bound<'_, PyAny>) -> PyResult<ClientTlsSettings> {
    let a: ClientTlsAttrs = material.extract()?;
    Ok(ClientTlsSettings {
        roots: a.roots,
        identity: a.identity,
        verify_hostname: a.verify_hostname,
        protocols: a.protocols,
        cipher_suites: a.cipher_suites,
    })
}
