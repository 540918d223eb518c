"""The types every metadata contract shares: versioned values, bookie service info, cookies,
watcher signatures and the name rules BookKeeper's znodes impose. Types only; no I/O."""

from __future__ import annotations

import re
from collections.abc import Callable
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

    def rpc_address(self) -> str | None:
        """``host:port`` of the published ``bookie-rpc`` endpoint, if there is one."""
        for endpoint in self.endpoints:
            if endpoint.protocol == "bookie-rpc":
                return f"{endpoint.host}:{endpoint.port}"
        return None


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
