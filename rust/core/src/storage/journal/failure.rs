//! A journal's failure state: the error that stands (a failed write or sync), the file a failed
//! sync poisoned, and the epoch that tells the writer to journal ledger keys again. It holds
//! state only; the writer and sync threads decide what a failure means.

use parking_lot::Mutex;

use crate::error::StorageError;

/// A journal's current failure, shared by its writer and sync threads.
///
/// A failed write keeps its group (unacknowledged) in the writer, which retries it in place
/// every [`RETRY_INTERVAL`] until it succeeds (space came back): only then is it synced,
/// applied and acknowledged. A failed sync poisons its file: the groups of that file are
/// answered with the error (never acknowledged) and the writer moves to a new file. While a
/// failure stands, new requests are refused at once with it. A failure of the sync thread
/// itself (`fatal`) is sticky.
#[derive(Default)]
pub(super) struct Failure(Mutex<FailState>);

#[derive(Default)]
struct FailState {
    error: Option<StorageError>,
    /// The newest journal file a sync failed on: its groups are never acknowledged.
    poisoned_file: Option<u64>,
    fatal: bool,
    /// Bumped on every failure: the writer then journals ledger keys again, since a key record
    /// may have been in a group that never became durable.
    epoch: u64,
}

impl Failure {
    pub(super) fn get(&self) -> Option<StorageError> {
        self.0.lock().error.clone()
    }
    pub(super) fn set(&self, e: StorageError) {
        let mut st = self.0.lock();
        st.epoch += 1;
        st.error.get_or_insert(e);
    }
    pub(super) fn set_fatal(&self, e: StorageError) {
        let mut st = self.0.lock();
        st.fatal = true;
        st.epoch += 1;
        st.error = Some(e);
    }
    pub(super) fn is_fatal(&self) -> bool {
        self.0.lock().fatal
    }
    /// A sync of `file_id` failed.
    pub(super) fn set_sync_failed(&self, file_id: u64, e: StorageError) {
        let mut st = self.0.lock();
        st.epoch += 1;
        st.poisoned_file = Some(st.poisoned_file.map_or(file_id, |f| f.max(file_id)));
        st.error.get_or_insert(e);
    }
    pub(super) fn poisoned_file(&self) -> Option<u64> {
        self.0.lock().poisoned_file
    }
    pub(super) fn epoch(&self) -> u64 {
        self.0.lock().epoch
    }
    /// Counts a failure that needs no retry (an apply error): keys are journalled again.
    pub(super) fn bump(&self) {
        self.0.lock().epoch += 1;
    }
    /// The writer recovered; the poisoned file stays poisoned for the sync thread.
    pub(super) fn clear(&self) {
        let mut st = self.0.lock();
        if !st.fatal {
            st.error = None;
        }
    }
}
