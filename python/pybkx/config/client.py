"""A client's configuration under Apache BookKeeper's client key names, typed and checked once.
It only validates values; it must never connect anywhere."""

# Keys and defaults follow BookKeeper 4.17's ``ClientConfiguration`` where it has them; the
# Rust core reads this object's typed attributes (``BookieClient(config)``). Keys the client
# does not own (placement policy keys, embedded store knobs) stay in ``extra`` for the parts
# that type them.

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from pybkx.config.jaas import JAAS_FILE_KEY, JAVA_PROPERTY
from pybkx.config.security import client_auth_provider
from pybkx.config.tls import TlsKeys, store_type
from pybkx.config.values import (
    MIB,
    KeyedConfig,
    boolean,
    integer,
    number,
    optional,
    optional_str,
    setting,
)
from pybkx.config.zk_security import ZkSecurityKeys

__all__ = ["ClientConfig"]

_DEFAULT_WORKERS = max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class ClientConfig(TlsKeys, ZkSecurityKeys, KeyedConfig):
    """A client's configuration; build it with ``ClientConfig.of(**keys)``.

    Every value is checked on construction (ConfigError).
    """

    # BookKeeper's setter is setStickyReadsEnabled but the key it writes is
    # "stickyReadSEnabled"; the setter's spelling is taken too (a real key wins over it).
    LEGACY_KEYS: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"stickyReadsEnabled": "stickyReadSEnabled", JAVA_PROPERTY: JAAS_FILE_KEY}
    )

    read_timeout_sec: float = setting("readTimeout", 5.0, number(0.001))
    """BookKeeper's older timeout: the default of both timeouts below."""
    add_entry_timeout_sec: float | None = setting(
        "addEntryTimeoutSec", None, optional(number(0.001))
    )
    """A bookie that does not acknowledge an add within this is replaced (default:
    ``readTimeout``)."""
    read_entry_timeout_sec: float | None = setting(
        "readEntryTimeoutSec", None, optional(number(0.001))
    )
    """A read not answered within this tries the next replica (default: ``readTimeout``)."""
    client_connect_timeout_ms: int = setting("clientConnectTimeoutMillis", 10_000, integer(1))
    netty_max_frame_size_bytes: int = setting("nettyMaxFrameSizeBytes", 5 * MIB, integer(64))
    """The largest frame sent or accepted; an entry must fit in one."""
    client_write_buffer_high_water_mark_bytes: int = setting(
        "clientWriteBufferHighWaterMark", 4 * MIB, integer(1)
    )
    """Request bytes queued per bookie connection before appends wait for room."""
    batch_read_enabled: bool = setting("batchReadEnabled", True, boolean)
    use_v2_wire_protocol: bool = setting("useV2WireProtocol", True, boolean)
    """Adds and reads as V2 frames (pybkx's default, as Pulsar runs BookKeeper) or, with
    false, as V3 protobuf requests (BookKeeper's default). BATCH_READ_ENTRY exists only in
    V2: a V3 client reads entry by entry, as BookKeeper's does."""
    throttle: int = setting("throttle", 5000, integer(1))
    """Appends pending per ledger before ``append`` waits (BookKeeper's ``throttle``)."""
    explicit_lac_interval_ms: int = setting("explicitLacInterval", 0, integer(0))
    """Milliseconds between a writer's WRITE_LAC flushes, sent when its LAC got past what its
    last add carried, so readers of an idle ledger see its last entries (BookKeeper's
    ``explicitLacInterval``; 0, the default, is off). V3 clients only
    (``useV2WireProtocol=false``): WRITE_LAC has no V2 form."""
    reorder_read_sequence_enabled: bool = setting("reorderReadSequenceEnabled", True, boolean)
    """Reads try replicas in the placement policy's order, rearranged per read by the
    client's recent figures of each bookie (failures, slow answers, pending requests)."""
    sticky_reads_enabled: bool = setting("stickyReadSEnabled", False, boolean)
    """Reads of a ledger with E == Qw go first to one bookie of its ensemble, another after
    that one fails (BookKeeper spells the key ``stickyReadSEnabled``)."""
    bookie_health_check_enabled: bool = setting("bookieHealthCheckEnabled", False, boolean)
    """Quarantine bookies with too many errors: new ensembles avoid them for a while."""
    bookie_health_check_interval_seconds: int = setting(
        "bookieHealthCheckIntervalSeconds", 60, integer(1)
    )
    bookie_error_threshold_per_interval: int = setting(
        "bookieErrorThresholdPerInterval", 100, integer(1)
    )
    """Errors of one bookie within one interval that quarantine it."""
    bookie_quarantine_time_seconds: int = setting("bookieQuarantineTimeSeconds", 1800, integer(1))
    bookie_quarantine_ratio: float = setting("bookieQuarantineRatio", 1.0, number(0.0, 1.0))
    """The chance that a bookie over the threshold is quarantined (1.0: always)."""
    speculative_read_timeout_ms: int = setting("speculativeReadTimeout", 2000, integer(0))
    """A read not answered within this many ms is also sent to the next replica, the first
    stays outstanding and the first good answer wins (0: speculative reads off)."""
    first_speculative_read_timeout_ms: int | None = setting(
        "firstSpeculativeReadTimeout", None, optional(integer(0))
    )
    """The wait before a read's first speculative request (default: ``speculativeReadTimeout``)."""
    max_speculative_read_timeout_ms: int | None = setting(
        "maxSpeculativeReadTimeout", None, optional(integer(0))
    )
    """The longest wait between two speculative requests of one read as the backoff grows it
    (default: ``speculativeReadTimeout``)."""
    speculative_read_timeout_backoff_multiplier: float = setting(
        "speculativeReadTimeoutBackoffMultiplier", 2.0, number(1e-9)
    )
    """Each wait between speculative requests of one read is the previous one times this."""
    first_speculative_read_lac_timeout_ms: int = setting(
        "firstSpeculativeReadLACTimeout", 1500, integer(0)
    )
    """A long-poll read of the LAC and the next entry not answered within this many ms also
    goes to the next replica (0: never)."""
    max_speculative_read_lac_timeout_ms: int = setting(
        "maxSpeculativeReadLACTimeout", 5000, integer(0)
    )
    """The longest wait between speculative long-poll reads of one call."""
    speculative_read_lac_timeout_backoff_multiplier: float = setting(
        "speculativeReadLACTimeoutBackoffMultiplier", 2.0, number(1e-9)
    )
    """Each wait between speculative long-poll reads is the previous one times this."""
    enable_bookie_failure_tracking: bool = setting("enableBookieFailureTracking", True, boolean)
    """Bookies that failed a request recently are read after healthy ones."""
    bookie_failure_history_expiration_ms: int = setting(
        "bookieFailureHistoryExpirationMSec", 60_000, integer(1)
    )
    """How long a failure or a slow answer moves a bookie back in read orders."""
    read_reorder_threshold_pending_requests: int = setting(
        "readReorderThresholdPendingRequests", 0, integer(0)
    )
    """A replica with at least this many fewer pending requests than the first is read first
    (0: off; then bookies that needed a speculative read go after the others instead)."""
    bookie_replacement_timeout_ms: int = setting("bookieReplacementTimeoutMs", 10_000, integer(0))
    """How long an ensemble change waits for a bookie to replace a failed one (pybkx key)."""
    num_worker_threads: int = setting("numWorkerThreads", _DEFAULT_WORKERS, integer(1, 1024))
    """Threads that run ensemble changes (several ledgers at once; one ledger at a time)."""
    zk_timeout_ms: int = setting("zkTimeout", 10_000, integer(1))

    # --- TLS to the bookies (START_TLS on every connection): the shared keys come from
    # TlsKeys; BookKeeper's client* store keys win over its tls* ones
    client_key_store_type: str | None = setting("clientKeyStoreType", None, optional(store_type))
    client_key_store: str | None = setting("clientKeyStore", None, optional_str)
    client_key_store_password_path: str | None = setting(
        "clientKeyStorePasswordPath", None, optional_str
    )
    client_trust_store_type: str | None = setting(
        "clientTrustStoreType", None, optional(store_type)
    )
    client_trust_store: str | None = setting("clientTrustStore", None, optional_str)
    client_trust_store_password_path: str | None = setting(
        "clientTrustStorePasswordPath", None, optional_str
    )
    tls_hostname_verification_enabled: bool = setting(
        "tlsHostnameVerificationEnabled", False, boolean
    )
    """The bookie's certificate must name the host dialled (its chain is always verified)."""
    start_tls_timeout_secs: float = setting("startTLSTimeoutSecs", 10.0, number(0.001))
    """The most START_TLS and the handshake may take on a new connection."""

    # --- SASL to the bookies (SASLClientProviderFactory, DIGEST-MD5): the JAAS file is
    # jaasConfigFile
    client_auth_provider_factory_class: str | None = setting(
        "clientAuthProviderFactoryClass", None, client_auth_provider
    )
    """``org.apache.bookkeeper.sasl.SASLClientProviderFactory``: every bookie connection
    authenticates (within ``clientConnectTimeoutMillis``) before any request."""
    sasl_jaas_client_section_name: str = setting("saslJaasClientSectionName", "BookKeeper", str)
    """The JAAS section holding the client's ``username`` and ``password``."""

    extra: Mapping[str, object] = field(
        default_factory=lambda: MappingProxyType({}), hash=False, repr=False
    )
    """Keys this class does not own (placement policy, metadata store), as given."""
    origins: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )
    """Key -> where its value came from."""
    source: str = field(default="ClientConfig()", compare=False)

    def __post_init__(self) -> None:
        self._parse_fields()
        # BookKeeper: readTimeout is the fallback of both per-operation timeouts.
        for name in ("add_entry_timeout_sec", "read_entry_timeout_sec"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, self.read_timeout_sec)

    @property
    def first_speculative_wait_ms(self) -> int:
        """The wait before a read's first speculative request: ``firstSpeculativeReadTimeout``,
        by default ``speculativeReadTimeout`` (kept unset, so an override of the latter counts)."""
        first = self.first_speculative_read_timeout_ms
        return self.speculative_read_timeout_ms if first is None else first

    @property
    def max_speculative_wait_ms(self) -> int:
        """The longest wait between speculative requests: ``maxSpeculativeReadTimeout``, by
        default ``speculativeReadTimeout``."""
        longest = self.max_speculative_read_timeout_ms
        return self.speculative_read_timeout_ms if longest is None else longest

    @classmethod
    def of(cls, **values: Any) -> ClientConfig:
        """From BookKeeper client keys as keyword arguments; keys it does not own go to
        ``extra``. Raises ConfigError for a bad value."""
        return cls().with_overrides(values, source="client configuration")

    def store_settings(self) -> dict[str, object]:
        """What the metadata store takes: ``zkTimeout``, ZooKeeper's security keys
        (``zkEnableSecurity``, the JAAS file, ``zkDigestAuthPath``) and the embedded store's
        keys."""
        out: dict[str, object] = {"zkTimeout": self.zk_timeout_ms, **self.zk_security_settings()}
        for key in ("embeddedPollIntervalMs", "embeddedBusyTimeoutMs"):
            if key in self.extra:
                out[key] = self.extra[key]
        return out

    def placement_settings(self) -> dict[str, object]:
        """What the placement policy takes: every key as BookKeeper spells it."""
        return {**self.settings(), **self.extra}
