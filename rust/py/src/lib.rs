//! PyO3 bindings of `pybkx-core`, built as the extension module `pybkx._core`. This file only
//! registers; each wrapped part has its module, errors map once in `errors`, and every
//! asynchronous operation completes the one `future::Future` type.

#[cfg(feature = "bench")]
mod bench;
mod bookie_conn;
mod buffer;
mod config;
mod digest;
mod errors;
mod faults;
mod future;
mod ledger;
mod logs;
mod metrics;
mod server;
mod storage;
mod util;

use pyo3::prelude::*;
use pyo3::types::PyType;

use pybkx_core::protocol;

/// Every Rust allocation of the extension (request frames, channel blocks, entry buffers) goes
/// to mimalloc: glibc's malloc spent a large share of a pipelined append's CPU consolidating and
/// splitting chunks that the network threads free (docs/performance.md, "The Python client
/// against the bookie's capacity"). Python's own objects keep Python's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its option enum keeps its order across versions: removed
/// options stay as placeholders) and its default, 10 ms.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const MI_DEFAULT_PURGE_DELAY_MS: std::ffi::c_long = 10;
/// How long freed memory stays committed before mimalloc returns it to the OS.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// Keeps freed memory for a second before returning it to the OS, instead of mimalloc's 10 ms:
/// a bookie frees a whole write-cache generation (tens of MiB of request buffers) at once and
/// allocates as much again within milliseconds; with the default, every page came back from the
/// kernel zeroed (page faults and `clear_page`: large adds took more CPU and ran slower, see
/// docs/performance.md, "Large adds"). Left alone when the option does not hold its known
/// default (a user's `MIMALLOC_PURGE_DELAY`, or a mimalloc whose options moved).
fn tune_allocator() {
    // SAFETY: mimalloc's option calls read and write a process-wide integer; any thread may.
    unsafe {
        if libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) == MI_DEFAULT_PURGE_DELAY_MS {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
        }
    }
}

/// Every `pybkx.errors` class the extension raises (imported now: a missing one fails here).
#[pyfunction]
fn _error_classes(py: Python<'_>) -> Vec<Bound<'_, PyType>> {
    errors::classes(py)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Rust log records (closed connections, replay warnings, I/O failures) reach Python's
    // logging through a queue and one drain thread: no journal thread ever takes the GIL.
    logs::install();
    tune_allocator();
    m.add_class::<future::Future>()?;
    storage::add_classes(m)?;
    m.add_class::<server::PyBookieServer>()?;
    m.add_class::<bookie_conn::PyBookieClient>()?;
    m.add_class::<digest::PyDigestManager>()?;
    m.add_class::<digest::PyVerifiedEntry>()?;
    m.add_class::<bookie_conn::PyLongPollResult>()?;
    m.add_class::<bookie_conn::PyReadLacResult>()?;
    m.add_class::<bookie_conn::PyBookieInfo>()?;
    m.add_class::<bookie_conn::PyBookieHealth>()?;
    m.add_class::<ledger::writer::PyLedgerWriter>()?;
    m.add_class::<ledger::writer::PyFailureQueue>()?;
    m.add_class::<ledger::writer::PyBookieFailure>()?;
    m.add_class::<ledger::reader::PyReadPlan>()?;
    m.add_class::<ledger::reader::PyReadResult>()?;
    m.add_class::<ledger::reader::PyColumnsResult>()?;
    m.add_class::<ledger::entry::PyLedgerEntry>()?;
    m.add_class::<buffer::PyBuffer>()?;
    m.add_class::<metrics::PyMetric>()?;
    m.add_class::<metrics::PyHistogramSnapshot>()?;
    m.add_function(wrap_pyfunction!(ledger::check_quorums, m)?)?;
    m.add_function(wrap_pyfunction!(storage::scan_journal, m)?)?;
    m.add_function(wrap_pyfunction!(digest::master_key, m)?)?;
    m.add_function(wrap_pyfunction!(faults::inject_disk_fault, m)?)?;
    m.add_function(wrap_pyfunction!(faults::remove_disk_fault, m)?)?;
    m.add_function(wrap_pyfunction!(faults::clear_disk_faults, m)?)?;
    m.add_function(wrap_pyfunction!(_error_classes, m)?)?;
    m.add_function(wrap_pyfunction!(logs::set_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::set_metrics_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::metrics_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::client_metrics, m)?)?;
    #[cfg(feature = "bench")]
    {
        m.add_function(wrap_pyfunction!(bench::run_load, m)?)?;
        m.add_function(wrap_pyfunction!(bench::micro_kernel, m)?)?;
        m.add_function(wrap_pyfunction!(bench::micro_kernels, m)?)?;
        m.add_function(wrap_pyfunction!(bench::fill_storage, m)?)?;
        m.add_function(wrap_pyfunction!(bench::index_lookups, m)?)?;
        m.add_class::<bench::PyIndexLookups>()?;
    }
    m.add("FLAG_NONE", protocol::FLAG_NONE)?;
    m.add("FLAG_DO_FENCING", protocol::FLAG_DO_FENCING)?;
    m.add("FLAG_RECOVERY_ADD", protocol::FLAG_RECOVERY_ADD)?;
    m.add("FLAG_HIGH_PRIORITY", protocol::FLAG_HIGH_PRIORITY)?;
    m.add("FLAG_STRIDED_READ", protocol::FLAG_STRIDED_READ)?;
    m.add("MAX_READ_ENTRIES", pybkx_core::ledger::MAX_READ_ENTRIES)?;
    Ok(())
}
