//! Checkpoints: flush the entry logs, persist the index with the journal marks, remove the
//! journals the marks cover; and the thread that takes one every `flushInterval`.

use super::Inner;
use crate::error::Result;

impl Inner {
    pub(super) fn checkpoint(&self) -> Result<()> {
        let mut log = self.index_log.lock();
        let snapshot = log.wants_snapshot() || self.shared.index.read().needs_snapshot();
        let mut records = Vec::new();
        let marks = self
            .shared
            .index
            .write()
            .take_checkpoint(snapshot, &mut records);
        let written = self.shared.entrylog.sync().and_then(|_| {
            if snapshot {
                log.rewrite(&records)
            } else {
                log.append(&records)
            }
        });
        if let Err(e) = written {
            self.shared.index.write().checkpoint_failed();
            return Err(e);
        }
        drop(log);
        for (j, journal) in self.journals.iter().enumerate() {
            journal.remove_old_files(marks[j].file_id, self.cfg.journal.max_backups)?;
        }
        self.stats.checkpoints.inc();
        Ok(())
    }

    pub(super) fn run_checkpointer(&self) {
        let mut stop = self.stop.lock();
        while !*stop {
            let timed_out = self
                .stop_signal
                .wait_for(&mut stop, self.cfg.flush_interval)
                .timed_out();
            if *stop {
                break;
            }
            if timed_out {
                drop(stop);
                if let Err(e) = self.checkpoint() {
                    log::error!("checkpoint failed: {e}");
                }
                stop = self.stop.lock();
            }
        }
    }
}
