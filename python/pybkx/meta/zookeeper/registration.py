"""Bookie registrations (``available``, ``available/readonly``) and cookies on ZooKeeper, in
BookKeeper's layout: ephemeral nodes holding ``BookieServiceInfoFormat``. It stores what a
bookie says; it never decides which mode a bookie is in."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch

from pybkx import errors
from pybkx.meta import serde
from pybkx.meta.types import BookieServiceInfo, BookiesWatcher, Cookie, Versioned, check_bookie_id
from pybkx.meta.zookeeper.layout import (
    AVAILABLE,
    COOKIES,
    READONLY,
    registration_path,
    zk_error,
)
from pybkx.meta.zookeeper.session import ZkSession, watch_setting

log = logging.getLogger(__name__)


class ZkRegistry(ZkSession):
    """Registrations and cookies."""

    def register_bookie(self, bookie_id: str, read_only: bool, info: BookieServiceInfo) -> None:
        """Create the ephemeral ``available[/readonly]/<id>`` node holding the service info,
        then delete the registration in the other mode. A node left by another session (a
        bookie restarted quickly) is given the session timeout to expire. Raises
        IncorrectParameterException for an invalid id, MetaStoreException if another live
        session holds the registration, ZKException."""
        check_bookie_id(bookie_id)
        data = serde.serialize_bookie_service_info(info)
        self._ensure(self._path(AVAILABLE, READONLY))
        path = registration_path(self._root, bookie_id, read_only)
        self._create_registration(path, data)
        with self._lock:
            self._registrations[bookie_id] = (read_only, data)
        self._delete_quietly(registration_path(self._root, bookie_id, not read_only))

    def _create_registration(self, path: str, data: bytes) -> None:
        deadline = time.monotonic() + self._timeout_s
        while True:
            gone = threading.Event()
            stat = self._call(f"exists {path}", self._zk.exists, path, watch_setting(gone))
            if stat is None:
                try:
                    self._call(f"register {path}", self._zk.create, path, data, ephemeral=True)
                    return
                except NodeExistsError:
                    if time.monotonic() < deadline:
                        continue  # raced with another session (or our own retried create)
                    raise errors.MetaStoreException(f"{path} keeps coming back") from None
            session = self._zk.client_id
            if session is not None and stat.ephemeralOwner == session[0]:
                self._call(f"update {path}", self._zk.set, path, data)
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not gone.wait(remaining):
                raise errors.MetaStoreException(
                    f"{path} is held by another live ZooKeeper session: is this bookie "
                    "already running?"
                )

    def unregister_bookie(self, bookie_id: str) -> None:
        """Delete the registrations now; while ZooKeeper is unreachable, leave them to the
        session's expiry instead of waiting for it (a bookie's stop must stay bounded)."""
        with self._lock:
            self._registrations.pop(bookie_id, None)
        if not self._zk.connected:
            log.warning(
                "ZooKeeper unreachable: the registration of %s ends with the session", bookie_id
            )
            return
        self._delete_quietly(registration_path(self._root, bookie_id, False))
        self._delete_quietly(registration_path(self._root, bookie_id, True))

    def writable_bookies(self) -> frozenset[str]:
        return frozenset(self._children(self._path(AVAILABLE))) - {READONLY}

    def readonly_bookies(self) -> frozenset[str]:
        return frozenset(self._children(self._path(AVAILABLE, READONLY)))

    def bookie_service_info(self, bookie_id: str) -> BookieServiceInfo:
        """Raises BookieHandleNotAvailableException if the bookie is not registered,
        MetadataSerializationException, ZKException."""
        for read_only in (False, True):
            path = registration_path(self._root, bookie_id, read_only)
            try:
                data, _ = self._call(f"read {path}", self._zk.get, path)
            except NoNodeError:
                continue
            return serde.parse_bookie_service_info(data, bookie_id)
        raise errors.BookieHandleNotAvailableException(f"bookie {bookie_id} is not registered")

    def watch_bookies(self, watcher: BookiesWatcher) -> Callable[[], None]:
        """``watcher(writable, readonly)`` now (on this thread), then on kazoo's thread after
        every change of either set. Returns the unsubscribe function."""
        self._ensure(self._path(AVAILABLE, READONLY))
        lock = threading.RLock()  # the watcher may unsubscribe from inside its call
        state: dict[str, Any] = {"active": True, "last": None}

        def refresh(_children: list[str]) -> bool | None:
            with lock:
                if not state["active"]:
                    return False
                try:
                    current = (self.writable_bookies(), self.readonly_bookies())
                except errors.BKException as exc:
                    log.warning("bookie watch: cannot list registrations: %s", exc)
                    return None
                if current != state["last"]:
                    state["last"] = current
                    try:
                        watcher(*current)
                    except Exception:
                        log.exception("bookie watcher failed")
            return None

        try:
            ChildrenWatch(self._zk, self._path(AVAILABLE), refresh)
            ChildrenWatch(self._zk, self._path(AVAILABLE, READONLY), refresh)
        except (KazooException, KazooTimeoutError) as exc:
            raise zk_error(exc, "watch the bookie registrations") from None

        def unsubscribe() -> None:
            with lock:
                state["active"] = False

        return unsubscribe

    # --- cookies ----------------------------------------------------------------------------

    def read_cookie(self, bookie_id: str) -> Versioned[Cookie]:
        """Raises CookieNotFoundException, InvalidCookieException, ZKException."""
        path = self._path(COOKIES, bookie_id)
        try:
            data, stat = self._call(f"read {path}", self._zk.get, path)
        except NoNodeError:
            raise errors.CookieNotFoundException(f"no cookie for bookie {bookie_id}") from None
        return Versioned(serde.parse_cookie(data), int(stat.version))

    def write_cookie(
        self, bookie_id: str, cookie: Cookie, expected_version: int | None
    ) -> Versioned[Cookie]:
        """Raises MetadataVersionException (exists on create / stale version),
        CookieNotFoundException (update of a missing cookie), ZKException."""
        check_bookie_id(bookie_id)
        path = self._path(COOKIES, bookie_id)
        data = serde.serialize_cookie(cookie)
        if expected_version is None:
            try:
                self._call(f"create {path}", self._zk.create, path, data, makepath=True)
            except NodeExistsError:
                raise errors.MetadataVersionException(
                    f"a cookie for bookie {bookie_id} already exists"
                ) from None
            return Versioned(cookie, 0)
        try:
            stat = self._call(f"write {path}", self._zk.set, path, data, version=expected_version)
        except BadVersionError:
            raise errors.MetadataVersionException(
                f"cookie of {bookie_id} changed: version {expected_version} is stale"
            ) from None
        except NoNodeError:
            raise errors.CookieNotFoundException(f"no cookie for bookie {bookie_id}") from None
        return Versioned(cookie, int(stat.version))

    def remove_cookie(self, bookie_id: str, expected_version: int) -> None:
        """Raises CookieNotFoundException, MetadataVersionException, ZKException."""
        path = self._path(COOKIES, bookie_id)
        try:
            self._call(f"delete {path}", self._zk.delete, path, version=expected_version)
        except NoNodeError:
            raise errors.CookieNotFoundException(f"no cookie for bookie {bookie_id}") from None
        except BadVersionError:
            raise errors.MetadataVersionException(
                f"cookie of {bookie_id} changed: version {expected_version} is stale"
            ) from None

    def all_bookies(self) -> frozenset[str]:
        return frozenset(self._children(self._path(COOKIES)))
