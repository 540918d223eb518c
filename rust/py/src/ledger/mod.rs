//! The per-ledger engine for Python, one module per face of `pybkx_core::ledger`: the
//! [`entry`] type reads return, the [`writer`] (quorum appends, and the `FailureQueue` its
//! bookie failures go to), the [`reader`] (`ReadPlan`, reads of one metadata version) and the
//! quorum rule. Wrappers only: the logic is in the core.

pub(crate) mod entry;
pub(crate) mod reader;
pub(crate) mod writer;

use pyo3::prelude::*;

use pybkx_core::ledger;

use crate::errors::BkResult;

/// Raises IncorrectParameterException unless E >= Qw >= Qa >= 1 (negative sizes too).
#[pyfunction]
pub(crate) fn check_quorums(
    ensemble_size: i64,
    write_quorum_size: i64,
    ack_quorum_size: i64,
) -> BkResult<()> {
    ledger::check_quorums(ensemble_size, write_quorum_size, ack_quorum_size)?;
    Ok(())
}
