//! The one future type of `pybkx._core`: every asynchronous operation of the core completes one.
//! It offers `concurrent.futures`' face (`result`, `exception`, `done`, `add_done_callback`)
//! and asyncio's (`await`), and never needs a thread to poll it: the core completes it through
//! a callback, waiting threads sleep on a condition variable with the GIL released (waking to
//! let Ctrl-C through), and done-callbacks run on one dispatcher thread per process.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use pybkx_core::queue::{Receiver, Sender};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use pybkx_core::done::Done;

use crate::errors::{BkError, BookieException, TimeoutException};
use crate::util::{deadline, SIGNAL_CHECK};

/// A value a future can hand to Python (converted under the GIL when asked for).
pub(crate) trait ToPy: Send + Sync + 'static {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>>;
}

impl ToPy for () {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(py.None())
    }
}

impl ToPy for i64 {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.into_pyobject(py)?.into_any().unbind())
    }
}

/// What an operation came to: its value, or the error `result()` raises (again each time).
type Outcome = Result<Box<dyn ToPy>, BkError>;

/// A done-callback waiting for its future: the callable and the future to pass it.
type Callback = (Py<PyAny>, Py<Future>);

enum State {
    Pending(Vec<Callback>),
    Done(Outcome),
}

struct Cell {
    state: Mutex<State>,
    ready: Condvar,
}

impl Cell {
    /// Waits (GIL released by the caller) until done or `until`; true if done.
    fn wait_until(&self, until: Instant) -> bool {
        let mut st = self.state.lock();
        while matches!(*st, State::Pending(_)) {
            if self.ready.wait_until(&mut st, until).timed_out() {
                return !matches!(*st, State::Pending(_));
            }
        }
        true
    }

    fn complete(&self, outcome: Outcome) {
        let callbacks = {
            let mut st = self.state.lock();
            if !matches!(*st, State::Pending(_)) {
                return;
            }
            match std::mem::replace(&mut *st, State::Done(outcome)) {
                State::Pending(callbacks) => callbacks,
                State::Done(_) => Vec::new(),
            }
        };
        self.ready.notify_all();
        if !callbacks.is_empty() {
            dispatch(callbacks);
        }
    }
}

/// Completes a future from the core; if dropped uncalled, completes it as abandoned.
pub(crate) struct Completer(Option<Arc<Cell>>);

impl Completer {
    pub(crate) fn complete(mut self, outcome: Outcome) {
        if let Some(cell) = self.0.take() {
            cell.complete(outcome);
        }
    }

    /// A core completion that resolves the future with the operation's result.
    pub(crate) fn into_done<T, E>(self) -> Done<Result<T, E>>
    where
        T: ToPy,
        E: Into<BkError> + Send + 'static,
    {
        Box::new(move |r: Result<T, E>| {
            self.complete(r.map(|v| Box::new(v) as Box<dyn ToPy>).map_err(Into::into));
        })
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        if let Some(cell) = self.0.take() {
            cell.complete(Err(BkError::Abandoned));
        }
    }
}

/// The pending result of an operation of `pybkx._core`; see `_core.pyi`.
#[pyclass(name = "Future", module = "pybkx._core", frozen)]
pub(crate) struct Future {
    cell: Arc<Cell>,
    /// The converted result, once asked for (so `result()` returns the same object each time).
    converted: Mutex<Option<Py<PyAny>>>,
}

impl Future {
    /// A new pending future and the completer that resolves it.
    pub(crate) fn pending(py: Python<'_>) -> PyResult<(Py<Future>, Completer)> {
        let cell = Arc::new(Cell {
            state: Mutex::new(State::Pending(Vec::new())),
            ready: Condvar::new(),
        });
        let fut = Py::new(
            py,
            Future {
                cell: cell.clone(),
                converted: Mutex::new(None),
            },
        )?;
        Ok((fut, Completer(Some(cell))))
    }

    /// Waits for the outcome with the GIL released, checking for signals; None on timeout.
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        if self.done() {
            return Ok(true); // the common case of a pipeline: no GIL round trip
        }
        let until = deadline(timeout)?;
        loop {
            let slice = Instant::now() + SIGNAL_CHECK;
            let wake = until.map_or(slice, |u| u.min(slice));
            if py.detach(|| self.cell.wait_until(wake)) {
                return Ok(true);
            }
            py.check_signals()?;
            if until.is_some_and(|u| Instant::now() >= u) {
                return Ok(false);
            }
        }
    }

    fn outcome(&self, py: Python<'_>) -> PyResult<Result<Py<PyAny>, PyErr>> {
        if let Some(v) = self.converted.lock().as_ref() {
            return Ok(Ok(v.clone_ref(py)));
        }
        let st = self.cell.state.lock();
        let State::Done(outcome) = &*st else {
            return Err(BookieException::new_err("future is not done"));
        };
        match outcome {
            Ok(value) => {
                let v = value.to_py(py)?;
                drop(st);
                *self.converted.lock() = Some(v.clone_ref(py));
                Ok(Ok(v))
            }
            Err(e) => Ok(Err(e.to_pyerr(py))),
        }
    }
}

#[pymethods]
impl Future {
    /// The result, waiting up to `timeout` seconds (None: for ever). Raises the operation's
    /// exception, or TimeoutException (a TimeoutError) if it is not done in time.
    #[pyo3(signature = (timeout = None))]
    fn result(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        if !self.wait(py, timeout)? {
            return Err(TimeoutException::new_err(
                "the operation did not complete within the wait",
            ));
        }
        self.outcome(py)?
    }

    /// The operation's exception (None if it succeeded), waiting as `result` does.
    #[pyo3(signature = (timeout = None))]
    fn exception(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        if !self.wait(py, timeout)? {
            return Err(TimeoutException::new_err(
                "the operation did not complete within the wait",
            ));
        }
        Ok(match self.outcome(py)? {
            Ok(_) => None,
            Err(e) => Some(e.into_value(py).into_any()),
        })
    }

    fn done(&self) -> bool {
        !matches!(*self.cell.state.lock(), State::Pending(_))
    }

    fn running(&self) -> bool {
        !self.done()
    }

    /// Operations sent to bookies cannot be called back: always False (as for a running
    /// `concurrent.futures.Future`).
    fn cancel(&self) -> bool {
        false
    }

    fn cancelled(&self) -> bool {
        false
    }

    /// Calls `fn(future)` once the future is done: at once (in this thread) if it already is,
    /// else on pybkx's callback thread. Exceptions it raises are reported, not propagated.
    fn add_done_callback(slf: &Bound<'_, Self>, r#fn: Py<PyAny>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().cell.state.lock();
            if let State::Pending(callbacks) = &mut *st {
                callbacks.push((r#fn, slf.clone().unbind()));
                return Ok(());
            }
        }
        if let Err(e) = r#fn.call1(py, (slf,)) {
            e.write_unraisable(py, Some(r#fn.bind(py)));
        }
        Ok(())
    }

    /// `await future` gives the result in asyncio code (through an asyncio future of the
    /// running loop that this future's completion resolves).
    fn __await__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        static AWAIT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        let helper = AWAIT.get_or_try_init(py, || {
            py.import("pybkx.client.aio")?
                .getattr("await_future")
                .map(Bound::unbind)
        })?;
        helper.call1(py, (slf,))
    }

    fn __repr__(&self) -> &'static str {
        if self.done() {
            "<pybkx Future: done>"
        } else {
            "<pybkx Future: pending>"
        }
    }
}

/// The process's callback thread (re-created after a fork: threads do not survive one).
static DISPATCHER: Mutex<Option<(u32, Sender<Vec<Callback>>)>> = Mutex::new(None);

fn dispatch(callbacks: Vec<Callback>) {
    let pid = std::process::id();
    let mut slot = DISPATCHER.lock();
    let alive = slot.as_ref().is_some_and(|(owner, _)| *owner == pid);
    if !alive {
        // Unbounded in effect (see below); the queue parks the idle thread at once, where a
        // crossbeam channel would spin and yield first (as the journal's queues did).
        let (tx, rx) = pybkx_core::queue::bounded(usize::MAX);
        let spawned = std::thread::Builder::new()
            .name("pybkx-callbacks".into())
            .spawn(move || run_callbacks(rx));
        if let Err(e) = spawned {
            log::error!("cannot start the future callback thread: {e}");
            return;
        }
        *slot = Some((pid, tx));
    }
    if let Some((_, tx)) = slot.as_ref() {
        // The queue holds one job per completed future that has callbacks: bounded by the
        // futures the program keeps pending, which the client's own limits bound.
        let _ = tx.send(callbacks);
    }
}

/// Most jobs run under one hold of the GIL: a burst of completions costs one acquisition, not
/// one each, while other Python threads still get the GIL between holds.
const CALLBACK_JOBS_PER_HOLD: usize = 256;

fn run_callbacks(rx: Receiver<Vec<Callback>>) {
    while let Ok(first) = rx.recv() {
        let ran = Python::try_attach(|py| {
            let more = std::iter::from_fn(|| rx.try_recv().ok()).take(CALLBACK_JOBS_PER_HOLD - 1);
            for job in std::iter::once(first).chain(more) {
                for (callback, fut) in job {
                    if let Err(e) = callback.call1(py, (fut,)) {
                        e.write_unraisable(py, Some(callback.bind(py)));
                    }
                }
            }
        });
        if ran.is_none() {
            return; // the interpreter is finalizing: nobody is left to call back
        }
    }
}
