//! `ReadPlan`: reads of one version of a ledger's metadata, each a `Future` of a `ReadResult`
//! (entries) or a `ColumnsResult` (the same entries as Arrow columns). Wrappers only: the
//! reading is `pybkx_core::ledger::read_range`'s.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use pybkx_core::bookie_conn::BookieClient;
use pybkx_core::ledger::{
    self, check_range, columns, LedgerError, ReadEntry, ReadOptions, ReadPlan, Segment,
};
use pybkx_core::runtime::runtime;

use super::entry::PyLedgerEntry;
use crate::bookie_conn::{flags_of, PyBookieClient};
use crate::buffer::PyBuffer;
use crate::digest::{digest_manager, verify, PyVerifiedEntry};
use crate::errors::{BkError, BkResult};
use crate::future::{Future, ToPy};

/// What `ReadPlan.read` gives: the entries, and whether batch reads still look supported.
#[pyclass(name = "ReadResult", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyReadResult {
    entries: Py<PyList>,
    batch_ok: bool,
}

/// What `ReadPlan.read_columns` gives: the entries as Arrow columns, and whether batch reads
/// still look supported.
#[pyclass(name = "ColumnsResult", module = "pybkx._core", frozen, get_all)]
pub(crate) struct PyColumnsResult {
    rows: usize,
    entry_ids: Py<PyBuffer>,
    offsets: Py<PyBuffer>,
    payloads: Py<PyBuffer>,
    batch_ok: bool,
}

/// The entries of one read, made Python objects when the future's result is asked for.
struct EntriesRead {
    ledger: i64,
    entries: Vec<ReadEntry>,
    batch_ok: bool,
}

impl ToPy for EntriesRead {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let list = PyList::empty(py);
        for e in &self.entries {
            list.append(Py::new(py, PyLedgerEntry::from_read(self.ledger, e))?)?;
        }
        let result = PyReadResult {
            entries: list.unbind(),
            batch_ok: self.batch_ok,
        };
        Ok(Py::new(py, result)?.into_any())
    }
}

/// The columns of one read, made Python objects when the future's result is asked for.
struct ColumnsRead {
    columns: columns::Columns,
    batch_ok: bool,
}

impl ToPy for ColumnsRead {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let c = &self.columns;
        let buffer = |b: &Bytes| Py::new(py, PyBuffer::new(b.clone()));
        let result = PyColumnsResult {
            rows: c.rows,
            entry_ids: buffer(&c.entry_ids)?,
            offsets: buffer(&c.offsets)?,
            payloads: buffer(&c.payloads)?,
            batch_ok: self.batch_ok,
        };
        Ok(Py::new(py, result)?.into_any())
    }
}

/// How to read one version of a ledger's metadata; see `_core.pyi`.
#[pyclass(name = "ReadPlan", module = "pybkx._core", frozen)]
pub(crate) struct PyReadPlan {
    client: Arc<BookieClient>,
    plan: Arc<ReadPlan>,
}

#[pymethods]
impl PyReadPlan {
    #[new]
    #[pyo3(signature = (
        client, ledger_id, write_quorum_size, password, digest_type, segments, *,
        orders = Vec::new(), max_batch_bytes = 5 << 20
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        client: PyRef<'_, PyBookieClient>,
        ledger_id: i64,
        write_quorum_size: usize,
        password: &[u8],
        digest_type: &str,
        segments: Vec<(i64, Vec<String>)>,
        orders: Vec<Vec<Vec<usize>>>,
        max_batch_bytes: i64,
    ) -> BkResult<Self> {
        let segments = segments.into_iter().map(Segment::from).collect();
        let plan = ReadPlan::new(
            ledger_id,
            write_quorum_size,
            digest_manager(ledger_id, password, digest_type)?,
            segments,
            orders,
            max_batch_bytes,
        )?;
        Ok(PyReadPlan {
            client: client.inner.clone(),
            plan: Arc::new(plan),
        })
    }

    /// Checks an entry as a bookie stored it. Raises DigestMatchException (also for another
    /// entry id than `entry_id`, if given).
    #[pyo3(signature = (entry, entry_id = None))]
    fn verify(
        &self,
        py: Python<'_>,
        entry: &[u8],
        entry_id: Option<i64>,
    ) -> BkResult<PyVerifiedEntry> {
        verify(py, self.plan.digest(), entry, entry_id)
    }

    /// Reads and verifies entries `first..=last` (with `held_by`, only those whose write set
    /// holds one of those ensemble positions); the future gives a `ReadResult`.
    /// Raises IncorrectParameterException at once for a bad range, and through the future for
    /// a position outside the ledger's ensembles.
    #[pyo3(signature = (
        first, last, *, batch = true, avoid = Vec::new(), flags = 0, master_key = None,
        window = 64, held_by = Vec::new()
    ))]
    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        py: Python<'_>,
        first: i64,
        last: i64,
        batch: bool,
        avoid: Vec<String>,
        flags: i64,
        master_key: Option<&[u8]>,
        window: usize,
        held_by: Vec<usize>,
    ) -> PyResult<Py<Future>> {
        let mut opts = read_options(first, last, batch, avoid, window)?;
        opts.flags = flags_of(flags)?;
        opts.master_key = master_key.map(Bytes::copy_from_slice);
        opts.held_by = held_by;
        self.spawn_read(py, first, last, opts, |ledger, entries, batch_ok| {
            Ok(EntriesRead {
                ledger,
                entries,
                batch_ok,
            })
        })
    }

    /// Reads entries `first..=last` as columns; the future gives a `ColumnsResult`, the three
    /// columns as `Buffer`s in Arrow's `int64` and `binary` layouts. Raises
    /// IncorrectParameterException for a bad range, or (through the future) for payloads above
    /// 2 GiB in all.
    #[pyo3(signature = (first, last, *, batch = true, avoid = Vec::new(), window = 64))]
    fn read_columns(
        &self,
        py: Python<'_>,
        first: i64,
        last: i64,
        batch: bool,
        avoid: Vec<String>,
        window: usize,
    ) -> PyResult<Py<Future>> {
        let opts = read_options(first, last, batch, avoid, window)?;
        self.spawn_read(py, first, last, opts, |_, entries, batch_ok| {
            Ok(ColumnsRead {
                columns: columns::pack(&entries)?,
                batch_ok,
            })
        })
    }
}

impl PyReadPlan {
    /// Reads `first..=last` on the runtime and completes the future with `finish(ledger,
    /// entries, batch_ok)`, run there too (off the interpreter's thread).
    fn spawn_read<T: ToPy + 'static>(
        &self,
        py: Python<'_>,
        first: i64,
        last: i64,
        opts: ReadOptions,
        finish: impl FnOnce(i64, Vec<ReadEntry>, bool) -> Result<T, LedgerError> + Send + 'static,
    ) -> PyResult<Py<Future>> {
        let rt = runtime().map_err(|e| PyOSError::new_err(e.to_string()))?;
        let (fut, completer) = Future::pending(py)?;
        let (client, plan) = (self.client.clone(), self.plan.clone());
        let done = completer.into_done::<T, LedgerError>();
        rt.spawn(async move {
            let r = ledger::read_range(&client, &plan, &opts, first, last).await;
            done(r.and_then(|(entries, batch_ok)| finish(plan.ledger_id(), entries, batch_ok)));
        });
        Ok(fut)
    }
}

/// The options of a plain read of `first..=last` (no flags, key or position filter); raises
/// IncorrectParameterException at once for a bad range.
fn read_options(
    first: i64,
    last: i64,
    batch: bool,
    avoid: Vec<String>,
    window: usize,
) -> PyResult<ReadOptions> {
    check_range(first, last).map_err(BkError::from)?;
    Ok(ReadOptions {
        batch,
        avoid: avoid.into_iter().collect::<HashSet<_>>(),
        window,
        ..ReadOptions::default()
    })
}
