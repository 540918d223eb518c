"""One pybkx client per executor process and cluster, made on first use and closed when the
process exits: Spark's Python workers are reused across tasks, so tasks share connections.
It owns those clients' lives; it never reads or writes a ledger itself."""

from __future__ import annotations

import atexit
import threading

from pybkx.client import BookKeeper

__all__ = ["client_for"]

_lock = threading.Lock()
_clients: dict[tuple[str | None, int], BookKeeper] = {}


def client_for(uri: str | None, zk_timeout_ms: int) -> BookKeeper:
    """The process's client of the cluster at ``uri`` (None: the default cluster). Raises what
    ``BookKeeper()`` raises."""
    key = (uri, zk_timeout_ms)
    with _lock:
        bk = _clients.get(key)
        if bk is None:
            bk = BookKeeper(uri, zkTimeout=zk_timeout_ms)
            _clients[key] = bk
        return bk


@atexit.register
def _close_all() -> None:
    with _lock:
        for bk in _clients.values():
            bk.close()
        _clients.clear()
