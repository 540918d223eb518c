"""The ZooKeeper metadata store (kazoo) in Apache BookKeeper's znode layout, shared with Java.
It must never invent paths or bytes of its own (serde.py) nor block kazoo's event thread."""

from __future__ import annotations

import logging
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any, Final, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from pybkx import errors
from pybkx.meta import serde
from pybkx.meta.base import (
    BookieServiceInfo,
    BookiesWatcher,
    Cookie,
    Election,
    LedgerWatcher,
    MetadataStore,
    Versioned,
    check_bookie_id,
    check_name,
)
from pybkx.meta.ledger_metadata import LedgerMetadata

__all__ = ["ZooKeeperMetadataStore", "ledger_id_from_path", "ledger_path"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# Names under the ledgers root, as BookKeeper spells them.
AVAILABLE: Final = "available"
READONLY: Final = "readonly"
COOKIES: Final = "cookies"
LAYOUT: Final = "LAYOUT"
INSTANCEID: Final = "INSTANCEID"
UNDER_REPLICATION: Final = "underreplication"
IDGEN: Final = "idgen"
IDGEN_LONG: Final = "idgen-long"
ID_PREFIX: Final = "ID-"
HOB_PREFIX: Final = "HOB-"
# pybkx's own coordination nodes (BookKeeper's ledger scans only look at 2-3 digit children).
LOCKS: Final = "locks"
ELECTIONS: Final = "elections"

SHORT_ID_LIMIT: Final = 2**31 - 1
"""Ids from ``idgen`` must stay below this; the hierarchical layout's long paths start here."""
MAX_LEDGER_ID: Final = 2**63 - 1
DEFAULT_ZK_TIMEOUT_MS: Final = 10_000
_KEPT_HOB_DIRS: Final = 3
_LEDGER_PARENT = re.compile(r"[0-9]{2,3}")
_LEVEL = re.compile(r"[0-9]{4}")
_LEAF = re.compile(r"L[0-9]{4}")
_SCHEMES: Final = {
    "zk": serde.HIERARCHICAL_FACTORY,
    "zk+hierarchical": serde.HIERARCHICAL_FACTORY,
    "zk+longhierarchical": serde.LONG_HIERARCHICAL_FACTORY,
    "zk+null": None,  # whatever the cluster's LAYOUT says
}
# Pre-V2 LAYOUT records name the manager type instead of its factory class.
_LEGACY_LAYOUT_TYPES: Final = {"hierarchical": serde.HIERARCHICAL_FACTORY}


def ledger_path(root: str, ledger_id: int, long_layout: bool = False) -> str:
    """The znode of a ledger under ``root``: hierarchical 2-4-4 (``/00/0000/L0001``) below
    2147483647, else the long 3-4-4-4-4 path; ``long_layout`` always takes the long path.
    Raises IncorrectParameterException for ids outside 0..2^63-1."""
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise errors.IncorrectParameterException(f"ledger id {ledger_id} out of 0..2^63-1")
    if not long_layout and ledger_id < SHORT_ID_LIMIT:
        s = f"{ledger_id:010d}"
        return f"{root}/{s[0:2]}/{s[2:6]}/L{s[6:10]}"
    s = f"{ledger_id:019d}"
    return f"{root}/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def ledger_id_from_path(root: str, path: str) -> int:
    """The ledger id of a :func:`ledger_path` (the digits of its components, in order).
    Raises ValueError for a path that is not a ledger's."""
    if not path.startswith(root + "/"):
        raise ValueError(f"{path!r} is not under {root!r}")
    parts = path[len(root) + 1 :].split("/")
    shape_ok = (len(parts) == 3 and len(parts[0]) == 2) or (len(parts) == 5 and len(parts[0]) == 3)
    if not (
        shape_ok
        and _LEDGER_PARENT.fullmatch(parts[0])
        and all(_LEVEL.fullmatch(p) for p in parts[1:-1])
        and _LEAF.fullmatch(parts[-1])
    ):
        raise ValueError(f"{path!r} is not a hierarchical ledger path")
    return int("".join(parts[:-1]) + parts[-1][1:])


def _parse_uri(uri: str) -> tuple[str, str, str]:
    """(scheme, kazoo connect string, ledgers root) of ``zk+<layout>://h:p[;h:p]/root``."""
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in _SCHEMES:
        raise ValueError(
            f"unsupported ZooKeeper metadataServiceUri {uri!r}: use zk+hierarchical://, "
            "zk+longhierarchical:// or zk+null://"
        )
    hosts, _, path = rest.partition("/")
    root = "/" + path.strip("/")
    if not hosts or root == "/":
        raise ValueError(f"metadataServiceUri {uri!r} needs servers and a ledgers root path")
    return scheme, hosts.replace(";", ","), root


def _zk_error(exc: BaseException, what: str) -> errors.ZKException:
    detail = str(exc)
    return errors.ZKException(
        f"ZooKeeper {what} failed: {type(exc).__name__}" + (f" ({detail})" if detail else "")
    )


class ZooKeeperMetadataStore(MetadataStore):
    """Metadata in ZooKeeper, laid out as Apache BookKeeper 4.17 lays it out under the root of
    ``zk+hierarchical://h1:2181;h2:2181/ledgers`` (``zk+longhierarchical``, ``zk+null`` and
    plain ``zk`` too). ``conf``: ``zkTimeout`` (ms, default 10000) is the session timeout, the
    connect timeout and the retry deadline of a call.

    Raises ValueError for an unsupported URI, ZKException if ZooKeeper cannot be reached within
    the timeout, MetaStoreException if the cluster's LAYOUT names another ledger manager.
    """

    def __init__(self, uri: str, **conf: Any) -> None:
        self.uri = uri
        scheme, self._hosts, self._root = _parse_uri(uri)
        self._timeout_s = int(conf.get("zkTimeout", DEFAULT_ZK_TIMEOUT_MS)) / 1000.0
        if self._timeout_s <= 0:
            raise ValueError(f"zkTimeout must be positive, got {conf.get('zkTimeout')}")
        self._zk = KazooClient(
            hosts=self._hosts,
            timeout=self._timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            command_retry=KazooRetry(
                max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, deadline=self._timeout_s
            ),
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
            self._factory = self._resolve_layout(_SCHEMES[scheme])
        except BaseException:
            self.close()
            raise
        self._long_paths = self._factory == serde.LONG_HIERARCHICAL_FACTORY
        self._zk.add_listener(self._on_state)

    # --- plumbing ---------------------------------------------------------------------------

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
        except (KazooException, KazooTimeoutError) as exc:
            raise _zk_error(exc, what) from None

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
            existing = _LEGACY_LAYOUT_TYPES.get(existing, existing)
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
            path = self._registration_path(bookie_id, read_only)
            try:
                self._zk.create(path, data, ephemeral=True, makepath=True)
                log.info("re-registered bookie %s after the ZooKeeper session expired", bookie_id)
            except NodeExistsError:
                pass
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("cannot re-register bookie %s: %r", bookie_id, exc)

    # --- cluster ----------------------------------------------------------------------------

    def init_new_cluster(self) -> bool:
        """Create root, ``available``, ``available/readonly``, LAYOUT and INSTANCEID in one
        transaction (whichever are missing). False if INSTANCEID already existed or another
        initialiser won the race. Raises ZKException."""
        parent = self._root.rsplit("/", 1)[0]
        if parent:
            self._ensure(parent)
        layout = serde.serialize_layout(serde.LedgerLayout(self._factory))
        for _ in range(3):
            if self._exists(self._path(INSTANCEID)):
                return False
            txn = self._zk.transaction()
            for path in (self._root, self._path(AVAILABLE), self._path(AVAILABLE, READONLY)):
                if not self._exists(path):
                    txn.create(path, b"")
            if not self._exists(self._path(LAYOUT)):
                txn.create(self._path(LAYOUT), layout)
            txn.create(self._path(INSTANCEID), str(uuid.uuid4()).encode())
            results = self._call("initialise the cluster", txn.commit)
            failures = [r for r in results if isinstance(r, Exception)]
            if not failures:
                return True
            if not any(isinstance(r, (NodeExistsError, NoNodeError)) for r in failures):
                raise _zk_error(failures[0], f"initialise the cluster at {self._root}")
            # Someone created a piece meanwhile: look again.
        return False

    def is_initialized(self) -> bool:
        return self._exists(self._path(INSTANCEID))

    def instance_id(self) -> str:
        """Raises MetaStoreException if the cluster is not initialised."""
        try:
            data, _ = self._call("read INSTANCEID", self._zk.get, self._path(INSTANCEID))
        except NoNodeError:
            raise errors.MetaStoreException(
                f"no cluster at {self.uri}: initialise it first (init_new_cluster / metaformat)"
            ) from None
        return bytes(data).decode("utf-8")

    def format(self) -> None:
        """Delete ledgers, id generators, cookies, registrations and under-replication marks;
        write LAYOUT and a new INSTANCEID. Locks and elections are left alone."""
        if not self._exists(self._root):
            self.init_new_cluster()
            return
        for child in self._children(self._root):
            if (
                _LEDGER_PARENT.fullmatch(child)
                or child in (IDGEN, IDGEN_LONG)
                or child.startswith(ID_PREFIX)
            ):
                self._delete_quietly(self._path(child), recursive=True)
        self._delete_quietly(self._path(UNDER_REPLICATION, "ledgers"), recursive=True)
        self._delete_quietly(self._path(UNDER_REPLICATION, LOCKS), recursive=True)
        self._delete_quietly(self._path(COOKIES), recursive=True)
        for bookie_id in self.writable_bookies():
            self._delete_quietly(self._path(AVAILABLE, bookie_id))
        for bookie_id in self.readonly_bookies():
            self._delete_quietly(self._path(AVAILABLE, READONLY, bookie_id))
        self._ensure(self._path(AVAILABLE, READONLY))
        self._delete_quietly(self._path(LAYOUT))
        layout = serde.serialize_layout(serde.LedgerLayout(self._factory))
        self._call("write LAYOUT", self._zk.create, self._path(LAYOUT), layout)
        self._delete_quietly(self._path(INSTANCEID))
        instance = str(uuid.uuid4()).encode()
        self._call("write INSTANCEID", self._zk.create, self._path(INSTANCEID), instance)
        with self._lock:
            self._long_idgen = None

    # --- ledger ids -------------------------------------------------------------------------

    def generate_ledger_id(self) -> int:
        """BookKeeper's generator: 31-bit ids from ``idgen/ID-`` sequential nodes while
        ``idgen-long`` does not exist; on overflow it creates ``idgen-long`` and switches for
        good to 63-bit ids ``(hob << 32) | seq`` from ``idgen-long/HOB-<hob>/ID-``.
        Raises ZKException, LedgerIdOverflowException."""
        with self._lock:
            long_mode = self._long_idgen
        if long_mode is None:
            long_mode = self._exists(self._path(IDGEN_LONG))
            with self._lock:
                self._long_idgen = long_mode
        if not long_mode:
            short = self._short_id(self._path(IDGEN))
            if short is not None:
                return short
            self._ensure(self._path(IDGEN_LONG))
            with self._lock:
                self._long_idgen = True
        return self._long_id()

    def _short_id(self, parent: str) -> int | None:
        """The sequence number of a new ``parent/ID-`` node (deleted right away), or None once
        it reaches 2^31-1 (ZooKeeper's counter then also turns negative)."""
        path: str = self._call(
            f"create {parent}/{ID_PREFIX}",
            self._zk.create,
            f"{parent}/{ID_PREFIX}",
            b"",
            ephemeral=True,
            sequence=True,
            makepath=True,
        )
        self._zk.delete_async(path)  # best effort; ephemeral anyway
        seq = int(path.rsplit("/", 1)[1][len(ID_PREFIX) :])
        return seq if 0 <= seq < SHORT_ID_LIMIT else None

    def _long_id(self) -> int:
        base = self._path(IDGEN_LONG)
        for _ in range(8):
            hobs = sorted(
                int(name[len(HOB_PREFIX) :])
                for name in self._children(base)
                if name.startswith(HOB_PREFIX) and name[len(HOB_PREFIX) :].isdigit()
            )
            if not hobs:
                self._create_hob(base, 1)
                continue
            high = hobs[-1]
            low = self._short_id(f"{base}/{HOB_PREFIX}{high:010d}")
            for old in hobs[:-_KEPT_HOB_DIRS]:  # keep the newest three, best effort
                with suppress(KazooException, KazooTimeoutError):
                    self._zk.delete(f"{base}/{HOB_PREFIX}{old:010d}", version=0)
            if low is not None:
                ledger_id = (high << 32) | low
                if ledger_id > MAX_LEDGER_ID:
                    break
                return ledger_id
            self._create_hob(base, high + 1)
        raise errors.LedgerIdOverflowException(f"no ledger id left under {base}")

    def _create_hob(self, base: str, high: int) -> None:
        if high >= 2**31:
            raise errors.LedgerIdOverflowException(f"high-order id bits exhausted under {base}")
        with suppress(NodeExistsError):
            self._call(f"create {base}/HOB", self._zk.create, f"{base}/{HOB_PREFIX}{high:010d}")

    # --- ledger metadata --------------------------------------------------------------------

    def _ledger_path(self, ledger_id: int) -> str:
        return ledger_path(self._root, ledger_id, self._long_paths)

    def create_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata
    ) -> Versioned[LedgerMetadata]:
        """Create the ledger's znode (parents as needed). Format 3 metadata gets a random
        creator token, so a create retried after a lost reply is told from a real clash.
        Raises LedgerExistException, MetadataSerializationException, ZKException."""
        path = self._ledger_path(ledger_id)
        if metadata.metadata_format_version > 2:
            metadata = metadata.replace(c_token=random.randrange(MAX_LEDGER_ID))
        data = serde.serialize_ledger_metadata(metadata)
        try:
            self._call(f"create {path}", self._zk.create, path, data, makepath=True)
        except NodeExistsError:
            if metadata.metadata_format_version > 2:
                try:
                    existing = self.read_ledger_metadata(ledger_id)
                except errors.NoSuchLedgerExistsOnMetadataServerException:
                    existing = None
                if existing is not None and existing.value.c_token == metadata.c_token:
                    return existing  # our own create, retried
            raise errors.LedgerExistException(f"ledger {ledger_id} already exists") from None
        return Versioned(metadata, 0)

    def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """Raises NoSuchLedgerExistsOnMetadataServerException, MetadataSerializationException,
        ZKException."""
        path = self._ledger_path(ledger_id)
        try:
            data, stat = self._call(f"read {path}", self._zk.get, path)
        except NoNodeError:
            raise errors.NoSuchLedgerExistsOnMetadataServerException(
                f"ledger {ledger_id} has no metadata"
            ) from None
        return Versioned(serde.parse_ledger_metadata(data), int(stat.version))

    def write_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        """Compare-and-set on the znode version. Raises MetadataVersionException,
        NoSuchLedgerExistsOnMetadataServerException, ZKException."""
        if expected_version < 0:
            # ZooKeeper reads -1 as "any version"; a compare-and-set never means that.
            raise errors.MetadataVersionException(
                f"ledger {ledger_id}: version {expected_version} is not a version"
            )
        path = self._ledger_path(ledger_id)
        data = serde.serialize_ledger_metadata(metadata)
        try:
            stat = self._call(f"write {path}", self._zk.set, path, data, version=expected_version)
        except BadVersionError:
            raise errors.MetadataVersionException(
                f"ledger {ledger_id} changed: version {expected_version} is stale"
            ) from None
        except NoNodeError:
            raise errors.NoSuchLedgerExistsOnMetadataServerException(
                f"ledger {ledger_id} has no metadata"
            ) from None
        return Versioned(metadata, int(stat.version))

    def remove_ledger_metadata(self, ledger_id: int, expected_version: int | None = None) -> None:
        """Delete the znode, then its parents that became empty (never the root). Raises
        NoSuchLedgerExistsOnMetadataServerException, MetadataVersionException, ZKException."""
        path = self._ledger_path(ledger_id)
        version = -1 if expected_version is None else expected_version
        try:
            self._call(f"delete {path}", self._zk.delete, path, version=version)
        except NoNodeError:
            raise errors.NoSuchLedgerExistsOnMetadataServerException(
                f"ledger {ledger_id} has no metadata"
            ) from None
        except BadVersionError:
            raise errors.MetadataVersionException(
                f"ledger {ledger_id} changed: version {expected_version} is stale"
            ) from None
        parent = path.rsplit("/", 1)[0]
        while parent != self._root and parent.startswith(self._root + "/"):
            try:
                self._call(f"delete {parent}", self._zk.delete, parent)
            except (NotEmptyError, NoNodeError):
                break
            parent = parent.rsplit("/", 1)[0]

    def list_ledgers(self) -> Iterator[int]:
        """Ids from a walk of the 2-4-4 and 3-4-4-4-4 trees, ascending; ledgers created or
        deleted during the walk may or may not appear. Raises ZKException while iterating."""
        top = sorted(c for c in self._children(self._root) if _LEDGER_PARENT.fullmatch(c))
        for first in [c for c in top if len(c) == 2] + [c for c in top if len(c) == 3]:
            yield from self._walk(self._path(first), first, 3 if len(first) == 2 else 5, 2)

    def _walk(self, path: str, digits: str, depth: int, level: int) -> Iterator[int]:
        names = self._children(path)
        if level == depth:
            for leaf in sorted(n for n in names if _LEAF.fullmatch(n)):
                yield int(digits + leaf[1:])
            return
        for name in sorted(n for n in names if _LEVEL.fullmatch(n)):
            yield from self._walk(f"{path}/{name}", digits + name, depth, level + 1)

    def watch_ledger(self, ledger_id: int, watcher: LedgerWatcher) -> Callable[[], None]:
        """``watcher(ledger_id, Versioned | None)`` on kazoo's thread after every change from
        now on (None once deleted); changes in quick succession may arrive as one. Returns the
        unsubscribe function."""
        path = self._ledger_path(ledger_id)
        state = {"active": True, "first": True}

        def on_data(data: bytes | None, stat: Any, event: Any) -> bool | None:
            if not state["active"]:
                return False
            if state["first"]:  # the current value, read while subscribing
                state["first"] = False
                return None
            if stat is None or data is None:
                value = None
            else:
                try:
                    value = Versioned(serde.parse_ledger_metadata(data), int(stat.version))
                except errors.MetadataSerializationException as exc:
                    log.warning("ledger %d: unreadable metadata in a watch: %s", ledger_id, exc)
                    return None
            try:
                watcher(ledger_id, value)
            except Exception:
                log.exception("ledger %d metadata watcher failed", ledger_id)
            return None

        if self._closed:
            raise errors.ClientClosedException(f"metadata store {self.uri} is closed")
        try:
            DataWatch(self._zk, path, on_data)
        except (KazooException, KazooTimeoutError) as exc:
            raise _zk_error(exc, f"watch {path}") from None

        def unsubscribe() -> None:
            state["active"] = False

        return unsubscribe

    # --- bookies ----------------------------------------------------------------------------

    def _registration_path(self, bookie_id: str, read_only: bool) -> str:
        if read_only:
            return self._path(AVAILABLE, READONLY, bookie_id)
        return self._path(AVAILABLE, bookie_id)

    def register_bookie(self, bookie_id: str, read_only: bool, info: BookieServiceInfo) -> None:
        """Create the ephemeral ``available[/readonly]/<id>`` node holding the service info,
        then delete the registration in the other mode. A node left by another session (a
        bookie restarted quickly) is given the session timeout to expire. Raises
        IncorrectParameterException for an invalid id, MetaStoreException if another live
        session holds the registration, ZKException."""
        check_bookie_id(bookie_id)
        data = serde.serialize_bookie_service_info(info)
        self._ensure(self._path(AVAILABLE, READONLY))
        path = self._registration_path(bookie_id, read_only)
        self._create_registration(path, data)
        with self._lock:
            self._registrations[bookie_id] = (read_only, data)
        self._delete_quietly(self._registration_path(bookie_id, not read_only))

    def _create_registration(self, path: str, data: bytes) -> None:
        deadline = time.monotonic() + self._timeout_s
        while True:
            gone = threading.Event()
            stat = self._call(f"exists {path}", self._zk.exists, path, _setter(gone))
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
        with self._lock:
            self._registrations.pop(bookie_id, None)
        self._delete_quietly(self._registration_path(bookie_id, False))
        self._delete_quietly(self._registration_path(bookie_id, True))

    def writable_bookies(self) -> frozenset[str]:
        return frozenset(self._children(self._path(AVAILABLE))) - {READONLY}

    def readonly_bookies(self) -> frozenset[str]:
        return frozenset(self._children(self._path(AVAILABLE, READONLY)))

    def bookie_service_info(self, bookie_id: str) -> BookieServiceInfo:
        """Raises BookieHandleNotAvailableException if the bookie is not registered,
        MetadataSerializationException, ZKException."""
        for read_only in (False, True):
            path = self._registration_path(bookie_id, read_only)
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
            raise _zk_error(exc, "watch the bookie registrations") from None

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

    # --- coordination -----------------------------------------------------------------------

    def lock(
        self, name: str, identifier: str, timeout: float | None = None
    ) -> AbstractContextManager[None]:
        """kazoo's Lock recipe under ``<root>/locks/<name>``: held while the session lives.
        Raises TimeoutException, ZKException (when entered)."""
        check_name(name, "lock")
        if self._closed:
            raise errors.ClientClosedException(f"metadata store {self.uri} is closed")
        return _held(self._zk.Lock(self._path(LOCKS, name), identifier), name, timeout)

    def election(self, name: str, identifier: str) -> Election:
        """kazoo's Election recipe under ``<root>/elections/<name>``."""
        check_name(name, "election")
        if self._closed:
            raise errors.ClientClosedException(f"metadata store {self.uri} is closed")
        return _ZooKeeperElection(self._zk.Election(self._path(ELECTIONS, name), identifier))

    def close(self) -> None:
        """Close the session: ZooKeeper deletes its ephemeral nodes (registrations, locks,
        election votes) at once. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._registrations.clear()
        self._stop_client()


def _setter(event: threading.Event) -> Callable[[Any], None]:
    """A kazoo watch that sets ``event``."""
    return lambda _watched: event.set()


@contextmanager
def _held(lock: Any, name: str, timeout: float | None) -> Iterator[None]:
    try:
        acquired = lock.acquire(timeout=timeout)
    except LockTimeout:
        acquired = False
    except (KazooException, KazooTimeoutError) as exc:
        raise _zk_error(exc, f"lock {name}") from None
    if not acquired:
        raise errors.TimeoutException(f"lock {name} not acquired within {timeout} s")
    try:
        yield
    finally:
        try:
            lock.release()
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("releasing lock %s: %r (it goes with the session)", name, exc)


class _ZooKeeperElection(Election):
    """kazoo's Election recipe: the leader holds the lowest ephemeral sequential node."""

    def __init__(self, election: Any) -> None:
        self._election = election

    def run(self, on_elected: Callable[[], None]) -> None:
        """Raises ZKException if ZooKeeper fails while contending."""
        try:
            self._election.run(on_elected)
        except (KazooException, KazooTimeoutError) as exc:
            raise _zk_error(exc, "election") from None

    def leader(self) -> str | None:
        try:
            contenders: list[str] = self._election.contenders()
        except (KazooException, KazooTimeoutError) as exc:
            raise _zk_error(exc, "list election contenders") from None
        return contenders[0] if contenders else None

    def cancel(self) -> None:
        """Stop contending; a running ``on_elected`` is not interrupted (its return, or the
        session's end, ends the leadership: never two leaders at once)."""
        self._election.cancel()
