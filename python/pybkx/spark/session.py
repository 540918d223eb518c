"""A Spark session ready for the ``pybkx`` source: the workers run this interpreter (so they
import the same pybkx without the user exporting PYSPARK_PYTHON) and the source is registered.
It only sets up the session; it never reads or writes a ledger."""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["spark_session"]


def spark_session(app: str = "pybkx", master: str = "local[*]", **conf: str) -> Any:
    """``SparkSession`` for ``master`` with the pybkx source registered; ``conf`` adds Spark
    settings. Raises ImportError without pyspark (``pip install 'pybkx[spark]'``)."""
    from pyspark.sql import SparkSession

    from pybkx.spark.reader import MASTER_ENV
    from pybkx.spark.source import LedgerDataSource

    # Local workers are started from the environment, not only from spark.pyspark.python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The workers that plan a read have no session; they inherit this environment.
    os.environ[MASTER_ENV] = master

    builder = (
        SparkSession.builder.appName(app)
        .master(master)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.ui.enabled", "false")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.dataSource.register(LedgerDataSource)
    return session
