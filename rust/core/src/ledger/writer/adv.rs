//! Appends of an adv writer (BookKeeper's `LedgerHandleAdv.asyncAddEntry(entryId, ...)`): the
//! caller names each entry id; the add is kept in the pending queue at its id's place, so
//! completions (and the LAC) still go in id order. It never picks ids itself.

use bytes::Bytes;

use super::{AppendDone, LedgerWriter};
use crate::ledger::error::LedgerError;

impl LedgerWriter {
    /// Appends `payload` as entry `entry_id`; `done` gets the id once Qa bookies hold it and
    /// every lower id completed. An id at or below the LAC, or one already pending, fails with
    /// [`LedgerError::DuplicateEntryId`] (a negative id is below the initial LAC of -1, as in
    /// BookKeeper). The ledger length grows in the order adds are made, as BookKeeper's
    /// `doAsyncAddEntry` counts it. Never blocks (see `wait_for_room`).
    pub fn append_adv(&self, entry_id: i64, payload: Bytes, done: AppendDone) {
        if !self.adv {
            return done(Err(LedgerError::InvalidArgument(
                "only an adv ledger's appends name their entry id".into(),
            )));
        }
        if let Err(e) = self.check_payload(payload.len()) {
            return done(Err(e));
        }
        let sends = {
            let mut st = self.state.lock();
            if let Some(err) = super::refusal(&st) {
                drop(st);
                return done(Err(err));
            }
            // Already pending (found) or at or below the LAC: a duplicate.
            let place = match st.pending.binary_search_by_key(&entry_id, |p| p.entry) {
                Err(place) if entry_id > st.lac => Some(place),
                _ => None,
            };
            let Some(place) = place else {
                drop(st);
                return done(Err(LedgerError::DuplicateEntryId {
                    ledger: self.ledger,
                    entry: entry_id,
                }));
            };
            st.next_entry = st.next_entry.max(entry_id + 1);
            self.stage(&mut st, place, entry_id, &payload, done)
        };
        self.send_all(sends);
    }
}
