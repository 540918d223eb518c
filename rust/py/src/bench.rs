//! Benchmark entry points (feature `bench`): the load generator and micro-benchmark kernels.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use pybkx_core::bench::{loadgen, microbench, storage_scale};

use crate::storage::PyLedgerStorage;

use crate::errors::BkResult;

/// Drives one bookie with a window of requests in flight (benchmarks); see `_core.pyi`.
#[pyfunction]
#[pyo3(signature = (bookie, workload, *, in_flight = 64, ledger_id = 1, ledgers = 1,
                    count = 100_000, payload_size = 100, batch = None, connections = 1,
                    rate = None, v3 = false, tls = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_load<'py>(
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
    v3: bool,
    tls: Option<&Bound<'py, PyAny>>,
) -> BkResult<Bound<'py, PyDict>> {
    let tls = match tls {
        Some(material) => Some(std::sync::Arc::new(
            pybkx_core::tls::ClientTls::new(&crate::bookie_conn::client_tls_settings(material)?)
                .map_err(|e| PyValueError::new_err(format!("TLS: {e}")))?,
        )),
        None => None,
    };
    let work = loadgen::parse_workload(workload, ledger_id, ledgers, count, payload_size, batch)
        .map_err(PyValueError::new_err)?;
    let opts = loadgen::LoadOptions {
        in_flight,
        connections,
        rate_per_s: rate,
        v3,
        tls,
    };
    let report = py.detach(|| loadgen::run_with(&bookie, work, opts))?;
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
pub(crate) fn micro_kernel(
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
pub(crate) fn micro_kernels() -> HashMap<&'static str, &'static str> {
    microbench::KERNELS.iter().copied().collect()
}

/// Fills a storage with `entries` entries interleaved over `ledgers` ledgers (from Rust, GIL
/// released); seconds until all are durable. Raises ValueError on a failed add.
#[pyfunction]
pub(crate) fn fill_storage(
    py: Python<'_>,
    storage: &PyLedgerStorage,
    ledgers: u64,
    entries: u64,
    payload_size: usize,
) -> PyResult<f64> {
    let s = storage.inner.clone();
    py.detach(|| storage_scale::fill(&s, ledgers, entries, payload_size))
        .map(|d| d.as_secs_f64())
        .map_err(PyValueError::new_err)
}

/// What `index_lookups` gives: see `_core.pyi`.
#[pyclass(name = "IndexLookups", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyIndexLookups {
    seconds: f64,
    found: u64,
}

/// Times `count` index lookups of random entries `0..span` of ledgers `1..=ledgers`.
#[pyfunction]
pub(crate) fn index_lookups(
    py: Python<'_>,
    storage: &PyLedgerStorage,
    ledgers: u64,
    span: u64,
    count: u64,
) -> PyResult<PyIndexLookups> {
    let s = storage.inner.clone();
    py.detach(|| storage_scale::lookups(&s, ledgers, span, count))
        .map(|(d, found)| PyIndexLookups {
            seconds: d.as_secs_f64(),
            found,
        })
        .map_err(PyValueError::new_err)
}
