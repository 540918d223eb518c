"""Offload to object storage beside the object server's own PUT and GET rates, in one run
(``make bench-offload``; ``--ledger-mb``, ``--entry-size``, ``--rounds``).

Owns this measurement (never asserts on timings). A sandbox of 3 pybkx bookies on loopback and
one S3Proxy (the tests' S3-compatible server, filesystem backend on the same disk) are started,
and the server is warmed up with three PUTs and GETs of a ledger's size. Each round: a closed
ledger of ``--ledger-mb`` MiB of random (incompressible) payloads is offloaded (read from the
bookies, written as Parquet, checked back, recorded), then a blob of the same size as its object
is PUT with the same S3 client. The object is then read whole by its row groups (ranged GETs)
and the blob with one GET. The first row group read alone (its recorded byte range) gives the
first-byte latency of a cold read from the object, and the whole table is read through
``pyarrow.dataset``. The best round of each counts. The ratios are offload / PUT and scan / GET.
Results go to bench/results/offload.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pybkx.client import BookKeeper
from pybkx.config.objectstore import ObjectStorageSettings
from pybkx.offload import ObjectStore, offload_ledger, table_dataset
from pybkx.tools.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tests") not in sys.path:
    sys.path.append(str(REPO / "tests"))

from support.s3server import S3Server, install  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MIB = 1 << 20


def closed_ledger(bk: BookKeeper, total_bytes: int, entry_size: int) -> int:
    lh = bk.create_ledger(3, 2, 2, password=b"pw")
    chunk = 256
    for start in range(0, total_bytes // entry_size, chunk):
        count = min(chunk, total_bytes // entry_size - start)
        lh.append_many([os.urandom(entry_size) for _ in range(count)])
    lh.close()
    return lh.ledger_id


def one_round(
    bk: BookKeeper, store: ObjectStore, args: argparse.Namespace, n: int
) -> dict[str, Any]:
    ledger_id = closed_ledger(bk, args.ledger_mb * MIB, args.entry_size)
    began = time.perf_counter()
    result = offload_ledger(bk, store, ledger_id, b"pw")
    offload_s = time.perf_counter() - began
    size = result.context.size_bytes
    blob_key = store.settings.key("bench", f"blob-{n}")
    blob = os.urandom(size)
    began = time.perf_counter()
    store.put(blob_key, blob)
    put_s = time.perf_counter() - began
    began = time.perf_counter()
    scanned = table_dataset(store).to_table(filter=None).num_rows
    scan_all_s = time.perf_counter() - began
    began = time.perf_counter()
    with store.open_input(result.context.object_key) as source:
        rows = (
            pq.ParquetFile(source)
            .read_row_groups(list(range(len(result.context.row_groups))))
            .num_rows
        )
    scan_s = time.perf_counter() - began
    began = time.perf_counter()
    assert len(store.get(blob_key)) == size
    get_s = time.perf_counter() - began
    began = time.perf_counter()
    with store.open_input(result.context.object_key) as source:
        first = pq.ParquetFile(source).read_row_group(0)
    first_group_s = time.perf_counter() - began
    store.delete(blob_key)
    return {
        "object_bytes": size,
        "payload_bytes": result.context.payload_bytes,
        "rows": rows,
        "table_rows_so_far": scanned,
        "offload_mb_s": size / MIB / offload_s,
        "put_mb_s": size / MIB / put_s,
        "scan_mb_s": size / MIB / scan_s,
        "get_mb_s": size / MIB / get_s,
        "table_scan_s": scan_all_s,
        "first_row_group_ms": first_group_s * 1000,
        "first_row_group_rows": first.num_rows,
    }


def warm_up(store: ObjectStore, size: int) -> None:
    """A few PUTs and GETs first: the server's JIT warms up (the first PUT ran at half speed)."""
    blob = os.urandom(size)
    for n in range(3):
        store.put(store.settings.key("bench", f"warm-{n}"), blob)
        store.get(store.settings.key("bench", f"warm-{n}"))
        store.delete(store.settings.key("bench", f"warm-{n}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger-mb", type=int, default=32)
    parser.add_argument("--entry-size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pybkx-bench-offload-") as tmp:
        server = S3Server(install(), Path(tmp) / "objects")
        server.start()
        try:
            settings = ObjectStorageSettings(
                bucket="bench",
                endpoint=f"http://{server.endpoint}",
                access_key=server.access_key,
                secret_key=server.secret_key,
            )
            store = ObjectStore(settings)
            store.ensure_bucket()
            warm_up(store, args.ledger_mb * MIB)
            with (
                Sandbox(3, directory=Path(tmp) / "sandbox") as sandbox,
                BookKeeper(sandbox.metadata_uri) as bk,
            ):
                rounds = [one_round(bk, store, args, n) for n in range(args.rounds)]
        finally:
            server.stop()
    best = {key: max(r[key] for r in rounds) for key in rounds[0] if key.endswith("_mb_s")}
    best["first_row_group_ms"] = min(r["first_row_group_ms"] for r in rounds)
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "ledger_mb": args.ledger_mb,
        "entry_size": args.entry_size,
        "rounds": rounds,
        "best": best,
        "offload_vs_put": best["offload_mb_s"] / best["put_mb_s"],
        "scan_vs_get": best["scan_mb_s"] / best["get_mb_s"],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "offload.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rounds"}, indent=2))


if __name__ == "__main__":
    main()
