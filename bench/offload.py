"""Offload to object storage beside the object server's own PUT and GET rates, and cold reads
from the object beside cold reads through the bookies, in one run (``make bench-offload``, or
``python -m bench.offload`` with ``--ledger-mb``, ``--entry-size``, ``--rounds``).

Owns this measurement (never asserts on timings). A sandbox of 3 pybkx bookies on loopback and
one S3Proxy (the tests' S3-compatible server, filesystem backend on the same disk) are started,
and the server is warmed up with three PUTs and GETs of a ledger's size. Each round: a closed
ledger of ``--ledger-mb`` MiB of random (incompressible) payloads is offloaded (read from the
bookies, written as Parquet, checked back, recorded), then a blob of the same size as its object
is PUT with the same S3 client; the object is read whole by its row groups (ranged GETs) and
the blob with one GET. Then the bookies are restarted and, before each cold read, their files
and the server's are dropped from the page cache: the first entry read alone through the
bookies beside the first row group read alone from the object (first-byte latency), and every
entry by batched reads beside every row group. Ratios are taken within each round; the medians
of the rounds are reported. Results go to bench/results/offload.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.machine import drop_cache
from pybkx.client import BookKeeper
from pybkx.config.objectstore import ObjectStorageSettings
from pybkx.offload import ObjectStore, OffloadContext, offload_ledger
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
) -> tuple[int, OffloadContext, dict[str, Any]]:
    """Offload beside PUT, the object scanned beside GET (both warm: just written)."""
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
    rows = read_object(store, result.context).num_rows
    scan_s = time.perf_counter() - began
    began = time.perf_counter()
    assert len(store.get(blob_key)) == size
    get_s = time.perf_counter() - began
    store.delete(blob_key)
    figures = {
        "object_bytes": size,
        "payload_bytes": result.context.payload_bytes,
        "rows": rows,
        "offload_mb_s": size / MIB / offload_s,
        "put_mb_s": size / MIB / put_s,
        "scan_mb_s": size / MIB / scan_s,
        "get_mb_s": size / MIB / get_s,
    }
    return ledger_id, result.context, figures


def read_object(store: ObjectStore, context: OffloadContext, groups: int | None = None) -> Any:
    """The object's first ``groups`` row groups (all: None), by ranged GETs."""
    count = len(context.row_groups) if groups is None else groups
    with store.open_input(context.object_key) as source:
        return pq.ParquetFile(source).read_row_groups(list(range(count)))


def cold_reads(
    sandbox: Sandbox,
    server: S3Server,
    bk: BookKeeper,
    store: ObjectStore,
    ledger_id: int,
    context: OffloadContext,
) -> dict[str, Any]:
    """The same ledger read cold through the bookies (restarted, their files dropped from the
    page cache) and from its object (the server's files dropped from the page cache): the
    first entry alone, then every entry by batched reads or by row groups."""
    for index in range(3):
        sandbox.restart_bookie(index)
    payload_mb = context.payload_bytes / MIB

    def timed(work: Any) -> float:
        drop_cache(sandbox.directory)
        drop_cache(server.directory)
        began = time.perf_counter()
        work()
        return time.perf_counter() - began

    handle = bk.open_ledger(ledger_id, b"pw", recovery=False)
    last = handle.last_add_confirmed
    local_first_s = timed(lambda: handle.read_arrow(0, 0))
    local_s = timed(lambda: sum(b.num_rows for b in handle.arrow_batches(0, last, 4096)))
    object_first_s = timed(lambda: read_object(store, context, 1))
    object_s = timed(lambda: read_object(store, context))
    return {
        "local_cold_first_entry_ms": local_first_s * 1000,
        "object_cold_first_row_group_ms": object_first_s * 1000,
        "local_cold_batch_read_mb_s": payload_mb / local_s,
        "object_cold_scan_mb_s": payload_mb / object_s,
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
                rounds = []
                for n in range(args.rounds):
                    ledger_id, context, figures = one_round(bk, store, args, n)
                    figures |= cold_reads(sandbox, server, bk, store, ledger_id, context)
                    rounds.append(figures)
                    print(json.dumps(figures), flush=True)
        finally:
            server.stop()
    ratios = {
        "offload_vs_put": ("offload_mb_s", "put_mb_s"),
        "scan_vs_get": ("scan_mb_s", "get_mb_s"),
        "object_vs_local_cold_scan": ("object_cold_scan_mb_s", "local_cold_batch_read_mb_s"),
    }
    for figures in rounds:
        figures |= {name: figures[a] / figures[b] for name, (a, b) in ratios.items()}
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "ledger_mb": args.ledger_mb,
        "entry_size": args.entry_size,
        "rounds": rounds,
        "median": {key: statistics.median(r[key] for r in rounds) for key in rounds[0]},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "offload.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["median"], indent=2))


if __name__ == "__main__":
    main()
