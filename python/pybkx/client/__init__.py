"""The ledger client: ``BookKeeper`` (a cluster), ``LedgerHandle``/``ReadHandle`` (a ledger),
with ensemble changes, ledger recovery and one failure dispatcher per client; the asyncio face
of its futures is ``aio``. It decides per ledger; the Rust core moves every entry."""

from pybkx._core import MAX_READ_ENTRIES, Future, LedgerEntry
from pybkx.client.adv_handle import LedgerHandleAdv
from pybkx.client.bookkeeper import BookKeeper
from pybkx.client.read_handle import ReadHandle
from pybkx.client.write_handle import LedgerHandle, WriteFlag

__all__ = [
    "MAX_READ_ENTRIES",
    "BookKeeper",
    "Future",
    "LedgerEntry",
    "LedgerHandle",
    "LedgerHandleAdv",
    "ReadHandle",
    "WriteFlag",
]
