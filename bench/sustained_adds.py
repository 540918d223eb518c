"""Sustained adds on one pybkx bookie: many runs back to back, each reported on its own, so
that checkpoints, page-cache growth and the disk's own slowdowns show as they happen.
``python -m bench.sustained_adds [--size B] [--count N] [--chunks N] [--other TREE]
[--set KEY=VALUE ...]``.

One bookie (BookKeeper's group-commit defaults, as bench.compare) is driven by pybkx's Rust load
generator with ``--chunks`` runs of ``--count`` adds over ``--ledgers`` ledgers. Per run: MB/s,
p50/p99 latency, the bookie's CPU ticks so far and the disk's write rate (from
``/proc/diskstats``). ``--other`` runs another built source tree's bookie instead (its
``python/pybkx``), for before/after runs; ``--set`` adds or overrides bookie settings (e.g.
``--set journalReuseFiles=false``) for runs of one build two ways. Alternate the two yourself.
Never asserts on timings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import cli, machine
from bench.compare_plan import GROUP_COMMIT

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))

import harness  # noqa: E402

from pybkx._core import run_load  # noqa: E402


def disk_sectors_written() -> int:
    """Sectors written to the machine's whole disks (``/proc/diskstats`` rows named in
    ``/sys/block``, loop and RAM devices left out), 0 when unreadable."""
    disks = {p.name for p in Path("/sys/block").glob("*") if not p.name.startswith(("loop", "ram"))}
    try:
        rows = [line.split() for line in Path("/proc/diskstats").read_text().splitlines()]
    except OSError:
        return 0
    return sum(int(f[9]) for f in rows if len(f) > 9 and f[2] in disks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sustained_adds", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--size", type=int, default=16384, help="payload bytes per entry")
    parser.add_argument("--count", type=int, default=20_000, help="adds per run")
    parser.add_argument("--chunks", type=int, default=24, help="runs back to back")
    parser.add_argument("--ledgers", type=int, default=16)
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--other", type=Path, default=None, help="another built source tree")
    cli.add_settings_option(
        parser, help="a bookie setting on top of the group-commit defaults (repeatable)"
    )
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)

    settings = {**GROUP_COMMIT, **cli.settings_of(parser, args.set)}
    conf = "".join(f"{k}={v}\n" for k, v in settings.items())
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="pybkx-sustained-") as tmp:
        other = args.other / "python" if args.other else None
        process, address = harness.start_pybkx_bookie(Path(tmp), conf, pythonpath=other)
        try:
            ledger = 1000
            started = time.monotonic()
            for chunk in range(args.chunks):
                sectors, at = disk_sectors_written(), time.monotonic()
                report = run_load(
                    address,
                    "add",
                    in_flight=args.in_flight,
                    ledger_id=ledger,
                    ledgers=args.ledgers,
                    count=args.count,
                    payload_size=args.size,
                )
                ledger += args.ledgers
                elapsed = time.monotonic() - at
                run = {
                    "at_s": round(time.monotonic() - started, 1),
                    "mb_s": report["bytes"] / report["seconds"] / 1e6,
                    "p50_ms": report["p50_us"] / 1000,
                    "p99_ms": report["p99_us"] / 1000,
                    "cpu_s": machine.cpu_seconds(process.pid),
                    "disk_mb_s": (disk_sectors_written() - sectors) * 512 / elapsed / 1e6,
                    "errors": report["errors"],
                }
                runs.append(run)
                print(
                    f"{run['at_s']:6.1f} s run {chunk:3d}: {run['mb_s']:6.0f} MB/s, "
                    f"p50 {run['p50_ms']:6.1f} ms, p99 {run['p99_ms']:7.1f} ms, "
                    f"bookie CPU {run['cpu_s']:6.1f} s, disk writes {run['disk_mb_s']:6.0f} MB/s",
                    flush=True,
                )
        finally:
            process.stop()
    summary = {
        "build": str(args.other or REPO),
        "settings": args.set,
        "size": args.size,
        "count": args.count,
        "mean_mb_s": round(statistics.fmean(r["mb_s"] for r in runs), 1),
        "min_mb_s": round(min(r["mb_s"] for r in runs), 1),
        "worst_p99_ms": max(r["p99_ms"] for r in runs),
        "median_p99_ms": statistics.median(r["p99_ms"] for r in runs),
        "bookie_cpu_s": runs[-1]["cpu_s"],
        "runs": runs,
    }
    return cli.report_figures(summary, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
