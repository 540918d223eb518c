"""The table view with real Spark (local[2]): the offloaded ledgers' Parquet objects, read by
``spark.read.parquet`` and by ``pyarrow.dataset`` from the S3 server, hold the same rows as
``spark.read.format("pybkx")`` of those ledgers from the bookies."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from offload.conftest import settings_for
from support.s3server import S3Server

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pybkx.client import BookKeeper
from pybkx.offload import ObjectStore, offload_ledger, table_dataset
from pybkx.spark import spark_session
from pybkx.tools.sandbox import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session(
        "pybkx-offload-tests", master="local[2]", **{"spark.sql.shuffle.partitions": "2"}
    )
    yield session
    session.stop()


def test_spark_and_pyarrow_read_the_table_as_the_pybkx_source_reads_the_ledgers(
    spark: Any, s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    sandbox, bk = cluster
    settings = settings_for(s3_server, "spark")
    store = ObjectStore(settings)
    ids = []
    for entries in (1500, 40):
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        lh.append_many(
            [
                hashlib.sha256(f"{lh.ledger_id}/{e}".encode()).digest() * (e % 9)
                for e in range(entries)
            ]
        )
        lh.close()
        offload_ledger(bk, store, lh.ledger_id, b"pw")
        ids.append(lh.ledger_id)
    from_bookies = (
        spark.read.format("pybkx")
        .option("metadataServiceUri", sandbox.metadata_uri)
        .option("password", "pw")
        .option("ledgers", ",".join(map(str, ids)))
        .load()
    )
    want = sorted((r.ledger_id, r.entry_id, bytes(r.payload)) for r in from_bookies.collect())
    assert len(want) == 1540
    # S3Proxy keeps each object as a file at <bucket>/<key>: Spark reads those very bytes.
    ledgers_dir = Path(s3_server.directory, settings.bucket, settings.key("ledgers"))
    table = spark.read.parquet(str(ledgers_dir))
    assert [f.name for f in table.schema.fields] == ["ledger_id", "entry_id", "payload"]
    got = sorted((r.ledger_id, r.entry_id, bytes(r.payload)) for r in table.collect())
    assert got == want
    # The same query both ways.
    query = "ledger_id = {} and entry_id between 100 and 199"
    narrowed = table.where(query.format(ids[0])).count()
    assert narrowed == from_bookies.where(query.format(ids[0])).count() == 100
    arrow = table_dataset(store).to_table()
    columns = (arrow.column(n).to_pylist() for n in ("ledger_id", "entry_id", "payload"))
    assert sorted(zip(*columns, strict=True)) == want
