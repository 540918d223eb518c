"""Entries as Arrow record batches. The Rust reader packs a read into Arrow's own layout
(entry ids, payload offsets, payloads back to back) off the interpreter's thread; this module
wraps those buffers in ``pyarrow`` arrays without copying them. Spark's data source and pandas
users read ledgers through it.

``pyarrow`` is optional (the ``arrow`` extra): everything else in pybkx works without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybkx._core import SharedBuffer

if TYPE_CHECKING:
    import pyarrow

__all__ = ["ENTRY_SCHEMA", "entry_schema", "record_batch"]

#: Column names of an entry batch, in order.
ENTRY_SCHEMA = (("ledger_id", "int64"), ("entry_id", "int64"), ("payload", "binary"))


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:
        raise ImportError(
            "read_arrow needs pyarrow: pip install 'pybkx[arrow]' (or pip install pyarrow)"
        ) from exc
    return pyarrow


def entry_schema() -> pyarrow.Schema:
    """The schema of ``read_arrow`` batches: ``ledger_id`` int64, ``entry_id`` int64,
    ``payload`` binary, none nullable. Raises ImportError without pyarrow."""
    pa = _pyarrow()
    return pa.schema(
        [pa.field(name, getattr(pa, kind)(), nullable=False) for name, kind in ENTRY_SCHEMA]
    )


def record_batch(
    ledger_id: int,
    rows: int,
    entry_ids: SharedBuffer,
    offsets: SharedBuffer,
    payloads: SharedBuffer,
) -> pyarrow.RecordBatch:
    """A record batch over the Rust buffers of one read (no copy: the arrays keep the buffers
    alive). Raises ImportError without pyarrow, ValueError for inconsistent buffers."""
    pa = _pyarrow()
    if len(entry_ids) != rows * 8 or len(offsets) != (rows + 1) * 4:
        raise ValueError(f"column buffers do not hold {rows} rows")
    ids = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(entry_ids)])
    data = pa.Array.from_buffers(
        pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(payloads)]
    )
    ledger = pa.repeat(pa.scalar(ledger_id, pa.int64()), rows)
    return pa.RecordBatch.from_arrays([ledger, ids, data], schema=entry_schema())
