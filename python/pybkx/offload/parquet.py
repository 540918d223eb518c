"""A ledger as one Parquet object: columns ledger_id, entry_id, payload (the Arrow client's
schema), row groups of about ``row_group_bytes`` of payload each so a read of a few entries
fetches one group, and key-value metadata naming the ledger. Owns the file's layout, its
writing and the check of a written (or found) object against the ledger; never the metadata.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pybkx import errors
from pybkx.client.arrow import entry_schema
from pybkx.meta.ledger_metadata import LedgerMetadata
from pybkx.offload.context import RowGroup

if TYPE_CHECKING:
    import pyarrow

    from pybkx.offload.store import ObjectStore

__all__ = ["ObjectCheck", "check_object", "write_ledger"]

LEDGER_ID_KEY: Final = b"pybkx.ledger_id"
ENTRIES_KEY: Final = b"pybkx.entries"
PAYLOAD_BYTES_KEY: Final = b"pybkx.payload_bytes"
#: Snappy: cheap on the CPU (the offload shares the bookie's cores) and what Spark reads natively.
COMPRESSION: Final = "snappy"


@dataclass(frozen=True)
class ObjectCheck:
    """What an object's footer says, once it matched the ledger."""

    size_bytes: int
    payload_bytes: int
    row_groups: tuple[RowGroup, ...]


def _file_schema(ledger_id: int, entries: int, payload_bytes: int) -> pyarrow.Schema:
    return entry_schema().with_metadata(
        {
            LEDGER_ID_KEY: str(ledger_id).encode(),
            ENTRIES_KEY: str(entries).encode(),
            PAYLOAD_BYTES_KEY: str(payload_bytes).encode(),
        }
    )


def write_ledger(
    store: ObjectStore,
    key: str,
    metadata: LedgerMetadata,
    ledger_id: int,
    batches: Iterable[pyarrow.RecordBatch],
    row_group_bytes: int,
) -> None:
    """Write ``batches`` (the ledger's entries in order, as ``read_arrow`` gives them) to
    ``key`` as one Parquet object; it appears whole when closed. Raises ObjectStorageException,
    and what reading ``batches`` raises (then no object appears: the upload is abandoned)."""
    import pyarrow.parquet as pq

    entries = metadata.last_entry_id + 1
    schema = _file_schema(ledger_id, entries, metadata.length)
    out = store.open_output(key)
    try:
        writer = pq.ParquetWriter(out, schema, compression=COMPRESSION)
        pending: list[pyarrow.RecordBatch] = []
        pending_bytes = 0
        for batch in batches:
            while batch.num_rows:
                rows = _rows_to_fill(batch, row_group_bytes - pending_bytes)
                pending.append(batch.slice(0, rows))
                pending_bytes += _payload_bytes(pending[-1])
                batch = batch.slice(rows)
                if pending_bytes >= row_group_bytes:
                    _write_group(writer, pending, schema)
                    pending, pending_bytes = [], 0
        if pending:
            _write_group(writer, pending, schema)
        writer.close()  # the footer; the stream stays open (the writer does not own it)
        out.close()  # completes the upload: the object appears whole
    except BaseException:
        _abandon(store, key, out)
        raise


def _payload_bytes(batch: pyarrow.RecordBatch) -> int:
    import pyarrow.compute as pc

    total: int | None = pc.sum(pc.binary_length(batch.column(2))).as_py()
    return total or 0


def _rows_to_fill(batch: pyarrow.RecordBatch, wanted_bytes: int) -> int:
    """How many of ``batch``'s first rows it takes for their payloads to reach
    ``wanted_bytes`` (all of them when they do not); at least one."""
    import pyarrow.compute as pc

    running = pc.cumulative_sum(pc.binary_length(batch.column(2)))
    below = int(pc.sum(pc.less(running, wanted_bytes)).as_py() or 0)
    rows: int = min(batch.num_rows, below + 1)
    return rows


def _write_group(
    writer: pyarrow.parquet.ParquetWriter,
    batches: list[pyarrow.RecordBatch],
    schema: pyarrow.Schema,
) -> None:
    """``batches`` as one row group."""
    import pyarrow as pa

    group = pa.Table.from_batches(batches, schema=entry_schema()).cast(schema)
    writer.write_table(group, row_group_size=group.num_rows)


def _abandon(store: ObjectStore, key: str, out: pyarrow.NativeFile) -> None:
    """An upload that failed part-way: pyarrow's stream has no abort, and closing it would
    complete a footerless object, so it is closed and the object removed at once (a later
    attempt's check refuses such an object all the same, and removes it)."""
    with contextlib.suppress(OSError):  # the upload failed: nothing appeared
        out.close()
    # The store being down: the next attempt finds the object, refuses and removes it.
    with contextlib.suppress(errors.ObjectStorageException):
        store.delete(key)


def check_object(
    store: ObjectStore, key: str, metadata: LedgerMetadata, ledger_id: int
) -> ObjectCheck | None:
    """The object's description if its footer says it holds exactly the ledger of
    ``metadata`` (its id, every entry 0..last, their payload bytes, one ascending run of entry
    ids over the row groups); None when it does not or is not Parquet. Raises
    ObjectStorageException when it cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    size = store.size(key)
    if size is None:
        return None
    with store.open_input(key) as source:
        try:
            footer = pq.ParquetFile(source).metadata
        except (pa.ArrowInvalid, OSError):
            return None  # not a whole Parquet file: not the ledger's object
    kv = footer.metadata or {}
    entries = metadata.last_entry_id + 1
    if (
        kv.get(LEDGER_ID_KEY) != str(ledger_id).encode()
        or kv.get(ENTRIES_KEY) != str(entries).encode()
        or kv.get(PAYLOAD_BYTES_KEY) != str(metadata.length).encode()
        or footer.num_rows != entries
    ):
        return None
    groups = _row_groups(footer)
    expected_first = 0
    for group in groups:
        if group.first_entry != expected_first:
            return None
        expected_first = group.last_entry + 1
    if expected_first != entries:
        return None
    return ObjectCheck(size, metadata.length, groups)


def _row_groups(footer: pyarrow.parquet.FileMetaData) -> tuple[RowGroup, ...]:
    """Each row group's entry range (from the entry_id column's statistics), its payload
    bytes (uncompressed size of the payload chunk) and its byte range in the object."""
    groups = []
    for index in range(footer.num_row_groups):
        group = footer.row_group(index)
        ids, payload = group.column(1), group.column(2)
        columns = [group.column(c) for c in range(group.num_columns)]
        starts = [
            c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
            for c in columns
        ]
        offset = min(starts)
        length = sum(c.total_compressed_size for c in columns)
        stats = ids.statistics
        first, last = (int(stats.min), int(stats.max)) if stats is not None else (-1, -1)
        groups.append(RowGroup(first, last, payload.total_uncompressed_size, offset, length))
    return tuple(groups)
