"""Batch reads of ledgers for Spark: partitions planned on the driver (one per ledger, large
ledgers split into entry ranges, narrowed by the ``ledgers`` and ``entries`` options), each read
on an executor as Arrow record batches built by the Rust client (no Python object per entry).
Open ledgers are read to their last add confirmed without fencing, unless the ``recovery``
option asks to recover them first. It never writes to a ledger.

No filter is pushed down: PySpark (4.1 to 4.3) keeps the partitions and read function planned
while pushing down one scan's filters on the loaded DataFrame's data source, and uses them for
every other scan of that DataFrame (a later unfiltered ``count()``, the other side of a union or
self-join), so a plan narrowed by filters would silently drop rows there. Spark evaluates the
filters on the rows read; the options narrow what is read, for the whole DataFrame."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.spark.clients import client_for
from pybkx.spark.options import LAST_ENTRY_ID, SourceOptions

if TYPE_CHECKING:
    import pyarrow

__all__ = ["EntryBounds", "LedgerRange", "LedgerReader", "plan_ranges"]

logger = logging.getLogger(__name__)


class LedgerRange(InputPartition):
    """Entries ``first..last`` of one ledger: one Spark partition."""

    def __init__(self, ledger_id: int, first: int, last: int) -> None:
        super().__init__((ledger_id, first, last))
        self.ledger_id, self.first, self.last = ledger_id, first, last

    def __repr__(self) -> str:
        return f"LedgerRange(ledger {self.ledger_id}, entries {self.first}..{self.last})"


@dataclass(frozen=True)
class EntryBounds:
    """The inclusive range of entry ids to read in each ledger."""

    entry_min: int = 0
    entry_max: int = LAST_ENTRY_ID


def plan_ranges(
    ledger_id: int, last: int, bounds: EntryBounds, per_partition: int
) -> list[LedgerRange]:
    """The partitions of one ledger whose entries ``0..last`` exist: entry ranges of at most
    ``per_partition`` within ``bounds`` (the ``entries`` option)."""
    first, end = max(0, bounds.entry_min), min(last, bounds.entry_max)
    return [
        LedgerRange(ledger_id, start, min(end, start + per_partition - 1))
        for start in range(first, end + 1, per_partition)
    ]


class LedgerReader(DataSourceReader):
    """Plans on the driver (``partitions``), reads on executors (``read``). Takes no filters
    (see the module's docstring): its plan depends on the options only."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        first, last = options.entries
        self.bounds = EntryBounds(first, last)

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per entry range. Raises ValueError naming the ledger that cannot be
        read (unknown, wrong password, no bookie answers its LAC)."""
        bk = client_for(self.options.uri, self.options.zk_timeout_ms)
        ids = self.options.ledgers if self.options.ledgers is not None else bk.list_ledgers()
        planned: list[LedgerRange] = []
        for ledger_id in ids:
            last = self._last_entry(bk, ledger_id)
            planned += plan_ranges(ledger_id, last, self.bounds, self.options.entries_per_partition)
        logger.info(
            "pybkx source: %d partitions over %d ledgers (entries %d..%d)",
            len(planned),
            len({p.ledger_id for p in planned}),
            self.bounds.entry_min,
            self.bounds.entry_max,
        )
        return planned

    def _last_entry(self, bk: BookKeeper, ledger_id: int) -> int:
        """The last entry to read: a closed ledger's last entry, an open one's LAC (after
        fencing and closing it, with ``recovery``)."""
        where = f"ledger {ledger_id}"
        try:
            rh = bk.open_ledger(ledger_id, self.options.password, recovery=self.options.recovery)
            if rh.is_closed:
                return rh.last_add_confirmed
            return rh.read_last_add_confirmed()
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            raise ValueError(f"{where} does not exist in {bk.store.uri}") from None
        except errors.UnauthorizedAccessException:
            raise ValueError(f"{where}: wrong password (option 'password')") from None
        except errors.BKException as exc:
            raise ValueError(f"{where} cannot be read: {type(exc).__name__}: {exc}") from None

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        """The partition's entries as record batches of at most ``entriesPerBatch`` rows, up to
        ``readAhead`` of them read ahead of the one Spark consumes; none for the placeholder
        partition PySpark reads when ``partitions`` planned none."""
        if not isinstance(partition, LedgerRange):
            # PySpark reads one empty partition where none was planned (nothing to read).
            return
        bk = client_for(self.options.uri, self.options.zk_timeout_ms)
        rh = bk.open_ledger(partition.ledger_id, self.options.password, recovery=False)
        if rh.last_add_confirmed < partition.last:
            rh.read_last_add_confirmed()
        yield from rh.arrow_batches(
            partition.first,
            partition.last,
            self.options.entries_per_batch,
            self.options.read_ahead,
        )


def resolved(options: SourceOptions, uri: str, master: str | None) -> SourceOptions:
    """``options`` with the cluster's URI fixed on the driver (executors must not guess it).
    Raises ValueError for the embedded store with executors that may run on other hosts."""
    if uri.startswith("embedded:") and master is not None and not master.startswith("local"):
        raise ValueError(
            f"the metadata store {uri} is embedded: it lives on this machine's disk, so "
            f"executors of the Spark master {master!r} on other hosts cannot reach it. Run the "
            "cluster on ZooKeeper (metadataServiceUri=zk+hierarchical://host:port/ledgers) or "
            "use a local master (local[*])"
        )
    return replace(options, uri=uri)


#: Where ``spark_session`` leaves the master for the planning workers: Spark plans Python data
#: sources in worker processes that have no session, but inherit the driver's environment.
MASTER_ENV = "PYBKX_SPARK_MASTER"


def spark_master() -> str | None:
    """The Spark master: the active session's, else the one ``spark_session`` recorded in the
    environment; None when unknown."""
    try:
        from pyspark.sql import SparkSession

        session: Any = SparkSession.getActiveSession()
    except ImportError:
        session = None
    if session is not None:
        return str(session.conf.get("spark.master"))
    return os.environ.get(MASTER_ENV)
