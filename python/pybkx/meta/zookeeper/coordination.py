"""Locks and elections on ZooKeeper: kazoo's Lock and Election recipes under the ledgers root,
held while the session lives. It never writes a lock protocol of its own."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from kazoo.exceptions import (
    KazooException,
    LockTimeout,
)
from kazoo.handlers.threading import KazooTimeoutError

from pybkx import errors
from pybkx.meta.coordination import Election
from pybkx.meta.types import check_name
from pybkx.meta.zookeeper.layout import ELECTIONS, LOCKS, zk_error
from pybkx.meta.zookeeper.session import ZkSession

log = logging.getLogger(__name__)


class ZkCoordination(ZkSession):
    """Locks and elections."""

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


@contextmanager
def _held(lock: Any, name: str, timeout: float | None) -> Iterator[None]:
    try:
        acquired = lock.acquire(timeout=timeout)
    except LockTimeout:
        acquired = False
    except (KazooException, KazooTimeoutError) as exc:
        raise zk_error(exc, f"lock {name}") from None
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
            raise zk_error(exc, "election") from None

    def leader(self) -> str | None:
        try:
            contenders: list[str] = self._election.contenders()
        except (KazooException, KazooTimeoutError) as exc:
            raise zk_error(exc, "list election contenders") from None
        return contenders[0] if contenders else None

    def cancel(self) -> None:
        """Stop contending; a running ``on_elected`` is not interrupted (its return, or the
        session's end, ends the leadership: never two leaders at once)."""
        self._election.cancel()
