"""A ZooKeeper session for the metadata store: kazoo client, its identity and default ACL
(``zkEnableSecurity``, auth.py), retries, error mapping, LAYOUT check, and re-registration
after a session expires. The store's concerns build on it; it must
never block kazoo's event thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from pybkx import errors
from pybkx.meta import serde
from pybkx.meta.zookeeper.auth import ZkAuth, zk_auth
from pybkx.meta.zookeeper.layout import (
    DEFAULT_ZK_TIMEOUT_MS,
    LAYOUT,
    LEGACY_LAYOUT_TYPES,
    SCHEMES,
    parse_uri,
    registration_path,
    zk_error,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


def watch_setting(event: threading.Event) -> Callable[[Any], None]:
    """A kazoo watch that sets ``event`` (on kazoo's event thread: it must not block)."""
    return lambda _watched: event.set()


class ZkSession:
    """What every part of the ZooKeeper store shares: the session and its plumbing."""

    uri: str

    def __init__(self, uri: str, **conf: Any) -> None:
        self.uri = uri
        scheme, self._hosts, self._root = parse_uri(uri)
        self._timeout_s = int(conf.get("zkTimeout", DEFAULT_ZK_TIMEOUT_MS)) / 1000.0
        if self._timeout_s <= 0:
            raise ValueError(f"zkTimeout must be positive, got {conf.get('zkTimeout')}")
        # Read before connecting: zkEnableSecurity without an identity stops here.
        self._auth: ZkAuth = zk_auth(conf)
        self._zk = KazooClient(
            hosts=self._hosts,
            timeout=self._timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            command_retry=KazooRetry(
                max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, deadline=self._timeout_s
            ),
            **self._auth.kazoo_options(),
        )
        self._closed = False
        self._lock = threading.Lock()
        self._registrations: dict[str, tuple[bool, bytes]] = {}  # re-created after expiry
        self._session_lost = False
        self._long_idgen: bool | None = None  # idgen-long seen (None: not checked yet)
        try:
            self._zk.start(timeout=self._timeout_s)
        except (KazooException, KazooTimeoutError) as exc:
            self._stop_client()
            raise errors.ZKException(
                f"cannot connect to ZooKeeper at {self._hosts} within {self._timeout_s:g} s "
                f"(zkTimeout) for {uri}: {type(exc).__name__}"
            ) from None
        try:
            self._factory = self._resolve_layout(SCHEMES[scheme])
        except BaseException:
            self.close()
            raise
        self._long_paths = self._factory == serde.LONG_HIERARCHICAL_FACTORY
        self._zk.add_listener(self._on_state)

    def _path(self, *names: str) -> str:
        return "/".join([self._root, *names])

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a kazoo call with retries over connection loss; kazoo errors other than the
        ones callers map themselves (NoNode, NodeExists, BadVersion, NotEmpty) -> ZKException."""
        if self._closed:
            raise errors.ClientClosedException(f"metadata store {self.uri} is closed")
        try:
            result: T = self._zk.retry(fn, *args, **kwargs)
            return result
        except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError):
            raise
        except AuthFailedError:
            login = (
                f"the SASL login of {self._auth.sasl_user} ({self._auth.sasl_source}): wrong "
                "username or password, or no SASL on the server"
                if self._auth.sasl_user is not None
                else f"the login of {', '.join(self._auth.identities) or 'this session'}"
            )
            raise errors.ZKException(
                f"ZooKeeper {what} failed: the server refused {login}"
            ) from None
        except NoAuthError:
            who = ", ".join(self._auth.identities) or "no identity (unauthenticated)"
            raise errors.ZKException(
                f"ZooKeeper {what} failed: NoAuthError, the znode's ACL does not admit this "
                f"session ({who}); a cluster made with zkEnableSecurity admits only the identity "
                "that created it"
            ) from None
        except (KazooException, KazooTimeoutError) as exc:
            raise zk_error(exc, what) from None

    def _exists(self, path: str) -> bool:
        return self._call(f"exists {path}", self._zk.exists, path) is not None

    def _children(self, path: str) -> list[str]:
        """Children of ``path``; none if it does not exist."""
        try:
            children: list[str] = self._call(f"list {path}", self._zk.get_children, path)
            return children
        except NoNodeError:
            return []

    def _ensure(self, path: str) -> None:
        self._call(f"create {path}", self._zk.ensure_path, path)

    def _delete_quietly(self, path: str, recursive: bool = False) -> None:
        with suppress(NoNodeError):
            self._call(f"delete {path}", self._zk.delete, path, recursive=recursive)

    def _stop_client(self) -> None:
        try:
            self._zk.stop()
            self._zk.close()
        except Exception as exc:  # closing must not fail the caller
            log.debug("closing the ZooKeeper client: %r", exc)

    def _resolve_layout(self, configured: str | None) -> str:
        """The ledger manager factory to use: the configured one, checked against LAYOUT."""
        try:
            data, _ = self._call("read LAYOUT", self._zk.get, self._path(LAYOUT))
        except NoNodeError:
            return configured or serde.HIERARCHICAL_FACTORY
        try:
            layout = serde.parse_layout(data)
        except errors.MetadataSerializationException as exc:
            raise errors.MetaStoreException(f"{self.uri}: {exc}") from None
        existing = layout.manager_factory_class
        if layout.layout_format_version <= 1:
            existing = LEGACY_LAYOUT_TYPES.get(existing, existing)
        if existing not in (serde.HIERARCHICAL_FACTORY, serde.LONG_HIERARCHICAL_FACTORY):
            raise errors.MetaStoreException(
                f"{self.uri}: the cluster uses ledger manager {existing}, which pybkx does not "
                "support (hierarchical and longhierarchical only)"
            )
        if configured is not None and configured != existing:
            raise errors.MetaStoreException(
                f"{self.uri}: configured ledger manager {configured} does not match the "
                f"cluster's LAYOUT ({existing})"
            )
        if layout.manager_version != 1:
            raise errors.MetaStoreException(
                f"{self.uri}: incompatible ledger manager version {layout.manager_version}"
            )
        return existing

    def _on_state(self, state: str) -> None:
        """kazoo's connection thread: never block here."""
        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._zk.handler.spawn(self._reregister)

    def _reregister(self) -> None:
        """After a session expired: the ephemeral registrations are gone; create them again."""
        with self._lock:
            registrations = dict(self._registrations)
        for bookie_id, (read_only, data) in registrations.items():
            path = registration_path(self._root, bookie_id, read_only)
            try:
                self._zk.create(path, data, ephemeral=True, makepath=True)
                log.info("re-registered bookie %s after the ZooKeeper session expired", bookie_id)
            except NodeExistsError:
                pass
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("cannot re-register bookie %s: %r", bookie_id, exc)

    def close(self) -> None:
        """Close the session: ZooKeeper deletes its ephemeral nodes (registrations, locks,
        election votes) at once. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._registrations.clear()
        self._stop_client()
