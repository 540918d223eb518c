//! Rust bytes lent to Python without a copy, through the buffer protocol: `memoryview(x)`,
//! `pyarrow.py_buffer(x)`, `numpy.frombuffer(x)` see the Rust memory itself, kept alive as long
//! as the Python object lives. Read-only views only.

use std::os::raw::c_int;

use bytes::Bytes;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// Fills `view` with a read-only view of `data`, owned by `owner` (which keeps `data` alive).
///
/// # Safety
/// `view` must be the pointer the interpreter passed to `__getbuffer__`, and `data` must live
/// as long as `owner`.
pub(crate) unsafe fn fill_view(
    py: Python<'_>,
    owner: *mut ffi::PyObject,
    data: &[u8],
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("no buffer view to fill"));
    }
    if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
        return Err(PyBufferError::new_err("pybkx buffers are read-only"));
    }
    let len = isize::try_from(data.len())
        .map_err(|_| PyBufferError::new_err("buffer larger than isize::MAX"))?;
    // SAFETY: the caller guarantees `view` and that `data` outlives `owner`; FillInfo takes a
    // new reference to `owner`, released when the view is.
    let rc = unsafe { ffi::PyBuffer_FillInfo(view, owner, data.as_ptr() as *mut _, len, 1, flags) };
    if rc != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(())
}

/// Bytes held by Rust, readable from Python as a buffer; see `_core.pyi`.
#[pyclass(name = "SharedBuffer", module = "pybkx._core", frozen)]
pub(crate) struct PyBuffer {
    data: Bytes,
}

impl PyBuffer {
    pub(crate) fn new(data: Bytes) -> Self {
        PyBuffer { data }
    }
}

#[pymethods]
impl PyBuffer {
    fn __len__(&self) -> usize {
        self.data.len()
    }

    unsafe fn __getbuffer__(
        slf: PyRef<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        // SAFETY: `slf` owns `data` for as long as the view holds a reference to it.
        unsafe { fill_view(slf.py(), slf.as_ptr(), &slf.data, view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
