//! Small conversions every binding needs: ids, timeouts, payloads, and waiting with the GIL
//! released while Ctrl-C stays able to interrupt. No logic of the data plane lives here.

use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

/// How often a blocked call wakes to let Python handle signals (Ctrl-C).
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(100);

pub(crate) fn non_negative(what: &str, id: i64) -> PyResult<u64> {
    u64::try_from(id).map_err(|_| PyValueError::new_err(format!("{what} must be >= 0, got {id}")))
}

/// A timeout in seconds as a deadline (None: wait for ever).
pub(crate) fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_finite() && t >= 0.0 => {
            Ok(Some(Instant::now() + Duration::from_secs_f64(t)))
        }
        Some(t) => Err(PyValueError::new_err(format!(
            "timeout must be a finite number >= 0, got {t}"
        ))),
    }
}

/// A payload from any object with the buffer protocol: `bytes` without a copy, anything else
/// (bytearray, memoryview, array) copied once, since it may change after the call returns.
pub(crate) fn payload(obj: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if obj.is_instance_of::<PyBytes>() {
        let backed: PyBackedBytes = obj.extract()?;
        return Ok(Bytes::from_owner(backed));
    }
    let buffer = PyBuffer::<u8>::get(obj).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "payload must be bytes-like (bytes, bytearray, memoryview), not {}",
            obj.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    Ok(Bytes::from(buffer.to_vec(obj.py())?))
}

/// Lets a blocking core call ask "should I stop?" while the GIL is released: it checks Python's
/// pending signals (from the main thread; elsewhere it never interrupts) and keeps the error.
#[derive(Default)]
pub(crate) struct SignalCheck {
    raised: Mutex<Option<PyErr>>,
}

impl SignalCheck {
    /// True once a signal handler raised (the error is kept for [`into_error`]).
    pub(crate) fn interrupted(&self) -> bool {
        if self.raised.lock().is_some() {
            return true;
        }
        let raised = Python::attach(|py| py.check_signals().err());
        match raised {
            Some(e) => {
                *self.raised.lock() = Some(e);
                true
            }
            None => false,
        }
    }

    /// The error a signal handler raised, if any.
    pub(crate) fn take(&self) -> Option<PyErr> {
        self.raised.lock().take()
    }
}
