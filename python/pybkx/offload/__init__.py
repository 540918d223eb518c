"""The object-storage cold tier, first half: closed ledgers offloaded once each to an
S3-compatible bucket as Parquet (``offloader``), recorded in their metadata (``context``), seen
as one table (``table``), objects of deleted ledgers found and removed (``orphans``). Never
deletes local copies: bookies cannot read the objects yet.
"""

from pybkx.offload.context import OFFLOAD_CONTEXT_KEY, OffloadContext, RowGroup, context_of
from pybkx.offload.offloader import (
    DEFAULT_CLAIM_TIMEOUT_S,
    OffloadResult,
    offload_ledger,
    offloaded_ledgers,
)
from pybkx.offload.orphans import OrphanObject, find_orphan_objects, remove_orphan_objects
from pybkx.offload.store import ObjectStore
from pybkx.offload.table import object_key, table_dataset, table_entries

__all__ = [
    "DEFAULT_CLAIM_TIMEOUT_S",
    "OFFLOAD_CONTEXT_KEY",
    "ObjectStore",
    "OffloadContext",
    "OffloadResult",
    "OrphanObject",
    "RowGroup",
    "context_of",
    "find_orphan_objects",
    "object_key",
    "offload_ledger",
    "offloaded_ledgers",
    "remove_orphan_objects",
    "table_dataset",
    "table_entries",
]
