"""Spark reading ledgers through the ``pybkx`` source beside Spark reading the same rows from a
local Parquet file, in one run (``make bench-spark``; ``--entries 10000000`` for the full size).

Owns this measurement (never asserts on timings). A sandbox of 3 pybkx bookies on loopback holds
``--ledgers`` closed ledgers (E=Qw=Qa=1: each ledger whole on one bookie) with ``--entries``
entries of ``--size`` bytes in all; the same (ledger_id, entry_id, payload) rows are written to a
Parquet file. Spark (local[2]) then scans each source ``--rounds`` times, alternating, with a
query that touches every payload byte (sum of payload lengths); the best round of each counts.
Results go to bench/results/spark_read.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pybkx.client import BookKeeper
from pybkx.spark import spark_session
from pybkx.tools.sandbox import Sandbox

RESULTS = Path(__file__).resolve().parent / "results"


def fill(uri: str, ledgers: int, entries: int, size: int, parquet: Path) -> list[int]:
    """Write the ledgers and the Parquet file with the same rows; the ledger ids."""
    per = entries // ledgers
    body = os.urandom(size)
    ids: list[int] = []
    writer = None
    with BookKeeper(uri) as bk:
        for _ in range(ledgers):
            lh = bk.create_ledger(1, 1, 1)
            for first in range(0, per, 10_000):
                lh.append_many([body] * min(10_000, per - first))
            lh.close()
            ids.append(lh.ledger_id)
            table = pa.table(
                {
                    "ledger_id": pa.array([lh.ledger_id] * per, pa.int64()),
                    "entry_id": pa.array(range(per), pa.int64()),
                    "payload": pa.array([body] * per, pa.binary()),
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(parquet, table.schema)
            writer.write_table(table)
    if writer is not None:
        writer.close()
    return ids


def scan(df: Any) -> tuple[int, float]:
    started = time.monotonic()
    row = df.selectExpr("count(*) AS n", "sum(length(payload)) AS bytes").collect()[0]
    return int(row["n"]), time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/spark_read.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--ledgers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partition", type=int, default=250_000, help="entriesPerPartition")
    parser.add_argument("--batch", type=int, default=100_000, help="entriesPerBatch")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pybkx-bench-spark-") as tmp:
        root = Path(tmp)
        with Sandbox(3, directory=root / "sandbox") as sandbox:
            uri = sandbox.metadata_uri
            parquet = root / "rows.parquet"
            ids = fill(uri, args.ledgers, args.entries, args.size, parquet)
            spark = spark_session("pybkx-bench", master="local[2]")
            try:
                ledgers = (
                    spark.read.format("pybkx")
                    .option("metadataServiceUri", uri)
                    .option("ledgers", ",".join(map(str, ids)))
                    .option("entriesPerPartition", str(args.partition))
                    .option("entriesPerBatch", str(args.batch))
                    .load()
                )
                files = spark.read.parquet(str(parquet))
                best = {"pybkx": float("inf"), "parquet": float("inf")}
                rows = {}
                for rnd in range(args.rounds):
                    order = ("pybkx", "parquet") if rnd % 2 == 0 else ("parquet", "pybkx")
                    for name in order:
                        n, seconds = scan(ledgers if name == "pybkx" else files)
                        rows[name] = n
                        best[name] = min(best[name], seconds)
            finally:
                spark.stop()
    total = rows["pybkx"]
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "entries": total,
        "size": args.size,
        "ledgers": args.ledgers,
        "rounds": args.rounds,
        "pybkx_rows_per_s": round(total / best["pybkx"]),
        "parquet_rows_per_s": round(rows["parquet"] / best["parquet"]),
        "pybkx_mb_per_s": round(total * args.size / best["pybkx"] / 1e6, 1),
        "parquet_mb_per_s": round(rows["parquet"] * args.size / best["parquet"] / 1e6, 1),
        "pybkx_over_parquet": round(best["parquet"] / best["pybkx"], 3),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = f"spark_read_{args.size}B"
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
