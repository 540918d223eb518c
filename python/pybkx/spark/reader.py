"""Batch reads of ledgers for Spark: partitions planned on the driver (one per ledger, large
ledgers split into entry ranges, pruned by pushed-down filters on ``ledger_id`` and
``entry_id``), each read on an executor as Arrow record batches built by the Rust client (no
Python object per entry). Open ledgers are read to their last add confirmed without fencing,
unless the ``recovery`` option asks to recover them first."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.spark.clients import client_for
from pybkx.spark.options import SourceOptions

if TYPE_CHECKING:
    import pyarrow

__all__ = ["EntryBounds", "LedgerRange", "LedgerReader", "plan_ranges"]

logger = logging.getLogger(__name__)

LEDGER, ENTRY = ("ledger_id",), ("entry_id",)


class LedgerRange(InputPartition):
    """Entries ``first..last`` of one ledger: one Spark partition."""

    def __init__(self, ledger_id: int, first: int, last: int) -> None:
        super().__init__((ledger_id, first, last))
        self.ledger_id, self.first, self.last = ledger_id, first, last

    def __repr__(self) -> str:
        return f"LedgerRange(ledger {self.ledger_id}, entries {self.first}..{self.last})"


@dataclass
class EntryBounds:
    """What pushed-down filters allow: ledger ids (None: any) and an inclusive id range for
    each of ``ledger_id`` and ``entry_id``."""

    ledgers: set[int] | None = None
    ledger_min: int = 0
    ledger_max: int = 2**63 - 1
    entry_min: int = 0
    entry_max: int = 2**63 - 1
    pushed: list[str] = field(default_factory=list)

    def allows_ledger(self, ledger_id: int) -> bool:
        in_set = self.ledgers is None or ledger_id in self.ledgers
        return in_set and self.ledger_min <= ledger_id <= self.ledger_max

    def take(self, f: Filter) -> bool:
        """Narrow the bounds by ``f`` if it is an integer comparison on a key column."""
        column = getattr(f, "attribute", None)
        if column not in (LEDGER, ENTRY):
            return False
        is_ledger = column == LEDGER
        if isinstance(f, In):
            values = list(f.value)
            if not is_ledger or not all(isinstance(v, int) for v in values):
                return False
            self._only(set(values))
            self.pushed.append(f"{column[0]} IN {sorted(values)}")
            return True
        value = getattr(f, "value", None)
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        lo, hi = {
            EqualTo: (value, value),
            GreaterThan: (value + 1, 2**63 - 1),
            GreaterThanOrEqual: (value, 2**63 - 1),
            LessThan: (0, value - 1),
            LessThanOrEqual: (0, value),
        }.get(type(f), (None, None))
        if lo is None or hi is None:
            return False
        if is_ledger:
            self.ledger_min, self.ledger_max = max(self.ledger_min, lo), min(self.ledger_max, hi)
        else:
            self.entry_min, self.entry_max = max(self.entry_min, lo), min(self.entry_max, hi)
        self.pushed.append(f"{column[0]} {type(f).__name__} {value}")
        return True

    def _only(self, ids: set[int]) -> None:
        self.ledgers = ids if self.ledgers is None else self.ledgers & ids


def plan_ranges(
    ledger_id: int, last: int, bounds: EntryBounds, per_partition: int
) -> list[LedgerRange]:
    """The partitions of one ledger whose entries ``0..last`` exist: entry ranges of at most
    ``per_partition`` within the pushed-down bounds."""
    first, end = max(0, bounds.entry_min), min(last, bounds.entry_max)
    return [
        LedgerRange(ledger_id, start, min(end, start + per_partition - 1))
        for start in range(first, end + 1, per_partition)
    ]


class LedgerReader(DataSourceReader):
    """Plans on the driver (``pushFilters``, ``partitions``), reads on executors (``read``)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.bounds = EntryBounds()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Take the comparisons on ``ledger_id`` and ``entry_id``; give back the others."""
        for f in filters:
            if not self.bounds.take(f):
                yield f

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per entry range. Raises ValueError naming the ledger that cannot be
        read (unknown, wrong password, no bookie answers its LAC)."""
        bk = client_for(self.options.uri, self.options.zk_timeout_ms)
        ids = self.options.ledgers if self.options.ledgers is not None else bk.list_ledgers()
        planned: list[LedgerRange] = []
        for ledger_id in ids:
            if not self.bounds.allows_ledger(ledger_id):
                continue
            last = self._last_entry(bk, ledger_id)
            planned += plan_ranges(ledger_id, last, self.bounds, self.options.entries_per_partition)
        logger.info(
            "pybkx source: %d partitions over %d ledgers (pushed: %s)",
            len(planned),
            len({p.ledger_id for p in planned}),
            ", ".join(self.bounds.pushed) or "none",
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
        """The partition's entries as record batches of at most ``entriesPerBatch`` rows."""
        assert isinstance(partition, LedgerRange)
        bk = client_for(self.options.uri, self.options.zk_timeout_ms)
        rh = bk.open_ledger(partition.ledger_id, self.options.password, recovery=False)
        if rh.last_add_confirmed < partition.last:
            rh.read_last_add_confirmed()
        step = self.options.entries_per_batch
        for start in range(partition.first, partition.last + 1, step):
            yield rh.read_arrow(start, min(partition.last, start + step - 1))


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
