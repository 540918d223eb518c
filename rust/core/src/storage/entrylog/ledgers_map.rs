//! The ledgers map of an entry log (ledger -> bytes it holds there) and its encoding in a
//! sealed log; garbage collection reads these instead of the logs. Pure byte work.

use crate::record::{be_u32, be_u64};
use std::collections::HashMap;

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

pub(super) fn decode_ledgers_map(body: &[u8]) -> Option<LedgersMap> {
    let n = be_u32(body.get(0..4)?) as usize;
    let items = body.get(4..4 + n * 16)?;
    Some(
        items
            .chunks_exact(16)
            .map(|c| (be_u64(&c[0..8]), be_u64(&c[8..16])))
            .collect(),
    )
}
