//! The index block cache: decoded segment blocks, bounded in bytes (`dbStorage_rocksDB_blockCacheSize`,
//! the memory budget of the on-disk index). Sharded; each shard evicts by CLOCK (a block used
//! since the hand last passed gets a second chance), so a hit only sets a flag.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::block::Block;

const SHARDS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockKey {
    pub seq: u64,
    pub block: u32,
}

struct Slot {
    block: Arc<Block>,
    used: AtomicBool,
    charge: usize,
}

#[derive(Default)]
struct Shard {
    map: HashMap<BlockKey, Slot>,
    clock: VecDeque<BlockKey>,
    bytes: usize,
}

/// Decoded blocks by (segment, block number).
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    shard_budget: usize,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl BlockCache {
    pub fn new(budget_bytes: usize) -> BlockCache {
        BlockCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: (budget_bytes / SHARDS).max(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &BlockKey) -> &Mutex<Shard> {
        let h = key.seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (key.block as u64);
        &self.shards[(h.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 60) as usize % SHARDS]
    }

    pub fn get(&self, key: &BlockKey) -> Option<Arc<Block>> {
        let shard = self.shard(key).lock();
        match shard.map.get(key) {
            Some(slot) => {
                slot.used.store(true, Ordering::Relaxed);
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(slot.block.clone())
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    pub fn insert(&self, key: BlockKey, block: Arc<Block>) {
        let charge = block.charge();
        let mut shard = self.shard(&key).lock();
        if shard.map.contains_key(&key) {
            return;
        }
        // Evict until the new block fits (a block larger than the shard's budget still goes
        // in alone, so a lookup never fails for want of room).
        let mut turns = shard.clock.len() * 2;
        while shard.bytes + charge > self.shard_budget && turns > 0 {
            turns -= 1;
            let Some(victim) = shard.clock.pop_front() else {
                break;
            };
            let second_chance = shard
                .map
                .get(&victim)
                .is_some_and(|s| s.used.swap(false, Ordering::Relaxed));
            if second_chance {
                shard.clock.push_back(victim);
            } else if let Some(slot) = shard.map.remove(&victim) {
                shard.bytes -= slot.charge;
            }
        }
        shard.bytes += charge;
        shard.clock.push_back(key);
        shard.map.insert(
            key,
            Slot {
                block,
                used: AtomicBool::new(false),
                charge,
            },
        );
    }

    /// Drops every block of segment `seq` (it was merged away).
    pub fn forget_segment(&self, seq: u64) {
        for s in &self.shards {
            let mut shard = s.lock();
            let Shard { map, clock, bytes } = &mut *shard;
            map.retain(|k, slot| {
                if k.seq == seq {
                    *bytes -= slot.charge;
                    false
                } else {
                    true
                }
            });
            clock.retain(|k| k.seq != seq);
        }
    }

    /// Bytes of decoded blocks held now.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::entrylog::Location;
    use crate::storage::index::block::IndexEntry;

    fn block(n: usize) -> Arc<Block> {
        let mut entries = Vec::with_capacity(n);
        for i in 0..n as u64 {
            entries.push(IndexEntry {
                ledger: 1,
                entry: i,
                at: Location::new(1, 32, 16),
            });
        }
        Arc::new(Block::from_entries(&entries).unwrap())
    }

    #[test]
    fn stays_within_budget_and_keeps_used_blocks() {
        let one = block(100).charge();
        let cache = BlockCache::new(one * SHARDS * 4);
        let hot = BlockKey { seq: 0, block: 0 };
        cache.insert(hot, block(100));
        for i in 1..2000u32 {
            assert!(cache.get(&hot).is_some(), "hot block evicted at {i}");
            cache.insert(BlockKey { seq: 1, block: i }, block(100));
            assert!(cache.bytes() <= one * SHARDS * 4);
        }
        cache.forget_segment(1);
        assert_eq!(cache.bytes(), one);
    }
}
