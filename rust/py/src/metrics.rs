//! Metrics for Python: the core's read-outs as `Metric`s and `HistogramSnapshot`s (the
//! exporter in `pybkx.admin` and the client's collector format them), the process-wide on/off
//! switch, and the client's metrics. Read-outs only: nothing here records.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

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

/// One metric read out: see `_core.pyi`. Python makes its own too (a bookie's gauges).
#[pyclass(name = "Metric", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyMetric {
    name: String,
    kind: String,
    unit: String,
    labels: Py<PyDict>,
    value: Py<PyAny>,
}

#[pymethods]
impl PyMetric {
    #[new]
    fn new(name: String, kind: String, unit: String, labels: Py<PyDict>, value: Py<PyAny>) -> Self {
        PyMetric {
            name,
            kind,
            unit,
            labels,
            value,
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Metric(name={:?}, kind={:?}, unit={:?}, labels={}, value={})",
            self.name,
            self.kind,
            self.unit,
            self.labels.bind(py).repr()?,
            self.value.bind(py).repr()?
        ))
    }
}

/// A histogram's buckets, count and sum, read out at once: see `_core.pyi`.
#[pyclass(name = "HistogramSnapshot", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyHistogramSnapshot {
    buckets: Py<PyList>,
    count: u64,
    sum: u64,
}

#[pymethods]
impl PyHistogramSnapshot {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "HistogramSnapshot(buckets={}, count={}, sum={})",
            self.buckets.bind(py).repr()?,
            self.count,
            self.sum
        ))
    }
}

/// The core's metrics as `Metric`s.
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
            Value::Distribution(s) => snapshot(py, s)?.into_any(),
            Value::Outcomes { ok, failed } => {
                let d = PyDict::new(py);
                d.set_item("true", snapshot(py, ok)?)?;
                d.set_item("false", snapshot(py, failed)?)?;
                d.into_any()
            }
        };
        let metric = PyMetric::new(
            m.name.to_string(),
            kind.to_string(),
            unit.to_string(),
            labels.unbind(),
            value.unbind(),
        );
        out.append(Bound::new(py, metric)?)?;
    }
    Ok(out)
}

/// Buckets as `(upper bound or None for +Inf, count)`, with the count and sum.
fn snapshot<'py>(
    py: Python<'py>,
    s: &HistogramSnapshot,
) -> PyResult<Bound<'py, PyHistogramSnapshot>> {
    let buckets = PyList::empty(py);
    for (upper, count) in &s.buckets {
        let upper = (*upper != u64::MAX).then_some(*upper);
        buckets.append((upper, *count))?;
    }
    Bound::new(
        py,
        PyHistogramSnapshot {
            buckets: buckets.unbind(),
            count: s.count,
            sum: s.sum,
        },
    )
}
