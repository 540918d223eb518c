//! The typed configuration of every part of the data plane. It holds no key names and no
//! defaults: the Python control plane reads BookKeeper's keys from files and flags, applies the
//! defaults (one table, `pybkx.config`) and hands these structs over already typed. Each part
//! checks here only the invariants it relies on; it never touches the file system.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Result, StorageError};

/// Entry log offsets are 32-bit inside a location, so a log may not grow past this.
pub const MAX_LOG_SIZE_LIMIT: u64 = (u32::MAX as u64) - (64 << 20);
/// Smallest frame limit that still fits every fixed-size request and response.
pub const MIN_FRAME_SIZE: usize = 64;

/// Group commit and file policy of the journal (BookKeeper's `journal*` keys).
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// `journalMaxGroupWaitMSec`; zero means "flush when the queue is empty", as BookKeeper.
    pub max_group_wait: Duration,
    pub buffered_writes_threshold: usize,
    /// Zero: no entry-count trigger.
    pub buffered_entries_threshold: usize,
    pub flush_when_queue_empty: bool,
    /// `journalAdaptiveGroupWrites`: a group also ends as soon as no fdatasync is in flight, so
    /// the group wait is spent only while the device is busy.
    pub adaptive_group_writes: bool,
    pub sync_data: bool,
    pub write_buffer_size: usize,
    pub prealloc_size: u64,
    pub max_file_size: u64,
    pub max_backups: usize,
    /// Requests waiting for the journal thread; a full queue blocks or refuses producers.
    pub queue_size: usize,
    pub page_cache_flush_interval: Duration,
    pub skip_replay_invalid_record: bool,
    /// `journalRemoveFromPageCache`: drop synced journal pages from the page cache.
    pub remove_from_page_cache: bool,
    /// `journalDirectIO` (pybkx's): journal files are written with `O_DIRECT` (no copy into the
    /// page cache) where the file system allows it.
    pub direct_io: bool,
    /// `journalReuseFiles`: a rollover reuses the oldest journal file a checkpoint let go (one
    /// of those kept by `max_backups`) instead of creating one.
    pub reuse_files: bool,
}

/// Everything `LedgerStorage::open` needs.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    pub journal_dirs: Vec<PathBuf>,
    pub ledger_dirs: Vec<PathBuf>,
    /// Empty: the index lives in the first ledger directory.
    pub index_dirs: Vec<PathBuf>,
    pub journal: JournalConfig,
    /// Entry log rollover size (`logSizeLimit`).
    pub log_size_limit: u64,
    /// Entry log write buffer (`writeBufferSizeBytes`).
    pub entry_log_write_buffer: usize,
    /// `dbStorage_directIOEntryLogger`: entry logs are written with `O_DIRECT` (no copy into
    /// the page cache) where the file system allows it.
    pub entry_log_direct_io: bool,
    /// `entryLogDirectReads` (pybkx's key): reads of at least 128 KiB from entry logs use
    /// `O_DIRECT` where the file system allows it.
    pub entry_log_direct_reads: bool,
    /// Checkpoint period (`flushInterval`); zero disables the timer.
    pub flush_interval: Duration,
    /// Write cache (`dbStorage_writeCacheMaxSizeMb`): journalled entries wait here, sorted at
    /// the next flush; a flush starts when half of it is used.
    pub write_cache_bytes: usize,
    /// Memory for the index's cached blocks (`dbStorage_rocksDB_blockCacheSize`).
    pub index_cache_bytes: usize,
    /// Read-ahead cache (`dbStorage_readAheadCacheMaxSizeMb`).
    pub read_ahead_cache_bytes: usize,
    /// Entries read ahead after a missed read (`dbStorage_readAheadCacheBatchSize`); 0 or 1
    /// turns read-ahead off.
    pub read_ahead_batch: usize,
    /// `entryLogReadAheadThreads` (pybkx's key): threads that read a scanned ledger's next
    /// entries from logs read directly, ahead of the scan and several at once; 0: a scan reads
    /// ahead only within its own I/O.
    pub read_ahead_threads: usize,
    /// Entry-log garbage collection period (`gcWaitTime`); zero turns the timer off.
    pub gc_wait: Duration,
    /// `isForceGCAllowWhenNoSpace`: with ledger directories (almost) full, compact at once
    /// instead of suspending compaction (see `LedgerStorage::set_disk_pressure`).
    pub force_gc_when_no_space: bool,
    /// Minor compaction: logs at most this live (`minorCompactionThreshold`), every
    /// `minorCompactionInterval` (zero: off).
    pub minor_compaction_threshold: f64,
    pub minor_compaction_interval: Duration,
    /// Major compaction (`majorCompactionThreshold`, `majorCompactionInterval`).
    pub major_compaction_threshold: f64,
    pub major_compaction_interval: Duration,
    /// Bytes per second a compaction scans (`compactionRateByBytes`); 0: unpaced.
    pub compaction_rate_bytes: u64,
    /// `scrubRateBytesPerSecond` (pybkx's key): bytes per second the background scrubber
    /// reads back; 0 turns the background scrubber off (a run asked for is then unpaced).
    pub scrub_rate_bytes: u64,
    /// `scrubIntervalSeconds` (pybkx's key): the pause between two background scrub runs
    /// (the first starts one pause after the open); zero turns the background scrubber off.
    pub scrub_interval: Duration,
    /// Tiers, quotas and placement policy of the ledger directories.
    pub dirs: DirsConfig,
    /// `diskReservedSpaceMB` in bytes, per directory; None: derived from `log_size_limit`, the
    /// journal's preallocation and the disk's size (see `storage::reserve`); 0: no reserve.
    pub disk_reserve_bytes: Option<u64>,
}

/// How new entry logs are placed over the ledger directories (pybkx's tiered storage, after
/// Alluxio's worker allocators and reviewers).
#[derive(Debug, Clone)]
pub struct DirsConfig {
    /// Per ledger directory (in order): its tier, 0 on top. Missing: tier 0.
    pub tiers: Vec<usize>,
    /// Per ledger directory: the bytes it may hold. Missing or None: its file system's size.
    pub quotas: Vec<Option<u64>>,
    /// `entryLogAllocatorClass`.
    pub allocator: String,
    /// `entryLogReviewerClass`.
    pub reviewer: String,
    pub reviewer_soft_limit: u64,
    pub reviewer_hard_limit: u64,
    /// `entryLogAnnotatorClass`: how entry logs are ranked hot to cold for demotion.
    pub annotator: String,
    /// `lrfuStepFactor` and `lrfuAttenuationFactor` (LRFUAnnotator).
    pub lrfu_step: f64,
    pub lrfu_attenuation: f64,
    /// Per tier (index = level): `tieredStorageLevel<N>HighWatermark` and `...LowWatermark`,
    /// fractions of the tier's capacity. Missing: 0.95 and 0.7.
    pub high_watermarks: Vec<f64>,
    pub low_watermarks: Vec<f64>,
    /// `tieredStoragePromoteOnRead`: a demoted log read again moves back up when there is room.
    pub promote_on_read: bool,
    /// `tieredStorageMoveRateByBytes`: bytes per second copied by moves between tiers; 0:
    /// unpaced.
    pub move_rate_bytes: u64,
}

impl Default for DirsConfig {
    /// One tier, no quotas, the most free directory first, no reviewer.
    fn default() -> Self {
        DirsConfig {
            tiers: Vec::new(),
            quotas: Vec::new(),
            allocator: "MaxFreeAllocator".into(),
            reviewer: "AcceptingReviewer".into(),
            reviewer_soft_limit: 0,
            reviewer_hard_limit: 0,
            annotator: "LRUAnnotator".into(),
            lrfu_step: 0.25,
            lrfu_attenuation: 2.0,
            high_watermarks: Vec::new(),
            low_watermarks: Vec::new(),
            promote_on_read: false,
            move_rate_bytes: 0,
        }
    }
}

fn invalid(what: String) -> StorageError {
    StorageError::InvalidArgument(what)
}

impl StorageConfig {
    /// Checks what the storage relies on. Raises InvalidArgument naming the BookKeeper key.
    pub fn validate(&self) -> Result<()> {
        if self.journal_dirs.is_empty() || self.ledger_dirs.is_empty() {
            return Err(invalid(
                "journalDirectories and ledgerDirectories must not be empty".into(),
            ));
        }
        if !(4096..=MAX_LOG_SIZE_LIMIT).contains(&self.log_size_limit) {
            return Err(invalid(format!(
                "logSizeLimit must be between 4096 and {MAX_LOG_SIZE_LIMIT}, got {}",
                self.log_size_limit
            )));
        }
        let j = &self.journal;
        if j.queue_size == 0 || j.write_buffer_size == 0 || j.max_file_size == 0 {
            return Err(invalid(
                "journalQueueSize, journalWriteBufferSizeKB and journalMaxSizeMB must be > 0"
                    .into(),
            ));
        }
        if self.entry_log_write_buffer == 0 {
            return Err(invalid("writeBufferSizeBytes must be > 0".into()));
        }
        if self.write_cache_bytes < 1 << 20 {
            return Err(invalid(format!(
                "dbStorage_writeCacheMaxSizeMb must be at least 1, got {} bytes",
                self.write_cache_bytes
            )));
        }
        Ok(())
    }

    /// Where the index lives: the first index directory, else the first ledger directory.
    pub fn index_dir(&self) -> &Path {
        self.index_dirs
            .first()
            .or(self.ledger_dirs.first())
            .map_or(Path::new("."), |p| p.as_path())
    }
}

/// The bookie server's limits (BookKeeper's server keys).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    /// `nettyMaxFrameSizeBytes`: larger frames close the connection.
    pub max_frame_size: usize,
    /// `maxPendingAddRequestsPerThread`, applied per connection.
    pub max_pending_adds: usize,
    /// `maxPendingReadRequestsPerThread`, applied per connection.
    pub max_pending_reads: usize,
    /// `maxBatchReadSize`: the most bytes one batch-read response may carry.
    pub max_batch_read_size: usize,
    /// `numReadWorkerThreads`: threads that serve plain reads, the connections' in turn; 0 runs
    /// reads inline on their connection's task (as BookKeeper's 0 runs them on the I/O thread).
    pub read_worker_threads: usize,
    /// `readWorkerThreadNice` (pybkx's): niceness added to the read threads, so that adds take
    /// a busy machine's CPU first.
    pub read_worker_nice: i32,
    /// `serverWriteBufferLowWaterMark`: a paused connection reads again below this.
    pub write_buffer_low_water_mark: usize,
    /// `serverWriteBufferHighWaterMark`: a connection with this many response bytes waiting to
    /// be written stops reading requests.
    pub write_buffer_high_water_mark: usize,
    /// Response bytes waiting in all connections together; above it every connection that has
    /// responses waiting stops reading until the total falls under the low share.
    pub response_buffer_total_bytes: usize,
    pub read_only: bool,
    /// With `tlsProviderFactoryClass`: what answers START_TLS. None: START_TLS is refused
    /// (EBADREQ), as a Java bookie without TLS refuses it.
    pub tls: Option<std::sync::Arc<crate::tls::ServerTls>>,
    /// With `bookieAuthProviderFactoryClass=BookieAuthZFactory`: the `authorizedRoles` a
    /// client certificate's first role must be one of; a connection is unauthenticated until
    /// its TLS handshake shows one. None: every connection is authenticated (AuthDisabled).
    pub authorized_roles: Option<Vec<String>>,
    /// With `bookieAuthProviderFactoryClass=SASLBookieAuthProviderFactory`: the JAAS users and
    /// `saslJaasClientAllowedIds`; a connection is unauthenticated until its DIGEST-MD5
    /// exchange succeeds. None: no SASL.
    pub sasl: Option<std::sync::Arc<crate::sasl::ServerPolicy>>,
}

impl ServerConfig {
    pub fn validate(&self) -> Result<()> {
        if self.max_frame_size < MIN_FRAME_SIZE {
            return Err(invalid(format!(
                "nettyMaxFrameSizeBytes must be >= {MIN_FRAME_SIZE}, got {}",
                self.max_frame_size
            )));
        }
        if self.max_pending_adds == 0 || self.max_pending_reads == 0 {
            return Err(invalid(
                "maxPendingAddRequestsPerThread and maxPendingReadRequestsPerThread must be > 0"
                    .into(),
            ));
        }
        if self.write_buffer_low_water_mark > self.write_buffer_high_water_mark
            || self.write_buffer_high_water_mark == 0
        {
            return Err(invalid(format!(
                "serverWriteBufferLowWaterMark ({}) must not exceed \
                 serverWriteBufferHighWaterMark ({}), which must be > 0",
                self.write_buffer_low_water_mark, self.write_buffer_high_water_mark
            )));
        }
        if self.response_buffer_total_bytes < self.write_buffer_high_water_mark {
            return Err(invalid(format!(
                "serverResponseBufferTotalBytes ({}) must be at least \
                 serverWriteBufferHighWaterMark ({})",
                self.response_buffer_total_bytes, self.write_buffer_high_water_mark
            )));
        }
        Ok(())
    }
}

/// The client's per-bookie connections (BookKeeper's client keys).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `addEntryTimeoutSec`.
    pub add_timeout: Duration,
    /// `readEntryTimeoutSec`.
    pub read_timeout: Duration,
    /// `clientConnectTimeoutMillis`.
    pub connect_timeout: Duration,
    /// `nettyMaxFrameSizeBytes`: the largest response accepted, and the largest request sent.
    pub max_frame_size: usize,
    /// `clientWriteBufferHighWaterMark`: request bytes queued per connection before senders
    /// wait (a single larger request still goes, alone).
    pub write_buffer_high_water_mark: usize,
    /// `useV2WireProtocol`: adds and reads as V2 frames (true) or V3 protobuf requests (false).
    /// BATCH_READ_ENTRY exists only in V2, and a bookie reads a connection as V2 for good after
    /// its first V2 frame: a V3 client does not batch (the binding refuses it).
    pub use_v2_wire_protocol: bool,
    /// With `tlsProviderFactoryClass`: every connection sends START_TLS and runs the handshake
    /// before any request, never falling back to plaintext. None: plaintext.
    pub tls: Option<std::sync::Arc<crate::tls::ClientTls>>,
    /// `startTLSTimeoutSecs`: the most START_TLS and the handshake may take together.
    pub start_tls_timeout: Duration,
    /// With `clientAuthProviderFactoryClass=SASLClientProviderFactory`: every connection runs
    /// the DIGEST-MD5 exchange with these credentials (after START_TLS, within
    /// `connect_timeout`) before any request. None: no authentication.
    pub sasl: Option<crate::sasl::Credentials>,
}

impl ClientConfig {
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.add_timeout.is_zero() || self.read_timeout.is_zero() {
            return Err("addEntryTimeoutSec and readEntryTimeoutSec must be > 0".into());
        }
        if self.max_frame_size < MIN_FRAME_SIZE {
            return Err(format!(
                "nettyMaxFrameSizeBytes must be >= {MIN_FRAME_SIZE}, got {}",
                self.max_frame_size
            ));
        }
        if self.write_buffer_high_water_mark == 0 {
            return Err("clientWriteBufferHighWaterMark must be > 0".into());
        }
        Ok(())
    }
}

/// How reads race and order replicas: BookKeeper's speculative-read keys
/// (`DefaultSpeculativeRequestExecutionPolicy`) and the read-reorder keys of its placement
/// policies (`reorderReadSequence` fed with the client's per-bookie health).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadPolicy {
    /// `firstSpeculativeReadTimeout` (default `speculativeReadTimeout`): a read not answered
    /// within this is also sent to the next replica. None: speculative reads off
    /// (`speculativeReadTimeout=0`).
    pub first_speculative_timeout: Option<Duration>,
    /// `maxSpeculativeReadTimeout` (default `speculativeReadTimeout`): the longest wait between
    /// two speculative requests of one read as the backoff grows it.
    pub max_speculative_timeout: Duration,
    /// `speculativeReadTimeoutBackoffMultiplier`: each wait is the previous one times this.
    pub speculative_backoff: f64,
    /// `reorderReadSequenceEnabled`: order each read's replicas by their recent health.
    pub reorder_read_sequence: bool,
    /// `bookieFailureHistoryExpirationMSec`: how long a failure or a slow answer counts.
    pub failure_history: Duration,
    /// `enableBookieFailureTracking`: whether failures move a bookie back at all.
    pub failure_tracking: bool,
    /// `readReorderThresholdPendingRequests`: the least-loaded replica goes first when the
    /// first has at least this many more requests pending (0: off, slow bookies go last).
    pub reorder_threshold_pending: u64,
}

impl Default for ReadPolicy {
    /// BookKeeper 4.17's defaults.
    fn default() -> Self {
        ReadPolicy {
            first_speculative_timeout: Some(Duration::from_millis(2000)),
            max_speculative_timeout: Duration::from_millis(2000),
            speculative_backoff: 2.0,
            reorder_read_sequence: true,
            failure_history: Duration::from_millis(60_000),
            failure_tracking: true,
            reorder_threshold_pending: 0,
        }
    }
}

impl ReadPolicy {
    /// Checks the backoff as BookKeeper does (a positive multiplier).
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.speculative_backoff > 0.0 && self.speculative_backoff.is_finite()) {
            return Err(format!(
                "speculativeReadTimeoutBackoffMultiplier must be > 0, got {}",
                self.speculative_backoff
            ));
        }
        Ok(())
    }

    /// The wait before the speculative request after one that waited `previous`.
    pub fn next_speculative_timeout(&self, previous: Duration) -> Duration {
        Duration::try_from_secs_f64(previous.as_secs_f64() * self.speculative_backoff)
            .unwrap_or(self.max_speculative_timeout)
            .min(self.max_speculative_timeout)
    }
}
