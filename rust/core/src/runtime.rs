//! The process's one tokio runtime, created on first use (never at import time).
//! It never outlives a fork: a forked child (PySpark's workers) gets a runtime of its own.

use std::sync::{Arc, Mutex};

use tokio::runtime::{Builder, Runtime};

static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// The runtime of this process, built on first call.
pub fn runtime() -> std::io::Result<Arc<Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((owner, rt)) = slot.as_ref() {
        if *owner == pid {
            return Ok(rt.clone());
        }
        // Inherited across fork: its threads do not exist here. Leak it rather than drop it,
        // since dropping would try to join threads that are gone.
        if let Some((_, stale)) = slot.take() {
            std::mem::forget(stale);
        }
    }
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 16));
    let rt = Arc::new(
        Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("pybkx-io")
            .enable_all()
            .build()?,
    );
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}
