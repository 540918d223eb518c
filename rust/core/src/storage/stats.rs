//! The ledger storage's metrics under BookKeeper's names (`BookieStats` and the ledger-storage
//! stats, scope `bookie`) and pybkx's own. It owns the metric fields and the read-out of every
//! part's metrics; the storage's paths record into them.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use super::journal::Journal;
use super::stores::Stores;
use crate::metrics::{Counter, Export, Gauge, Kind, Metric, OpStats, Unit, Value};

/// What the storage itself measures; the journals measure their own ([`super::journal`]).
#[derive(Debug)]
pub struct StorageStats {
    /// Sizes of the entries added.
    pub add_entry_bytes: OpStats,
    /// Reads of one entry or a batch: called -> data read (or failed).
    pub read_entry: OpStats,
    /// Sizes of the entries read.
    pub read_entry_bytes: OpStats,
    /// Finding an entry's location in the index, and reading it from its entry log.
    pub get_offset: OpStats,
    pub get_entry: OpStats,
    /// Entry data read from entry logs (the entry logs count what they write).
    pub read_bytes: Counter,
    pub checkpoints: Counter,
    /// Entry data accepted for journalling (BookKeeper counts `WRITE_BYTES` at the add, not
    /// when its ledger storage later writes the entry log).
    pub write_bytes: Counter,
    /// Entry logs removed by garbage collection, and their bytes.
    pub gc_logs_removed: Counter,
    pub gc_reclaimed_bytes: Counter,
    /// Entry logs compacted.
    pub compacted_logs: Counter,
    /// The compaction under way (all 0 while none runs): when it started (ms since the epoch),
    /// the logs it chose and their bytes, and how many of them (and their bytes) are done.
    pub compaction: CompactionProgress,
    /// Index segment merges done.
    pub index_merges: Counter,
    /// Entry logs moved down a tier, up a tier, and the bytes moved.
    pub tier_demotions: Counter,
    pub tier_promotions: Counter,
    pub tier_moved_bytes: Counter,
    /// Entries read ahead (brought along by a read that missed every cache).
    pub read_ahead_entries: Counter,
    /// Reads that found a stored copy corrupt (a record whose framing or checksum fails).
    pub corrupt_entries: Counter,
    /// The scrubber's work: bytes read back, entries verified, damaged entries found, runs.
    pub scrub_bytes: Counter,
    pub scrub_entries: Counter,
    pub scrub_corrupt: Counter,
    pub scrub_runs: Counter,
    /// The corrupt records already logged (each is logged once; bounded).
    corrupt_logged: Mutex<HashSet<String>>,
}

/// The progress of the compaction under way, for an operator's ETA: gauges, all 0 while no
/// compaction runs.
#[derive(Debug, Default)]
pub struct CompactionProgress {
    pub started_ms: Gauge,
    pub logs_planned: Gauge,
    pub logs_done: Gauge,
    pub bytes_planned: Gauge,
    pub bytes_done: Gauge,
}

impl CompactionProgress {
    /// A compaction of `logs` logs holding `bytes` bytes starts now.
    pub fn start(&self, logs: u64, bytes: u64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.started_ms.set(now);
        self.logs_planned.set(logs);
        self.bytes_planned.set(bytes);
        self.logs_done.set(0);
        self.bytes_done.set(0);
    }

    /// One log of `bytes` bytes is done.
    pub fn log_done(&self, bytes: u64) {
        self.logs_done.inc();
        self.bytes_done.add(bytes);
    }

    /// No compaction runs any more.
    pub fn finish(&self) {
        for gauge in [
            &self.started_ms,
            &self.logs_planned,
            &self.logs_done,
            &self.bytes_planned,
            &self.bytes_done,
        ] {
            gauge.set(0);
        }
    }
}

crate::named_stats!(CompactionProgress {
    started_ms => "pybkx_compaction_started_ms",
    logs_planned => "pybkx_compaction_logs_planned",
    logs_done => "pybkx_compaction_logs_done",
    bytes_planned => "pybkx_compaction_bytes_planned",
    bytes_done => "pybkx_compaction_bytes_done",
});

/// How many distinct corrupt records are remembered to log each only once; past it every
/// further one is still counted but no longer logged.
const CORRUPT_LOGGED_MAX: usize = 1024;

impl StorageStats {
    /// Counts a read that found a corrupt copy and logs it (file, offset, ledger and entry are
    /// in the message) the first time this record is seen.
    pub fn note_corruption(&self, what: &str) {
        self.corrupt_entries.inc();
        let mut logged = self.corrupt_logged.lock();
        if logged.len() < CORRUPT_LOGGED_MAX && logged.insert(what.to_string()) {
            log::error!("corrupt entry copy: {what}; answered EIO (read another replica)");
        }
    }
}

impl Default for StorageStats {
    fn default() -> Self {
        StorageStats {
            add_entry_bytes: OpStats::new(Unit::Bytes),
            read_entry: OpStats::latency(),
            read_entry_bytes: OpStats::new(Unit::Bytes),
            get_offset: OpStats::latency(),
            get_entry: OpStats::latency(),
            read_bytes: Counter::default(),
            checkpoints: Counter::default(),
            index_merges: Counter::default(),
            tier_demotions: Counter::default(),
            tier_promotions: Counter::default(),
            tier_moved_bytes: Counter::default(),
            gc_logs_removed: Counter::default(),
            gc_reclaimed_bytes: Counter::default(),
            compacted_logs: Counter::default(),
            compaction: CompactionProgress::default(),
            write_bytes: Counter::default(),
            read_ahead_entries: Counter::default(),
            corrupt_entries: Counter::default(),
            scrub_bytes: Counter::default(),
            scrub_entries: Counter::default(),
            scrub_corrupt: Counter::default(),
            scrub_runs: Counter::default(),
            corrupt_logged: Mutex::new(HashSet::new()),
        }
    }
}

crate::named_stats!(StorageStats {
    add_entry_bytes => "bookie_BOOKIE_ADD_ENTRY_BYTES",
    read_entry => "bookie_BOOKIE_READ_ENTRY",
    read_entry_bytes => "bookie_BOOKIE_READ_ENTRY_BYTES",
    get_offset => "bookie_STORAGE_GET_OFFSET",
    get_entry => "bookie_STORAGE_GET_ENTRY",
    read_bytes => "bookie_READ_BYTES",
    checkpoints => "pybkx_storage_checkpoints",
    corrupt_entries => "pybkx_storage_corrupt_entries",
});

/// Every metric of the storage (`stats`, `stores`) and its `journals` (labelled
/// `journalIndex`), read now.
pub(super) fn export(
    stats: &StorageStats,
    journals: &[Journal],
    stores: &Stores,
    out: &mut Vec<Metric>,
) {
    stats.export(out);
    stats.compaction.export(out);
    export_journals(journals, out);
    out.push(Metric::gauge(
        "pybkx_disk_reserve_released_bytes",
        stores.reserve.released_bytes(),
    ));
    out.push(Metric::counter(
        "pybkx_disk_reserve_releases",
        stores.reserve.releases.get(),
    ));
    out.push(Metric::counter(
        "pybkx_disk_reserve_restores",
        stores.reserve.restores.get(),
    ));
    out.push(Metric::gauge(
        "bookie_gc_ACTIVE_LEDGER_TOTAL",
        stores.index.read().ledgers.len() as u64,
    ));
    out.push(Metric::counter(
        "bookie_WRITE_BYTES",
        stats.write_bytes.get(),
    ));
    export_stores(stores, out);
    export_counters(stats, out);
    export_scrub(stats, stores, out);
}

/// The scrubber's counters and the progress of its current (or last) run.
fn export_scrub(stats: &StorageStats, stores: &Stores, out: &mut Vec<Metric>) {
    let counters = [
        ("pybkx_scrub_bytes", &stats.scrub_bytes),
        ("pybkx_scrub_entries_verified", &stats.scrub_entries),
        ("pybkx_scrub_corrupt_entries", &stats.scrub_corrupt),
        ("pybkx_scrub_runs", &stats.scrub_runs),
    ];
    for (name, counter) in counters {
        out.push(Metric::counter(name, counter.get()));
    }
    let scrub = &stores.scrub;
    out.push(Metric::gauge(
        "pybkx_scrub_run_total_bytes",
        scrub.run_total_bytes.load(Ordering::Relaxed),
    ));
    out.push(Metric::gauge(
        "pybkx_scrub_run_done_bytes",
        scrub.run_done_bytes.load(Ordering::Relaxed),
    ));
    out.push(Metric::gauge(
        "pybkx_scrub_refused_entries",
        scrub.refused_entries(),
    ));
    out.push(Metric::counter(
        "pybkx_scrub_dropped_findings",
        scrub.dropped_findings.load(Ordering::Relaxed),
    ));
}

/// Each journal's metrics, labelled with its index, and the storage's add latency: the
/// journals' together (an add completes when its journal made it durable and applied it).
fn export_journals(journals: &[Journal], out: &mut Vec<Metric>) {
    let mut adds: Option<Value> = None;
    for (j, journal) in journals.iter().enumerate() {
        let first = out.len();
        journal.export(out);
        crate::metrics::label_all(&mut out[first..], "journalIndex", &j.to_string());
        let Some(m) = out[first..]
            .iter()
            .find(|m| m.name == "bookie_journal_JOURNAL_ADD_ENTRY")
        else {
            continue;
        };
        adds = Some(match (adds, &m.value) {
            (
                Some(Value::Outcomes { mut ok, mut failed }),
                Value::Outcomes {
                    ok: more_ok,
                    failed: more_failed,
                },
            ) => {
                ok.merge(more_ok);
                failed.merge(more_failed);
                Value::Outcomes { ok, failed }
            }
            (_, v) => v.clone(),
        });
    }
    if let Some(value) = adds {
        out.push(Metric {
            name: "bookie_BOOKIE_ADD_ENTRY",
            kind: Kind::Summary,
            unit: Unit::Micros,
            labels: Vec::new(),
            value,
        });
    }
}

/// The entry logs', the write cache's and the index's gauges and counters.
fn export_stores(stores: &Stores, out: &mut Vec<Metric>) {
    out.push(Metric::counter(
        "pybkx_storage_entry_log_rollovers",
        stores.entrylog.rollovers.get(),
    ));
    let (cache_bytes, cache_entries) = stores.cache.usage();
    out.push(Metric::gauge(
        "pybkx_storage_write_cache_bytes",
        cache_bytes as u64,
    ));
    out.push(Metric::gauge(
        "pybkx_storage_write_cache_entries",
        cache_entries as u64,
    ));
    let segs = &stores.segments;
    out.push(Metric::gauge(
        "pybkx_index_segments",
        segs.snapshot().len() as u64,
    ));
    out.push(Metric::gauge("pybkx_index_entries", segs.entry_count()));
    out.push(Metric::gauge(
        "pybkx_index_block_cache_bytes",
        segs.cache.bytes() as u64,
    ));
    out.push(Metric::counter(
        "pybkx_index_block_cache_hits",
        segs.cache.hits.load(Ordering::Relaxed),
    ));
    out.push(Metric::counter(
        "pybkx_index_block_cache_misses",
        segs.cache.misses.load(Ordering::Relaxed),
    ));
}

/// The storage's own counters under pybkx's names: merges, the lifecycle's work, read-ahead.
fn export_counters(stats: &StorageStats, out: &mut Vec<Metric>) {
    let counters = [
        ("pybkx_index_merges", &stats.index_merges),
        ("pybkx_gc_entry_logs_removed", &stats.gc_logs_removed),
        ("pybkx_gc_reclaimed_bytes", &stats.gc_reclaimed_bytes),
        ("pybkx_gc_compacted_entry_logs", &stats.compacted_logs),
        ("pybkx_tier_demoted_entry_logs", &stats.tier_demotions),
        ("pybkx_tier_promoted_entry_logs", &stats.tier_promotions),
        ("pybkx_tier_moved_bytes", &stats.tier_moved_bytes),
        (
            "pybkx_storage_read_ahead_entries",
            &stats.read_ahead_entries,
        ),
    ];
    for (name, counter) in counters {
        out.push(Metric::counter(name, counter.get()));
    }
}
