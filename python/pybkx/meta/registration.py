"""The bookie part of the metadata contract: registrations (writable or read-only, ephemeral),
service info, watches, and cookies. Abstract methods only; backends implement them."""

from __future__ import annotations

import abc
from collections.abc import Callable

from pybkx.meta.types import BookieServiceInfo, BookiesWatcher, Cookie, Versioned


class BookieRegistry(abc.ABC):
    """Which bookies exist, which are up, and what identity each has on disk."""

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
