"""The keys of Apache BookKeeper 4.17's bookie configuration that pybkx does not implement, each
with what pybkx does instead. Data only: it never reads a file or decides what to log.

Taken from BookKeeper's ``ServerConfiguration`` and ``AbstractConfiguration`` key constants, the
shipped ``conf/bk_server.conf`` and ``PrometheusMetricsProvider``; the interop tests check the
list against the real classes. Keys pybkx implements are ``setting`` fields of ``ServerConfig``
and are not listed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["NOT_IMPLEMENTED"]

# (what pybkx does instead, the keys it answers for)
_GROUPS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    (
        "pybkx has one storage (journal, write cache, entry logs, on-disk index): the "
        "ledger-storage choice and DbLedgerStorage/SortedLedgerStorage tuning do not apply",
        (
            "ledgerStorageClass",
            "sortedLedgerStorageEnabled",
            "skipListSizeLimit",
            "skipListArenaChunkSize",
            "skipListArenaMaxAllocSize",
            "numOfMemtableFlushThreads",
            "pageSize",
            "pageLimit",
            "openFileLimit",
            "fileInfoCacheInitialCapacity",
            "fileInfoMaxIdleTime",
            "fileInfoFormatVersionToWrite",
            "readBufferSizeBytes",
            "flushEntrylogBytes",
            "entryLogFilePreallocationEnabled",
            "entryLogPerLedgerEnabled",
            "entryLogPerLedgerCounterLimitsMultFactor",
            "entrylogMapAccessExpiryTimeInSeconds",
            "maximumNumberOfActiveEntryLogs",
            "defaultRocksdbConf",
            "entryLocationRocksdbConf",
            "ledgerMetadataRocksdbConf",
            "maxOperationNumbersInSingleRocksdbWriteBatch",
            "dbStorage_readAheadCacheBatchBytesSize",
            "dbStorage_rocksDB_blockSize",
            "dbStorage_rocksDB_bloomFilterBitsPerKey",
            "dbStorage_rocksDB_checksum_type",
            "dbStorage_rocksDB_format_version",
            "dbStorage_rocksDB_logPath",
            "dbStorage_rocksDB_maxSizeInLevel1MB",
            "dbStorage_rocksDB_numFilesInLevel0",
            "dbStorage_rocksDB_numLevels",
            "dbStorage_rocksDB_sstSizeInMB",
            "dbStorage_rocksDB_writeBufferSizeMB",
            "dbStorage_directIOEntryLoggerMaxFdCacheTimeSeconds",
            "dbStorage_directIOEntryLoggerReadBufferSizeMB",
            "dbStorage_directIOEntryLoggerTotalReadBufferSizeMB",
            "dbStorage_directIOEntryLoggerTotalWriteBufferSizeMB",
        ),
    ),
    (
        "not implemented: garbage collection removes deleted and over-replicated ledgers "
        "(one metadata request at a time), entry logs whose ledgers are all deleted, and "
        "compacts by the minor/major thresholds and compactionRateByBytes only",
        (
            "gcOverreplicatedLedgerMaxConcurrentRequests",
            "gcMetadataOpRateLimit",
            "gcEntryLogMetadataCacheEnabled",
            "gcEntryLogMetadataCachePath",
            "verifyMetadataOnGC",
            "useTargetEntryLogSizeForGc",
            "forceAllowCompaction",
            "majorCompactionMaxTimeMillis",
            "minorCompactionMaxTimeMillis",
            "compactionRate",
            "compactionRateByEntries",
            "compactionMaxOutstandingRequests",
            "isThrottleByBytes",
            "useTransactionalCompaction",
            "entryLocationCompactionInterval",
        ),
    ),
    (
        "the disk checker marks full directories and turns the bookie read-only by its "
        "thresholds; these finer knobs do not exist",
        (
            "minUsableSizeForEntryLogCreation",
            "minUsableSizeForIndexFileCreation",
            "allowStorageExpansion",
            "allowMultipleDirsUnderSameDiskPartition",
        ),
    ),
    (
        "AutoRecovery's auditor runs its periodic checks one ledger at a time; these "
        "tunables of BookKeeper's concurrency, grace periods, batching and placement repair "
        "do not exist",
        (
            "auditorMaxNumberOfConcurrentOpenLedgerOperations",
            "auditorAcquireConcurrentOpenLedgerOperationsTimeOutMSec",
            "underreplicatedLedgerRecoveryGracePeriod",
            "lockReleaseOfFailedLedgerGracePeriod",
            "rereplicationEntryBatchSize",
            "inFlightReadEntryNumInLedgerChecker",
            "repairedPlacementPolicyNotAdheringBookieEnabled",
            "storeSystemTimeAsLedgerUnderreplicatedMarkTime",
            "bookieDeathWatchInterval",
        ),
    ),
    (
        "requests run on one tokio runtime (a thread per core), journal threads and read "
        "threads (numReadWorkerThreads) of their own: BookKeeper's other thread pools and their "
        "throttles do not exist",
        (
            "numAddWorkerThreads",
            "numHighPriorityWorkerThreads",
            "numLongPollWorkerThreads",
            "numJournalCallbackThreads",
            "serverNumIOThreads",
            "serverNumAcceptorThreads",
            "readWorkerThreadsThrottlingEnabled",
            "maxAddsInProgressLimit",
            "maxReadsInProgressLimit",
            "enableBusyWait",
            "enableTaskExecutionStats",
            "preserveMdcForTaskExecution",
            "requestTimerTickDurationMs",
            "requestTimerNumTicks",
            "waitTimeoutOnResponseBackpressureMs",
            "closeChannelOnResponseTimeout",
        ),
    ),
    (
        "the journal writes BookKeeper's group commits with its own record format and buffers; "
        "this file-format or memory knob does not apply",
        (
            "journalAlignmentSize",
            "journalChannelProvider",
            "journalFormatVersionToWrite",
            "journalMaxMemorySizeMb",
            "journalWriteData",
        ),
    ),
    (
        "not implemented: the bookie has no startup-user check",
        ("permittedStartupUsers",),
    ),
    (
        "metrics are exported in Prometheus format only (enableStatistics, statsProviderClass, "
        "prometheusStats*)",
        (
            "codahaleStatsPrefix",
            "codahaleStatsOutputFrequencySeconds",
            "codahaleStatsGraphiteEndpoint",
            "codahaleStatsCSVEndpoint",
            "codahaleStatsSlf4jEndpoint",
            "codahaleStatsJmxEndpoint",
            "limitStatsLogging",
            "sanityCheckMetricsEnabled",
            "exposeDefaultJVMMetrics",
        ),
    ),
    (
        "the admin HTTP server is pybkx's own (waitress), configured by httpServerEnabled, "
        "httpServerHost and httpServerPort",
        ("httpServerClass",),
    ),
    (
        "the network stack is tokio: TCP_NODELAY always on, keep-alive and linger at the "
        "system's defaults, Rust's allocator instead of Netty's",
        (
            "serverTcpNoDelay",
            "serverSockKeepalive",
            "serverTcpLinger",
            "disableServerSocketBind",
            "enableLocalTransport",
            "byteBufAllocatorSizeInitial",
            "byteBufAllocatorSizeMin",
            "byteBufAllocatorSizeMax",
            "allocatorPoolingPolicy",
            "allocatorPoolingConcurrency",
            "allocatorOutOfMemoryPolicy",
            "allocatorLeakDetectionPolicy",
            "allocatorExitOnOutOfMemory",
        ),
    ),
    (
        "the bookie id is bookieId if set, else the advertised, listening-interface or host "
        "address with the port",
        ("useHostNameAsBookieID", "useShortHostName", "bookieAddressResolverEnabled"),
    ),
    (
        "metadata lives in ZooKeeper in BookKeeper's hierarchical layout (or the embedded "
        "store), chosen by metadataServiceUri; retries follow zkTimeout",
        (
            "ledgerManagerFactoryClass",
            "ledgerManagerType",
            "ledgerManagerFactoryDisableClassCheck",
            "allowShadedLedgerManagerFactoryClass",
            "shadedLedgerManagerFactoryClassPrefix",
            "registrationManagerClass",
            "metastoreImplClass",
            "metastoreMaxEntriesPerScan",
            "ledgerMetadataVersion",
            "storeSystemTimeAsLedgerCreationTime",
            "zkRetryBackoffStartMs",
            "zkRetryBackoffMaxMs",
            "zkRetryBackoffMaxRetries",
            "zkRequestRateLimit",
            "available",
        ),
    ),
    (
        "the scrubber is paced in bytes per second (scrubRateBytesPerSecond, "
        "scrubIntervalSeconds), not in entries; no data-integrity cookie stamping",
        (
            "localScrubInterval",
            "localScrubRateLimit",
            "dataIntegrityChecking",
            "dataIntegrityStampMissingCookies",
        ),
    ),
    (
        "the bookie runs no extra components, health checker or local transport",
        (
            "extraServerComponents",
            "ignoreExtraServerComponentsStartupFailures",
            "enableHealthCheck",
            "org.apache.bookkeeper.conf.readsystemproperties",
        ),
    ),
    (
        "a client key: the bookie does not create or read ledgers itself",
        (
            "ensemblePlacementPolicy",
            "reppDnsResolverClass",
            "networkTopologyScriptFileName",
            "networkTopologyScriptNumberArgs",
            "minNumRacksPerWriteQuorum",
            "enforceMinNumRacksPerWriteQuorum",
            "enforceMinNumFaultDomainsForWrite",
            "minNumZonesPerWriteQuorum",
            "desiredNumZonesPerWriteQuorum",
            "enforceStrictZoneawarePlacement",
            "ignoreLocalNodeInPlacementPolicy",
            "reorderReadSequenceEnabled",
            "stickyReadSEnabled",
            "digestType",
            "passwd",
            "enableDigestTypeAutodetection",
            "entryFormatterClass",
            "ledgerIdFormatterClass",
            "dlog.bkcEnsembleSize",
            "dlog.bkcWriteQuorumSize",
            "dlog.bkcAckQuorumSize",
        ),
    ),
    (
        "BookKeeper's stream storage (table service) is not part of pybkx",
        (
            "storage.range.store.dirs",
            "storage.serve.readonly.tables",
            "storage.cluster.controller.schedule.interval.ms",
            "storageserver.grpc.port",
        ),
    ),
)

NOT_IMPLEMENTED: Final[Mapping[str, str]] = MappingProxyType(
    {key: note for note, keys in _GROUPS for key in keys}
)
"""BookKeeper key -> what pybkx does instead (one line for the bookie's start-up log)."""
