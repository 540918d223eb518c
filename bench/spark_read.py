"""Spark reading ledgers through the ``pybkx`` source beside Spark reading the same rows from a
local Parquet file, in one run (``make bench-spark``: 10 million 100 B entries, then 2 million
1 KiB entries; ``--entries``/``--size`` for one size).

Owns this measurement (never asserts on timings). A sandbox of 3 pybkx bookies on loopback holds
``--ledgers`` closed ledgers (E=Qw=Qa=1: each ledger whole on one bookie) with ``--entries``
entries of ``--size`` random bytes in all, every payload different (a repeated payload would let
Parquet's dictionary encoding shrink the file to nothing); the same (ledger_id, entry_id,
payload) rows are written to a Parquet file. Spark (local[2]) then scans each source once to
warm up and ``--rounds`` times, alternating, with a query that touches every payload byte (sum of
payload lengths); the best round of each counts. A third source, a Python data source that
reads nothing and yields batches of the same shape from memory, shows what Spark's Python data
source path costs by itself. Each scan's CPU time is split by role: the bookies, Spark's JVM, its
Python workers (where a Python data source runs) and this driver, in CPU seconds per million
rows. Results go to bench/results/spark_read_<size>B.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pybkx.client import BookKeeper
from pybkx.client.arrow import entry_schema
from pybkx.spark import spark_session
from pybkx.spark.options import DEFAULT_ENTRIES_PER_BATCH
from pybkx.spark.source import SCHEMA
from pybkx.tools.sandbox import Sandbox

RESULTS = Path(__file__).resolve().parent / "results"


def fill(uri: str, ledgers: int, entries: int, size: int, parquet: Path) -> list[int]:
    """Write the ledgers and the Parquet file with the same rows; the ledger ids."""
    per = entries // ledgers
    ids: list[int] = []
    writer = None
    with BookKeeper(uri) as bk:
        for _ in range(ledgers):
            lh = bk.create_ledger(1, 1, 1)
            chunks = []
            for first in range(0, per, 10_000):
                count = min(10_000, per - first)
                blob = os.urandom(count * size)
                payloads = [blob[i * size : (i + 1) * size] for i in range(count)]
                lh.append_many(payloads)
                chunks.append(pa.array(payloads, pa.binary()))
            lh.close()
            ids.append(lh.ledger_id)
            table = pa.table(
                {
                    "ledger_id": pa.array([lh.ledger_id] * per, pa.int64()),
                    "entry_id": pa.array(range(per), pa.int64()),
                    "payload": pa.chunked_array(chunks, pa.binary()),
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(parquet, table.schema)
            writer.write_table(table)
    if writer is not None:
        writer.close()
    return ids


TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, own CPU s, CPU s of reaped children) of a process; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) * TICK_S
    reaped = (int(fields[13]) + int(fields[14])) * TICK_S
    return int(fields[1]), own, reaped


def cpu_by_role(bookie_pids: list[int]) -> dict[str, float]:
    """CPU seconds used so far: the bookies, Spark's JVM (the java child of this process), the
    Python workers under it (their reaped children included) and this driver."""
    me = os.getpid()
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    jvms = [pid for pid in children.get(me, []) if pid not in bookie_pids]
    workers = 0.0
    pending = [c for jvm in jvms for c in children.get(jvm, [])]
    while pending:
        pid = pending.pop()
        workers += stats[pid][1] + stats[pid][2]
        pending += children.get(pid, [])
    return {
        "bookies": sum(stats[p][1] for p in bookie_pids if p in stats),
        "jvm": sum(stats[p][1] for p in jvms),
        "python_workers": workers,
        "driver": stats[me][1],
    }


class _NullPartition(InputPartition):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class NullReader(DataSourceReader):
    """Record batches of the pybkx schema made from one random payload buffer, nothing read:
    what Spark's Python data source path costs by itself."""

    def __init__(self, rows: int, partitions: int, size: int, batch_rows: int) -> None:
        self.rows, self.count, self.size, self.batch_rows = rows, partitions, size, batch_rows

    def partitions(self) -> list[InputPartition]:
        per = self.rows // self.count
        return [_NullPartition(per) for _ in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batch_rows = self.batch_rows
        payloads = pa.py_buffer(os.urandom(batch_rows * self.size))
        offsets = pa.py_buffer(
            pa.array(range(0, (batch_rows + 1) * self.size, self.size), pa.int32()).buffers()[1]
        )
        schema = entry_schema()
        for first in range(0, partition.rows, batch_rows):
            n = min(batch_rows, partition.rows - first)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.repeat(pa.scalar(1, pa.int64()), n),
                    pa.array(range(first, first + n), pa.int64()),
                    pa.Array.from_buffers(pa.binary(), n, [None, offsets, payloads]),
                ],
                schema=schema,
            )


class NullSource(DataSource):
    """``spark.read.format("pybkx_bench_null")``: see NullReader."""

    @classmethod
    def name(cls) -> str:
        return "pybkx_bench_null"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        o = self.options
        return NullReader(int(o["rows"]), int(o["partitions"]), int(o["size"]), int(o["batchRows"]))


def scan(df: Any) -> tuple[int, float]:
    started = time.monotonic()
    row = df.selectExpr("count(*) AS n", "sum(length(payload)) AS bytes").collect()[0]
    return int(row["n"]), time.monotonic() - started


#: (entries, size) measured when no size is given: the issue's two sizes.
DEFAULT_RUNS = ((10_000_000, 100), (2_000_000, 1024))


def measure(args: argparse.Namespace, entries: int, size: int) -> dict[str, Any]:
    """One size: fill, warm up, alternate the sources; the figures."""
    with tempfile.TemporaryDirectory(prefix="pybkx-bench-spark-") as tmp:
        root = Path(tmp)
        with Sandbox(3, directory=root / "sandbox") as sandbox:
            uri = sandbox.metadata_uri
            bookie_pids = [p for i in range(3) if (p := sandbox.pid(i)) is not None]
            parquet = root / "rows.parquet"
            ids = fill(uri, args.ledgers, entries, size, parquet)
            spark = spark_session("pybkx-bench", master="local[2]")
            try:
                reader = (
                    spark.read.format("pybkx")
                    .option("metadataServiceUri", uri)
                    .option("ledgers", ",".join(map(str, ids)))
                )
                for key, value in (
                    ("entriesPerPartition", args.partition),
                    ("entriesPerBatch", args.batch),
                    ("readAhead", args.read_ahead),
                ):
                    if value is not None:
                        reader = reader.option(key, str(value))
                sources = {"pybkx": reader.load(), "parquet": spark.read.parquet(str(parquet))}
                partitions = sources["pybkx"].rdd.getNumPartitions()
                spark.dataSource.register(NullSource)
                sources["null_python_source"] = (
                    spark.read.format("pybkx_bench_null")
                    .option("rows", str(entries - entries % partitions))
                    .option("partitions", str(partitions))
                    .option("size", str(size))
                    .option("batchRows", str(args.batch or DEFAULT_ENTRIES_PER_BATCH))
                    .load()
                )
                for df in sources.values():
                    scan(df)  # warm-up: JIT, Python workers, page cache
                best = {name: float("inf") for name in sources}
                cpu: dict[str, dict[str, float]] = {name: {} for name in sources}
                rows = {}
                for rnd in range(args.rounds):
                    order = ("pybkx", "parquet", "null_python_source")
                    if rnd % 2:
                        order = order[::-1]
                    for name in order:
                        before = cpu_by_role(bookie_pids)
                        n, seconds = scan(sources[name])
                        after = cpu_by_role(bookie_pids)
                        rows[name] = n
                        best[name] = min(best[name], seconds)
                        for role, used in after.items():
                            cpu[name][role] = cpu[name].get(role, 0.0) + used - before[role]
            finally:
                spark.stop()
    per_million = {
        name: {
            role: round(used / args.rounds / (rows[name] / 1e6), 3) for role, used in roles.items()
        }
        for name, roles in cpu.items()
    }
    total = rows["pybkx"]
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "entries": total,
        "size": size,
        "ledgers": args.ledgers,
        "partitions": partitions,
        "rounds": args.rounds,
        "pybkx_rows_per_s": round(total / best["pybkx"]),
        "parquet_rows_per_s": round(rows["parquet"] / best["parquet"]),
        "pybkx_mb_per_s": round(total * size / best["pybkx"] / 1e6, 1),
        "parquet_mb_per_s": round(rows["parquet"] * size / best["parquet"] / 1e6, 1),
        "pybkx_over_parquet": round(best["parquet"] / best["pybkx"], 3),
        "null_python_source_rows_per_s": round(
            rows["null_python_source"] / best["null_python_source"]
        ),
        "cpu_s_per_million_rows": per_million,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/spark_read.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--entries", type=int, help="one run of this many (default: both sizes)")
    parser.add_argument("--size", type=int, help="payload bytes (with --entries)")
    parser.add_argument("--ledgers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partition", type=int, help="entriesPerPartition (source default)")
    parser.add_argument("--batch", type=int, help="entriesPerBatch (source default)")
    parser.add_argument("--read-ahead", type=int, help="readAhead (source default)")
    args = parser.parse_args(argv)
    runs = DEFAULT_RUNS
    if args.entries is not None or args.size is not None:
        runs = ((args.entries or 1_000_000, args.size or 100),)
    RESULTS.mkdir(parents=True, exist_ok=True)
    for entries, size in runs:
        result = measure(args, entries, size)
        (RESULTS / f"spark_read_{size}B.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
