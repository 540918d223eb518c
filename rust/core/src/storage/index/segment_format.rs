//! The segment file format, shared by the writer and the reader: the header and trailer magic,
//! the block and run limits, the block directory entries, the Bloom filters, varints, and how a
//! run is encoded and a block decoded. It performs no I/O.
//!
//! File: the common 32-byte header (magic `PBKXISEG`), then blocks, each one record
//! (`[len][crc32c][body]`) of runs, then one record holding the block directory and the
//! ledger Bloom filter, then a 16-byte trailer (offset of that record, magic).
//!
//! A run is entries of one ledger lying back to back in one entry log, as a sorted flush
//! writes them: `ledger u64, first entry u64, log id u32, first offset u32, count varint`,
//! then per later entry its id delta (varint), then per entry its record body length
//! (varint). Offsets follow from lengths, so an entry costs about 3 bytes on disk.

use super::block::{Block, IndexEntry, Spot};
use crate::error::{Result, StorageError};
use crate::record::{be_u32, be_u64, RECORD_HEADER_LEN};

pub(super) const SEGMENT_MAGIC: &[u8; 8] = b"PBKXISEG";
pub(super) const SEGMENT_VERSION: u32 = 1;
pub(super) const TRAILER_MAGIC: &[u8; 8] = b"PBKXIEND";
pub(super) const TRAILER_LEN: usize = 16;
/// A block closes at the first run's end past this many entries or encoded bytes: lookups
/// binary-search a decoded block, so its size bounds their cost and the cache's unit. (Ending
/// runs at the limit instead made misses faster and hits slower by as much: not taken; see
/// docs/performance.md, "Design figures behind the code".)
pub(super) const BLOCK_MAX_ENTRIES: usize = 1024;
pub(super) const BLOCK_MAX_BYTES: usize = 8 << 10;
pub(super) const RUN_MAX_ENTRIES: usize = 4096;
/// Bloom filters: bits per key and probes. One filter holds ledger ids (scans), the other
/// (ledger, entry / 1024) buckets (lookups): when many ledgers are written interleaved every
/// segment holds every ledger, but only one or two hold a given bucket of its entries.
const BLOOM_BITS_PER_KEY: usize = 10;
const BUCKET_BITS: u32 = 10;
const BLOOM_PROBES: u32 = 6;
pub(super) const DIR_ENTRY_LEN: usize = 8 + 8 + 8 + 8 + 8 + 4 + 4;

/// The file name of segment `seq`.
pub fn segment_name(seq: u64) -> String {
    format!("{seq:x}.idx")
}

/// Where a block is and which keys it holds (kept in memory for every block).
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockMeta {
    pub(super) first: (u64, u64),
    pub(super) last: (u64, u64),
    pub(super) offset: u64,
    pub(super) len: u32,
}

/// Ledger-id Bloom filter: a segment without the ledger is skipped without reading a block.
pub(super) struct Bloom {
    pub(super) bits: Vec<u64>,
}

pub(super) fn bucket_key(ledger: u64, entry: u64) -> u64 {
    mix(ledger) ^ (entry >> BUCKET_BITS)
}

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Bloom {
    pub(super) fn with_keys(keys: &[u64]) -> Bloom {
        // A power of two, so a probe is a mask rather than a division.
        let words = (keys.len() * BLOOM_BITS_PER_KEY)
            .div_ceil(64)
            .max(1)
            .next_power_of_two();
        let mut bloom = Bloom {
            bits: vec![0; words],
        };
        for k in keys {
            for bit in bloom.probes(*k) {
                bloom.bits[bit / 64] |= 1 << (bit % 64);
            }
        }
        bloom
    }

    fn probes(&self, key: u64) -> impl Iterator<Item = usize> {
        let h = mix(key);
        let (h1, h2) = (h as u32 as u64, (h >> 32) | 1);
        let mask = (self.bits.len() * 64 - 1) as u64;
        (0..BLOOM_PROBES as u64).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) & mask) as usize)
    }

    pub(super) fn may_contain(&self, key: u64) -> bool {
        self.probes(key)
            .all(|bit| self.bits[bit / 64] & (1 << (bit % 64)) != 0)
    }
}

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn get_varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= ((b & 0x7F) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A run being collected.
pub(super) struct Run {
    pub(super) ledger: u64,
    pub(super) first: u64,
    pub(super) log_id: u32,
    pub(super) first_offset: u64,
    pub(super) next_offset: u64,
    pub(super) last_entry: u64,
    pub(super) deltas: Vec<u64>,
    pub(super) lens: Vec<u32>,
}

impl Run {
    pub(super) fn continues(&self, e: &IndexEntry) -> bool {
        e.ledger == self.ledger
            && e.at.log_id() == self.log_id
            && e.at.offset() == self.next_offset
            && e.entry > self.last_entry
            && self.lens.len() < RUN_MAX_ENTRIES
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ledger.to_be_bytes());
        out.extend_from_slice(&self.first.to_be_bytes());
        out.extend_from_slice(&self.log_id.to_be_bytes());
        out.extend_from_slice(&(self.first_offset as u32).to_be_bytes());
        put_varint(out, self.lens.len() as u64);
        for d in &self.deltas {
            put_varint(out, *d);
        }
        for l in &self.lens {
            put_varint(out, *l as u64);
        }
    }
}

pub(super) fn decode_block(body: &[u8], what: &dyn Fn() -> String) -> Result<Block> {
    let bad = || StorageError::Corruption(format!("{}: malformed block", what()));
    // Sized once from the body (an entry takes at least two of its bytes, a run at least 26):
    // growing by doubling copied the entries over and over, a measurable share of a cache
    // miss's time (docs/performance.md, "Design figures behind the code").
    let mut block = Block::with_capacity(body.len() / 2 + 1, body.len() / 26 + 1);
    let mut at = 0usize;
    while at < body.len() {
        let head = body.get(at..at + 24).ok_or_else(bad)?;
        at += 24;
        let ledger = be_u64(&head[0..8]);
        let first = be_u64(&head[8..16]);
        let log_id = be_u32(&head[16..20]);
        let first_offset = be_u32(&head[20..24]);
        let count = get_varint(body, &mut at).ok_or_else(bad)? as usize;
        if count == 0 || count > RUN_MAX_ENTRIES {
            return Err(bad());
        }
        // A run stores its ids, then its lengths: the ids go in first, their spots after.
        block.start_run(ledger, log_id);
        let mut id = first;
        for i in 0..count {
            if i > 0 {
                let d = get_varint(body, &mut at).ok_or_else(bad)?;
                id = id.checked_add(d).ok_or_else(bad)?;
            }
            block.push(id, 0, 0).map_err(|_| bad())?;
        }
        let mut offset = u64::from(first_offset);
        for spot in block.run_spots_mut() {
            let len =
                u32::try_from(get_varint(body, &mut at).ok_or_else(bad)?).map_err(|_| bad())?;
            *spot = Spot {
                offset: u32::try_from(offset).map_err(|_| bad())?,
                len,
            };
            offset += (RECORD_HEADER_LEN + len as usize) as u64;
        }
    }
    block.trim();
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        let mut out = Vec::new();
        let vals = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
        for v in vals {
            put_varint(&mut out, v);
        }
        let mut at = 0;
        for v in vals {
            assert_eq!(get_varint(&out, &mut at), Some(v));
        }
        assert_eq!(get_varint(&out, &mut at), None);
    }
}
