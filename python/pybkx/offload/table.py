"""The table view of the offloaded ledgers: where each ledger's Parquet object lives
(``<prefix>/ledgers/<id>.parquet``, a directory pyarrow and Spark read as one dataset) and the
manifest of the committed ones (``<prefix>/manifest/<id>.json``, one small object per ledger,
written only after the metadata records the offload complete). Owns that layout; never the
metadata nor the objects' contents.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from pybkx import errors
from pybkx.config.objectstore import ObjectStorageSettings
from pybkx.offload.context import OffloadContext

if TYPE_CHECKING:
    import pyarrow.dataset

    from pybkx.offload.store import ObjectStore

__all__ = [
    "LEDGERS_DIR",
    "MANIFEST_DIR",
    "object_key",
    "table_dataset",
    "table_entries",
    "write_manifest_entry",
]

LEDGERS_DIR: Final = "ledgers"
MANIFEST_DIR: Final = "manifest"
#: Ledger ids are zero-padded so the keys list in ledger order.
_ID_DIGITS: Final = 20


def object_key(settings: ObjectStorageSettings, ledger_id: int) -> str:
    """The one key ledger ``ledger_id``'s object may have (so a retry overwrites, never
    duplicates)."""
    return settings.key(LEDGERS_DIR, f"{ledger_id:0{_ID_DIGITS}d}.parquet")


def _manifest_key(settings: ObjectStorageSettings, ledger_id: int) -> str:
    return settings.key(MANIFEST_DIR, f"{ledger_id:0{_ID_DIGITS}d}.json")


def write_manifest_entry(
    store: ObjectStore, ledger_id: int, context: OffloadContext, *, only_if_missing: bool = False
) -> None:
    """Enter a complete offload in the manifest (the entry is written whole; with
    ``only_if_missing`` an existing entry is left as it is). Raises ObjectStorageException;
    IllegalOpException for an offload not complete."""
    if not context.complete:
        raise errors.IllegalOpException(f"ledger {ledger_id}: offload not complete")
    if only_if_missing and store.size(_manifest_key(store.settings, ledger_id)) is not None:
        return
    entry = {
        "ledger_id": ledger_id,
        "object_key": context.object_key,
        "uid": context.uid,
        "entries": context.entries,
        "size_bytes": context.size_bytes,
        "completed_at_ms": context.completed_at_ms,
    }
    store.put(_manifest_key(store.settings, ledger_id), json.dumps(entry, sort_keys=True).encode())


def table_entries(store: ObjectStore) -> list[dict[str, Any]]:
    """The manifest: one entry per committed ledger (``ledger_id``, ``object_key``, ``uid``,
    ``entries``, ``size_bytes``, ``completed_at_ms``), by ledger id. Raises
    ObjectStorageException, MetadataSerializationException for an unreadable entry."""
    entries = []
    for key, _size in store.list(store.settings.key(MANIFEST_DIR)):
        try:
            entry = json.loads(store.get(key))
            int(entry["ledger_id"]), str(entry["object_key"])
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.MetadataSerializationException(f"bad manifest entry {key}: {exc}") from exc
        entries.append(entry)
    return sorted(entries, key=lambda e: int(e["ledger_id"]))


def table_dataset(store: ObjectStore) -> pyarrow.dataset.Dataset:
    """The committed offloaded ledgers as one ``pyarrow.dataset`` (columns ledger_id,
    entry_id, payload), read straight from the object store. Raises ObjectStorageException,
    MetadataSerializationException, ImportError without pyarrow."""
    import pyarrow.dataset as ds

    from pybkx.client.arrow import entry_schema

    paths = [store.path(str(e["object_key"])) for e in table_entries(store)]
    try:
        return ds.dataset(paths, schema=entry_schema(), format="parquet", filesystem=store.fs)
    except OSError as exc:
        raise errors.ObjectStorageException(f"object storage: table: {exc}") from exc
