//! What the index holds per entry, and a decoded segment block: the unit segments read and
//! the block cache keeps. It never touches a file.

use crate::storage::entrylog::Location;

/// One indexed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub ledger: u64,
    pub entry: u64,
    pub at: Location,
}

impl IndexEntry {
    pub(super) fn key(&self) -> (u64, u64) {
        (self.ledger, self.entry)
    }
}

/// A run of a decoded block: entries of one ledger in one entry log.
#[derive(Debug, Clone, Copy)]
struct BlockRun {
    ledger: u64,
    log_id: u32,
    /// Index in `ids` past the run's last entry (its first is the previous run's end).
    end: u32,
}

/// Where an entry's record lies in its run's entry log.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spot {
    pub offset: u32,
    pub len: u32,
}

/// A decoded block: its entries sorted by (ledger, entry), kept by run so that an entry costs
/// 16 bytes (its id and where it lies) rather than the 32 of an `IndexEntry`: a cache miss
/// writes half as much, and the block cache's budget holds twice the entries.
#[derive(Debug, Default)]
pub struct Block {
    runs: Vec<BlockRun>,
    ids: Vec<u64>,
    spots: Vec<Spot>,
    /// The key of the last entry pushed.
    last: Option<(u64, u64)>,
}

/// Why entries pushed into a block were refused: out of (ledger, entry) order.
#[derive(Debug)]
pub struct OutOfOrder;

impl Block {
    /// An empty block with room for `entries` entries in `runs` runs.
    pub fn with_capacity(entries: usize, runs: usize) -> Block {
        Block {
            runs: Vec::with_capacity(runs),
            ids: Vec::with_capacity(entries),
            spots: Vec::with_capacity(entries),
            last: None,
        }
    }

    /// Starts a run: the entries pushed next are `ledger`'s, in entry log `log_id`.
    pub fn start_run(&mut self, ledger: u64, log_id: u32) {
        let run = BlockRun {
            ledger,
            log_id,
            end: self.ids.len() as u32,
        };
        // A run left empty is replaced, so that every run holds an entry (lookups read a
        // run's last one).
        let empty = !self.runs.is_empty() && self.last_run_start() == self.ids.len();
        match self.runs.last_mut() {
            Some(last) if empty => *last = run,
            _ => self.runs.push(run),
        }
    }

    /// Appends an entry to the current run. Refuses one whose (ledger, entry) key is not above
    /// the block's last (a run started, none yet: also refused).
    pub fn push(&mut self, entry: u64, offset: u32, len: u32) -> Result<(), OutOfOrder> {
        let Some(run) = self.runs.last_mut() else {
            return Err(OutOfOrder);
        };
        let key = (run.ledger, entry);
        if self.last.is_some_and(|last| key <= last) {
            return Err(OutOfOrder);
        }
        run.end += 1;
        self.ids.push(entry);
        self.spots.push(Spot { offset, len });
        self.last = Some(key);
        Ok(())
    }

    /// The spots of the current run's entries, to fill in after their ids were pushed (a
    /// segment stores a run's ids, then their lengths).
    pub fn run_spots_mut(&mut self) -> &mut [Spot] {
        let start = self.last_run_start();
        &mut self.spots[start..]
    }

    /// Where the last run's entries start in `ids` (0 with no run).
    fn last_run_start(&self) -> usize {
        self.run_start(self.runs.len().saturating_sub(1))
    }

    /// Gives back unused room when more than a quarter of it is left (the cache charges a block
    /// by its capacity).
    pub fn trim(&mut self) {
        let n = self.ids.len();
        if self.ids.capacity() - n > n / 4 {
            self.ids.shrink_to_fit();
            self.spots.shrink_to_fit();
        }
        if self.runs.capacity() - self.runs.len() > self.runs.len() / 4 {
            self.runs.shrink_to_fit();
        }
    }

    /// A block of `entries`, which must be in ascending (ledger, entry) order; a run starts
    /// wherever the ledger or the log changes. (Tests build blocks so; segments decode theirs.)
    #[cfg(test)]
    pub fn from_entries(entries: &[IndexEntry]) -> Result<Block, OutOfOrder> {
        let mut block = Block::with_capacity(entries.len(), 1);
        let mut current = None;
        for e in entries {
            let run = (e.ledger, e.at.log_id());
            if current != Some(run) {
                block.start_run(e.ledger, e.at.log_id());
                current = Some(run);
            }
            block.push(e.entry, e.at.offset() as u32, e.at.len)?;
        }
        Ok(block)
    }

    /// Entries held.
    #[cfg(test)]
    pub fn entry_count(&self) -> usize {
        self.ids.len()
    }

    /// Memory a cached block is charged for.
    pub fn charge(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<BlockRun>()
            + self.ids.capacity() * std::mem::size_of::<u64>()
            + self.spots.capacity() * std::mem::size_of::<Spot>()
            + 96
    }

    fn run_start(&self, r: usize) -> usize {
        if r == 0 {
            0
        } else {
            self.runs[r - 1].end as usize
        }
    }

    /// The first run whose last key is not below (ledger, entry), if any.
    fn run_reaching(&self, ledger: u64, entry: u64) -> Option<usize> {
        let r = self.runs.partition_point(|run| {
            run.end == 0 || (run.ledger, self.ids[run.end as usize - 1]) < (ledger, entry)
        });
        (r < self.runs.len()).then_some(r)
    }

    /// Where (ledger, entry) lies, if the block holds it.
    pub fn find(&self, ledger: u64, entry: u64) -> Option<Location> {
        let r = self.run_reaching(ledger, entry)?;
        let run = self.runs[r];
        if run.ledger != ledger {
            return None;
        }
        let start = self.run_start(r);
        let i = start
            + self.ids[start..run.end as usize]
                .binary_search(&entry)
                .ok()?;
        let spot = self.spots[i];
        Some(Location::new(run.log_id, u64::from(spot.offset), spot.len))
    }

    /// A cursor at the first entry whose key is not below (ledger, from).
    pub fn seek(&self, ledger: u64, from: u64) -> Cursor {
        let Some(r) = self.run_reaching(ledger, from) else {
            return Cursor {
                pos: self.ids.len(),
                run: self.runs.len(),
            };
        };
        let run = self.runs[r];
        let start = self.run_start(r);
        let pos = if run.ledger == ledger {
            start + self.ids[start..run.end as usize].partition_point(|id| *id < from)
        } else {
            start
        };
        Cursor { pos, run: r }
    }

    /// The entry at `cursor`, moving it on; None past the last.
    pub fn next(&self, cursor: &mut Cursor) -> Option<IndexEntry> {
        if cursor.pos >= self.ids.len() {
            return None;
        }
        while self.runs[cursor.run].end as usize <= cursor.pos {
            cursor.run += 1;
        }
        let run = self.runs[cursor.run];
        let spot = self.spots[cursor.pos];
        let e = IndexEntry {
            ledger: run.ledger,
            entry: self.ids[cursor.pos],
            at: Location::new(run.log_id, u64::from(spot.offset), spot.len),
        };
        cursor.pos += 1;
        Some(e)
    }
}

/// A position in a block (see [`Block::seek`], [`Block::next`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cursor {
    pos: usize,
    run: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(ledger: u64, entry: u64, log: u32, offset: u64) -> IndexEntry {
        IndexEntry {
            ledger,
            entry,
            at: Location::new(log, offset, 16),
        }
    }

    #[test]
    fn finds_and_walks_what_it_holds() {
        // Ledger 1 in two logs, ledger 2 with gaps, ledger 4 alone.
        let all = vec![
            e(1, 0, 1, 32),
            e(1, 1, 1, 56),
            e(1, 2, 2, 32),
            e(2, 5, 2, 56),
            e(2, 9, 2, 80),
            e(4, 0, 3, 32),
        ];
        let block = Block::from_entries(&all).unwrap();
        assert_eq!(block.entry_count(), all.len());
        for x in &all {
            assert_eq!(block.find(x.ledger, x.entry), Some(x.at));
        }
        for (ledger, entry) in [
            (0, 0),
            (1, 3),
            (2, 0),
            (2, 6),
            (2, 10),
            (3, 0),
            (4, 1),
            (5, 0),
        ] {
            assert_eq!(block.find(ledger, entry), None, "{ledger}/{entry}");
        }
        let walk = |ledger, from| {
            let mut c = block.seek(ledger, from);
            std::iter::from_fn(|| block.next(&mut c)).collect::<Vec<_>>()
        };
        assert_eq!(walk(0, 0), all);
        assert_eq!(walk(1, 2), all[2..]);
        assert_eq!(walk(2, 6), all[4..]);
        assert_eq!(walk(3, 0), all[5..]);
        assert_eq!(walk(4, 1), vec![]);
        assert_eq!(walk(9, 0), vec![]);
    }

    #[test]
    fn entries_out_of_order_are_refused() {
        assert!(Block::from_entries(&[e(1, 2, 1, 32), e(1, 2, 1, 56)]).is_err());
        assert!(Block::from_entries(&[e(2, 0, 1, 32), e(1, 5, 1, 56)]).is_err());
        assert!(Block::from_entries(&[e(1, 3, 1, 32), e(1, 1, 2, 56)]).is_err());
        let mut block = Block::default();
        assert!(block.push(0, 32, 16).is_err(), "an entry before any run");
        // A run left empty is replaced by the next.
        block.start_run(1, 1);
        block.start_run(2, 1);
        block.push(0, 32, 16).unwrap();
        block.start_run(3, 1);
        assert_eq!(block.find(2, 0), Some(Location::new(1, 32, 16)));
        assert_eq!(block.find(3, 0), None);
    }

    #[test]
    fn an_entry_costs_sixteen_bytes() {
        let all: Vec<_> = (0..1000).map(|i| e(7, i, 1, 32 + 24 * i)).collect();
        let block = Block::from_entries(&all).unwrap();
        assert!(block.charge() <= 1000 * 16 + 200, "{}", block.charge());
    }
}
