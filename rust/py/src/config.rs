//! Typed configuration crossing from Python: the attributes of `pybkx.config.ServerConfig` and
//! `pybkx.config.ClientConfig` (already parsed, validated and defaulted there) read into the
//! core's structs. No key names, no defaults and no parsing of strings here.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use pybkx_core::config::{
    ClientConfig, DirsConfig, JournalConfig, ReadPolicy, ServerConfig, StorageConfig,
};

/// The storage attributes of a `ServerConfig`.
#[derive(FromPyObject)]
struct StorageAttrs {
    #[pyo3(attribute("journal_directories"))]
    journal_dirs: Vec<PathBuf>,
    #[pyo3(attribute("ledger_directories"))]
    ledger_dirs: Vec<PathBuf>,
    #[pyo3(attribute("index_directories"))]
    index_dirs: Option<Vec<PathBuf>>,
    #[pyo3(attribute("journal_max_group_wait_ms"))]
    max_group_wait_ms: u64,
    #[pyo3(attribute("journal_buffered_writes_threshold_bytes"))]
    buffered_writes_threshold: usize,
    #[pyo3(attribute("journal_buffered_entries_threshold"))]
    buffered_entries_threshold: usize,
    #[pyo3(attribute("journal_flush_when_queue_empty"))]
    flush_when_queue_empty: bool,
    #[pyo3(attribute("journal_adaptive_group_writes"))]
    adaptive_group_writes: bool,
    #[pyo3(attribute("journal_sync_data"))]
    sync_data: bool,
    #[pyo3(attribute("journal_write_buffer_size_kb"))]
    write_buffer_kb: usize,
    #[pyo3(attribute("journal_pre_alloc_size_mb"))]
    prealloc_mb: u64,
    #[pyo3(attribute("journal_max_size_mb"))]
    max_size_mb: u64,
    #[pyo3(attribute("journal_max_backups"))]
    max_backups: usize,
    #[pyo3(attribute("journal_queue_size"))]
    queue_size: usize,
    #[pyo3(attribute("journal_page_cache_flush_interval_ms"))]
    page_cache_flush_interval_ms: u64,
    #[pyo3(attribute("skip_replay_journal_invalid_record"))]
    skip_replay_invalid_record: bool,
    #[pyo3(attribute("journal_remove_from_page_cache"))]
    remove_from_page_cache: bool,
    #[pyo3(attribute("journal_direct_io"))]
    journal_direct_io: bool,
    #[pyo3(attribute("journal_reuse_files"))]
    journal_reuse_files: bool,
    #[pyo3(attribute("log_size_limit_bytes"))]
    log_size_limit: u64,
    #[pyo3(attribute("write_buffer_size_bytes"))]
    entry_log_write_buffer: usize,
    #[pyo3(attribute("direct_io_entry_logger"))]
    entry_log_direct_io: bool,
    #[pyo3(attribute("entry_log_direct_reads"))]
    entry_log_direct_reads: bool,
    #[pyo3(attribute("ledger_dir_tiers"))]
    ledger_dir_tiers: Vec<usize>,
    #[pyo3(attribute("ledger_dir_quotas"))]
    ledger_dir_quotas: Vec<Option<u64>>,
    #[pyo3(attribute("entry_log_allocator_class"))]
    entry_log_allocator: String,
    #[pyo3(attribute("entry_log_reviewer_class"))]
    entry_log_reviewer: String,
    #[pyo3(attribute("reviewer_soft_limit_bytes"))]
    reviewer_soft_limit: u64,
    #[pyo3(attribute("reviewer_hard_limit_bytes"))]
    reviewer_hard_limit: u64,
    #[pyo3(attribute("entry_log_annotator_class"))]
    entry_log_annotator: String,
    #[pyo3(attribute("lrfu_step_factor"))]
    lrfu_step: f64,
    #[pyo3(attribute("lrfu_attenuation_factor"))]
    lrfu_attenuation: f64,
    #[pyo3(attribute("tier_high_watermarks"))]
    high_watermarks: Vec<f64>,
    #[pyo3(attribute("tier_low_watermarks"))]
    low_watermarks: Vec<f64>,
    #[pyo3(attribute("tiered_storage_promote_on_read"))]
    promote_on_read: bool,
    #[pyo3(attribute("tiered_storage_move_rate_by_bytes"))]
    move_rate_bytes: u64,
    #[pyo3(attribute("flush_interval_ms"))]
    flush_interval_ms: u64,
    #[pyo3(attribute("db_storage_write_cache_max_size_mb"))]
    write_cache_mb: usize,
    #[pyo3(attribute("db_storage_rocksdb_block_cache_size"))]
    index_cache_bytes: usize,
    #[pyo3(attribute("db_storage_read_ahead_cache_max_size_mb"))]
    read_ahead_cache_mb: usize,
    #[pyo3(attribute("db_storage_read_ahead_cache_batch_size"))]
    read_ahead_batch: usize,
    #[pyo3(attribute("entry_log_read_ahead_threads"))]
    read_ahead_threads: usize,
    #[pyo3(attribute("gc_wait_time_ms"))]
    gc_wait_ms: u64,
    #[pyo3(attribute("is_force_gc_allow_when_no_space"))]
    force_gc_when_no_space: bool,
    #[pyo3(attribute("minor_compaction_threshold"))]
    minor_compaction_threshold: f64,
    #[pyo3(attribute("minor_compaction_interval_s"))]
    minor_compaction_interval_s: u64,
    #[pyo3(attribute("major_compaction_threshold"))]
    major_compaction_threshold: f64,
    #[pyo3(attribute("major_compaction_interval_s"))]
    major_compaction_interval_s: u64,
    #[pyo3(attribute("compaction_rate_by_bytes"))]
    compaction_rate_bytes: u64,
    #[pyo3(attribute("disk_reserved_space_mb"))]
    disk_reserved_space_mb: Option<u64>,
    #[pyo3(attribute("scrub_rate_bytes_per_second"))]
    scrub_rate_bytes: u64,
    #[pyo3(attribute("scrub_interval_s"))]
    scrub_interval_s: u64,
}

/// The storage part of a `pybkx.config.ServerConfig`.
pub(crate) fn storage_config(obj: &Bound<'_, PyAny>) -> PyResult<StorageConfig> {
    let a: StorageAttrs = obj.extract()?;
    Ok(StorageConfig {
        journal_dirs: a.journal_dirs,
        ledger_dirs: a.ledger_dirs,
        index_dirs: a.index_dirs.unwrap_or_default(),
        journal: JournalConfig {
            max_group_wait: Duration::from_millis(a.max_group_wait_ms),
            buffered_writes_threshold: a.buffered_writes_threshold,
            buffered_entries_threshold: a.buffered_entries_threshold,
            flush_when_queue_empty: a.flush_when_queue_empty,
            adaptive_group_writes: a.adaptive_group_writes,
            sync_data: a.sync_data,
            write_buffer_size: a.write_buffer_kb.saturating_mul(1024),
            prealloc_size: a.prealloc_mb << 20,
            max_file_size: a.max_size_mb << 20,
            max_backups: a.max_backups,
            queue_size: a.queue_size,
            page_cache_flush_interval: Duration::from_millis(a.page_cache_flush_interval_ms),
            skip_replay_invalid_record: a.skip_replay_invalid_record,
            remove_from_page_cache: a.remove_from_page_cache,
            direct_io: a.journal_direct_io,
            reuse_files: a.journal_reuse_files,
        },
        log_size_limit: a.log_size_limit,
        entry_log_write_buffer: a.entry_log_write_buffer,
        entry_log_direct_io: a.entry_log_direct_io,
        entry_log_direct_reads: a.entry_log_direct_reads,
        flush_interval: Duration::from_millis(a.flush_interval_ms),
        write_cache_bytes: a.write_cache_mb.saturating_mul(1 << 20),
        index_cache_bytes: a.index_cache_bytes,
        read_ahead_cache_bytes: a.read_ahead_cache_mb.saturating_mul(1 << 20),
        read_ahead_batch: a.read_ahead_batch,
        read_ahead_threads: a.read_ahead_threads,
        gc_wait: Duration::from_millis(a.gc_wait_ms),
        force_gc_when_no_space: a.force_gc_when_no_space,
        minor_compaction_threshold: a.minor_compaction_threshold,
        minor_compaction_interval: Duration::from_secs(a.minor_compaction_interval_s),
        major_compaction_threshold: a.major_compaction_threshold,
        major_compaction_interval: Duration::from_secs(a.major_compaction_interval_s),
        compaction_rate_bytes: a.compaction_rate_bytes,
        scrub_rate_bytes: a.scrub_rate_bytes,
        scrub_interval: Duration::from_secs(a.scrub_interval_s),
        dirs: DirsConfig {
            tiers: a.ledger_dir_tiers,
            quotas: a.ledger_dir_quotas,
            allocator: a.entry_log_allocator,
            reviewer: a.entry_log_reviewer,
            reviewer_soft_limit: a.reviewer_soft_limit,
            reviewer_hard_limit: a.reviewer_hard_limit,
            annotator: a.entry_log_annotator,
            lrfu_step: a.lrfu_step,
            lrfu_attenuation: a.lrfu_attenuation,
            high_watermarks: a.high_watermarks,
            low_watermarks: a.low_watermarks,
            promote_on_read: a.promote_on_read,
            move_rate_bytes: a.move_rate_bytes,
        },
        disk_reserve_bytes: a
            .disk_reserved_space_mb
            .map(|mb| mb.saturating_mul(1 << 20)),
    })
}

/// The server attributes of a `ServerConfig`.
#[derive(FromPyObject)]
struct ServerAttrs {
    #[pyo3(attribute("netty_max_frame_size_bytes"))]
    max_frame_size: usize,
    #[pyo3(attribute("max_pending_add_requests_per_thread"))]
    max_pending_adds: usize,
    #[pyo3(attribute("max_pending_read_requests_per_thread"))]
    max_pending_reads: usize,
    #[pyo3(attribute("max_batch_read_size_bytes"))]
    max_batch_read_size: usize,
    #[pyo3(attribute("num_read_worker_threads"))]
    read_worker_threads: usize,
    #[pyo3(attribute("read_worker_thread_nice"))]
    read_worker_nice: i32,
    #[pyo3(attribute("server_write_buffer_low_water_mark_bytes"))]
    low_water_mark: usize,
    #[pyo3(attribute("server_write_buffer_high_water_mark_bytes"))]
    high_water_mark: usize,
    #[pyo3(attribute("server_response_buffer_total_bytes"))]
    response_buffer_total: usize,
    #[pyo3(attribute("force_read_only_bookie"))]
    read_only: bool,
}

/// The server part of a `pybkx.config.ServerConfig`, listening on `host:port`.
pub(crate) fn server_config(
    obj: &Bound<'_, PyAny>,
    host: String,
    port: u16,
) -> PyResult<ServerConfig> {
    let a: ServerAttrs = obj.extract()?;
    Ok(ServerConfig {
        host,
        port,
        max_frame_size: a.max_frame_size,
        max_pending_adds: a.max_pending_adds,
        max_pending_reads: a.max_pending_reads,
        max_batch_read_size: a.max_batch_read_size,
        read_worker_threads: a.read_worker_threads,
        read_worker_nice: a.read_worker_nice,
        write_buffer_low_water_mark: a.low_water_mark,
        write_buffer_high_water_mark: a.high_water_mark,
        response_buffer_total_bytes: a.response_buffer_total,
        read_only: a.read_only,
        tls: None,
        authorized_roles: None,
        sasl: None,
    })
}

/// The attributes of a `pybkx.config.ClientConfig`.
#[derive(FromPyObject)]
struct ClientAttrs {
    #[pyo3(attribute("add_entry_timeout_sec"))]
    add_timeout_s: f64,
    #[pyo3(attribute("read_entry_timeout_sec"))]
    read_timeout_s: f64,
    #[pyo3(attribute("client_connect_timeout_ms"))]
    connect_timeout_ms: u64,
    #[pyo3(attribute("netty_max_frame_size_bytes"))]
    max_frame_size: usize,
    #[pyo3(attribute("client_write_buffer_high_water_mark_bytes"))]
    high_water_mark: usize,
    #[pyo3(attribute("use_v2_wire_protocol"))]
    use_v2_wire_protocol: bool,
    #[pyo3(attribute("start_tls_timeout_secs"))]
    start_tls_timeout_s: f64,
}

fn seconds(what: &str, v: f64) -> PyResult<Duration> {
    if v > 0.0 && v.is_finite() {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(PyValueError::new_err(format!(
            "{what} must be > 0, got {v}"
        )))
    }
}

/// The read-policy attributes of a `pybkx.config.ClientConfig`.
#[derive(FromPyObject)]
struct ReadPolicyAttrs {
    #[pyo3(attribute("speculative_read_timeout_ms"))]
    speculative_ms: u64,
    #[pyo3(attribute("first_speculative_wait_ms"))]
    first_speculative_ms: u64,
    #[pyo3(attribute("max_speculative_wait_ms"))]
    max_speculative_ms: u64,
    #[pyo3(attribute("speculative_read_timeout_backoff_multiplier"))]
    backoff: f64,
    #[pyo3(attribute("reorder_read_sequence_enabled"))]
    reorder: bool,
    #[pyo3(attribute("enable_bookie_failure_tracking"))]
    failure_tracking: bool,
    #[pyo3(attribute("bookie_failure_history_expiration_ms"))]
    failure_history_ms: u64,
    #[pyo3(attribute("read_reorder_threshold_pending_requests"))]
    threshold_pending: u64,
}

/// How the reads of a `pybkx.config.ClientConfig` race and order replicas, as the core's.
pub(crate) fn read_policy(obj: &Bound<'_, PyAny>) -> PyResult<ReadPolicy> {
    let a: ReadPolicyAttrs = obj.extract()?;
    // BookKeeper: speculativeReadTimeout=0 turns speculative reads off whatever the others say.
    let first = (a.speculative_ms > 0).then(|| Duration::from_millis(a.first_speculative_ms));
    let policy = ReadPolicy {
        first_speculative_timeout: first,
        max_speculative_timeout: Duration::from_millis(a.max_speculative_ms.max(1)),
        speculative_backoff: a.backoff,
        reorder_read_sequence: a.reorder,
        failure_history: Duration::from_millis(a.failure_history_ms),
        failure_tracking: a.failure_tracking,
        reorder_threshold_pending: a.threshold_pending,
    };
    policy.validate().map_err(PyValueError::new_err)?;
    Ok(policy)
}

/// A `pybkx.config.ClientConfig` as the core's.
pub(crate) fn client_config(obj: &Bound<'_, PyAny>) -> PyResult<ClientConfig> {
    let a: ClientAttrs = obj.extract()?;
    let cfg = ClientConfig {
        add_timeout: seconds("addEntryTimeoutSec", a.add_timeout_s)?,
        read_timeout: seconds("readEntryTimeoutSec", a.read_timeout_s)?,
        connect_timeout: Duration::from_millis(a.connect_timeout_ms.max(1)),
        max_frame_size: a.max_frame_size,
        write_buffer_high_water_mark: a.high_water_mark,
        use_v2_wire_protocol: a.use_v2_wire_protocol,
        tls: None,
        start_tls_timeout: seconds("startTLSTimeoutSecs", a.start_tls_timeout_s)?,
        sasl: None,
    };
    cfg.validate().map_err(PyValueError::new_err)?;
    Ok(cfg)
}
