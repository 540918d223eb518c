"""The metadata store contract: what every backend (ZooKeeper, embedded) must provide.
Types and abstract methods only; it must never hold a backend's logic or talk to a server."""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pybkx import errors
from pybkx.meta.ledger_metadata import LedgerMetadata

T = TypeVar("T")

# What a bookie id and a lock/election name may be: a ZooKeeper znode name, as BookKeeper allows.
_BOOKIE_ID = re.compile(r"[a-zA-Z0-9:._\-]+")
_NAME = re.compile(r"[a-zA-Z0-9._\-]+")


def check_bookie_id(bookie_id: str) -> None:
    """Raises IncorrectParameterException for an id BookKeeper would not accept."""
    if not _BOOKIE_ID.fullmatch(bookie_id) or bookie_id == "readonly":
        raise errors.IncorrectParameterException(
            f"invalid bookie id {bookie_id!r}: use [a-zA-Z0-9:._-], not 'readonly'"
        )


def check_name(name: str, what: str) -> None:
    """Raises IncorrectParameterException for a lock or election name that is not a plain
    path component."""
    if not _NAME.fullmatch(name):
        raise errors.IncorrectParameterException(
            f"invalid {what} name {name!r}: use [a-zA-Z0-9._-]"
        )


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value with the version it was read or written at (compare-and-set token)."""

    value: T
    version: int


@dataclass(frozen=True)
class Endpoint:
    """One ``BookieServiceInfoFormat.Endpoint``."""

    id: str
    port: int
    host: str
    protocol: str
    auth: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()


@dataclass(frozen=True)
class BookieServiceInfo:
    """What a bookie publishes when it registers (``BookieServiceInfoFormat``)."""

    endpoints: tuple[Endpoint, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_address(cls, host: str, port: int) -> BookieServiceInfo:
        """The registration of a bookie serving BookKeeper's RPC at ``host:port``."""
        return cls(endpoints=(Endpoint("bookie", port, host, "bookie-rpc"),))


@dataclass(frozen=True)
class Cookie:
    """A bookie's identity record (``CookieFormat``), kept in the store and in its dirs."""

    bookie_id: str
    journal_dirs: tuple[str, ...]
    ledger_dirs: tuple[str, ...]
    instance_id: str | None = None
    index_dirs: tuple[str, ...] | None = None


LedgerWatcher = Callable[[int, "Versioned[LedgerMetadata] | None"], None]
"""Called with the ledger id and its new metadata (None once deleted)."""

BookiesWatcher = Callable[[frozenset[str], frozenset[str]], None]
"""Called with the writable and the read-only bookie ids whenever either set changes."""


class Election(abc.ABC):
    """A leader election among contenders identified by strings (e.g. bookie ids)."""

    @abc.abstractmethod
    def run(self, on_elected: Callable[[], None]) -> None:
        """Block until elected, call ``on_elected`` while leading, then give up leadership.
        Returns early (without calling it) after ``cancel()`` or when the store closes."""

    @abc.abstractmethod
    def leader(self) -> str | None:
        """The current leader's identifier, if any."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop contending. A running ``on_elected`` is not interrupted: leadership ends when it
        returns (or the store's session ends), so there are never two leaders at once."""


class MetadataStore(abc.ABC):
    """Ledger metadata, bookie registration, cookies and coordination for one cluster.

    All methods are blocking and thread-safe. Errors are ``pybkx.errors`` classes:
    ``MetaStoreException`` (store unreachable or failed; ``ZKException`` on ZooKeeper),
    ``MetadataVersionException`` (compare-and-set lost a race),
    ``NoSuchLedgerExistsOnMetadataServerException``, ``LedgerExistException``,
    ``LedgerIdOverflowException``, ``ClientClosedException`` (used after ``close()``). Watch
    callbacks run on a background thread of the store.
    """

    #: The URI this store was opened with (``zk+hierarchical://...`` or ``embedded://...``).
    uri: str

    # --- cluster --------------------------------------------------------------------------

    @abc.abstractmethod
    def init_new_cluster(self) -> bool:
        """Create the cluster's layout and instance id if absent; True if this call created it."""

    @abc.abstractmethod
    def is_initialized(self) -> bool: ...

    @abc.abstractmethod
    def instance_id(self) -> str:
        """The cluster's instance id. Raises MetaStoreException if not initialised."""

    @abc.abstractmethod
    def format(self) -> None:
        """Delete every ledger, registration and cookie, then initialise afresh (metaformat)."""

    # --- ledgers --------------------------------------------------------------------------

    @abc.abstractmethod
    def generate_ledger_id(self) -> int:
        """A new ledger id, never handed out before in this cluster."""

    @abc.abstractmethod
    def create_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata
    ) -> Versioned[LedgerMetadata]:
        """Raises LedgerExistException if the ledger exists."""

    @abc.abstractmethod
    def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """Raises NoSuchLedgerExistsOnMetadataServerException."""

    @abc.abstractmethod
    def write_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        """Compare-and-set against a version >= 0 read or written earlier (there is no "any
        version"). Raises MetadataVersionException if the stored version differs,
        NoSuchLedgerExistsOnMetadataServerException if the ledger is gone."""

    @abc.abstractmethod
    def remove_ledger_metadata(self, ledger_id: int, expected_version: int | None = None) -> None:
        """Delete (compare-and-set when a version is given). Raises
        NoSuchLedgerExistsOnMetadataServerException, MetadataVersionException."""

    @abc.abstractmethod
    def list_ledgers(self) -> Iterator[int]:
        """Every ledger id, ascending."""

    @abc.abstractmethod
    def watch_ledger(self, ledger_id: int, watcher: LedgerWatcher) -> Callable[[], None]:
        """Call ``watcher`` on every change of the ledger's metadata; returns an unsubscribe."""

    # --- bookies --------------------------------------------------------------------------

    @abc.abstractmethod
    def register_bookie(self, bookie_id: str, read_only: bool, info: BookieServiceInfo) -> None:
        """Register (ephemerally: gone when this store's session or process ends). Registering
        read-only removes a writable registration of the same bookie and vice versa. If another
        live session holds the id, the store may wait for it to expire (ZooKeeper: up to the
        session timeout) and then raises MetaStoreException."""

    @abc.abstractmethod
    def unregister_bookie(self, bookie_id: str) -> None:
        """Remove the bookie's writable and read-only registrations, if any."""

    @abc.abstractmethod
    def writable_bookies(self) -> frozenset[str]: ...

    @abc.abstractmethod
    def readonly_bookies(self) -> frozenset[str]: ...

    @abc.abstractmethod
    def bookie_service_info(self, bookie_id: str) -> BookieServiceInfo:
        """The registered service info. Raises BookieHandleNotAvailableException."""

    @abc.abstractmethod
    def watch_bookies(self, watcher: BookiesWatcher) -> Callable[[], None]:
        """Call ``watcher`` now (in the caller's thread) and on every registration change (on
        the store's thread); returns an unsubscribe."""

    # --- cookies --------------------------------------------------------------------------

    @abc.abstractmethod
    def read_cookie(self, bookie_id: str) -> Versioned[Cookie]:
        """Raises CookieNotFoundException."""

    @abc.abstractmethod
    def write_cookie(
        self, bookie_id: str, cookie: Cookie, expected_version: int | None
    ) -> Versioned[Cookie]:
        """Create (``expected_version`` None; MetadataVersionException if it exists) or
        compare-and-set update (CookieNotFoundException if there is none)."""

    @abc.abstractmethod
    def remove_cookie(self, bookie_id: str, expected_version: int) -> None: ...

    @abc.abstractmethod
    def all_bookies(self) -> frozenset[str]:
        """Bookies that ever joined: the ids holding cookies."""

    # --- coordination ---------------------------------------------------------------------

    @abc.abstractmethod
    def lock(
        self, name: str, identifier: str, timeout: float | None = None
    ) -> AbstractContextManager[None]:
        """An exclusive lock across processes, released on exit or when the holder dies.
        Raises TimeoutException if not acquired within ``timeout`` seconds."""

    @abc.abstractmethod
    def election(self, name: str, identifier: str) -> Election: ...

    @abc.abstractmethod
    def close(self) -> None:
        """End the session: ephemeral registrations go away. Idempotent."""

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
