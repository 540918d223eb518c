//! The ledgers map of an entry log (ledger -> bytes it holds there): encoded into a sealed log,
//! read back, or rebuilt by scanning an unsealed one. Garbage collection reads these instead of
//! the logs. It never writes a log.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::log::{LOG_MAGIC, LOG_VERSION, MAP_MARKER, MAP_OFFSET_AT};
use crate::error::{IoContext, Result};
use crate::fs;
use crate::record::{
    be_u32, be_u64, check_file_header, verify_record, RecordReader, ScanEnd, FILE_HEADER_LEN,
    RECORD_HEADER_LEN,
};

pub type LedgersMap = HashMap<u64, u64>;

pub(super) fn encode_ledgers_map(map: &LedgersMap) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + map.len() * 16);
    body.extend_from_slice(&(map.len() as u32).to_be_bytes());
    let mut items: Vec<_> = map.iter().collect();
    items.sort_unstable();
    for (ledger, bytes) in items {
        body.extend_from_slice(&ledger.to_be_bytes());
        body.extend_from_slice(&bytes.to_be_bytes());
    }
    body
}

fn decode_ledgers_map(body: &[u8]) -> Option<LedgersMap> {
    let n = be_u32(body.get(0..4)?) as usize;
    let items = body.get(4..4 + n * 16)?;
    Some(
        items
            .chunks_exact(16)
            .map(|c| (be_u64(&c[0..8]), be_u64(&c[8..16])))
            .collect(),
    )
}

/// Reads a log's ledgers map from its seal, or rebuilds it by scanning the records.
pub fn read_ledgers_map(path: &Path) -> Result<LedgersMap> {
    let mut file = fs::open_read(path)?;
    let mut header = [0u8; FILE_HEADER_LEN];
    if file.read_exact(&mut header).is_err() {
        // Created but never given its header (a crash at rollover): it holds no entries.
        return Ok(LedgersMap::new());
    }
    check_file_header(&header, LOG_MAGIC, LOG_VERSION, "entry log")?;
    let map_offset = be_u64(&header[MAP_OFFSET_AT as usize..]);
    if map_offset != 0 {
        let file_len = file
            .metadata()
            .ctx(|| format!("reading the size of {}", path.display()))?
            .len();
        let mut tail = vec![0u8; file_len.saturating_sub(map_offset) as usize];
        let sealed = file
            .read_exact_at(&mut tail, map_offset)
            .ok()
            .and_then(|_| {
                let len = be_u32(tail.get(0..4)?) as usize;
                let body = verify_record(tail.get(..RECORD_HEADER_LEN + len)?, String::new).ok()?;
                (be_u64(&body[0..8]) == MAP_MARKER).then(|| decode_ledgers_map(&body[16..]))?
            });
        if let Some(map) = sealed {
            return Ok(map);
        }
        log::warn!(
            "entry log {}: unreadable ledgers map, scanning",
            path.display()
        );
    }
    let mut reader = RecordReader::new(file, FILE_HEADER_LEN as u64, path.display().to_string());
    let mut map = LedgersMap::new();
    loop {
        match reader.next_record()? {
            Ok(rec) if rec.body.len() >= 16 => {
                let ledger = be_u64(&rec.body[0..8]);
                if ledger == MAP_MARKER {
                    break;
                }
                *map.entry(ledger).or_insert(0) += rec.size;
            }
            Ok(_) => break,
            Err(ScanEnd::Torn(why)) => {
                log::warn!("entry log {}: scan stopped: {why}", path.display());
                break;
            }
            Err(_) => break,
        }
    }
    Ok(map)
}
