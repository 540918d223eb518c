"""The ``pybkx`` Spark data source: ledgers as rows of ``ledger_id`` long, ``entry_id`` long,
``payload`` binary, read in batch and written, on PySpark's Python Data Source API. It checks
the options and hands out readers and writers; it never reads or writes a ledger itself."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pybkx.meta import default_metadata_uri
from pybkx.spark.options import SourceOptions
from pybkx.spark.reader import LedgerReader, resolved, spark_master
from pybkx.spark.stream import LedgerStreamReader
from pybkx.spark.writer import LedgerWriter

__all__ = ["SCHEMA", "LedgerDataSource"]

SCHEMA = "ledger_id long not null, entry_id long not null, payload binary not null"


class LedgerDataSource(DataSource):
    """``spark.read.format("pybkx")`` / ``df.write.format("pybkx")``; see docs/spark.md for
    the options. Bad options fail the query on the driver with a message naming the option or
    the ledger (ValueError)."""

    @classmethod
    def name(cls) -> str:
        return "pybkx"

    def schema(self) -> str:
        return SCHEMA

    def _options(self) -> SourceOptions:
        options = SourceOptions.parse(self.options)
        return resolved(options, options.uri or default_metadata_uri(), spark_master())

    def reader(self, schema: StructType) -> DataSourceReader:
        return LedgerReader(self._options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._options()
        if options.entries != SourceOptions.parse({}).entries:
            raise ValueError("option 'entries' is for batch reads: a stream reads every entry")
        return LedgerStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if "payload" not in schema.fieldNames():
            raise ValueError(
                "writing to format 'pybkx' needs a column 'payload' (binary or string)"
            )
        if overwrite:
            raise ValueError("format 'pybkx' appends new ledgers: use mode('append')")
        return LedgerWriter(self._options())
