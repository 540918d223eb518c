"""Writes for Spark: each task appends its partition's ``payload`` column, in row order, to a
new ledger (quorums, digest and password from the options), and reports the ledger in its
commit message; the job's commit logs every ledger written (and the ledgers carry the job's
``name`` in their custom metadata, where a reader finds them), and an aborted job deletes the
ledgers its tasks wrote. It never appends to a ledger it did not create."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage

from pybkx import errors
from pybkx.spark.clients import client_for
from pybkx.spark.options import NAME_KEY, WRITE_CHUNK, SourceOptions

__all__ = ["LedgerWriter", "LedgerWritten"]

logger = logging.getLogger(__name__)


@dataclass
class LedgerWritten(WriterCommitMessage):
    """One task's ledger: its id and how many entries it holds."""

    ledger_id: int
    entries: int


def payload_of(value: Any) -> bytes:
    """A row's payload as bytes: binary as is, strings UTF-8. Raises ValueError otherwise."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise ValueError(f"column 'payload' must be binary or string, got {type(value).__name__}")


class LedgerWriter(DataSourceWriter):
    """A ledger per task; committed ledgers listed by ``commit``, aborted ones deleted."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.committed: list[int] = []

    def write(self, iterator: Iterator[Any]) -> LedgerWritten:
        """Append every row's payload to a new ledger and close it. Raises what creating or
        appending raises (the ledger is deleted first)."""
        o = self.options
        bk = client_for(o.uri, o.zk_timeout_ms)
        custom = {NAME_KEY: o.name.encode()} if o.name else {}
        lh = bk.create_ledger(
            o.ensemble_size,
            o.write_quorum_size,
            o.ack_quorum_size,
            o.digest_type,
            o.password,
            custom_metadata=custom,
        )
        written = 0
        try:
            chunk: list[bytes] = []
            for row in iterator:
                chunk.append(payload_of(row["payload"]))
                if len(chunk) >= WRITE_CHUNK:
                    lh.append_many(chunk)
                    written += len(chunk)
                    chunk = []
            if chunk:
                lh.append_many(chunk)
                written += len(chunk)
            lh.close()
        except BaseException:
            _delete_quietly(o, lh.ledger_id)
            raise
        return LedgerWritten(lh.ledger_id, written)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Record the ledgers written (the job's log, and ``committed``)."""
        written = [m for m in messages if isinstance(m, LedgerWritten)]
        self.committed = [m.ledger_id for m in written]
        logger.info(
            "pybkx sink committed %d ledgers (%d entries)%s: %s",
            len(written),
            sum(m.entries for m in written),
            f" named {self.options.name!r}" if self.options.name else "",
            self.committed,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the ledgers the job's tasks wrote."""
        for m in messages:
            if isinstance(m, LedgerWritten):
                _delete_quietly(self.options, m.ledger_id)
        logger.warning("pybkx sink aborted: deleted the ledgers its tasks wrote")


def _delete_quietly(options: SourceOptions, ledger_id: int) -> None:
    try:
        client_for(options.uri, options.zk_timeout_ms).delete_ledger(ledger_id)
    except errors.BKException as exc:
        logger.warning("could not delete ledger %d of a failed write: %s", ledger_id, exc)
