"""``BookKeeper``: a client of one cluster. It owns the metadata store session, the placement
policy, the Rust connections to bookies and the failure dispatcher, and creates and opens
ledgers. Per-entry work is the Rust core's; it must never move entries itself."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from pybkx import errors
from pybkx._core import BookieClient, FailureQueue, check_quorums
from pybkx.client.adv_handle import LedgerHandleAdv
from pybkx.client.aio import run_blocking
from pybkx.client.bookie_health import BookieHealth
from pybkx.client.failures import FailureDispatcher
from pybkx.client.ledger_recovery import recover
from pybkx.client.metrics import ensure_registered, timed
from pybkx.client.read_handle import ReadHandle
from pybkx.client.write_handle import LedgerHandle, WriteFlag, parse_write_flags
from pybkx.config import ClientConfig
from pybkx.config.jaas import ClientSasl
from pybkx.config.security import (
    client_sasl_credentials,
)
from pybkx.config.tls import ClientTlsMaterial, client_tls_material
from pybkx.meta import (
    MAX_METADATA_RETRIES,
    BookieServiceInfo,
    DigestType,
    LedgerMetadata,
    MetadataStore,
    open_metadata_store,
)
from pybkx.meta.discovery import describe_default
from pybkx.placement import (
    EnsemblePlacementPolicy,
    PlacementPolicyAdherence,
    PlacementResult,
    create_policy,
)

__all__ = ["BookKeeper"]

logger = logging.getLogger(__name__)


class BookKeeper:
    """A client of one cluster.

    ``metadata_service_uri`` is BookKeeper's ``metadataServiceUri`` (``zk+hierarchical://...``)
    or ``embedded:///dir``; None opens the embedded default store. ``conf`` takes BookKeeper's
    client keys (see :class:`pybkx.config.ClientConfig`: ``addEntryTimeoutSec``,
    ``readEntryTimeoutSec``, ``clientConnectTimeoutMillis``, ``nettyMaxFrameSizeBytes``,
    ``batchReadEnabled``, ``throttle``, ``zkTimeout``, ``bookieReplacementTimeoutMs``, ...) and
    the placement policy's keys (``ensemblePlacementPolicy`` and its options), bookie
    quarantine (``bookieHealthCheckEnabled`` and its keys) and ``stickyReadSEnabled``.

    With ``tlsProviderFactoryClass=org.apache.bookkeeper.tls.TLSContextFactory`` every bookie
    connection sends START_TLS and runs TLS (BookKeeper's ``clientTrustStore*``/``tlsTrustStore*``
    to verify the bookies, ``clientKeyStore*``/``tlsKeyStore*`` with
    ``tlsClientAuthentication``, ``tlsHostnameVerificationEnabled``, ``startTLSTimeoutSecs``),
    never plaintext: a bookie that refuses it fails its requests with SecurityException.

    With ``clientAuthProviderFactoryClass=org.apache.bookkeeper.sasl.SASLClientProviderFactory``
    every bookie connection authenticates by SASL DIGEST-MD5 with the ``username`` and
    ``password`` of the JAAS file's (``jaasConfigFile``, else ``$PYBKX_JAAS_CONFIG``)
    ``saslJaasClientSectionName`` section before any request; refused credentials fail the
    requests with UnauthorizedAccessException naming the bookie.

    Raises ConfigError for a bad value, a TLS store or JAAS file that cannot be read (naming the
    key), security it does not implement (another ``clientAuthProviderFactoryClass``: it
    refuses rather than run without it), ``zkEnableSecurity`` without an identity for ZooKeeper
    (a JAAS ``Client`` section or ``zkDigestAuthPath``), ValueError for an unsupported URI,
    MetaStoreException if the store cannot be reached.
    """

    def __init__(self, metadata_service_uri: str | None = None, **conf: Any) -> None:
        self.config = ClientConfig.of(**conf)
        # Read before anything opens: a missing store or a bad password stops here.
        self.tls_material: ClientTlsMaterial | None = client_tls_material(self.config)
        """The TLS every bookie connection of this client uses (None: plaintext)."""
        self.sasl_credentials: ClientSasl | None = client_sasl_credentials(self.config)
        """What every bookie connection authenticates with (None: no authentication)."""
        self._uri_given = metadata_service_uri is not None
        ensure_registered()
        self.store: MetadataStore = open_metadata_store(
            metadata_service_uri, **self.config.store_settings()
        )
        try:
            # BookKeeper's `ensemblePlacementPolicy` (rack-aware by default) follows the
            # registered bookies from here on.
            self.placement: EnsemblePlacementPolicy = create_policy(
                self.config.placement_settings()
            )
            self._registered: frozenset[str] = frozenset()
            self._unwatch = self.store.watch_bookies(self._on_bookies_changed)
            self.bookies = BookieClient(self.config, self.tls_material, self.sasl_credentials)
        except BaseException:
            self.store.close()
            raise
        self.failures = FailureDispatcher(FailureQueue(), self.config.num_worker_threads)
        # Quarantine of faulty bookies (a thread only with bookieHealthCheckEnabled).
        self.health = BookieHealth(
            self.config, self.bookies, self.address_of, lambda: self._registered
        )
        # The *_async methods run metadata work here: a bounded pool, threads made on demand.
        self.executor: Executor = ThreadPoolExecutor(
            self.config.num_worker_threads, thread_name_prefix="pybkx-client"
        )
        self._addresses: dict[str, str] = {}
        self._addresses_lock = threading.Lock()
        self._closed = False
        if self.config.explicit_lac_interval_ms > 0 and self.config.use_v2_wire_protocol:
            # BookKeeper's client sends WRITE_LAC as a V3 frame on its V2 connection, which a
            # bookie that already read V2 there cannot decode; pybkx does not send it at all.
            logger.warning(
                "explicitLacInterval=%d is off: WRITE_LAC is a V3 request and this client "
                "speaks V2 (set useV2WireProtocol=false)",
                self.config.explicit_lac_interval_ms,
            )

    # --- bookies ----------------------------------------------------------------------------

    def address_of(self, bookie_id: str) -> str:
        """``host:port`` to connect to for a bookie id (its registered ``bookie-rpc``
        endpoint; a bare ``host:port`` id when it publishes none)."""
        with self._addresses_lock:
            address = self._addresses.get(bookie_id)
        if address is None:
            address = bookie_id
            try:
                info: BookieServiceInfo = self.store.bookie_service_info(bookie_id)
                address = info.rpc_address() or bookie_id
            except errors.BKException:
                pass  # unregistered or the store unreachable: a bare host:port id it is
            with self._addresses_lock:
                self._addresses[bookie_id] = address
        return address

    def _on_bookies_changed(self, writable: frozenset[str], readonly: frozenset[str]) -> None:
        self._registered = writable | readonly
        self.placement.on_cluster_changed(writable, readonly)

    @property
    def registered_bookies(self) -> frozenset[str]:
        """The bookie ids registered now (writable or read-only), as the watch last saw them."""
        return self._registered

    def unregistered(self, bookies: Iterable[str]) -> list[str]:
        """The bookie ids of ``bookies`` that are not registered (writable or read-only)."""
        registered = self._registered
        return [b for b in bookies if b not in registered]

    # --- ledgers ----------------------------------------------------------------------------

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum_size: int = 2,
        ack_quorum_size: int = 2,
        digest_type: str = "CRC32C",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        write_flags: Iterable[WriteFlag | str] = (),
    ) -> LedgerHandle:
        """Create a ledger on ``ensemble_size`` writable bookies and open it for writing.
        ``write_flags``: BookKeeper's ``WriteFlag``s (or their names), e.g.
        ``{WriteFlag.DEFERRED_SYNC}`` (V3 protocol only; see ``LedgerHandle.force``).

        Raises IncorrectParameterException (quorums, write flags), NotEnoughBookiesException,
        ValueError (digest type), MetaStoreException, ClientClosedException.
        """
        self._check_open()
        flags = parse_write_flags(
            write_flags, use_v2_wire_protocol=self.config.use_v2_wire_protocol
        )
        with timed("LEDGER_CREATE"):
            return self._create_ledger(
                ensemble_size,
                write_quorum_size,
                ack_quorum_size,
                digest_type,
                password,
                custom_metadata,
                flags,
            )

    def _create_ledger(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        digest_type: str,
        password: bytes,
        custom_metadata: Mapping[str, bytes] | None,
        write_flags: frozenset[WriteFlag] = frozenset(),
        *,
        adv: bool = False,
        ledger_id: int | None = None,
    ) -> LedgerHandle:
        digest = DigestType.parse(digest_type)
        check_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        try:
            placed = self._new_ensemble(
                ensemble_size, write_quorum_size, ack_quorum_size, dict(custom_metadata or {})
            )
        except errors.NotEnoughBookiesException as exc:
            raise errors.NotEnoughBookiesException(
                self._explain_no_bookies(ensemble_size, exc)
            ) from exc
        if placed.adherence == PlacementPolicyAdherence.FAIL:
            logger.log(
                logging.WARNING if self.placement.places_by_topology else logging.DEBUG,
                "new ensemble %s does not adhere to the placement policy %s",
                placed.result,
                type(self.placement).__name__,
            )
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
            ensembles={0: tuple(placed.result)},
            digest_type=digest,
            password=password,
            custom_metadata=dict(custom_metadata or {}),
            c_token=random.getrandbits(62),
        )
        handle_class = LedgerHandleAdv if adv else LedgerHandle
        if ledger_id is not None:
            # The caller's id (BookKeeper's createLedgerAdv(ledgerId, ...)): taken is an error.
            versioned = self.store.create_ledger_metadata(ledger_id, metadata)
            return handle_class(self, ledger_id, versioned, write_flags)
        for _ in range(MAX_METADATA_RETRIES):
            new_id = self.store.generate_ledger_id()
            try:
                versioned = self.store.create_ledger_metadata(new_id, metadata)
            except errors.LedgerExistException:
                continue  # the id was taken (e.g. by another client's retried create)
            return handle_class(self, new_id, versioned, write_flags)
        raise errors.MetaStoreException("could not allocate a free ledger id")

    def _new_ensemble(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        custom: dict[str, bytes],
    ) -> PlacementResult[list[str]]:
        """The placement policy's ensemble without the quarantined bookies, or with them when
        the others are too few (as BookKeeper's ``BookieWatcherImpl.newEnsemble``). Raises
        NotEnoughBookiesException."""
        quarantined = self.health.quarantined()
        if quarantined:
            try:
                return self.placement.new_ensemble(
                    ensemble_size, write_quorum_size, ack_quorum_size, custom, quarantined
                )
            except errors.NotEnoughBookiesException:
                logger.debug("not enough healthy bookies; quarantined %s may be used", quarantined)
        return self.placement.new_ensemble(
            ensemble_size, write_quorum_size, ack_quorum_size, custom, ()
        )

    def create_ledger_adv(
        self,
        ensemble_size: int = 3,
        write_quorum_size: int = 2,
        ack_quorum_size: int = 2,
        digest_type: str = "CRC32C",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        ledger_id: int | None = None,
    ) -> LedgerHandleAdv:
        """Create a ledger whose appends name their entry ids (BookKeeper's
        ``createLedgerAdv``), with the id ``ledger_id`` if given (else a generated one).

        Raises LedgerExistException (``ledger_id`` taken), IncorrectParameterException
        (quorums, a negative ``ledger_id``), NotEnoughBookiesException, ValueError (digest
        type), MetaStoreException, ClientClosedException.
        """
        self._check_open()
        if ledger_id is not None and ledger_id < 0:
            raise errors.IncorrectParameterException(
                f"invalid ledger id {ledger_id} < 0: leave it out to have one generated"
            )
        with timed("LEDGER_CREATE"):
            handle = self._create_ledger(
                ensemble_size,
                write_quorum_size,
                ack_quorum_size,
                digest_type,
                password,
                custom_metadata,
                adv=True,
                ledger_id=ledger_id,
            )
        assert isinstance(handle, LedgerHandleAdv)
        return handle

    async def create_ledger_adv_async(
        self,
        ensemble_size: int = 3,
        write_quorum_size: int = 2,
        ack_quorum_size: int = 2,
        digest_type: str = "CRC32C",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        ledger_id: int | None = None,
    ) -> LedgerHandleAdv:
        """``create_ledger_adv`` for asyncio code (on the client's worker pool)."""
        return await run_blocking(
            self.executor,
            self.create_ledger_adv,
            ensemble_size,
            write_quorum_size,
            ack_quorum_size,
            digest_type,
            password,
            custom_metadata,
            ledger_id,
        )

    def open_ledger(
        self, ledger_id: int, password: bytes = b"", recovery: bool = True
    ) -> ReadHandle:
        """Open a ledger for reading. With ``recovery`` (the default) an OPEN ledger is fenced,
        recovered and closed first, so its writer can add nothing more.

        Raises NoSuchLedgerExistsOnMetadataServerException, UnauthorizedAccessException (wrong
        password), LedgerRecoveryException, MetaStoreException, ClientClosedException.
        """
        self._check_open()
        with timed("LEDGER_OPEN"):
            versioned = self.store.read_ledger_metadata(ledger_id)
            if versioned.value.password != password:
                raise errors.UnauthorizedAccessException(f"wrong password for ledger {ledger_id}")
            handle = ReadHandle(self, ledger_id, versioned)
            if recovery and not versioned.value.is_closed:
                with timed("LEDGER_RECOVER"):
                    recover(handle)
            return handle

    def delete_ledger(self, ledger_id: int) -> None:
        """Delete the ledger's metadata (bookies drop its data). Raises
        NoSuchLedgerExistsOnMetadataServerException, ClientClosedException."""
        self._check_open()
        with timed("LEDGER_DELETE"):
            self.store.remove_ledger_metadata(ledger_id)

    def list_ledgers(self) -> list[int]:
        """Every ledger id of the cluster, ascending. Raises MetaStoreException."""
        self._check_open()
        return list(self.store.list_ledgers())

    def _explain_no_bookies(self, wanted: int, exc: Exception) -> str:
        registered = len(self.store.writable_bookies())
        text = (
            f"{wanted} bookies needed, {registered} writable registered in {self.store.uri} ({exc})"
        )
        if registered == 0:
            where = (
                ""
                if self._uri_given
                else f"; with no URI given the client looked at {describe_default()}"
            )
            text += (
                f"{where}. Start bookies (`pybkx sandbox --bookies 3` for a local cluster) or "
                "pass the cluster's metadataServiceUri to BookKeeper()"
            )
        return text

    async def create_ledger_async(
        self,
        ensemble_size: int = 3,
        write_quorum_size: int = 2,
        ack_quorum_size: int = 2,
        digest_type: str = "CRC32C",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        write_flags: Iterable[WriteFlag | str] = (),
    ) -> LedgerHandle:
        """``create_ledger`` for asyncio code."""
        return await run_blocking(
            self.executor,
            self.create_ledger,
            ensemble_size,
            write_quorum_size,
            ack_quorum_size,
            digest_type,
            password,
            custom_metadata,
            write_flags,
        )

    async def open_ledger_async(
        self, ledger_id: int, password: bytes = b"", recovery: bool = True
    ) -> ReadHandle:
        """``open_ledger`` for asyncio code."""
        return await run_blocking(self.executor, self.open_ledger, ledger_id, password, recovery)

    async def delete_ledger_async(self, ledger_id: int) -> None:
        """``delete_ledger`` for asyncio code."""
        await run_blocking(self.executor, self.delete_ledger, ledger_id)

    def close(self) -> None:
        """Close bookie connections, the failure dispatcher and the metadata session.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._unwatch()
        self.health.close()
        self.failures.close()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.placement.uninitialize()
        self.bookies.close()
        self.store.close()

    def _check_open(self) -> None:
        if self._closed:
            raise errors.ClientClosedException("the BookKeeper client is closed")

    def __enter__(self) -> BookKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
