//! The merge window of a batched read: the entries of at most [`WINDOW_ENTRIES`] consecutive
//! entry ids as they arrive from any stream, run or single read, in any order, each kept once;
//! then handed on in entry order. It never sends a request.

use std::collections::{HashMap, HashSet};

use super::fetch::{Fetched, Requests};
use super::verify::ReadEntry;
use crate::ledger::error::LedgerError;

/// Entries planned and merged at once: the merge buffer of one read stays this small whatever
/// its range.
pub(super) const WINDOW_ENTRIES: i64 = 1 << 16;

/// The entries of one window as they arrive, handed on in entry order.
pub(super) struct Window {
    pub(super) first: i64,
    /// Entries as they arrived, each id once: already in entry order when one stream brought
    /// them all (a segment every bookie holds whole), so they are handed on without a move.
    arrived: Vec<ReadEntry>,
    /// Per entry id of the window, whether it arrived.
    have: Vec<bool>,
    /// Per entry id, whether the read wants it (None: every one); the others are neither read
    /// nor kept.
    wanted: Option<Vec<bool>>,
    /// How many entries the read wants: once that many arrived, nothing is missing.
    needed: usize,
    /// Entry -> bookies that returned a copy failing its digest check.
    corrupt: HashMap<i64, Vec<String>>,
}

impl Window {
    /// A window over `first..=last` keeping the entries `wants` (None: every entry).
    pub(super) fn new(first: i64, last: i64, wants: Option<impl Fn(i64) -> bool>) -> Window {
        let len = (last - first + 1).max(0) as usize;
        let wanted: Option<Vec<bool>> = wants.map(|wants| (first..=last).map(wants).collect());
        Window {
            first,
            arrived: Vec::new(),
            have: vec![false; len],
            needed: wanted
                .as_ref()
                .map_or(len, |w| w.iter().filter(|w| **w).count()),
            wanted,
            corrupt: HashMap::new(),
        }
    }

    pub(super) fn last(&self) -> i64 {
        self.first + self.have.len() as i64 - 1
    }

    pub(super) fn wants(&self, entry: i64) -> bool {
        usize::try_from(entry - self.first)
            .is_ok_and(|i| i < self.have.len() && wanted_at(self.wanted.as_deref(), i))
    }

    /// Keeps a verified entry if the window wants it and it is not in yet.
    pub(super) fn offer(&mut self, entry: ReadEntry) {
        if claim(self.first, self.wanted.as_deref(), &mut self.have, &entry) {
            self.arrived.push(entry);
        }
    }

    /// The wanted entries not read yet, ascending.
    pub(super) fn missing(&self) -> Vec<i64> {
        if self.arrived.len() == self.needed {
            return Vec::new();
        }
        let wanted = self.wanted.as_deref();
        (self.first..)
            .zip(self.have.iter().enumerate())
            .filter_map(|(e, (i, have))| (!*have && wanted_at(wanted, i)).then_some(e))
            .collect()
    }

    pub(super) fn returned_corrupt(&self, entry: i64, bookie: &str) -> bool {
        self.corrupt
            .get(&entry)
            .is_some_and(|bookies| bookies.iter().any(|b| b == bookie))
    }

    /// Takes what a fetch brought: its entries, the copies it found corrupt, the bookies it
    /// found failing, what its requests came to.
    pub(super) fn absorb(
        &mut self,
        got: Fetched,
        failing: &mut HashSet<String>,
        requests: &mut Requests,
    ) {
        let mut entries = got.entries;
        let wanted = self.wanted.as_deref();
        entries.retain(|e| claim(self.first, wanted, &mut self.have, e));
        if self.arrived.is_empty() {
            self.arrived = entries;
        } else {
            self.arrived.append(&mut entries);
        }
        for (entry, bookie) in got.corrupt {
            self.corrupt.entry(entry).or_default().push(bookie);
        }
        failing.extend(got.failing);
        requests.replied += got.requests.replied;
        requests.dropped += got.requests.dropped;
    }

    /// Appends the wanted entries to `out` in order; every one must have arrived.
    pub(super) fn drain_into(
        mut self,
        ledger: i64,
        out: &mut Vec<ReadEntry>,
    ) -> Result<(), LedgerError> {
        if let Some(entry) = self.missing().first() {
            return Err(LedgerError::ReadFailed {
                ledger,
                entry: *entry,
                last: "not read".into(),
                missing: false,
            });
        }
        // Striped streams arrive one write-set start after another: a merge of E sorted runs.
        if !self.arrived.is_sorted_by_key(|e| e.entry_id) {
            self.arrived.sort_by_key(|e| e.entry_id);
        }
        if out.is_empty() {
            *out = self.arrived;
        } else {
            out.append(&mut self.arrived);
        }
        Ok(())
    }
}

/// Whether the read wants the window's entry at index `i` (None: every one).
fn wanted_at(wanted: Option<&[bool]>, i: usize) -> bool {
    wanted.is_none_or(|w| w[i])
}

/// Marks `entry` arrived if the window (from `first`) wants it and does not hold it yet;
/// whether it does now.
fn claim(first: i64, wanted: Option<&[bool]>, have: &mut [bool], entry: &ReadEntry) -> bool {
    match usize::try_from(entry.entry_id - first) {
        Ok(i) if i < have.len() && !have[i] && wanted_at(wanted, i) => {
            have[i] = true;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn entry(id: i64, payload: &'static [u8]) -> ReadEntry {
        ReadEntry::test(id, payload)
    }

    const EVERY: Option<fn(i64) -> bool> = None;

    fn ids(w: Window) -> Vec<i64> {
        let mut out = Vec::new();
        w.drain_into(1, &mut out).unwrap();
        out.iter().map(|e| e.entry_id).collect()
    }

    #[test]
    fn a_window_keeps_the_first_copy_of_its_own_entries_in_order() {
        let mut w = Window::new(10, 13, EVERY);
        assert_eq!(w.missing(), vec![10, 11, 12, 13]);
        w.offer(entry(12, b"a"));
        w.offer(entry(12, b"b"));
        w.offer(entry(9, b"x"));
        w.offer(entry(14, b"x"));
        assert_eq!(w.missing(), vec![10, 11, 13]);
        let mut failing = HashSet::new();
        let mut requests = Requests::default();
        w.absorb(
            Fetched {
                entries: vec![entry(13, b"d"), entry(10, b"c")],
                corrupt: vec![(11, "b1".into())],
                failing: vec!["b2".into()],
                requests: Requests {
                    replied: 0,
                    dropped: 1,
                },
            },
            &mut failing,
            &mut requests,
        );
        assert!(w.returned_corrupt(11, "b1") && !w.returned_corrupt(11, "b0"));
        assert!(failing.contains("b2") && requests.all_dropped());
        assert!(matches!(
            Window::new(10, 13, EVERY).drain_into(1, &mut Vec::new()),
            Err(LedgerError::ReadFailed { entry: 10, .. })
        ));
        w.offer(entry(11, b"e"));
        let mut got = Vec::new();
        w.drain_into(1, &mut got).unwrap();
        let ids: Vec<i64> = got.iter().map(|e| e.entry_id).collect();
        assert_eq!(ids, vec![10, 11, 12, 13]);
        assert_eq!(got[2].payload, Bytes::from_static(b"a"));
    }

    #[test]
    fn a_window_neither_wants_nor_keeps_the_entries_it_was_not_asked_for() {
        let mut w = Window::new(10, 15, Some(|e: i64| e % 3 != 0));
        assert!(!w.wants(12) && w.wants(13) && !w.wants(9) && !w.wants(16));
        assert_eq!(w.missing(), vec![10, 11, 13, 14]);
        for id in 10..=15 {
            w.offer(entry(id, b""));
        }
        assert_eq!(ids(w), vec![10, 11, 13, 14]);
    }
}
