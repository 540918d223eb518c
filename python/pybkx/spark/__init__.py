"""Spark for pybkx ledgers: the ``pybkx`` data source (PySpark's Python Data Source API, no
UDFs, no JVM code) reads ledgers in batch as Arrow record batches and writes DataFrames into
new ledgers. ``pip install 'pybkx[spark]'``; see docs/spark.md. It never runs JVM code nor
registers UDFs.

    from pybkx.spark import LedgerDataSource
    spark.dataSource.register(LedgerDataSource)
    df = spark.read.format("pybkx").option("ledgers", "12,20-40").load()
"""

from pybkx.spark.session import spark_session
from pybkx.spark.source import LedgerDataSource

__all__ = ["LedgerDataSource", "spark_session"]
