"""Single READ vs BATCH_READ_ENTRY(100), and pipelined adds, through one bookie: pybkx beside
the real Apache BookKeeper bookie, in the same run.

Owns this side-by-side measurement (a script, run by hand or by `make bench`); must never assert
on timings. Both bookies run as separate processes on loopback with journalSyncData=true and
BookKeeper's group-commit defaults; the same load generator (pybkx's Rust V2 client,
`pybkx._core.run_load`) drives each: first N adds of 100 B (the entries then sit in the page
cache), then reads of all N entries one by one and in batches of 100, each with 1 and 64 requests
in flight. Needs JDK 17 and Maven (the Java bookie comes from Maven Central).

    python bench/bookie_reads.py [--entries 1000000] [--dir PATH]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interop"))

import harness

from pybkx._core import run_load

ADD_IN_FLIGHT = 1000
BATCH = 100


def measure(address: str, entries: int) -> dict[str, dict[str, Any]]:
    """All runs against one bookie: name -> run_load report."""
    runs: dict[str, dict[str, Any]] = {}
    runs["add 100 B"] = run_load(
        address, "add", count=entries, payload_size=100, in_flight=ADD_IN_FLIGHT
    )
    for in_flight in (1, 64):
        # One-by-one reads at depth 1 take a round trip each: read a tenth of the entries.
        single = entries // 10 if in_flight == 1 else entries
        runs[f"read x1, {in_flight} in flight"] = run_load(
            address, "read", count=single, in_flight=in_flight
        )
        runs[f"batch read x{BATCH}, {in_flight} in flight"] = run_load(
            address, "read", count=entries, in_flight=in_flight, batch=BATCH
        )
    return runs


def rate(run: dict[str, Any]) -> float:
    return float(run["entries"]) / float(run["seconds"]) if run["seconds"] else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pybkx-bookie-bench-", dir=args.dir))
    started: list[harness.Process] = []
    try:
        classpath = harness.java_classpath()
        zk_process, zookeeper = harness.start_zookeeper(classpath, root)
        started.append(zk_process)
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for name in ("pybkx", "java"):
            workdir = root / name
            workdir.mkdir()
            if name == "pybkx":
                process, address = harness.start_pybkx_bookie(workdir)
            else:
                process, address = harness.start_java_bookie(
                    classpath, zookeeper, workdir, heap="1g"
                )
            started.append(process)
            for run_name, run in measure(address, args.entries).items():
                if run["errors"]:
                    raise SystemExit(f"{name}: {run_name}: {run['errors']} requests failed")
                results.setdefault(run_name, {})[name] = run
            process.stop()

        print(f"# Bookie reads and adds: pybkx vs Apache BookKeeper ({args.entries:,} entries)\n")
        print(
            f"{platform.node()}: {platform.machine()}, Python {platform.python_version()}; "
            f"adds with {ADD_IN_FLIGHT} in flight over one connection; 100 B payloads, CRC32C.\n"
        )
        print(
            "| run | pybkx entries/s | pybkx p50/p99 µs | Java entries/s | Java p50/p99 µs "
            "| pybkx/Java |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for run_name, by in results.items():
            p, j = by["pybkx"], by["java"]
            print(
                f"| {run_name} | {rate(p):,.0f} | {p['p50_us']:,}/{p['p99_us']:,} "
                f"| {rate(j):,.0f} | {j['p50_us']:,}/{j['p99_us']:,} "
                f"| {rate(p) / rate(j):.2f} |"
            )
        print()
        for in_flight in (1, 64):
            single = results[f"read x1, {in_flight} in flight"]
            batch = results[f"batch read x{BATCH}, {in_flight} in flight"]
            print(
                f"batch({BATCH})/single read, {in_flight} in flight: "
                f"pybkx {rate(batch['pybkx']) / rate(single['pybkx']):.1f}x, "
                f"Java {rate(batch['java']) / rate(single['java']):.1f}x "
                "(BP-62 reports 22x)"
            )
    except harness.HarnessError as exc:
        raise SystemExit(str(exc)) from None
    finally:
        for process in reversed(started):
            process.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
