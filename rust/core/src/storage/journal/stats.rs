//! The metrics of one journal under BookKeeper's names (`JournalStats`, scope `bookie_journal`)
//! and pybkx's own. It owns the fields; the writer and sync threads record into them.

use crate::metrics::{Counter, OpStats, Unit};

/// The metrics of one journal, under BookKeeper's names (`JournalStats`, scope
/// `bookie_journal`; the storage labels them with `journalIndex`) and pybkx's own.
#[derive(Debug)]
pub struct JournalStats {
    /// Entries: enqueued -> durable and applied (or failed).
    pub add_entry: OpStats,
    /// Requests: enqueued -> taken by the journal thread.
    pub queue_latency: OpStats,
    /// Writing one group to the file.
    pub flush_latency: OpStats,
    /// Forming one group: its first request taken -> the group handed to the sync thread.
    pub process_time: OpStats,
    /// A group handed to the sync thread -> taken by it.
    pub force_write_enqueue: OpStats,
    /// One fdatasync.
    pub sync: OpStats,
    /// Creating a journal file.
    pub creation: OpStats,
    /// Entries and bytes of each group.
    pub force_write_batch_entries: OpStats,
    pub force_write_batch_bytes: OpStats,
    /// Entries made durable by one sync.
    pub force_write_grouping: OpStats,
    /// Why groups ended: the group wait passed, the size thresholds, the queue ran empty.
    pub flush_max_wait: Counter,
    pub flush_max_outstanding_bytes: Counter,
    pub flush_empty_queue: Counter,
    /// pybkx's adaptive group commit: groups ended because no sync was in flight.
    pub flush_sync_idle: Counter,
    /// Entry payload bytes journalled.
    pub write_bytes: Counter,
    pub entries: Counter,
    pub records: Counter,
    pub bytes: Counter,
    pub groups: Counter,
    pub syncs: Counter,
    pub rollovers: Counter,
    /// Writes, syncs or applies that failed (a full disk, say), and recoveries from them.
    pub failures: Counter,
    pub recoveries: Counter,
}

impl Default for JournalStats {
    fn default() -> Self {
        JournalStats {
            add_entry: OpStats::latency(),
            queue_latency: OpStats::latency(),
            flush_latency: OpStats::latency(),
            process_time: OpStats::latency(),
            force_write_enqueue: OpStats::latency(),
            sync: OpStats::latency(),
            creation: OpStats::latency(),
            force_write_batch_entries: OpStats::new(Unit::Count),
            force_write_batch_bytes: OpStats::new(Unit::Bytes),
            force_write_grouping: OpStats::new(Unit::Count),
            flush_max_wait: Counter::default(),
            flush_max_outstanding_bytes: Counter::default(),
            flush_empty_queue: Counter::default(),
            flush_sync_idle: Counter::default(),
            write_bytes: Counter::default(),
            entries: Counter::default(),
            records: Counter::default(),
            bytes: Counter::default(),
            groups: Counter::default(),
            syncs: Counter::default(),
            rollovers: Counter::default(),
            failures: Counter::default(),
            recoveries: Counter::default(),
        }
    }
}

crate::named_stats!(JournalStats {
    add_entry => "bookie_journal_JOURNAL_ADD_ENTRY",
    queue_latency => "bookie_journal_JOURNAL_QUEUE_LATENCY",
    flush_latency => "bookie_journal_JOURNAL_FLUSH_LATENCY",
    process_time => "bookie_journal_JOURNAL_PROCESS_TIME_LATENCY",
    force_write_enqueue => "bookie_journal_JOURNAL_FORCE_WRITE_ENQUEUE",
    sync => "bookie_journal_JOURNAL_SYNC",
    creation => "bookie_journal_JOURNAL_CREATION_LATENCY",
    force_write_batch_entries => "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES",
    force_write_batch_bytes => "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES",
    force_write_grouping => "bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_TOTAL",
    flush_max_wait => "bookie_journal_JOURNAL_NUM_FLUSH_MAX_WAIT",
    flush_max_outstanding_bytes => "bookie_journal_JOURNAL_NUM_FLUSH_MAX_OUTSTANDING_BYTES",
    flush_empty_queue => "bookie_journal_JOURNAL_NUM_FLUSH_EMPTY_QUEUE",
    flush_sync_idle => "pybkx_journal_flush_sync_idle",
    write_bytes => "bookie_journal_JOURNAL_WRITE_BYTES",
    entries => "pybkx_journal_entries",
    records => "pybkx_journal_records",
    bytes => "pybkx_journal_bytes",
    groups => "pybkx_journal_groups",
    syncs => "pybkx_journal_syncs",
    rollovers => "pybkx_journal_rollovers",
    failures => "pybkx_journal_failures",
    recoveries => "pybkx_journal_recoveries",
});
