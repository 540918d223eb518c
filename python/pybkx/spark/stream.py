"""Tailing ledgers with Spark Structured Streaming: an offset is, per ledger, the next entry id
to read; the latest offset comes from each ledger's last add confirmed (a closed ledger's last
entry), so a micro-batch reads exactly the entries between two offsets and a query restarted
from its checkpoint neither loses nor repeats one. Ledgers that appear and match the options
(ids, or a name prefix in their custom metadata) join the stream from entry 0."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.spark.clients import client_for
from pybkx.spark.options import NAME_KEY, SourceOptions
from pybkx.spark.reader import EntryBounds, LedgerRange, LedgerReader, plan_ranges

if TYPE_CHECKING:
    import pyarrow

__all__ = ["LedgerStreamReader"]


class LedgerStreamReader(DataSourceStreamReader):
    """Offsets ``{"ledgers": {"<id>": next entry id}}``; reads as the batch reader does."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._reader = LedgerReader(options)

    def _client(self) -> BookKeeper:
        return client_for(self.options.uri, self.options.zk_timeout_ms)

    def _matching(self, bk: BookKeeper) -> list[int]:
        ids = self.options.ledgers if self.options.ledgers is not None else bk.list_ledgers()
        prefix = self.options.name_prefix
        if prefix is None:
            return list(ids)
        found = []
        for ledger_id in ids:
            try:
                md = bk.store.read_ledger_metadata(ledger_id).value
            except errors.NoSuchLedgerExistsOnMetadataServerException:
                continue
            if md.custom_metadata.get(NAME_KEY, b"").decode(errors="replace").startswith(prefix):
                found.append(ledger_id)
        return found

    def initialOffset(self) -> dict[str, Any]:
        """Nothing read yet: every ledger starts at entry 0 when it is first seen."""
        return {"ledgers": {}}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, Any]:
        """Per matching ledger, the entry after its last add confirmed (ledgers deleted
        meanwhile are dropped). Raises ValueError naming a ledger whose LAC cannot be read."""
        bk = self._client()
        out: dict[str, int] = {}
        for ledger_id in self._matching(bk):
            where = f"ledger {ledger_id}"
            try:
                rh = bk.open_ledger(ledger_id, self.options.password, recovery=False)
                lac = rh.last_add_confirmed if rh.is_closed else rh.read_last_add_confirmed()
            except errors.NoSuchLedgerExistsOnMetadataServerException:
                continue
            except errors.UnauthorizedAccessException:
                raise ValueError(f"{where}: wrong password (option 'password')") from None
            except errors.BKException as exc:
                raise ValueError(f"{where}: its LAC cannot be read: {exc}") from None
            out[str(ledger_id)] = lac + 1
        previous = (start or {}).get("ledgers", {})
        # Never go back: a ledger's LAC as seen by a reader only grows.
        for key, value in previous.items():
            out[key] = max(out.get(key, value), value) if key in out else value
        return {"ledgers": out}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begun = start.get("ledgers", {})
        planned: list[LedgerRange] = []
        for key, next_entry in sorted(end.get("ledgers", {}).items(), key=lambda kv: int(kv[0])):
            first = int(begun.get(key, 0))
            if next_entry > first:
                bounds = EntryBounds(entry_min=first)
                planned += plan_ranges(
                    int(key), next_entry - 1, bounds, self.options.entries_per_partition
                )
        return planned

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        """The partition's entries, as the batch reader reads them."""
        yield from self._reader.read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: ledgers are never trimmed by a reader."""
