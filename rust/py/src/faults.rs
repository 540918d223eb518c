//! Disk fault injection for tests: errors or latency on the storage's file-system calls under a
//! path, through the core's `fs` seam. Process-wide; meant for test bookies, never production.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use pybkx_core::fs::{self, Fault, FaultAction, Op};

/// Injects a fault; returns its id for `remove_disk_fault`. See `_core.pyi`.
#[pyfunction]
#[pyo3(signature = (path_prefix, ops, *, errno = None, delay_ms = None, times = None))]
pub(crate) fn inject_disk_fault(
    path_prefix: PathBuf,
    ops: Vec<String>,
    errno: Option<i32>,
    delay_ms: Option<u64>,
    times: Option<u64>,
) -> PyResult<u64> {
    let ops = ops
        .iter()
        .map(|name| {
            Op::from_name(name).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "unknown file operation {name:?}: use create, open, write, read, sync, \
                     allocate, truncate, remove, rename or lock"
                ))
            })
        })
        .collect::<PyResult<Vec<Op>>>()?;
    let action = match (errno, delay_ms) {
        (Some(e), None) if e > 0 => FaultAction::Fail(e),
        (None, Some(ms)) => FaultAction::Delay(Duration::from_millis(ms)),
        _ => {
            return Err(PyValueError::new_err(
                "give exactly one of errno (> 0) or delay_ms",
            ))
        }
    };
    Ok(fs::inject_fault(Fault {
        path_prefix,
        ops,
        action,
        times,
    }))
}

#[pyfunction]
pub(crate) fn remove_disk_fault(fault_id: u64) {
    fs::remove_fault(fault_id);
}

#[pyfunction]
pub(crate) fn clear_disk_faults() {
    fs::clear_faults();
}
