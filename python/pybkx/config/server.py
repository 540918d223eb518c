"""A bookie's configuration under Apache BookKeeper's key names, typed and checked once.
It only validates values; it must never open storage, listen or start threads."""

# Key names and defaults are those of BookKeeper 4.17's ``ServerConfiguration`` (and
# ``AbstractConfiguration`` for ``nettyMaxFrameSizeBytes``, ``metadataServiceUri``, ``zkServers``).
# Attributes are snake_case with units; each field's metadata carries its BookKeeper key. Keys
# pybkx does not use yet are kept in ``extra`` (real bk_server.conf files carry hundreds). The
# Rust core receives this object itself (``LedgerStorage(config)``, ``BookieServer(..., config,
# ...)``) and reads the typed attributes: these are the only defaults of the data plane.

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar, Final

from pybkx.config.bookkeeper_keys import NOT_IMPLEMENTED
from pybkx.config.jaas import JAAS_FILE_KEY, JAVA_PROPERTY, allowed_ids_pattern
from pybkx.config.network import interface_ipv4, interface_names, is_ip
from pybkx.config.objectstore import ObjectStorageKeys
from pybkx.config.properties import read_file
from pybkx.config.security import bookie_auth_provider, client_auth_provider
from pybkx.config.tiers import (
    ALLOCATORS,
    ANNOTATORS,
    MAX_TIERS,
    REVIEWERS,
    Tier,
    build_tiers,
    byte_sizes,
    class_name,
)
from pybkx.config.tls import TlsKeys, names
from pybkx.config.values import (
    JAVA_LONG_MAX,
    MIB,
    ConfigError,
    InvalidValue,
    KeyedConfig,
    boolean,
    dirs,
    integer,
    number,
    optional,
    optional_dirs,
    optional_str,
    servers,
    setting,
)
from pybkx.config.zk_security import ZkSecurityKeys

__all__ = ["MAX_LOG_SIZE_LIMIT", "NULL_STATS_PROVIDER", "PROMETHEUS_STATS_PROVIDER", "ServerConfig"]

logger = logging.getLogger(__name__)

MAX_LOG_SIZE_LIMIT: Final = (1 << 32) - 1 - 64 * MIB
"""Largest ``logSizeLimit`` the Rust entry log accepts (its offsets are 32-bit)."""


NULL_STATS_PROVIDER: Final = "org.apache.bookkeeper.stats.NullStatsProvider"
"""BookKeeper's default ``statsProviderClass``: no metrics."""
PROMETHEUS_STATS_PROVIDER: Final = (
    "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"
)
"""The provider BookKeeper's shipped ``bk_server.conf`` names: Prometheus metrics."""

DEFAULT_READ_WORKER_THREADS: Final = max(1, min(8, (os.cpu_count() or 2) // 2))
"""``numReadWorkerThreads`` unless configured: half the machine's cores, at most BookKeeper's 8.
More read threads than that take the CPU the threads reading and journaling adds need: beside a
flood of batch reads on two cores, another client's add p99 rose 1.2x with one read thread,
1.8x with two and 5.5x with reads inline (docs/performance.md)."""


def _text(default: str) -> Callable[[object], str]:
    """A string; blank means ``default``."""

    def parse(value: object) -> str:
        return optional_str(value) or default

    return parse


def _root_path(value: object) -> str:
    """A ZooKeeper root path; blank means BookKeeper's default ``/ledgers``."""
    return optional_str(value) or "/ledgers"


@dataclass(frozen=True)
class ServerConfig(TlsKeys, ZkSecurityKeys, ObjectStorageKeys, KeyedConfig):
    """A bookie's configuration; construct it with ``from_file``/``load`` or keyword arguments.

    Every value is checked on construction (``ConfigError``). Directory lists are tuples.
    """

    LEGACY_KEYS: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"journalDirectory": "journalDirectories", JAVA_PROPERTY: JAAS_FILE_KEY}
    )
    FOREIGN_KEYS: ClassVar[Mapping[str, str]] = NOT_IMPLEMENTED

    # --- network and identity
    bookie_port: int = setting("bookiePort", 3181, integer(0, 65535))
    listening_interface: str | None = setting("listeningInterface", None, optional_str)
    """A network interface name (as in BookKeeper) or, a pybkx extension, an address to bind."""
    advertised_address: str | None = setting("advertisedAddress", None, optional_str)
    bookie_id: str | None = setting("bookieId", None, optional_str)
    allow_loopback: bool = setting("allowLoopback", False, boolean)
    allow_ephemeral_ports: bool = setting("allowEphemeralPorts", False, boolean)

    # --- TLS on the bookie port (START_TLS): the shared keys come from TlsKeys
    tls_cert_files_refresh_duration_seconds: int = setting(
        "tlsCertFilesRefreshDurationSeconds", 0, integer(0)
    )
    """How often the store files are checked for changes (0: never); a change reloads them for
    the handshakes that follow."""

    # --- authorization (BookKeeper's BookieAuthZFactory: the role in a TLS client certificate)
    bookie_auth_provider_factory_class: str | None = setting(
        "bookieAuthProviderFactoryClass", None, bookie_auth_provider
    )
    """``org.apache.bookkeeper.tls.BookieAuthZFactory``: a connection is served only once its
    TLS handshake shows a client certificate whose first role is in ``authorizedRoles``."""
    authorized_roles: tuple[str, ...] = setting("authorizedRoles", (), names)
    # --- SASL (SASLBookieAuthProviderFactory, DIGEST-MD5): the JAAS file is jaasConfigFile
    sasl_jaas_bookie_section_name: str = setting("saslJaasBookieSectionName", "Bookie", str)
    """The JAAS section whose ``user_<name>="password"`` options are the clients' accounts."""
    sasl_jaas_client_allowed_ids: str = setting(
        "saslJaasClientAllowedIds", ".*bookkeeper.*", allowed_ids_pattern
    )
    """A regular expression an authenticated client id must match whole (BookKeeper's
    default admits ids containing ``bookkeeper``)."""
    client_auth_provider_factory_class: str | None = setting(
        "clientAuthProviderFactoryClass", None, client_auth_provider
    )
    """For the bookie's own clients (AutoRecovery, the admin API, ``pybkx shell --conf``):
    ``org.apache.bookkeeper.sasl.SASLClientProviderFactory`` makes them authenticate."""
    sasl_jaas_client_section_name: str = setting("saslJaasClientSectionName", "BookKeeper", str)
    """The JAAS section of those clients' ``username`` and ``password``."""

    # --- directories (``journalDirectory`` is the legacy single-directory key)
    journal_directories: tuple[str, ...] = setting(
        "journalDirectories", ("/tmp/bk-txn",), dirs, storage=True
    )
    ledger_directories: tuple[str, ...] = setting(
        "ledgerDirectories", ("/tmp/bk-data",), dirs, storage=True
    )
    index_directories: tuple[str, ...] | None = setting(
        "indexDirectories", None, optional_dirs, storage=True
    )

    # --- tiered ledger directories and entry-log placement (pybkx's; Alluxio's design)
    tiered_storage_levels: int = setting(
        "tieredStorageLevels", 0, integer(0, MAX_TIERS), storage=True
    )
    """Storage tiers (0: none, ``ledgerDirectories`` is one tier). With tiers, their directories
    take the place of ``ledgerDirectories``."""
    tiered_storage_level0_alias: str | None = setting(
        "tieredStorageLevel0Alias", None, optional_str, storage=True
    )
    tiered_storage_level0_dirs: tuple[str, ...] | None = setting(
        "tieredStorageLevel0Dirs", None, optional_dirs, storage=True
    )
    tiered_storage_level0_dirs_quota: tuple[int, ...] | None = setting(
        "tieredStorageLevel0DirsQuota", None, byte_sizes, storage=True
    )
    tiered_storage_level1_alias: str | None = setting(
        "tieredStorageLevel1Alias", None, optional_str, storage=True
    )
    tiered_storage_level1_dirs: tuple[str, ...] | None = setting(
        "tieredStorageLevel1Dirs", None, optional_dirs, storage=True
    )
    tiered_storage_level1_dirs_quota: tuple[int, ...] | None = setting(
        "tieredStorageLevel1DirsQuota", None, byte_sizes, storage=True
    )
    tiered_storage_level2_alias: str | None = setting(
        "tieredStorageLevel2Alias", None, optional_str, storage=True
    )
    tiered_storage_level2_dirs: tuple[str, ...] | None = setting(
        "tieredStorageLevel2Dirs", None, optional_dirs, storage=True
    )
    tiered_storage_level2_dirs_quota: tuple[int, ...] | None = setting(
        "tieredStorageLevel2DirsQuota", None, byte_sizes, storage=True
    )
    tiered_storage_level3_alias: str | None = setting(
        "tieredStorageLevel3Alias", None, optional_str, storage=True
    )
    tiered_storage_level3_dirs: tuple[str, ...] | None = setting(
        "tieredStorageLevel3Dirs", None, optional_dirs, storage=True
    )
    tiered_storage_level3_dirs_quota: tuple[int, ...] | None = setting(
        "tieredStorageLevel3DirsQuota", None, byte_sizes, storage=True
    )
    entry_log_allocator_class: str = setting(
        "entryLogAllocatorClass", ALLOCATORS[0], class_name(ALLOCATORS), storage=True
    )
    """Which directory takes a new entry log: the most free one of the top tier with room
    (MaxFreeAllocator), the first with room top tier down (GreedyAllocator), or the next in turn
    in the top tier with room (RoundRobinAllocator)."""
    entry_log_reviewer_class: str = setting(
        "entryLogReviewerClass", REVIEWERS[0], class_name(REVIEWERS), storage=True
    )
    """A veto on the allocator's choice: ProbabilisticBufferReviewer refuses fuller directories
    ever more often between the soft and hard limits; AcceptingReviewer never refuses."""
    reviewer_soft_limit_bytes: int = setting(
        "reviewerSoftLimitBytes", 256 * MIB, integer(0, JAVA_LONG_MAX), storage=True
    )
    """Above this many bytes available a directory is always accepted."""
    reviewer_hard_limit_bytes: int = setting(
        "reviewerHardLimitBytes", 64 * MIB, integer(0, JAVA_LONG_MAX), storage=True
    )
    """At or below this many bytes available a directory is refused (unless all are)."""
    entry_log_annotator_class: str = setting(
        "entryLogAnnotatorClass", ANNOTATORS[0], class_name(ANNOTATORS), storage=True
    )
    """How entry logs are ranked hot to cold for demotion: by last access (LRUAnnotator) or by
    recency and frequency combined (LRFUAnnotator)."""
    lrfu_step_factor: float = setting("lrfuStepFactor", 0.25, number(0.0, 1.0), storage=True)
    """LRFUAnnotator: near 0 ranks by access counts (LFU), near 1 by recency (LRU)."""
    lrfu_attenuation_factor: float = setting(
        "lrfuAttenuationFactor", 2.0, number(2.0), storage=True
    )
    """LRFUAnnotator: how fast the weight of past accesses fades (at least 2)."""
    tiered_storage_level0_high_watermark: float = setting(
        "tieredStorageLevel0HighWatermark", 0.95, number(0.0, 1.0), storage=True
    )
    tiered_storage_level0_low_watermark: float = setting(
        "tieredStorageLevel0LowWatermark", 0.7, number(0.0, 1.0), storage=True
    )
    tiered_storage_level1_high_watermark: float = setting(
        "tieredStorageLevel1HighWatermark", 0.95, number(0.0, 1.0), storage=True
    )
    tiered_storage_level1_low_watermark: float = setting(
        "tieredStorageLevel1LowWatermark", 0.7, number(0.0, 1.0), storage=True
    )
    tiered_storage_level2_high_watermark: float = setting(
        "tieredStorageLevel2HighWatermark", 0.95, number(0.0, 1.0), storage=True
    )
    tiered_storage_level2_low_watermark: float = setting(
        "tieredStorageLevel2LowWatermark", 0.7, number(0.0, 1.0), storage=True
    )
    tiered_storage_level3_high_watermark: float = setting(
        "tieredStorageLevel3HighWatermark", 0.95, number(0.0, 1.0), storage=True
    )
    tiered_storage_level3_low_watermark: float = setting(
        "tieredStorageLevel3LowWatermark", 0.7, number(0.0, 1.0), storage=True
    )
    tiered_storage_promote_on_read: bool = setting(
        "tieredStoragePromoteOnRead", False, boolean, storage=True
    )
    """A log below the top tier that is read moves up a tier when that tier stays below its
    low watermark with it."""
    tiered_storage_move_rate_by_bytes: int = setting(
        "tieredStorageMoveRateByBytes", 32 * MIB, integer(0, JAVA_LONG_MAX), storage=True
    )
    """Bytes per second the moves between tiers copy (0: unpaced)."""

    # --- metadata (None: a standalone bookie)
    metadata_service_uri: str | None = setting("metadataServiceUri", None, optional_str)
    zk_servers: str | None = setting("zkServers", None, servers)
    zk_ledgers_root_path: str = setting("zkLedgersRootPath", "/ledgers", _root_path)
    zk_timeout_ms: int = setting("zkTimeout", 10_000, integer(1))
    """ZooKeeper session timeout; a killed bookie's registration outlives it by at most this."""

    # --- journal (group commit and files)
    journal_max_group_wait_ms: int = setting("journalMaxGroupWaitMSec", 2, integer(0), storage=True)
    journal_buffered_writes_threshold_bytes: int = setting(
        "journalBufferedWritesThreshold", 512 * 1024, integer(0), storage=True
    )
    journal_buffered_entries_threshold: int = setting(
        "journalBufferedEntriesThreshold", 0, integer(0), storage=True
    )
    journal_flush_when_queue_empty: bool = setting(
        "journalFlushWhenQueueEmpty", False, boolean, storage=True
    )
    journal_adaptive_group_writes: bool = setting(
        "journalAdaptiveGroupWrites", True, boolean, storage=True
    )
    """Adaptive group commit: a journal group also ends as soon as no fdatasync is in flight,
    so ``journalMaxGroupWaitMSec`` is waited only while the device is busy syncing the group
    before (an add at low load costs one fdatasync, no group wait). False: BookKeeper's fixed
    wait."""
    journal_sync_data: bool = setting("journalSyncData", True, boolean, storage=True)
    journal_write_buffer_size_kb: int = setting(
        "journalWriteBufferSizeKB", 64, integer(1), storage=True
    )
    journal_pre_alloc_size_mb: int = setting("journalPreAllocSizeMB", 16, integer(0), storage=True)
    journal_max_size_mb: int = setting("journalMaxSizeMB", 2048, integer(1), storage=True)
    journal_max_backups: int = setting("journalMaxBackups", 5, integer(0), storage=True)
    journal_queue_size: int = setting("journalQueueSize", 10_000, integer(1), storage=True)
    """Requests waiting for the journal thread; past it, adds wait (TCP backpressure)."""
    journal_page_cache_flush_interval_ms: int = setting(
        "journalPageCacheFlushIntervalMSec", 1000, integer(1), storage=True
    )
    skip_replay_journal_invalid_record: bool = setting(
        "skipReplayJournalInvalidRecord", False, boolean, storage=True
    )
    journal_remove_from_page_cache: bool = setting(
        "journalRemoveFromPageCache", True, boolean, storage=True
    )
    """Drop synced journal pages from the page cache (8 MiB behind the synced end)."""
    journal_direct_io: bool = setting("journalDirectIO", True, boolean, storage=True)
    """Write journal files with direct I/O (``O_DIRECT``) where the file system allows it:
    records go from the journal's buffer to the disk without a copy into the page cache, and
    ``journalRemoveFromPageCache`` has nothing to drop. pybkx's key (BookKeeper's journal always
    writes through the page cache); the journal's format is the same either way."""
    journal_reuse_files: bool = setting("journalReuseFiles", True, boolean, storage=True)
    """At a rollover, reuse the oldest journal file a checkpoint no longer needs (one of those
    ``journalMaxBackups`` keeps) instead of creating one: its blocks are already allocated and
    written, so nothing is preallocated or freed, and a sync has no allocation to commit.
    BookKeeper's key; pybkx's default is on (BookKeeper's is off)."""

    # --- entry logs and checkpoints
    log_size_limit_bytes: int = setting(
        "logSizeLimit", 1 << 30, integer(4096, MAX_LOG_SIZE_LIMIT), storage=True
    )
    write_buffer_size_bytes: int = setting("writeBufferSizeBytes", 65536, integer(1), storage=True)
    direct_io_entry_logger: bool = setting(
        "dbStorage_directIOEntryLogger", True, boolean, storage=True
    )
    """Write entry logs with direct I/O (``O_DIRECT``) where the file system allows it: entry data
    goes from the write cache's flush buffer to the disk without a copy into the page cache.
    BookKeeper's key; pybkx's default is on, and its entry-log format is the same either way."""
    entry_log_direct_reads: bool = setting("entryLogDirectReads", True, boolean, storage=True)
    """Read entry logs with direct I/O (``O_DIRECT``) for reads of 128 KiB or more (a batch read,
    a read-ahead's run; the records between a strided read's wanted ones are read along to make
    such runs): no page allocation and no copy out of the page cache, so a scan of cold ledgers
    and a copy of a lost bookie's data run on far less CPU, and a client beside the healing
    suffers far less (measured: docs/performance.md, "Healing a lost bookie"). The cost: a scan
    read again comes from the disk, not the page cache. pybkx's key, on by default, as
    BookKeeper's direct entry logger reads directly whenever it writes directly; ``false`` reads
    through the page cache."""
    flush_interval_ms: int = setting("flushInterval", 10_000, integer(0), storage=True)
    gc_wait_time_ms: int = setting("gcWaitTime", 600_000, integer(0), storage=True)
    """Every this many ms (after a checkpoint) entry logs whose ledgers are all deleted are
    removed; 0 turns the timer off (``PUT /api/v1/bookie/gc`` still collects)."""
    gc_overreplicated_ledger_wait_time_ms: int = setting(
        "gcOverreplicatedLedgerWaitTime", 86_400_000, integer(0)
    )
    """How often garbage collection also removes the closed ledgers this bookie stores but no
    ensemble names any more (re-replicated elsewhere while it was away); 0: never."""
    is_force_gc_allow_when_no_space: bool = setting(
        "isForceGCAllowWhenNoSpace", False, boolean, storage=True
    )
    """Full or almost full ledger directories: compact at once instead of suspending it."""
    disk_reserved_space_mb: int | None = setting(
        "diskReservedSpaceMB", None, optional(integer(0)), storage=True
    )
    """pybkx's key: MiB kept back, as an allocated file (``pybkx-space-reserve``), in every
    ledger, index and journal directory, and given back when the disk is full so that
    checkpoints, index records and a compaction of the logs with the most garbage can still
    write (see docs/storage.md, "When the disk is full"). Unset: derived per directory (a
    ledger directory's fits one flush of the write cache, one entry log's worth of compaction,
    at most 256 MiB, and 4 MiB of index writes; a journal directory's two
    ``journalPreAllocSizeMB`` chunks; each at most an eighth of its file system); 0: no
    reserve (BookKeeper's behaviour)."""
    minor_compaction_threshold: float = setting(
        "minorCompactionThreshold", 0.2, number(0.0, 1.0), storage=True
    )
    minor_compaction_interval_s: int = setting(
        "minorCompactionInterval", 3600, integer(0), storage=True
    )
    major_compaction_threshold: float = setting(
        "majorCompactionThreshold", 0.8, number(0.0, 1.0), storage=True
    )
    major_compaction_interval_s: int = setting(
        "majorCompactionInterval", 86400, integer(0), storage=True
    )
    compaction_rate_by_bytes: int = setting(
        "compactionRateByBytes", 1_000_000, integer(0), storage=True
    )
    """Bytes per second a compaction scans (0: unpaced); BookKeeper's default."""
    scrub_rate_bytes_per_second: int = setting(
        "scrubRateBytesPerSecond", 4 * MIB, integer(0), storage=True
    )
    """pybkx's key: bytes per second the background scrubber reads its entry logs back at
    (0: no background scrubber). BookKeeper paces its scrub in entries per second
    (``localScrubRateLimit``); bytes are what a disk pays for."""
    scrub_interval_s: int = setting("scrubIntervalSeconds", 3600, integer(0), storage=True)
    """pybkx's key: seconds between two background scrub runs, the first one interval after
    the start (0: no background scrubber)."""
    cross_replica_check_enabled: bool = setting("crossReplicaCheckEnabled", True, boolean)
    """pybkx's key: in each background scrub cycle (``scrubIntervalSeconds``, paced to
    ``scrubRateBytesPerSecond``), compare the replicas of the closed ledgers whose fragments this
    bookie heads and repair the odd one out (docs/integrity.md). Needs the admin HTTP server on
    every bookie; off with the background scrubber."""
    local_consistency_check_on_startup: bool = setting(
        "localConsistencyCheckOnStartup", False, boolean
    )
    """Check every stored entry (an unpaced scrub) before serving; a damaged entry stops the
    start, as in BookKeeper."""
    db_storage_write_cache_max_size_mb: int = setting(
        "dbStorage_writeCacheMaxSizeMb", 64, integer(1, 1 << 20), storage=True
    )
    """Journalled entries wait here until a flush writes them sorted by ledger; a flush starts
    when half of it is used, adds wait while it is full and a flush runs."""
    db_storage_rocksdb_block_cache_size: int = setting(
        "dbStorage_rocksDB_blockCacheSize", 128 * MIB, integer(1 * MIB, 1 << 62), storage=True
    )
    """Bytes of decoded index blocks kept in memory (pybkx's index is not RocksDB; this key
    keeps its meaning: the index's memory budget)."""
    db_storage_read_ahead_cache_max_size_mb: int = setting(
        "dbStorage_readAheadCacheMaxSizeMb", 64, integer(1, 1 << 20), storage=True
    )
    db_storage_read_ahead_cache_batch_size: int = setting(
        "dbStorage_readAheadCacheBatchSize", 100, integer(0), storage=True
    )
    """Entries read in the same I/O after a read that missed every cache (0 or 1: off)."""
    entry_log_read_ahead_threads: int = setting(
        "entryLogReadAheadThreads", 4, integer(0, 64), storage=True
    )
    """Threads that read a scanned ledger's next entries ahead of the scan, several reads at
    once, where entry logs are read directly (``entryLogDirectReads``); the entries wait in the
    read-ahead cache, whose size bounds how far ahead they read. pybkx's key; 0 turns them off
    (a scan then reads ahead only within its own reads, one at a time)."""

    # --- server limits
    netty_max_frame_size_bytes: int = setting("nettyMaxFrameSizeBytes", 5 * MIB, integer(64))
    max_pending_add_requests_per_thread: int = setting(
        "maxPendingAddRequestsPerThread", 10_000, integer(1)
    )
    """In-flight adds per connection; past it an add is answered ETOOMANYREQUESTS."""
    max_pending_read_requests_per_thread: int = setting(
        "maxPendingReadRequestsPerThread", 10_000, integer(1)
    )
    """In-flight reads per connection; past it a read is answered ETOOMANYREQUESTS."""
    num_read_worker_threads: int = setting(
        "numReadWorkerThreads", DEFAULT_READ_WORKER_THREADS, integer(0, 256)
    )
    """Threads that serve plain reads (not fencing, not long-poll), taking the connections'
    reads in turn, so that one client's flood of reads neither delays the reading of others'
    adds nor takes more than its turn from other readers. 0 serves reads inline on their
    connection's task (BookKeeper's 0 serves them on the I/O thread). Default: half the
    machine's cores, at most 8 (BookKeeper's default is 8 whatever the machine)."""
    read_worker_thread_nice: int = setting("readWorkerThreadNice", 0, integer(0, 19))
    """Niceness added to the read threads (Linux): on a busy machine the threads that take and
    journal adds get the CPU first and reads what is left; an idle machine reads as fast. A
    pybkx key."""
    max_batch_read_size_bytes: int = setting("maxBatchReadSize", 5 * MIB, integer(1, JAVA_LONG_MAX))
    server_write_buffer_low_water_mark_bytes: int = setting(
        "serverWriteBufferLowWaterMark", 384 * 1024, integer(0)
    )
    """A connection paused for unread responses reads again once they fall below this."""
    server_write_buffer_high_water_mark_bytes: int = setting(
        "serverWriteBufferHighWaterMark", 512 * 1024, integer(1)
    )
    """Response bytes a connection may have waiting to be written before it stops reading."""
    server_response_buffer_total_bytes: int = setting(
        "serverResponseBufferTotalBytes", 64 * MIB, integer(1, JAVA_LONG_MAX)
    )
    """Response bytes waiting in all connections together before they all stop reading (a
    pybkx key: BookKeeper bounds only per connection)."""

    # --- state
    read_only_mode_enabled: bool = setting("readOnlyModeEnabled", True, boolean)
    bookie_shutdown_timeout_ms: int = setting("bookieShutdownTimeoutMs", 30_000, integer(1000))
    """The most a stopping bookie spends on its metadata store (unregistering, closing the
    session) and on draining in-flight requests, together; the storage checkpoint comes after and
    is not cut short. With the metadata store unreachable the bookie skips unregistering (its
    registration ends with its session) and still exits within this bound (a pybkx key)."""
    force_read_only_bookie: bool = setting("forceReadOnlyBookie", False, boolean)
    persist_bookie_status_enabled: bool = setting("persistBookieStatusEnabled", False, boolean)
    """Keep the read-only state in BOOKIE_STATUS files across restarts (BookKeeper's key)."""

    # --- the disk checker (BookKeeper's LedgerDirsMonitor keys and defaults)
    disk_usage_threshold: float = setting("diskUsageThreshold", 0.95, number(0.0, 1.0))
    """A ledger directory whose file system is used past this fraction takes no new entry log;
    with every one past it (or an index or journal directory) the bookie turns read-only."""
    disk_usage_warn_threshold: float = setting("diskUsageWarnThreshold", 0.90, number(0.0, 1.0))
    """Past this fraction a directory is logged as almost full."""
    disk_usage_lwm_threshold: float | None = setting(
        "diskUsageLwmThreshold", None, optional(number(0.0, 1.0))
    )
    """A read-only bookie becomes writable again once the usage of its ledger directories
    together falls below this (default: ``diskUsageThreshold``; set it lower for hysteresis)."""
    disk_check_interval_ms: int = setting("diskCheckInterval", 10_000, integer(1))
    read_only_mode_on_any_disk_full_enabled: bool = setting(
        "readOnlyModeOnAnyDiskFullEnabled", False, boolean
    )
    """Turn read-only when any ledger directory is full, not only when all are."""
    min_usable_size_for_high_priority_writes: int | None = setting(
        "minUsableSizeForHighPriorityWrites", None, optional(integer(0, JAVA_LONG_MAX))
    )
    """A read-only bookie still takes high-priority (recovery) adds while some ledger directory
    has this many bytes free (default: ``logSizeLimit``, as BookKeeper)."""

    # --- metrics and the admin HTTP server (BookKeeper's keys and defaults, and pybkx's bounds)
    enable_statistics: bool = setting("enableStatistics", True, boolean)
    stats_provider_class: str = setting(
        "statsProviderClass", NULL_STATS_PROVIDER, _text(NULL_STATS_PROVIDER)
    )
    """Metrics are collected and exported (in Prometheus format) unless this is BookKeeper's
    NullStatsProvider (its default) or ``enableStatistics=false``."""
    prometheus_stats_http_enable: bool = setting("prometheusStatsHttpEnable", True, boolean)
    prometheus_stats_http_address: str = setting(
        "prometheusStatsHttpAddress", "0.0.0.0", _text("0.0.0.0")
    )
    prometheus_stats_http_port: int = setting("prometheusStatsHttpPort", 8000, integer(0, 65535))
    """Where ``/metrics`` is served when the admin HTTP server is off (0: any free port)."""
    prometheus_stats_latency_rollover_seconds: int = setting(
        "prometheusStatsLatencyRolloverSeconds", 60, integer(1)
    )
    """Latency quantiles cover the last complete window of this many seconds."""
    http_server_enabled: bool = setting("httpServerEnabled", False, boolean)
    http_server_host: str = setting("httpServerHost", "0.0.0.0", _text("0.0.0.0"))
    http_server_port: int = setting("httpServerPort", 8080, integer(0, 65535))
    """The admin HTTP server (0: any free port; the bookie registers the one it got)."""
    http_server_threads: int = setting("httpServerThreads", 4, integer(1, 64))
    """Requests the admin HTTP server handles at once (a pybkx key)."""
    http_server_max_connections: int = setting("httpServerMaxConnections", 100, integer(1, 10_000))
    """Open connections the admin HTTP server accepts before refusing more (a pybkx key)."""
    http_server_auth_token_path: str | None = setting("httpServerAuthTokenPath", None, optional_str)
    """pybkx's key (BookKeeper's admin API has no authentication): a file holding a token
    that every PUT, POST and DELETE of the admin API must carry as ``Authorization: Bearer
    <token>`` (GET stays open, as in BookKeeper). Unset: no token asked for."""
    http_server_max_request_bytes: int = setting(
        "httpServerMaxRequestBytes", 1 * MIB, integer(1, 1 << 30)
    )
    """Largest request body the admin HTTP server reads (a pybkx key)."""
    http_server_tls_enable: bool = setting("httpServerTlsEnable", False, boolean)
    """The admin HTTP server speaks HTTPS only, with the key in ``httpServerKeyStorePath``."""
    http_server_key_store_path: str | None = setting("httpServerKeyStorePath", None, optional_str)
    """The admin server's key and certificate chain: a JKS or PKCS12 file (BookKeeper opens it
    as Java's JKS type, which reads PKCS12 files too); required with TLS."""
    http_server_key_store_password: str = setting("httpServerKeyStorePassword", "", _text(""))
    """The key store's password itself (not a file), as in BookKeeper."""
    http_server_trust_store_path: str | None = setting(
        "httpServerTrustStorePath", None, optional_str
    )
    """JKS or PKCS12 certificates the admin server trusts: when set, every client must present
    a certificate they signed (BookKeeper requires client certificates with TLS)."""
    http_server_trust_store_password: str = setting("httpServerTrustStorePassword", "", _text(""))
    """The trust store's password; when it does not open the store (or is empty),
    ``httpServerKeyStorePassword`` is tried: BookKeeper 4.17.3's getter returns that one."""
    http_server_basic_auth_path: str | None = setting("httpServerBasicAuthPath", None, optional_str)
    """pybkx's key: a file of ``user:password`` lines; every PUT, POST and DELETE of the admin
    API may then authenticate with ``Authorization: Basic`` as one of them (beside the bearer
    token when both are set). Unset: no basic auth."""

    # --- AutoRecovery
    auto_recovery_daemon_enabled: bool = setting("autoRecoveryDaemonEnabled", False, boolean)
    """Run the auditor elector and a replication worker in the bookie's process."""
    lost_bookie_recovery_delay_s: int = setting("lostBookieRecoveryDelay", 0, integer(0))
    """Seconds before one lost bookie's ledgers are marked (the cluster's stored value wins)."""
    open_ledger_rereplication_grace_period_ms: int = setting(
        "openLedgerRereplicationGracePeriod", 30_000, integer(0)
    )
    """How long an open ledger whose last segment lost a bookie is left to its writer."""
    rw_rereplicate_backoff_ms: int = setting("rwRereplicateBackoffMs", 5000, integer(0))
    """A replication worker's pause after a ledger failed to replicate."""
    replication_rate_by_bytes: int = setting("replicationRateByBytes", -1, integer(-1))
    """The most bytes a second a worker copies (-1: no limit)."""
    auditor_periodic_bookie_check_interval_s: int = setting(
        "auditorPeriodicBookieCheckInterval", 86_400, integer(0)
    )
    """Seconds between the auditor's checks for lost bookies named by ledgers (0: once, when
    elected)."""
    auditor_periodic_check_interval_s: int = setting(
        "auditorPeriodicCheckInterval", 604_800, integer(0)
    )
    """Seconds between the auditor's checks of every closed ledger's fragments on their
    bookies (0: never)."""
    auditor_periodic_placement_policy_check_interval_s: int = setting(
        "auditorPeriodicPlacementPolicyCheckInterval", 0, integer(0)
    )
    """Seconds between the auditor's counts of closed ledgers whose ensembles do not adhere to
    the placement policy (0: never)."""
    auditor_replicas_check_interval_s: int = setting("auditorReplicasCheckInterval", 0, integer(0))
    """Seconds between the auditor's asking every bookie which entries it holds (0: never)."""
    auditor_ledger_verification_percentage: int = setting(
        "auditorLedgerVerificationPercentage", 0, integer(0, 100)
    )
    """Percent of a fragment's entries the ledger check reads from each bookie, beside the
    first and last (0: those two only)."""

    # --- not settings
    extra: Mapping[str, object] = field(
        default_factory=lambda: MappingProxyType({}), hash=False, repr=False
    )
    """Keys pybkx does not use (yet), as given."""
    origins: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )
    """Key -> where its value came from (``file:line``, ``command line``)."""
    source: str = field(default="ServerConfig()", compare=False)
    """Where the values came from, for messages: a file path, ``command line``, or both."""

    def __post_init__(self) -> None:
        self._parse_fields()
        self._apply_tiers()
        for level, (high, low) in enumerate(
            zip(self.tier_high_watermarks, self.tier_low_watermarks, strict=True)
        ):
            if low >= high:
                raise ConfigError(
                    f"invalid tieredStorageLevel{level}LowWatermark in {self.source}: {low} must "
                    f"be below tieredStorageLevel{level}HighWatermark {high}"
                )
        if self.bookie_port == 0 and not self.allow_ephemeral_ports:
            raise ConfigError(
                f"invalid bookiePort in {self.source}: 0 (an ephemeral port) needs "
                "allowEphemeralPorts=true"
            )
        if self.force_read_only_bookie and not self.read_only_mode_enabled:
            raise ConfigError(
                f"invalid forceReadOnlyBookie in {self.source}: a forced read-only bookie "
                "needs readOnlyModeEnabled=true"
            )
        threshold = self.disk_usage_threshold
        if not 0.0 < threshold < 1.0:
            raise ConfigError(
                f"invalid diskUsageThreshold in {self.source}: {threshold} (must be in (0, 1))"
            )
        if self.disk_usage_warn_threshold - threshold > 1e-6:
            raise ConfigError(
                f"invalid diskUsageWarnThreshold in {self.source}: "
                f"{self.disk_usage_warn_threshold} exceeds diskUsageThreshold {threshold}"
            )
        if self.disk_usage_lwm - threshold > 1e-6:
            raise ConfigError(
                f"invalid diskUsageLwmThreshold in {self.source}: {self.disk_usage_lwm} exceeds "
                f"diskUsageThreshold {threshold}"
            )
        if self.server_write_buffer_low_water_mark_bytes > (
            self.server_write_buffer_high_water_mark_bytes
        ):
            raise ConfigError(
                f"invalid serverWriteBufferLowWaterMark in {self.source}: "
                f"{self.server_write_buffer_low_water_mark_bytes} exceeds "
                f"serverWriteBufferHighWaterMark {self.server_write_buffer_high_water_mark_bytes}"
            )
        if self.server_response_buffer_total_bytes < self.server_write_buffer_high_water_mark_bytes:
            raise ConfigError(
                f"invalid serverResponseBufferTotalBytes in {self.source}: it must be at least "
                "serverWriteBufferHighWaterMark"
            )

    # --- construction

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, lenient: bool = False) -> ServerConfig:
        """Read a BookKeeper properties file (``bk_server.conf`` syntax) or, for ``*.toml``, a
        TOML file with the same flat key names.

        BookKeeper keys pybkx does not implement are kept in ``extra`` (``not_implemented()``
        says what pybkx does instead). Any other unknown key is misspelt: ConfigError naming the
        closest known key, unless ``lenient`` (then logged as a warning and ignored).
        """
        p = Path(path)
        values, lines = read_file(p)
        config = cls().with_overrides(values, source=str(p), lines=lines)
        for problem in config.check_keys(lenient=lenient):
            logger.warning("%s; ignored (--lenient)", problem)
        return config

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, object] | None = None,
        *,
        overrides_source: str = "command line",
        lenient: bool = False,
    ) -> ServerConfig:
        """The file's configuration (BookKeeper's defaults without one), then ``overrides``."""
        config = cls() if path is None else cls.from_file(path, lenient=lenient)
        if overrides:
            config = config.with_overrides(overrides, source=overrides_source)
        return config

    @classmethod
    def of(cls, **values: object) -> ServerConfig:
        """From BookKeeper keys given as keyword arguments (programmatic use: a misspelt key is
        an error naming the closest known one). Raises ConfigError."""
        return cls().with_overrides(values, source="keyword arguments", strict=True)

    def notes(self) -> list[str]:
        """One line per setting pybkx takes differently from BookKeeper: each BookKeeper key
        given that pybkx does not implement, and values pybkx does not support, with what it
        does instead (the bookie logs them at start)."""
        lines = [
            f"{key}={value} ({self.origin(key)}) is not implemented: {note}"
            for key, value, note in self.not_implemented()
        ]
        if self.tiers and "ledgerDirectories" in self.origins:
            lines.append(
                f"ledgerDirectories ({self.origin('ledgerDirectories')}) is replaced by the "
                f"directories of tieredStorageLevels={self.tiered_storage_levels}: "
                + ", ".join(self.ledger_directories)
            )
        provider = self.stats_provider_class
        if provider not in (NULL_STATS_PROVIDER, PROMETHEUS_STATS_PROVIDER):
            lines.append(
                f"statsProviderClass={provider} ({self.origin('statsProviderClass')}) is not "
                "implemented: metrics are exported in Prometheus format"
            )
        return lines

    # --- tiers

    def _apply_tiers(self) -> None:
        """With ``tieredStorageLevels`` set, the tiers' directories become the ledger
        directories (top tier first). Raises ConfigError."""
        try:
            tiers = self.tiers
        except InvalidValue as exc:
            raise ConfigError(f"invalid tiered storage in {self.source}: {exc}") from None
        if tiers:
            dirs_in_order = tuple(d for tier in tiers for d in tier.dirs)
            object.__setattr__(self, "ledger_directories", dirs_in_order)

    @property
    def tiers(self) -> tuple[Tier, ...]:
        """The storage tiers, top first (empty without ``tieredStorageLevels``). Raises
        InvalidValue."""
        if self.tiered_storage_levels == 0 and not any(
            getattr(self, f"tiered_storage_level{i}_dirs") is not None for i in range(MAX_TIERS)
        ):
            return ()
        return build_tiers(
            self.tiered_storage_levels,
            [getattr(self, f"tiered_storage_level{i}_alias") for i in range(MAX_TIERS)],
            [getattr(self, f"tiered_storage_level{i}_dirs") for i in range(MAX_TIERS)],
            [getattr(self, f"tiered_storage_level{i}_dirs_quota") for i in range(MAX_TIERS)],
        )

    @property
    def ledger_dir_tiers(self) -> list[int]:
        """Per ledger directory (in order): its tier (all 0 without tiers)."""
        tiers = self.tiers
        if not tiers:
            return [0] * len(self.ledger_directories)
        return [tier.level for tier in tiers for _ in tier.dirs]

    @property
    def ledger_dir_quotas(self) -> list[int | None]:
        """Per ledger directory (in order): its quota in bytes (None: its file system's size)."""
        tiers = self.tiers
        if not tiers:
            return [None] * len(self.ledger_directories)
        return [q for tier in tiers for q in tier.quotas]

    @property
    def tier_high_watermarks(self) -> list[float]:
        """Per tier level (0 to MAX_TIERS - 1): ``tieredStorageLevel<N>HighWatermark``."""
        return [
            float(getattr(self, f"tiered_storage_level{i}_high_watermark"))
            for i in range(MAX_TIERS)
        ]

    @property
    def tier_low_watermarks(self) -> list[float]:
        """Per tier level (0 to MAX_TIERS - 1): ``tieredStorageLevel<N>LowWatermark``."""
        return [
            float(getattr(self, f"tiered_storage_level{i}_low_watermark")) for i in range(MAX_TIERS)
        ]

    # --- disks

    @property
    def disk_usage_lwm(self) -> float:
        """``diskUsageLwmThreshold``, defaulting to ``diskUsageThreshold``."""
        lwm = self.disk_usage_lwm_threshold
        return self.disk_usage_threshold if lwm is None else lwm

    @property
    def high_priority_min_free_bytes(self) -> int:
        """``minUsableSizeForHighPriorityWrites``, defaulting to ``logSizeLimit``."""
        value = self.min_usable_size_for_high_priority_writes
        return self.log_size_limit_bytes if value is None else value

    # --- metrics

    @property
    def collects_metrics(self) -> bool:
        """Whether metrics are recorded and exported: ``enableStatistics`` and a stats provider
        other than BookKeeper's NullStatsProvider."""
        return self.enable_statistics and self.stats_provider_class != NULL_STATS_PROVIDER

    # --- views

    def storage_settings(self) -> dict[str, object]:
        """The storage keys and their values (as ``settings`` gives them)."""
        storage_keys = {
            f.metadata["key"] for f in dataclasses.fields(self) if f.metadata.get("storage")
        }
        return {k: v for k, v in self.settings().items() if k in storage_keys}

    def listening_address(self) -> str:
        """The address to bind: all IPv4 interfaces unless ``listeningInterface`` is set.

        ``listeningInterface`` names a network interface (its IPv4 address is used, as in
        BookKeeper); pybkx also accepts an IP address or a host name there.
        """
        iface = self.listening_interface
        if iface is None:
            return "0.0.0.0"
        if is_ip(iface) or iface not in interface_names():
            return iface
        address = interface_ipv4(iface)
        if address is None:
            raise ConfigError(
                f"invalid listeningInterface in {self.source}: interface {iface} has no IPv4 "
                "address"
            )
        return address

    def bookie_address(self, port: int) -> str:
        """The ``host:port`` a bookie with this configuration is known by, following
        BookKeeper's rule (``advertisedAddress``, else ``listeningInterface``'s address, else the
        host name's; a loopback address only with ``allowLoopback`` when joining a cluster).
        Raises ConfigError."""
        return _bookie_address(self, port)

    def bookie_identity(self, port: int) -> str:
        """The id the bookie registers under: ``bookieId`` if set, else its address."""
        return self.bookie_id or self.bookie_address(port)

    def client_settings(self) -> dict[str, object]:
        """The client keys for a client this bookie's configuration runs (AutoRecovery, the
        admin API, the shell with ``--conf``), as BookKeeper builds a ClientConfiguration from
        the server's: ``zkTimeout`` and, with TLS on, the TLS keys (the ``tls*`` stores serve
        as the client's, ``client*`` keys in the file win; with ``tlsClientAuthentication`` the
        bookie's own certificate is presented), ZooKeeper's security keys (the bookie's
        identity and ACLs serve its clients too) and the SASL client keys given in the file
        (``clientAuthProviderFactoryClass``, ``saslJaasClientSectionName``)."""
        # BookKeeper copies every server key into such a client's configuration; a JVM's JAAS
        # system property is the process's, so the bookie's JAAS file (among the ZooKeeper
        # security settings) serves its clients too.
        out: dict[str, object] = {"zkTimeout": self.zk_timeout_ms, **self.zk_security_settings()}
        if self.client_auth_provider_factory_class is not None:
            out["clientAuthProviderFactoryClass"] = self.client_auth_provider_factory_class
            out["saslJaasClientSectionName"] = self.sasl_jaas_client_section_name
        if self.tls_provider_factory_class is None:
            return out
        tls: dict[str, object] = {
            "tlsProviderFactoryClass": self.tls_provider_factory_class,
            "tlsClientAuthentication": self.tls_client_authentication,
            "tlsKeyStoreType": self.tls_key_store_type,
            "tlsKeyStore": self.tls_key_store,
            "tlsKeyStorePasswordPath": self.tls_key_store_password_path,
            "tlsTrustStoreType": self.tls_trust_store_type,
            "tlsTrustStore": self.tls_trust_store,
            "tlsTrustStorePasswordPath": self.tls_trust_store_password_path,
            "tlsCertificatePath": self.tls_certificate_path,
            "tlsEnabledProtocols": ",".join(self.tls_enabled_protocols),
            "tlsEnabledCipherSuites": ",".join(self.tls_enabled_cipher_suites),
        }
        out |= {key: value for key, value in tls.items() if value not in (None, "")}
        for key, value in self.extra.items():
            if key.startswith(("clientKeyStore", "clientTrustStore")) or key in (
                "tlsHostnameVerificationEnabled",
                "startTLSTimeoutSecs",
            ):
                out[key] = value
        return out

    def metadata_uri(self) -> str | None:
        """``metadataServiceUri``, else the URI BookKeeper derives from the legacy ``zkServers``
        (and ``zkLedgersRootPath``); None for a standalone bookie."""
        if self.metadata_service_uri is not None:
            return self.metadata_service_uri
        if self.zk_servers is None:
            return None
        return f"zk+hierarchical://{self.zk_servers.replace(',', ';')}{self.zk_ledgers_root_path}"


# --- identity ---------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _bookie_address(config: ServerConfig, port: int) -> str:
    """The ``host:port`` this bookie is known by, following BookKeeper's rule.

    ``advertisedAddress`` if set; else the address of ``listeningInterface``; else the local host
    name's address. A loopback address is refused unless ``allowLoopback`` when the bookie is meant
    to join a cluster (a metadata service is configured), because every such bookie would claim
    the same identity; a standalone bookie may use one. Raises ConfigError.
    """
    if config.advertised_address is not None:
        return f"{config.advertised_address}:{port}"
    registering = config.metadata_uri() is not None
    if config.listening_interface is not None:
        host = config.listening_address()
        what = f"listeningInterface {config.listening_interface}"
    else:
        host = socket.gethostname()
        what = f"the local host name {host}"
    try:
        address = socket.gethostbyname(host)
    except OSError as exc:
        if registering:
            raise ConfigError(
                f"cannot resolve {what} to an address for the bookie id: {exc}; "
                "set advertisedAddress"
            ) from None
        address = host
    if registering and is_loopback(address) and not config.allow_loopback:
        raise ConfigError(
            f"invalid allowLoopback in {config.source}: the bookie address {address}:{port} "
            f"(from {what}) is a loopback address; set allowLoopback=true, listeningInterface "
            "or advertisedAddress"
        )
    return f"{address}:{port}"
