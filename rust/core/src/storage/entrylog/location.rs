//! Where an entry is stored: the one notion of an entry's location shared by the index and
//! everything that moves or rewrites entry logs. It never touches a file.

/// An entry's location: `log_id << 32 | offset` of its record, and the record body's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub loc: u64,
    pub len: u32,
}

impl Location {
    pub fn new(log_id: u32, offset: u64, len: u32) -> Self {
        Location {
            loc: ((log_id as u64) << 32) | (offset & 0xFFFF_FFFF),
            len,
        }
    }

    pub fn log_id(&self) -> u32 {
        (self.loc >> 32) as u32
    }

    pub fn offset(&self) -> u64 {
        self.loc & 0xFFFF_FFFF
    }

    /// Length of the entry data alone (the body also holds ledger and entry ids).
    pub fn data_len(&self) -> usize {
        (self.len as usize).saturating_sub(16)
    }
}

/// The file name of entry log `id`: `<hex id>.log`, as BookKeeper names them.
pub fn log_name(id: u32) -> String {
    format!("{id:x}.log")
}
