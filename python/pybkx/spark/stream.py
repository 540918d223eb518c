"""Tailing ledgers with Spark Structured Streaming: an offset is, per ledger, the next entry id
to read; the latest offset comes from each ledger's last add confirmed (a closed ledger's last
entry), so a micro-batch reads exactly the entries between two offsets and a query restarted
from its checkpoint neither loses nor repeats one. Ledgers that appear and match the options
(ids, or a name prefix in their custom metadata) join the stream from entry 0.

When no matching ledger has a new entry, ``latestOffset`` waits for one (at most the
``longPollTimeoutMs`` option, default 1 s) on the open ledgers' bookies: long-poll LAC reads over
V3, answered the moment an add passes the LAC; repeated LAC reads over V2. A new entry then
starts the next micro-batch at once, and an idle stream asks the bookies once a second instead
of at Spark's polling rate. It never writes to a ledger it tails."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from pybkx import errors
from pybkx.client import BookKeeper, ReadHandle
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
        meanwhile are dropped). When that is nothing new since ``start``, waits for a new entry
        in an open ledger (at most ``longPollTimeoutMs``, see the module docstring). Raises
        ValueError naming a ledger whose LAC cannot be read."""
        bk = self._client()
        out: dict[str, int] = {}
        open_handles: list[ReadHandle] = []
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
            if not rh.is_closed:
                open_handles.append(rh)
        previous = (start or {}).get("ledgers", {})
        if start is not None and open_handles and not _advanced(out, previous):
            for rh in self._wait_for_entries(open_handles):
                out[str(rh.ledger_id)] = max(out[str(rh.ledger_id)], rh.last_add_confirmed + 1)
        # Never go back: a ledger's LAC as seen by a reader only grows.
        for key, value in previous.items():
            out[key] = max(out.get(key, value), value) if key in out else value
        return {"ledgers": out}

    def _wait_for_entries(self, handles: list[ReadHandle]) -> list[ReadHandle]:
        """Waits until one of ``handles`` gets an entry past its LAC, at most
        ``longPollTimeoutMs``; returns the handles whose wait ended with a new LAC. A wait that
        fails (a bookie gone) just ends: the next latestOffset reads the LAC again."""
        timeout = self.options.long_poll_timeout_ms / 1000
        if timeout <= 0:
            return []
        # Not a `with` block: leaving one would wait for every wait to time out.
        pool = ThreadPoolExecutor(
            max_workers=min(len(handles), 32), thread_name_prefix="pybkx-spark-lac"
        )
        try:
            waits: dict[Future[int], tuple[ReadHandle, int]] = {}
            for rh in handles:
                seen = rh.last_add_confirmed
                waits[pool.submit(rh.wait_for_last_add_confirmed, seen, timeout)] = (rh, seen)
            done, _ = wait(waits, timeout=timeout + 1, return_when=FIRST_COMPLETED)
            # Whatever else finished by now is taken too; the rest end by their own timeout.
            done |= {f for f in waits if f.done()}
            return [waits[f][0] for f in done if f.exception() is None and f.result() > waits[f][1]]
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The entries between two offsets, split as the batch reader splits a ledger."""
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


def _advanced(latest: dict[str, int], previous: dict[str, int]) -> bool:
    """Whether ``latest`` has an entry ``previous`` had not reached (or a new ledger)."""
    return any(value > previous.get(key, 0) or key not in previous for key, value in latest.items())
