"""One client's adds beside another client's flood of batch reads, on one pybkx bookie, in one
run: the adder's p50/p99 alone and with the flood, per round (issue: fair admission, a noisy
reader must not push another client's add p99 up by more than 20 %).

Owns this measurement (a script, run by hand or by ``make bench-noisy``); it never asserts on
timings. The bookie runs with the comparison's group-commit settings on loopback; the adder is
pybkx's load generator sending 1 KiB adds open loop at ``--rate`` (latency from each add's due
time, so queueing counts); the flood is ``--flooders`` processes, each batch-reading a cached
ledger (100 entries a request, 64 in flight over 4 connections) as fast as the bookie answers.
The flooders run at ``nice 19``: on a small machine their own client work would otherwise take
the CPU from the bookie and the adder, which is not what is measured (on a real cluster they
run elsewhere).

    python -m bench.noisy_neighbour [--rounds 3] [--rate 2000] [--flooders 2] [--read-threads 8,0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from bench import machine
from bench.compare import harness
from bench.compare_plan import GROUP_COMMIT
from bench.compare_report import RESULTS
from pybkx._core import run_load

READ_LEDGER = 7
READ_ENTRIES = 200_000
PAYLOAD = 1024
ADDS = 10_000
#: Entries a flooder reads in one pass (it counts what it read by passes).
FLOOD_PASS = 10_000
#: How long the flood runs before the adds start (its connections and windows fill).
FLOOD_WARMUP_S = 2.0

FLOODER = """
import sys
from pybkx._core import run_load
while True:
    run_load(sys.argv[1], "read", ledger_id={ledger}, count={entries}, payload_size={payload},
             batch=100, in_flight=64, connections=4)
    print({entries}, flush=True)
"""


def adds(address: str, first_ledger: int, rate: float) -> tuple[float, float]:
    """p50 and p99 (ms) of ``ADDS`` open-loop adds at ``rate`` per second."""
    report = run_load(
        address,
        "add",
        ledger_id=first_ledger,
        count=ADDS,
        payload_size=PAYLOAD,
        in_flight=256,
        rate=rate,
    )
    if report["errors"]:
        raise RuntimeError(f"adds on {address}: {report['errors']} errors")
    return float(report["p50_us"]) / 1000, float(report["p99_us"]) / 1000


def with_flood(
    address: str, flooders: int, first_ledger: int, rate: float
) -> tuple[float, float, float]:
    """The adds' p50 and p99 (ms) beside the flood, and the entries per second the flood read
    (whole passes over the ledger, from the flood's start to its end)."""
    code = FLOODER.format(ledger=READ_LEDGER, entries=FLOOD_PASS, payload=PAYLOAD)
    started_at = time.monotonic()
    started = [
        subprocess.Popen(
            ["nice", "-n", "19", sys.executable, "-c", code, address],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(flooders)
    ]
    read = 0
    try:
        time.sleep(FLOOD_WARMUP_S)  # not a wait on a condition: the flood's ramp-up
        p50, p99 = adds(address, first_ledger, rate)
    finally:
        elapsed = time.monotonic() - started_at
        for process in started:
            process.kill()
            out, _ = process.communicate()
            read += sum(int(line) for line in out.split())
    return p50, p99, read / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.noisy_neighbour", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=2000.0, help="adds per second")
    parser.add_argument("--flooders", type=int, default=2, help="flooding reader processes")
    parser.add_argument(
        "--read-threads",
        default="1,2,0",
        help="the bookies compared, comma-separated: numReadWorkerThreads (0: reads inline), "
        "optionally /readWorkerThreadNice (2/10)",
    )
    args = parser.parse_args(argv)
    variants = args.read_threads.split(",")
    rows: dict[str, list[dict[str, object]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="pybkx-bench-noisy-") as tmp, ExitStack() as stack:
        bookies = {
            v: start_filled_bookie(Path(tmp) / f"bookie-{v.replace('/', '-nice-')}", v, stack)
            for v in variants
        }
        for rnd in range(args.rounds):
            for threads, (process, address) in bookies.items():
                machine.wait_quiet([process.popen.pid])
                alone = adds(address, 1000 + 2 * rnd, args.rate)
                noisy = with_flood(address, args.flooders, 1001 + 2 * rnd, args.rate)
                rows[threads].append(
                    {
                        "round": rnd + 1,
                        "alone_ms": alone,
                        "flood_ms": noisy[:2],
                        "flood_entries_per_s": noisy[2],
                        "p99_ratio": noisy[1] / alone[1],
                    }
                )
                print(
                    f"round {rnd + 1}, read threads {threads}: adds alone p50 "
                    f"{alone[0]:.2f} ms p99 {alone[1]:.2f} ms; beside the flood p50 "
                    f"{noisy[0]:.2f} ms p99 {noisy[1]:.2f} ms; "
                    f"p99 ratio {noisy[1] / alone[1]:.2f}; "
                    f"the flood read {noisy[2] / 1000:.0f} k entries/s",
                    flush=True,
                )
    medians = {v: statistics.median(float(r["p99_ratio"]) for r in rows[v]) for v in variants}  # type: ignore[arg-type]
    for threads, median in medians.items():
        print(
            f"read threads {threads}: median p99 ratio (flood / alone) {median:.2f} (aim: <= 1.2)"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "noisy_neighbour.json").write_text(
        json.dumps(
            {
                "at": datetime.now(UTC).isoformat(),
                "rate": args.rate,
                "flooders": args.flooders,
                "variants": [
                    {"read_threads": v, "rounds": rows[v], "median_p99_ratio": medians[v]}
                    for v in variants
                ],
            },
            indent=2,
        )
    )
    return 0


def start_filled_bookie(
    workdir: Path, variant: str, stack: ExitStack
) -> tuple[harness.Process, str]:
    """A bookie with ``numReadWorkerThreads[/readWorkerThreadNice]`` of ``variant``, its read
    ledger written; stopped when ``stack`` closes."""
    workdir.mkdir()
    threads, _, nice = variant.partition("/")
    settings = {
        **GROUP_COMMIT,
        "numReadWorkerThreads": int(threads),
        "readWorkerThreadNice": int(nice or 0),
    }
    conf = "".join(f"{k}={v}\n" for k, v in settings.items())
    process, address = harness.start_pybkx_bookie(workdir, conf)
    stack.callback(process.stop)
    run_load(
        address,
        "add",
        ledger_id=READ_LEDGER,
        count=READ_ENTRIES,
        payload_size=PAYLOAD,
        in_flight=1000,
    )
    return process, address


if __name__ == "__main__":
    raise SystemExit(main())
