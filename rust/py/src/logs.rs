//! Rust log records into Python's `logging`, so that Rust and Python lines share one format and
//! one configuration. Threads that log (journal, sync, network) only push a record onto a
//! bounded queue and never take the GIL; one drain thread per process, started by the first
//! record, hands them to `logging.getLogger("pybkx.core.<module>")`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::Mutex;
use pyo3::prelude::*;

/// Records waiting for the drain thread; past it new records are dropped (and counted).
const QUEUE_RECORDS: usize = 10_000;

struct Record {
    level: u8,
    target: String,
    message: String,
}

struct Bridge {
    queue: Mutex<Option<(u32, Sender<Record>)>>,
    dropped: AtomicU64,
}

static BRIDGE: Bridge = Bridge {
    queue: Mutex::new(None),
    dropped: AtomicU64::new(0),
};

fn python_level(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 40,
        log::Level::Warn => 30,
        log::Level::Info => 20,
        log::Level::Debug => 10,
        log::Level::Trace => 5,
    }
}

impl log::Log for Bridge {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let rec = Record {
            level: python_level(record.level()),
            target: record.target().to_string(),
            message: record.args().to_string(),
        };
        let pid = std::process::id();
        let mut slot = self.queue.lock();
        if slot.as_ref().is_none_or(|(owner, _)| *owner != pid) {
            let (tx, rx) = crossbeam_channel::bounded(QUEUE_RECORDS);
            let spawned = std::thread::Builder::new()
                .name("pybkx-log".into())
                .spawn(move || drain(rx));
            if spawned.is_err() {
                return; // no thread for logs: the record cannot be delivered
            }
            *slot = Some((pid, tx));
        }
        if let Some((_, tx)) = slot.as_ref() {
            if let Err(TrySendError::Full(_)) = tx.try_send(rec) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn flush(&self) {}
}

fn drain(rx: Receiver<Record>) {
    let mut loggers: HashMap<String, Py<PyAny>> = HashMap::new();
    for rec in rx {
        let delivered = Python::try_attach(|py| -> PyResult<()> {
            let dropped = BRIDGE.dropped.swap(0, Ordering::Relaxed);
            let logging = py.import("logging")?;
            // `pybkx_core::ledger::reader` logs as `pybkx.core.ledger.reader`: one hierarchy
            // with the Python side's loggers, configurable by prefix.
            let name = format!(
                "pybkx.core.{}",
                rec.target
                    .trim_start_matches("pybkx_core::")
                    .replace("::", ".")
            );
            let logger = match loggers.get(&name) {
                Some(l) => l.clone_ref(py),
                None => {
                    let l = logging.call_method1("getLogger", (name.clone(),))?.unbind();
                    loggers.insert(name, l.clone_ref(py));
                    l
                }
            };
            if dropped > 0 {
                logger.call_method1(
                    py,
                    "warning",
                    (format!(
                        "{dropped} log records dropped (the log queue was full)"
                    ),),
                )?;
            }
            logger.call_method1(py, "log", (rec.level, rec.message))?;
            Ok(())
        });
        match delivered {
            None => return, // the interpreter is finalizing
            Some(Err(e)) => Python::attach(|py| e.print(py)),
            Some(Ok(())) => {}
        }
    }
}

/// Installs the bridge (once per process); records below `PYBKX_LOG` (default "warn") are cut
/// in Rust before any work.
pub(crate) fn install() {
    if log::set_logger(&BRIDGE).is_ok() {
        let level = std::env::var("PYBKX_LOG")
            .ok()
            .and_then(|v| v.parse::<log::LevelFilter>().ok())
            .unwrap_or(log::LevelFilter::Warn);
        log::set_max_level(level);
    }
}

/// The most detailed level of Rust records forwarded to `logging` (a `logging` level number).
#[pyfunction]
pub(crate) fn set_log_level(level: i32) {
    let filter = match level {
        l if l <= 5 => log::LevelFilter::Trace,
        l if l <= 10 => log::LevelFilter::Debug,
        l if l <= 20 => log::LevelFilter::Info,
        l if l <= 30 => log::LevelFilter::Warn,
        l if l <= 50 => log::LevelFilter::Error,
        _ => log::LevelFilter::Off,
    };
    log::set_max_level(filter);
}
