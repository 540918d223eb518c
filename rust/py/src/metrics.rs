//! Metrics for Python: the core's read-outs as plain tuples (the exporter in `pybkx.admin` and
//! the client's collector format them), the process-wide on/off switch, and the client's
//! metrics. Read-outs only: nothing here records.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use pybkx_core::metrics::{self, Export, HistogramSnapshot, Kind, Metric, Unit, Value};

/// Switches histogram and timing collection on or off for this process (BookKeeper's
/// `enableStatistics`).
#[pyfunction]
pub(crate) fn set_metrics_enabled(enabled: bool) {
    metrics::set_enabled(enabled);
}

#[pyfunction]
pub(crate) fn metrics_enabled() -> bool {
    metrics::enabled()
}

/// The metrics of every client of this process (`bookkeeper_client_*`).
#[pyfunction]
pub(crate) fn client_metrics(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    metrics_list(py, pybkx_core::ledger::client_stats().metrics())
}

/// Counters and gauges by name (labelled ones added up) as a dict: the flat view.
pub(crate) fn flat_dict<'py>(py: Python<'py>, metrics: &[Metric]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in metrics::flat(metrics) {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Metrics as `(name, kind, unit, labels, value)` tuples; see `_core.pyi`.
pub(crate) fn metrics_list<'py>(
    py: Python<'py>,
    metrics: Vec<Metric>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for m in metrics {
        let kind = match m.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
            Kind::Histogram => "histogram",
        };
        let unit = match m.unit {
            Unit::Micros => "us",
            Unit::Bytes => "bytes",
            Unit::Count => "count",
        };
        let labels = PyDict::new(py);
        for (k, v) in &m.labels {
            labels.set_item(*k, v)?;
        }
        let value: Bound<'py, PyAny> = match &m.value {
            Value::Int(v) => v.into_pyobject(py)?.into_any(),
            Value::Distribution(s) => snapshot_tuple(py, s)?.into_any(),
            Value::Outcomes { ok, failed } => {
                let d = PyDict::new(py);
                d.set_item("true", snapshot_tuple(py, ok)?)?;
                d.set_item("false", snapshot_tuple(py, failed)?)?;
                d.into_any()
            }
        };
        out.append((m.name, kind, unit, labels, value))?;
    }
    Ok(out)
}

/// `([(upper bound or None for +Inf, count), ...], count, sum)`.
fn snapshot_tuple<'py>(py: Python<'py>, s: &HistogramSnapshot) -> PyResult<Bound<'py, PyTuple>> {
    let buckets = PyList::empty(py);
    for (upper, count) in &s.buckets {
        let upper = (*upper != u64::MAX).then_some(*upper);
        buckets.append((upper, *count))?;
    }
    PyTuple::new(
        py,
        [
            buckets.into_any(),
            s.count.into_pyobject(py)?.into_any(),
            s.sum.into_pyobject(py)?.into_any(),
        ],
    )
}
