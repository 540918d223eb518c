"""Objects in the bucket that no ledger owns any more: the Parquet objects and manifest entries
of ledgers whose metadata is gone (deleted after, or while, they were offloaded). Owns finding
them and, when asked, removing them; never touches an object whose ledger still exists (an
unrecorded object of a live ledger is the next offload attempt's to adopt or replace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.offload.store import ObjectStore
from pybkx.offload.table import LEDGERS_DIR, MANIFEST_DIR

__all__ = ["OrphanObject", "find_orphan_objects", "remove_orphan_objects"]

_LEDGER_OBJECT: Final = re.compile(r"(\d{20})\.(parquet|json)")


@dataclass(frozen=True)
class OrphanObject:
    """An object under the prefix whose ledger has no metadata; ``ledger_id`` None: a key
    that names no ledger at all (not written by pybkx)."""

    key: str
    size_bytes: int
    ledger_id: int | None


def find_orphan_objects(bk: BookKeeper, store: ObjectStore) -> list[OrphanObject]:
    """Every object under ``<prefix>/ledgers/`` and ``<prefix>/manifest/`` whose ledger's
    metadata does not exist, in key order. Raises ObjectStorageException, MetaStoreException."""
    orphans = []
    exists: dict[int, bool] = {}
    for directory in (LEDGERS_DIR, MANIFEST_DIR):
        root = store.settings.key(directory) + "/"
        for key, size in store.list(store.settings.key(directory)):
            match = _LEDGER_OBJECT.fullmatch(key.removeprefix(root))
            if match is None:
                orphans.append(OrphanObject(key, size, None))
                continue
            ledger_id = int(match.group(1))
            if ledger_id not in exists:
                exists[ledger_id] = _ledger_exists(bk, ledger_id)
            if not exists[ledger_id]:
                orphans.append(OrphanObject(key, size, ledger_id))
    return orphans


def _ledger_exists(bk: BookKeeper, ledger_id: int) -> bool:
    try:
        bk.store.read_ledger_metadata(ledger_id)
    except errors.NoSuchLedgerExistsOnMetadataServerException:
        return False
    return True


def remove_orphan_objects(
    bk: BookKeeper, store: ObjectStore, orphans: list[OrphanObject]
) -> list[OrphanObject]:
    """Remove those of ``orphans`` whose ledger still has no metadata (checked again just
    before each removal) and that name a ledger; the ones removed. Raises
    ObjectStorageException, MetaStoreException."""
    removed = []
    for orphan in orphans:
        if orphan.ledger_id is None or _ledger_exists(bk, orphan.ledger_id):
            continue
        store.delete(orphan.key)
        removed.append(orphan)
    return removed
