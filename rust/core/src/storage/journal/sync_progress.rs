//! What the journal thread and its sync thread share for adaptive group commit
//! (`journalAdaptiveGroupWrites`): whether an fdatasync is in flight, and whether the journal
//! thread waits, with a group formed, for the device to go idle. It never blocks.
//!
//! The leader/follower pattern of database logs: a group ends as soon as no sync is in flight,
//! so at low load an add costs one fdatasync and no group wait, and at high load the requests
//! that arrive during a sync form the next group by themselves.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

/// Shared by one journal's two threads.
#[derive(Debug, Default)]
pub(super) struct SyncProgress {
    /// Groups handed to the sync thread whose fdatasync has not returned yet.
    unsynced_groups: AtomicUsize,
    /// The journal thread waits, with a group formed, for `unsynced_groups` to reach zero.
    writer_waiting: AtomicBool,
}

impl SyncProgress {
    /// The journal thread hands a group to the sync thread.
    pub(super) fn handed(&self) {
        self.unsynced_groups.fetch_add(1, SeqCst);
    }

    /// The sync thread is done with `groups` groups (synced or failed): true when that left the
    /// device idle while the journal thread waits for it, so it must be woken.
    pub(super) fn synced(&self, groups: usize) -> bool {
        let before = self.unsynced_groups.fetch_sub(groups, SeqCst);
        debug_assert!(before >= groups, "more groups synced than handed");
        before == groups && self.writer_waiting.swap(false, SeqCst)
    }

    /// Whether no group waits for its sync.
    pub(super) fn idle(&self) -> bool {
        self.unsynced_groups.load(SeqCst) == 0
    }

    /// The journal thread is about to wait for the device: true if it is idle already (then it
    /// must not wait). Both sides use `SeqCst` so that of "the writer marks itself waiting, then
    /// reads the count" and "the sync thread lowers the count, then reads the mark" at least one
    /// sees the other's write: either the writer sees the device idle or it is woken.
    pub(super) fn start_waiting(&self) -> bool {
        self.writer_waiting.store(true, SeqCst);
        if self.idle() {
            self.writer_waiting.store(false, SeqCst);
            return true;
        }
        false
    }

    /// The journal thread stopped waiting (a request came, or the group wait passed).
    pub(super) fn stop_waiting(&self) {
        self.writer_waiting.store(false, SeqCst);
    }
}
