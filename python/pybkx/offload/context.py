"""The offload record a ledger's metadata carries (custom metadata ``pybkx.offloadContext``, as
Pulsar's managed ledger keeps an ``OffloadContext`` per ledger): who claimed the offload, where
the object is, and once complete its size, row groups, ensembles and digest type. Data and its
JSON encoding only; the offloader decides the changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from pybkx import errors
from pybkx.meta.ledger_metadata import LedgerMetadata

__all__ = ["DRIVER_NAME", "OFFLOAD_CONTEXT_KEY", "OffloadContext", "RowGroup", "context_of"]

OFFLOAD_CONTEXT_KEY: Final = "pybkx.offloadContext"
"""The custom-metadata key holding the record (UTF-8 JSON)."""

DRIVER_NAME: Final = "pybkx-s3-parquet"


@dataclass(frozen=True)
class RowGroup:
    """One Parquet row group of the object: entries ``first_entry..last_entry``, the size of
    their payload column chunk uncompressed (payloads plus Parquet's length prefixes), and
    where the group's column chunks start and how long they are in the object (the byte range
    a ranged read fetches)."""

    first_entry: int
    last_entry: int
    payload_chunk_bytes: int
    offset: int
    length: int


@dataclass(frozen=True)
class OffloadContext:
    """The offload of one ledger. ``complete`` False: a claim by ``owner`` made at
    ``claimed_at_ms`` (the object may or may not exist yet); True: the object ``object_key`` in
    ``bucket`` holds every entry and the fields after ``complete`` describe it.
    ``bookkeeper_deleted`` stays False until the local copies are removed (not yet done)."""

    uid: str
    owner: str
    claimed_at_ms: int
    bucket: str
    object_key: str
    complete: bool = False
    bookkeeper_deleted: bool = False
    completed_at_ms: int = 0
    size_bytes: int = 0
    entries: int = 0
    payload_bytes: int = 0
    digest_type: str = ""
    ensembles: tuple[tuple[int, tuple[str, ...]], ...] = ()
    row_groups: tuple[RowGroup, ...] = ()
    driver: Mapping[str, str] = field(default_factory=dict)

    def completed(
        self,
        metadata: LedgerMetadata,
        *,
        at_ms: int,
        size_bytes: int,
        payload_bytes: int,
        row_groups: tuple[RowGroup, ...],
    ) -> OffloadContext:
        """This claim, complete: the object of ``size_bytes`` holds the ledger of ``metadata``."""
        return replace(
            self,
            complete=True,
            completed_at_ms=at_ms,
            size_bytes=size_bytes,
            entries=metadata.last_entry_id + 1,
            payload_bytes=payload_bytes,
            digest_type=metadata.digest_type.name,
            ensembles=tuple(metadata.ensembles.items()),
            row_groups=row_groups,
        )

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> OffloadContext:
        """Raises MetadataSerializationException for a record this version cannot read."""
        try:
            raw: dict[str, Any] = json.loads(data)
            raw["ensembles"] = tuple((int(f), tuple(b)) for f, b in raw.get("ensembles", ()))
            raw["row_groups"] = tuple(RowGroup(**g) for g in raw.get("row_groups", ()))
            return cls(**raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise errors.MetadataSerializationException(
                f"unreadable {OFFLOAD_CONTEXT_KEY}: {exc}"
            ) from exc


def context_of(metadata: LedgerMetadata) -> OffloadContext | None:
    """The ledger's offload record, None when it has none. Raises
    MetadataSerializationException for an unreadable one."""
    data = metadata.custom_metadata.get(OFFLOAD_CONTEXT_KEY)
    return None if data is None else OffloadContext.decode(data)
