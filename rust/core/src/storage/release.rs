//! Frees the disk blocks of removed entry logs gradually, off the thread that removed them.
//!
//! A removed log (garbage collection, compaction, a tier move's source) is unlinked at once, as
//! before, but one descriptor is kept open past the unlink: the file system frees a file's
//! blocks when its last descriptor closes, and freeing a whole 1 GiB log in one go holds up
//! every fsync on the file system meanwhile (the journal's included, see `fs::cut_in_steps`). A
//! single worker thread, started when work arrives and gone when there is none, waits until no
//! reader holds the log (a read that found it before the removal still reads it whole), then
//! cuts the file down in steps and closes it. Bounded: at most [`MAX_PENDING`] logs wait; past
//! that one is closed at once, as an unlink alone would.

use std::collections::VecDeque;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::LogFile;
use crate::fs;

/// Logs waiting to be freed, at most.
const MAX_PENDING: usize = 64;
/// How long the worker waits for a log's readers before it closes its own descriptors uncut
/// (the last reader's close then frees the blocks at once).
const READERS_WAIT: Duration = Duration::from_secs(30);
const READERS_POLL: Duration = Duration::from_millis(5);

/// One unlinked log: a descriptor open for writing, and the readers' shared handle if the log
/// was open for reads.
pub(super) struct Unlinked {
    pub(super) file: File,
    pub(super) path: PathBuf,
    pub(super) readers: Option<Arc<LogFile>>,
}

#[derive(Default)]
pub(super) struct Releaser {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    pending: VecDeque<Unlinked>,
    working: bool,
}

impl Releaser {
    /// Frees `log` in the background (or now, when too many wait or no thread can start).
    pub(super) fn release(&self, log: Unlinked) {
        let mut st = self.state.lock();
        if st.pending.len() >= MAX_PENDING {
            return; // `log` drops here: closed now, freed at once
        }
        st.pending.push_back(log);
        if st.working {
            return;
        }
        let state = self.state.clone();
        let spawned = std::thread::Builder::new()
            .name("pybkx-entrylog-release".to_string())
            .spawn(move || work(&state));
        match spawned {
            Ok(_) => st.working = true,
            Err(e) => {
                log::warn!("no thread to free removed entry logs in steps: {e}");
                st.pending.clear();
            }
        }
    }

    /// Logs waiting or being freed.
    #[cfg(test)]
    pub(super) fn pending(&self) -> usize {
        let st = self.state.lock();
        st.pending.len() + usize::from(st.working)
    }
}

fn work(state: &Mutex<State>) {
    loop {
        let next = {
            let mut st = state.lock();
            match st.pending.pop_front() {
                Some(log) => log,
                None => {
                    st.working = false;
                    return;
                }
            }
        };
        let Unlinked {
            file,
            path,
            readers,
        } = next;
        if let Some(readers) = readers {
            let deadline = Instant::now() + READERS_WAIT;
            while Arc::strong_count(&readers) > 1 && Instant::now() < deadline {
                std::thread::sleep(READERS_POLL);
            }
            if Arc::strong_count(&readers) > 1 {
                // Still read: never cut a file under a reader; its last close frees it.
                continue;
            }
        }
        if let Err(e) = fs::cut_in_steps(&file, &path, fs::FREE_STEP, fs::FREE_PAUSE, None) {
            log::warn!("freeing removed entry log {}: {e}", path.display());
        }
    }
}
