"""Opening a bookie's ledger storage from BookKeeper's keys (for tools, tests and benchmarks):
the keys are typed by ``ServerConfig`` and the Rust storage receives that object."""

from __future__ import annotations

from pybkx._core import LedgerStorage
from pybkx.config import ServerConfig

__all__ = ["open_ledger_storage"]


def open_ledger_storage(config: ServerConfig | None = None, /, **keys: object) -> LedgerStorage:
    """The ledger storage of ``config`` (default: BookKeeper's defaults) with ``keys``
    (BookKeeper key names: ``journalDirectories``, ``ledgerDirectories``, ``flushInterval``...)
    applied over it. Raises ConfigError for an unknown key (naming the closest known one) or a
    bad value, BookieException if the directories are locked by another process, BookieIOException
    if the files cannot be read.
    """
    base = config if config is not None else ServerConfig()
    if keys:
        base = base.with_overrides(keys, source="keyword arguments", strict=True)
    return LedgerStorage(base)
