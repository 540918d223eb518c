//! Frees the disk blocks of removed storage files gradually, off the thread that removed them:
//! entry logs (garbage collection, compaction, a tier move's source) and index segments (merged
//! away).
//!
//! A removed file is unlinked at once, but one descriptor is kept open past the unlink: the file
//! system frees a file's blocks when its last descriptor closes, and freeing a whole 1 GiB file
//! in one go holds up every fsync on the file system meanwhile (the journal's included, see
//! `fs::cut_in_steps`). A worker thread per releaser, started when work arrives and gone when
//! there is none, waits until no reader holds the file (a read that found it before the removal
//! still reads it whole), then cuts it down in steps and closes it. Bounded: at most
//! [`MAX_PENDING`] files wait; past that one is closed at once, as an unlink alone would.

use std::any::Any;
use std::collections::VecDeque;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::fs;

/// Files waiting to be freed, at most (per releaser).
const MAX_PENDING: usize = 64;
/// How long the worker waits for a file's readers before it closes its own descriptors uncut
/// (the last reader's close then frees the blocks at once).
const READERS_WAIT: Duration = Duration::from_secs(30);
const READERS_POLL: Duration = Duration::from_millis(5);

/// One unlinked file: a descriptor open for writing, and the handle readers share if it was
/// open for reads (the file is cut once this is the last reference to it).
pub(super) struct Unlinked {
    pub(super) file: File,
    pub(super) path: PathBuf,
    pub(super) readers: Option<Arc<dyn Any + Send + Sync>>,
}

pub(super) struct Releaser {
    /// The worker thread's name.
    name: &'static str,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    pending: VecDeque<Unlinked>,
    working: bool,
}

impl Releaser {
    /// A releaser whose worker thread is called `name`.
    pub(super) fn new(name: &'static str) -> Releaser {
        Releaser {
            name,
            state: Arc::default(),
        }
    }

    /// Frees `file` in the background (or now, when too many wait or no thread can start).
    pub(super) fn release(&self, file: Unlinked) {
        let mut st = self.state.lock();
        if st.pending.len() >= MAX_PENDING {
            return; // `file` drops here: closed now, freed at once
        }
        st.pending.push_back(file);
        if st.working {
            return;
        }
        let state = self.state.clone();
        let spawned = std::thread::Builder::new()
            .name(self.name.to_string())
            .spawn(move || work(&state));
        match spawned {
            Ok(_) => st.working = true,
            Err(e) => {
                log::warn!(
                    "no thread ({}) to free removed files in steps: {e}",
                    self.name
                );
                st.pending.clear();
            }
        }
    }

    /// Files waiting or being freed.
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
                Some(file) => file,
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
            log::warn!("freeing removed file {}: {e}", path.display());
        }
    }
}
