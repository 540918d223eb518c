//! Fixtures for this crate's tests: explicit configurations (small files, no timers) and a
//! bookie on a loopback port. Test code only; the real defaults live in `pybkx.config`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ClientConfig, JournalConfig, ServerConfig, StorageConfig};
use crate::server::BookieServer;
use crate::storage::LedgerStorage;

/// Descriptors of this process open on `path` after it was unlinked (`/proc/self/fd`).
pub fn open_descriptors_of_deleted(path: &Path) -> usize {
    let gone = format!("{} (deleted)", path.display());
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy() == gone)
        .count()
}

pub fn journal_config() -> JournalConfig {
    JournalConfig {
        max_group_wait: Duration::from_millis(2),
        buffered_writes_threshold: 512 * 1024,
        buffered_entries_threshold: 0,
        flush_when_queue_empty: false,
        adaptive_group_writes: true,
        sync_data: true,
        write_buffer_size: 64 * 1024,
        prealloc_size: 1 << 20,
        max_file_size: 2048 << 20,
        max_backups: 5,
        queue_size: 10_000,
        page_cache_flush_interval: Duration::from_millis(1000),
        skip_replay_invalid_record: false,
        remove_from_page_cache: true,
        direct_io: true,
        reuse_files: true,
    }
}

/// Storage under `dir/j` and `dir/l`, checkpoints only when asked.
pub fn storage_config(dir: &Path) -> StorageConfig {
    StorageConfig {
        journal_dirs: vec![dir.join("j")],
        ledger_dirs: vec![dir.join("l")],
        index_dirs: Vec::new(),
        journal: journal_config(),
        log_size_limit: 1 << 30,
        entry_log_write_buffer: 64 * 1024,
        entry_log_direct_io: true,
        entry_log_direct_reads: true,
        flush_interval: Duration::ZERO,
        write_cache_bytes: 16 << 20,
        index_cache_bytes: 16 << 20,
        read_ahead_cache_bytes: 16 << 20,
        read_ahead_batch: 100,
        read_ahead_threads: 4,
        gc_wait: Duration::ZERO,
        force_gc_when_no_space: false,
        minor_compaction_threshold: 0.2,
        minor_compaction_interval: Duration::ZERO,
        major_compaction_threshold: 0.8,
        major_compaction_interval: Duration::ZERO,
        compaction_rate_bytes: 0,
        scrub_rate_bytes: 0,
        scrub_interval: Duration::ZERO,
        dirs: Default::default(),
        disk_reserve_bytes: Some(0),
    }
}

pub fn server_config() -> ServerConfig {
    ServerConfig {
        host: "127.0.0.1".into(),
        port: 0,
        max_frame_size: 5 << 20,
        max_pending_adds: 10_000,
        max_pending_reads: 10_000,
        max_batch_read_size: 5 << 20,
        read_worker_threads: 2,
        read_worker_nice: 0,
        write_buffer_low_water_mark: 384 << 10,
        write_buffer_high_water_mark: 512 << 10,
        response_buffer_total_bytes: 64 << 20,
        read_only: false,
        tls: None,
        authorized_roles: None,
        sasl: None,
    }
}

pub fn client_config() -> ClientConfig {
    ClientConfig {
        add_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(10),
        max_frame_size: 5 << 20,
        write_buffer_high_water_mark: 512 << 10,
        use_v2_wire_protocol: true,
        tls: None,
        start_tls_timeout: Duration::from_secs(10),
        sasl: None,
    }
}

/// The server half of a [`TestBookie`], named for the tests of parts that may not name the server.
pub type TestServer = BookieServer;
/// A bookie of [`test_bookie`]: its storage and its server.
pub type TestBookie = (Arc<LedgerStorage>, TestServer);

/// A bookie on a loopback port over fresh directories, for tests of the layers above.
pub fn test_bookie(dir: &Path) -> TestBookie {
    test_bookie_with(dir, server_config())
}

/// [`test_bookie`] with the server configuration `cfg` (authentication, limits).
pub fn test_bookie_with(dir: &Path, cfg: ServerConfig) -> TestBookie {
    let storage = Arc::new(LedgerStorage::open(storage_config(dir)).expect("test storage"));
    let server = BookieServer::start(storage.clone(), cfg).expect("test server");
    (storage, server)
}
