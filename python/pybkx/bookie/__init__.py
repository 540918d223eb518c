"""The bookie: the process that serves ledgers (storage, server, registration, cookies,
read-only mode) and opening its storage from BookKeeper's keys. Control plane only; the bytes
are the Rust core's."""

from pybkx.bookie.gc import GarbageCollector, GcRun, LocalOrphans
from pybkx.bookie.process import DRAIN_TIMEOUT_MS, Bookie, BookieError, BookieService
from pybkx.bookie.storage import open_ledger_storage

__all__ = [
    "DRAIN_TIMEOUT_MS",
    "Bookie",
    "BookieError",
    "BookieService",
    "GarbageCollector",
    "GcRun",
    "LocalOrphans",
    "open_ledger_storage",
]
