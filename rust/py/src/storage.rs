//! `LedgerStorage` and `scan_journal`: the bookie's storage engine for Python (the bookie
//! process, tools, tests), with its results as named, frozen classes. Thin wrappers: blocking
//! calls release the GIL; errors map once.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use pyo3::exceptions::PyValueError;

use pybkx_core::storage::{self, Compaction, LedgerStorage, RangeLimits, LAST_ENTRY};

use crate::config::storage_config;
use crate::errors::BkResult;
use crate::util::{non_negative, payload};

/// Registers the storage's classes on the extension module.
pub(crate) fn add_classes(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLedgerStorage>()?;
    m.add_class::<PyGcReport>()?;
    m.add_class::<PyCompactionReport>()?;
    m.add_class::<PyCollectReport>()?;
    m.add_class::<PyMoveReport>()?;
    m.add_class::<PyDirectoryUsage>()?;
    m.add_class::<PyJournalMark>()?;
    m.add_class::<PyScrubFinding>()?;
    m.add_class::<PyScrubReport>()?;
    Ok(())
}

/// How a result's field shows in its class's repr (Python's spelling).
trait Repr {
    fn repr(&self) -> String;
}

impl Repr for u64 {
    fn repr(&self) -> String {
        self.to_string()
    }
}

impl Repr for bool {
    fn repr(&self) -> String {
        if *self { "True" } else { "False" }.to_string()
    }
}

impl Repr for String {
    fn repr(&self) -> String {
        format!("{self:?}")
    }
}

impl<T: Repr> Repr for Option<T> {
    fn repr(&self) -> String {
        self.as_ref().map_or("None".to_string(), Repr::repr)
    }
}

impl<T: Repr> Repr for Vec<T> {
    fn repr(&self) -> String {
        let items: Vec<String> = self.iter().map(Repr::repr).collect();
        format!("[{}]", items.join(", "))
    }
}

/// A storage result as a frozen class with named fields (typed in `_core.pyi`), equal by value,
/// with a repr naming its fields.
macro_rules! result_class {
    ($(#[$doc:meta])* $rust:ident as $py:literal { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[pyclass(name = $py, module = "pybkx._core", frozen, get_all, eq, skip_from_py_object)]
        #[derive(Clone, PartialEq)]
        pub(crate) struct $rust {
            $($field: $ty),*
        }

        impl Repr for $rust {
            fn repr(&self) -> String {
                let fields = [$(format!("{}={}", stringify!($field), self.$field.repr())),*];
                format!("{}({})", $py, fields.join(", "))
            }
        }

        #[pymethods]
        impl $rust {
            fn __repr__(&self) -> String {
                self.repr()
            }
        }
    };
}

result_class!(
    /// What `gc_entry_logs` did.
    PyGcReport as "GcReport" { logs_removed: u64, bytes_freed: u64 }
);
result_class!(
    /// What `compact` did.
    PyCompactionReport as "CompactionReport" {
        logs_compacted: u64,
        bytes_moved: u64,
        bytes_freed: u64,
    }
);
result_class!(
    /// What `collect` did.
    PyCollectReport as "CollectReport" { gc: PyGcReport, compaction: Option<PyCompactionReport> }
);
result_class!(
    /// What `move_entry_logs` did.
    PyMoveReport as "MoveReport" { demoted: u64, promoted: u64, bytes: u64 }
);
result_class!(
    /// One directory for the disk checker.
    PyDirectoryUsage as "DirectoryUsage" {
        kind: String,
        path: String,
        total_bytes: u64,
        free_bytes: u64,
        full: bool,
    }
);
result_class!(
    /// A journal position.
    PyJournalMark as "JournalMark" { file_id: u64, offset: u64 }
);

result_class!(
    /// A damaged entry the scrubber found.
    PyScrubFinding as "ScrubFinding" {
        ledger_id: u64,
        entry_id: u64,
        check: String,
        entry_log: String,
        offset: u64,
    }
);
result_class!(
    /// What a scrub run did.
    PyScrubReport as "ScrubReport" {
        logs_scrubbed: u64,
        logs_skipped: u64,
        bytes_scrubbed: u64,
        entries_verified: u64,
        digest_unverified: u64,
        corrupt_entries: u64,
        complete: bool,
        findings: Vec<PyScrubFinding>,
    }
);

impl From<storage::ScrubFinding> for PyScrubFinding {
    fn from(f: storage::ScrubFinding) -> Self {
        PyScrubFinding {
            ledger_id: f.ledger,
            entry_id: f.entry,
            check: f.check.name().to_string(),
            entry_log: f.log,
            offset: f.offset,
        }
    }
}

impl From<storage::ScrubReport> for PyScrubReport {
    fn from(r: storage::ScrubReport) -> Self {
        PyScrubReport {
            logs_scrubbed: r.logs_scrubbed,
            logs_skipped: r.logs_skipped,
            bytes_scrubbed: r.bytes_scrubbed,
            entries_verified: r.entries_verified,
            digest_unverified: r.digest_unverified,
            corrupt_entries: r.corrupt_entries,
            complete: r.complete,
            findings: r.findings.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<storage::GcReport> for PyGcReport {
    fn from(r: storage::GcReport) -> Self {
        PyGcReport {
            logs_removed: r.logs_removed,
            bytes_freed: r.bytes_freed,
        }
    }
}

impl From<storage::CompactionReport> for PyCompactionReport {
    fn from(r: storage::CompactionReport) -> Self {
        PyCompactionReport {
            logs_compacted: r.logs_compacted,
            bytes_moved: r.bytes_moved,
            bytes_freed: r.bytes_freed,
        }
    }
}

/// The compaction `collect` runs: "major", "minor" or None.
fn compaction_named(name: Option<&str>) -> PyResult<Option<Compaction>> {
    match name {
        None => Ok(None),
        Some("major") => Ok(Some(Compaction::Major)),
        Some("minor") => Ok(Some(Compaction::Minor)),
        Some(other) => Err(PyValueError::new_err(format!(
            "compaction must be \"major\", \"minor\" or None, got {other:?}"
        ))),
    }
}

/// A bookie's ledger storage (journal + entry logs + index); see `_core.pyi`.
#[pyclass(name = "LedgerStorage", module = "pybkx._core", frozen)]
pub(crate) struct PyLedgerStorage {
    pub(crate) inner: Arc<LedgerStorage>,
}

#[pymethods]
impl PyLedgerStorage {
    /// Opens the storage described by `config` (a `pybkx.config.ServerConfig`).
    #[new]
    fn new(py: Python<'_>, config: &Bound<'_, PyAny>) -> BkResult<Self> {
        let cfg = storage_config(config)?;
        let inner = py.detach(|| LedgerStorage::open(cfg))?;
        Ok(PyLedgerStorage {
            inner: Arc::new(inner),
        })
    }

    #[pyo3(signature = (ledger_id, entry_id, data, master_key = None, recovery = false))]
    fn add_entry(
        &self,
        py: Python<'_>,
        ledger_id: i64,
        entry_id: i64,
        data: &Bound<'_, PyAny>,
        master_key: Option<&[u8]>,
        recovery: bool,
    ) -> BkResult<()> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let entry = non_negative("entry_id", entry_id)?;
        let key = master_key.unwrap_or_default().to_vec();
        let data = payload(data)?;
        py.detach(|| {
            LedgerStorage::wait_for(|done| {
                self.inner
                    .add_entry(ledger, entry, &key, data, recovery, done)
            })
        })?;
        Ok(())
    }

    #[pyo3(signature = (ledger_id, entries, master_key = None, recovery = false))]
    fn add_entries(
        &self,
        py: Python<'_>,
        ledger_id: i64,
        entries: Vec<(i64, Bound<'_, PyAny>)>,
        master_key: Option<&[u8]>,
        recovery: bool,
    ) -> BkResult<()> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let key = master_key.unwrap_or_default().to_vec();
        let items = entries
            .iter()
            .map(|(e, d)| Ok((non_negative("entry_id", *e)?, payload(d)?)))
            .collect::<PyResult<Vec<(u64, Bytes)>>>()?;
        py.detach(|| {
            self.inner
                .add_entries_blocking(ledger, items, &key, recovery)
        })?;
        Ok(())
    }

    fn read_entry<'py>(
        &self,
        py: Python<'py>,
        ledger_id: i64,
        entry_id: i64,
    ) -> BkResult<Bound<'py, PyBytes>> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let entry = if entry_id == -1 {
            LAST_ENTRY
        } else {
            non_negative("entry_id", entry_id)?
        };
        let data = py.detach(|| self.inner.read_entry(ledger, entry))?;
        Ok(PyBytes::new(py, &data))
    }

    fn read_range<'py>(
        &self,
        py: Python<'py>,
        ledger_id: i64,
        first_entry_id: i64,
        max_count: i64,
        max_bytes: i64,
    ) -> BkResult<Bound<'py, PyList>> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let first = non_negative("first_entry_id", first_entry_id)?;
        let limits = RangeLimits {
            max_count: usize::try_from(max_count).unwrap_or(0),
            max_bytes: usize::try_from(max_bytes).unwrap_or(0),
            per_entry_overhead: 0,
            stride: 1,
        };
        let entries = py.detach(|| self.inner.read_range(ledger, first, limits))?;
        Ok(PyList::new(
            py,
            entries.iter().map(|e| PyBytes::new(py, e)),
        )?)
    }

    fn last_entry_id(&self, ledger_id: i64) -> BkResult<i64> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        Ok(self.inner.last_entry_id(ledger)? as i64)
    }

    #[pyo3(signature = (ledger_id, master_key = None))]
    fn fence(&self, py: Python<'_>, ledger_id: i64, master_key: Option<&[u8]>) -> BkResult<bool> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let key = master_key.unwrap_or_default().to_vec();
        let was = py.detach(|| {
            let mut was = false;
            LedgerStorage::wait_for(|done| {
                was = self.inner.fence(ledger, &key, done)?;
                Ok(())
            })
            .map(|_| was)
        })?;
        Ok(was)
    }

    fn is_fenced(&self, ledger_id: i64) -> BkResult<bool> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        Ok(self.inner.is_fenced(ledger)?)
    }

    #[pyo3(signature = (ledger_id, lac, master_key = None))]
    fn set_explicit_lac(
        &self,
        py: Python<'_>,
        ledger_id: i64,
        lac: &[u8],
        master_key: Option<&[u8]>,
    ) -> BkResult<()> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let key = master_key.unwrap_or_default().to_vec();
        let lac = Bytes::copy_from_slice(lac);
        py.detach(|| {
            LedgerStorage::wait_for(|done| self.inner.set_explicit_lac(ledger, &key, lac, done))
        })?;
        Ok(())
    }

    fn get_explicit_lac<'py>(
        &self,
        py: Python<'py>,
        ledger_id: i64,
    ) -> BkResult<Option<Bound<'py, PyBytes>>> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let lac = self.inner.explicit_lac(ledger)?;
        Ok(lac.map(|b| PyBytes::new(py, &b)))
    }

    fn read_master_key<'py>(
        &self,
        py: Python<'py>,
        ledger_id: i64,
    ) -> BkResult<Bound<'py, PyBytes>> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let key = self.inner.master_key(ledger)?;
        Ok(PyBytes::new(py, &key))
    }

    fn ledger_exists(&self, ledger_id: i64) -> bool {
        u64::try_from(ledger_id).is_ok_and(|l| self.inner.ledger_exists(l))
    }

    fn list_ledgers(&self) -> Vec<u64> {
        self.inner.list_ledgers()
    }

    fn delete_ledger(&self, py: Python<'_>, ledger_id: i64) -> BkResult<()> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        py.detach(|| LedgerStorage::wait_for(|done| self.inner.delete_ledger(ledger, done)))?;
        Ok(())
    }

    fn journal_marks(&self) -> Vec<PyJournalMark> {
        self.inner
            .journal_marks()
            .into_iter()
            .map(|m| PyJournalMark {
                file_id: m.file_id,
                offset: m.offset,
            })
            .collect()
    }

    fn compact(&self, py: Python<'_>, threshold: f64) -> BkResult<PyCompactionReport> {
        Ok(py.detach(|| self.inner.compact(threshold))?.into())
    }

    #[pyo3(signature = (compaction = None))]
    fn collect(&self, py: Python<'_>, compaction: Option<&str>) -> BkResult<PyCollectReport> {
        let compaction = compaction_named(compaction)?;
        let r = py.detach(|| self.inner.collect(compaction))?;
        Ok(PyCollectReport {
            gc: r.gc.into(),
            compaction: r.compaction.map(Into::into),
        })
    }

    /// 0: normal, 1: a ledger directory is almost full, 2: one is full.
    fn set_disk_pressure(&self, level: u8) {
        self.inner.set_disk_pressure(match level {
            0 => storage::DiskPressure::Normal,
            1 => storage::DiskPressure::AlmostFull,
            _ => storage::DiskPressure::Full,
        });
    }

    fn move_entry_logs(&self, py: Python<'_>) -> BkResult<PyMoveReport> {
        let r = py.detach(|| self.inner.move_entry_logs())?;
        Ok(PyMoveReport {
            demoted: r.demoted,
            promoted: r.promoted,
            bytes: r.bytes,
        })
    }

    /// Entry log id -> the ledger directory (`current/`) holding it.
    fn entry_log_dirs(&self) -> std::collections::HashMap<u32, String> {
        self.inner
            .entry_log_dirs()
            .into_iter()
            .map(|(id, p)| (id, p.to_string_lossy().into_owned()))
            .collect()
    }

    #[pyo3(signature = (rate_bytes_per_second = 0))]
    fn scrub(&self, py: Python<'_>, rate_bytes_per_second: u64) -> BkResult<PyScrubReport> {
        Ok(py
            .detach(|| self.inner.scrub(rate_bytes_per_second))?
            .into())
    }

    fn take_scrub_findings(&self) -> Vec<PyScrubFinding> {
        self.inner
            .take_scrub_findings()
            .into_iter()
            .map(Into::into)
            .collect()
    }

    fn scrub_repaired(&self, ledger_id: i64, entry_id: i64) -> PyResult<()> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let entry = non_negative("entry_id", entry_id)?;
        self.inner.scrub_repaired(ledger, entry);
        Ok(())
    }

    /// The cross-replica check's digest of what this storage holds of the ledger in entries
    /// `first, first + stride, ...` up to `last`: (entries, bytes, unreadable entries, SHA-1
    /// over (id, entry SHA-1), [(entry id, entry SHA-1)] when `list`). Hashed in Rust, the GIL
    /// released; no payload crosses into Python.
    #[pyo3(signature = (ledger_id, first_entry_id, last_entry_id, stride = 1, list = false))]
    #[allow(clippy::type_complexity)]
    fn replica_digest<'py>(
        &self,
        py: Python<'py>,
        ledger_id: i64,
        first_entry_id: i64,
        last_entry_id: i64,
        stride: i64,
        list: bool,
    ) -> BkResult<(
        u64,
        u64,
        u64,
        Bound<'py, PyBytes>,
        Vec<(u64, Bound<'py, PyBytes>)>,
    )> {
        let ledger = non_negative("ledger_id", ledger_id)?;
        let range = storage::DigestRange {
            first: non_negative("first_entry_id", first_entry_id)?,
            last: non_negative("last_entry_id", last_entry_id)?,
            stride: non_negative("stride", stride)?,
        };
        let found = py.detach(|| self.inner.replica_digest(ledger, range, list))?;
        let listed = found
            .listed
            .iter()
            .map(|(entry, digest)| (*entry, PyBytes::new(py, digest)))
            .collect();
        Ok((
            found.entries,
            found.bytes,
            found.unreadable,
            PyBytes::new(py, &found.digest),
            listed,
        ))
    }

    /// (the last finished run or None, bytes read by the current run, bytes it covers).
    fn scrub_status(&self) -> (Option<PyScrubReport>, u64, u64) {
        let (last, done, total) = self.inner.scrub_status();
        (last.map(Into::into), done, total)
    }

    fn gc_entry_logs(&self, py: Python<'_>) -> BkResult<PyGcReport> {
        Ok(py.detach(|| self.inner.gc_entry_logs())?.into())
    }

    fn checkpoint(&self, py: Python<'_>) -> BkResult<()> {
        py.detach(|| self.inner.checkpoint())?;
        Ok(())
    }

    fn entry_log_ledgers<'py>(&self, py: Python<'py>) -> BkResult<Bound<'py, PyDict>> {
        let maps = py.detach(|| self.inner.entry_log_ledgers())?;
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

    fn directory_usage(&self, py: Python<'_>) -> BkResult<Vec<PyDirectoryUsage>> {
        let dirs = py.detach(|| self.inner.directory_usage())?;
        Ok(dirs
            .into_iter()
            .map(|d| PyDirectoryUsage {
                kind: d.kind.name().to_string(),
                path: d.path.display().to_string(),
                total_bytes: d.usage.total_bytes,
                free_bytes: d.usage.free_bytes,
                full: d.full,
            })
            .collect())
    }

    fn set_full_ledger_dirs(&self, full: Vec<bool>) {
        self.inner.set_full_ledger_dirs(&full);
    }

    fn restore_space_reserve(&self, py: Python<'_>) -> BkResult<bool> {
        Ok(py.detach(|| self.inner.restore_space_reserve())?)
    }

    fn space_reserve(&self) -> Vec<(String, u64, bool)> {
        self.inner
            .space_reserve()
            .into_iter()
            .map(|(path, bytes, held)| (path.display().to_string(), bytes, held))
            .collect()
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::metrics::flat_dict(py, &self.inner.metrics())
    }

    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        crate::metrics::metrics_list(py, self.inner.metrics())
    }

    fn close(&self, py: Python<'_>) -> BkResult<()> {
        py.detach(|| self.inner.close())?;
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> BkResult<()> {
        self.close(py)
    }
}

/// Decodes one journal file for tools (like BookKeeper's `readjournal`).
#[pyfunction]
pub(crate) fn scan_journal<'py>(py: Python<'py>, path: PathBuf) -> BkResult<Bound<'py, PyList>> {
    let (records, end, reason) = py.detach(|| storage::journal::scan_file(&path))?;
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
