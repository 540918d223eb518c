"""Ledger metadata on ZooKeeper: BookKeeper's id generators (``idgen``, ``idgen-long``), ledger
znodes with versions as compare-and-set tokens, listing and watches. It never invents bytes or
paths of its own (serde.py, layout.py)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import DataWatch

from pybkx import errors
from pybkx.meta import serde
from pybkx.meta.ledger_metadata import LedgerMetadata
from pybkx.meta.types import LedgerWatcher, Versioned
from pybkx.meta.zookeeper.layout import (
    HOB_PREFIX,
    ID_PREFIX,
    IDGEN,
    IDGEN_LONG,
    KEPT_HOB_DIRS,
    LEAF_RE,
    LEDGER_PARENT_RE,
    LEVEL_RE,
    MAX_LEDGER_ID,
    SHORT_ID_LIMIT,
    ledger_path,
    zk_error,
)
from pybkx.meta.zookeeper.session import ZkSession

log = logging.getLogger(__name__)


class ZkLedgers(ZkSession):
    """Ledger ids and metadata."""

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
            for old in hobs[:-KEPT_HOB_DIRS]:  # keep the newest three, best effort
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
        top = sorted(c for c in self._children(self._root) if LEDGER_PARENT_RE.fullmatch(c))
        for first in [c for c in top if len(c) == 2] + [c for c in top if len(c) == 3]:
            yield from self._walk(self._path(first), first, 3 if len(first) == 2 else 5, 2)

    def _walk(self, path: str, digits: str, depth: int, level: int) -> Iterator[int]:
        names = self._children(path)
        if level == depth:
            for leaf in sorted(n for n in names if LEAF_RE.fullmatch(n)):
                yield int(digits + leaf[1:])
            return
        for name in sorted(n for n in names if LEVEL_RE.fullmatch(n)):
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
            raise zk_error(exc, f"watch {path}") from None

        def unsubscribe() -> None:
            state["active"] = False

        return unsubscribe
