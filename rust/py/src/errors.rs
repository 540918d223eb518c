//! The one mapping of core errors to `pybkx.errors` classes. Each class is imported once (by
//! `import_exception!`); bindings return [`BkResult`] and use `?` on core results.

use std::sync::Arc;

use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyType;

use pybkx_core::bookie_conn::ClientError;
use pybkx_core::digest::DigestError;
use pybkx_core::error::StorageError;
use pybkx_core::ledger::LedgerError;
use pybkx_core::protocol::Status;

pyo3::import_exception!(pybkx.errors, BKException);
pyo3::import_exception!(pybkx.errors, BookieException);
pyo3::import_exception!(pybkx.errors, BookieHandleNotAvailableException);
pyo3::import_exception!(pybkx.errors, BookieIOException);
pyo3::import_exception!(pybkx.errors, ClientClosedException);
pyo3::import_exception!(pybkx.errors, DataUnknownException);
pyo3::import_exception!(pybkx.errors, DigestMatchException);
pyo3::import_exception!(pybkx.errors, DuplicateEntryIdException);
pyo3::import_exception!(pybkx.errors, IncorrectParameterException);
pyo3::import_exception!(pybkx.errors, LedgerClosedException);
pyo3::import_exception!(pybkx.errors, LedgerFencedException);
pyo3::import_exception!(pybkx.errors, NoSuchEntryException);
pyo3::import_exception!(pybkx.errors, NoSuchLedgerExistsException);
pyo3::import_exception!(pybkx.errors, ProtocolVersionException);
pyo3::import_exception!(pybkx.errors, ReadException);
pyo3::import_exception!(pybkx.errors, SecurityException);
pyo3::import_exception!(pybkx.errors, TimeoutException);
pyo3::import_exception!(pybkx.errors, TooManyRequestsException);
pyo3::import_exception!(pybkx.errors, UnauthorizedAccessException);
pyo3::import_exception!(pybkx.errors, WriteException);
pyo3::import_exception!(pybkx.errors, WriteOnReadOnlyBookieException);

/// Every class this module raises (for the test that checks they all exist).
pub(crate) fn classes(py: Python<'_>) -> Vec<Bound<'_, PyType>> {
    vec![
        py.get_type::<BKException>(),
        py.get_type::<BookieException>(),
        py.get_type::<BookieHandleNotAvailableException>(),
        py.get_type::<BookieIOException>(),
        py.get_type::<ClientClosedException>(),
        py.get_type::<DataUnknownException>(),
        py.get_type::<DigestMatchException>(),
        py.get_type::<DuplicateEntryIdException>(),
        py.get_type::<IncorrectParameterException>(),
        py.get_type::<LedgerClosedException>(),
        py.get_type::<LedgerFencedException>(),
        py.get_type::<NoSuchEntryException>(),
        py.get_type::<NoSuchLedgerExistsException>(),
        py.get_type::<ProtocolVersionException>(),
        py.get_type::<ReadException>(),
        py.get_type::<SecurityException>(),
        py.get_type::<TimeoutException>(),
        py.get_type::<TooManyRequestsException>(),
        py.get_type::<UnauthorizedAccessException>(),
        py.get_type::<WriteException>(),
        py.get_type::<WriteOnReadOnlyBookieException>(),
    ]
}

/// An exception the control plane stopped a writer with, kept so that every waiting append
/// raises the same class and message.
#[derive(Debug)]
pub(crate) struct RaisedByPython {
    class: Py<PyType>,
    message: String,
}

impl std::fmt::Display for RaisedByPython {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RaisedByPython {}

impl RaisedByPython {
    /// Keeps `exc`'s class and message (a new instance is raised each time).
    pub(crate) fn capture(exc: &Bound<'_, PyAny>) -> PyResult<LedgerError> {
        let class = exc.get_type().unbind();
        let message = exc.str()?.to_string();
        Ok(LedgerError::Stopped(Arc::new(RaisedByPython {
            class,
            message,
        })))
    }
}

/// Any error a binding can return, and the one a `Future` keeps to raise again on every
/// `result()`.
pub(crate) enum BkError {
    Storage(StorageError),
    Client(ClientError),
    Ledger(LedgerError),
    Digest(DigestError),
    Py(PyErr),
    /// The core dropped an operation's completion without calling it (its component shut
    /// down).
    Abandoned,
}

pub(crate) type BkResult<T> = Result<T, BkError>;

impl From<StorageError> for BkError {
    fn from(e: StorageError) -> Self {
        BkError::Storage(e)
    }
}

impl From<ClientError> for BkError {
    fn from(e: ClientError) -> Self {
        BkError::Client(e)
    }
}

impl From<LedgerError> for BkError {
    fn from(e: LedgerError) -> Self {
        BkError::Ledger(e)
    }
}

impl From<DigestError> for BkError {
    fn from(e: DigestError) -> Self {
        BkError::Digest(e)
    }
}

impl From<PyErr> for BkError {
    fn from(e: PyErr) -> Self {
        BkError::Py(e)
    }
}

impl BkError {
    /// The Python exception for this error; a new one each call, so a kept error can be
    /// raised again.
    pub(crate) fn to_pyerr(&self, py: Python<'_>) -> PyErr {
        match self {
            BkError::Storage(e) => storage(e),
            BkError::Client(e) => client(e),
            BkError::Ledger(e) => ledger(e),
            BkError::Digest(e) => DigestMatchException::new_err(e.to_string()),
            BkError::Py(e) => e.clone_ref(py),
            BkError::Abandoned => BookieException::new_err(
                "the operation was abandoned: the component serving it shut down",
            ),
        }
    }
}

impl From<BkError> for PyErr {
    fn from(e: BkError) -> PyErr {
        match e {
            BkError::Py(e) => e,
            other => Python::attach(|py| other.to_pyerr(py)),
        }
    }
}

/// The class BookKeeper users expect for each storage error.
fn storage(e: &StorageError) -> PyErr {
    let message = e.to_string();
    match e {
        StorageError::NoLedger(_) => NoSuchLedgerExistsException::new_err(message),
        StorageError::NoEntry { .. } => NoSuchEntryException::new_err(message),
        StorageError::Fenced(_) => LedgerFencedException::new_err(message),
        StorageError::Unauthorized(_) => UnauthorizedAccessException::new_err(message),
        StorageError::InvalidArgument(_) => PyValueError::new_err(message),
        StorageError::Io { .. } | StorageError::Corruption(_) => {
            BookieIOException::new_err(message)
        }
        StorageError::Locked(_) | StorageError::Closed | StorageError::QueueFull => {
            BookieException::new_err(message)
        }
    }
}

/// The exception the Java client raises for a per-bookie failure: statuses map as its status
/// translation does (EBADREQ, EIO and unknown codes fall back to the operation's generic
/// exception); EUNKNOWNLEDGERSTATE maps to DataUnknownException.
fn client(e: &ClientError) -> PyErr {
    let message = e.to_string();
    match e {
        ClientError::Bookie { status, op, .. } => match status {
            Status::NoLedger => NoSuchLedgerExistsException::new_err(message),
            Status::NoEntry => NoSuchEntryException::new_err(message),
            Status::Unauthorized => UnauthorizedAccessException::new_err(message),
            Status::BadVersion => ProtocolVersionException::new_err(message),
            Status::Fenced => LedgerFencedException::new_err(message),
            Status::ReadOnly => WriteOnReadOnlyBookieException::new_err(message),
            Status::TooManyRequests => TooManyRequestsException::new_err(message),
            Status::UnknownLedgerState => DataUnknownException::new_err(message),
            _ if *op == "add" => WriteException::new_err(message),
            _ => ReadException::new_err(message),
        },
        ClientError::Timeout { .. } => TimeoutException::new_err(message),
        ClientError::Unavailable { .. } => BookieHandleNotAvailableException::new_err(message),
        ClientError::TooLarge { .. } => IncorrectParameterException::new_err(message),
        ClientError::Closed => ClientClosedException::new_err(message),
        ClientError::Security { .. } => SecurityException::new_err(message),
    }
}

/// The exception a ledger operation's failure maps to.
fn ledger(e: &LedgerError) -> PyErr {
    let message = e.to_string();
    match e {
        LedgerError::Bookie(c) => client(c),
        LedgerError::Fenced(_) => LedgerFencedException::new_err(message),
        LedgerError::WriterFailed(_) => WriteException::new_err(message),
        LedgerError::Closed => LedgerClosedException::new_err(message),
        LedgerError::DuplicateEntryId { .. } => DuplicateEntryIdException::new_err(message),
        LedgerError::ReadFailed { missing: true, .. } => NoSuchEntryException::new_err(message),
        LedgerError::ReadFailed { .. } => ReadException::new_err(message),
        LedgerError::Digest { .. } => DigestMatchException::new_err(message),
        LedgerError::InvalidArgument(_) => IncorrectParameterException::new_err(message),
        LedgerError::Interrupted => PyKeyboardInterrupt::new_err(message),
        LedgerError::Stopped(cause) => match cause.downcast_ref::<RaisedByPython>() {
            Some(raised) => Python::attach(|py| {
                PyErr::from_type(raised.class.bind(py).clone(), raised.message.clone())
            }),
            None => WriteException::new_err(message),
        },
    }
}
