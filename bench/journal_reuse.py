"""Synchronous adds on a bookie whose journal has cycled, with journal files reused or created.
``python -m bench.journal_reuse [--rounds N] [--rate-mb R] [--set KEY=VALUE ...] [--json F]``.

Each round starts one bookie (BookKeeper's group-commit defaults, as bench.compare, with
64 MiB journal files and a checkpoint every 2 s, so that the journal rolls over many times),
fills it with 16 KiB adds (about 1.5 GB: its journal has gone through its kept files several
times), then times one writer's synchronous 1 KiB adds alone and beside a stream of 16 KiB adds
at ``--rate-mb``. Rounds alternate ``journalReuseFiles=true`` and ``false`` (which goes first
alternates too); the figures are medians over rounds, and the ratio of the two in the same run.
With reuse the journal writes over blocks already allocated and written; without, over
preallocated (unwritten) blocks, whose conversion each ``fdatasync`` commits in the file
system's journal. Never asserts on timings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import cli
from bench.compare_plan import GROUP_COMMIT

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))

import harness  # noqa: E402

from pybkx._core import run_load  # noqa: E402

FILL_ADDS = 90_000
PROBE_ADDS = 3_000
STREAM_SIZE = 16384


def one_round(reuse: bool, rate_mb: float, extra: dict[str, str]) -> dict[str, float]:
    settings = {
        **GROUP_COMMIT,
        "journalMaxSizeMB": "64",
        "flushInterval": "2000",
        **extra,
        "journalReuseFiles": "true" if reuse else "false",
    }
    conf = "".join(f"{k}={v}\n" for k, v in settings.items())
    with tempfile.TemporaryDirectory(prefix="pybkx-journal-reuse-", dir="/var/tmp") as tmp:
        process, address = harness.start_pybkx_bookie(Path(tmp), conf)
        try:
            run_load(
                address,
                "add",
                in_flight=500,
                ledger_id=100,
                ledgers=8,
                count=FILL_ADDS,
                payload_size=STREAM_SIZE,
            )
            time.sleep(2.5)  # a checkpoint covers the fill: its files become reusable
            alone = run_load(
                address, "add", in_flight=1, ledger_id=5000, count=PROBE_ADDS, payload_size=1024
            )
            per_s = rate_mb * 1e6 / STREAM_SIZE
            stream = threading.Thread(
                target=run_load,
                args=(address, "add"),
                kwargs={
                    "in_flight": 64,
                    "ledger_id": 6000,
                    "ledgers": 4,
                    "count": int(per_s * 12),
                    "payload_size": STREAM_SIZE,
                    "rate": per_s,
                },
            )
            stream.start()
            time.sleep(0.5)
            beside = run_load(
                address, "add", in_flight=1, ledger_id=7000, count=PROBE_ADDS, payload_size=1024
            )
            stream.join()
        finally:
            process.stop()
    return {
        "alone_p50_ms": alone["p50_us"] / 1000,
        "alone_p99_ms": alone["p99_us"] / 1000,
        "beside_stream_p50_ms": beside["p50_us"] / 1000,
        "beside_stream_p99_ms": beside["p99_us"] / 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.journal_reuse", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each setting")
    parser.add_argument("--rate-mb", type=float, default=100, help="the stream's MB/s")
    cli.add_settings_option(
        parser, help="a bookie setting for both (e.g. journalDirectIO=false; repeatable)"
    )
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    extra = cli.settings_of(parser, args.set)

    rounds: dict[str, list[dict[str, float]]] = {"reuse": [], "new_files": []}
    for r in range(args.rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        for reuse in order:
            figures = one_round(reuse, args.rate_mb, extra)
            rounds["reuse" if reuse else "new_files"].append(figures)
            print(f"round {r} reuse={reuse}: {figures}", flush=True)
    medians = {
        name: {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        for name, runs in rounds.items()
    }
    summary = {
        "rate_mb": args.rate_mb,
        "settings": args.set,
        "medians": medians,
        "p99_beside_stream_reuse_over_new_files": [
            round(a["beside_stream_p99_ms"] / b["beside_stream_p99_ms"], 2)
            for a, b in zip(rounds["reuse"], rounds["new_files"], strict=True)
        ],
        "rounds": rounds,
    }
    return cli.report_figures(summary, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
