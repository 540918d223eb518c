"""Adaptive group commit against BookKeeper's fixed group wait, one build, one run:
``python -m bench.group_commit [--rounds N] [--quick] [--json FILE]``.

Two pybkx bookies run side by side with BookKeeper's group-commit settings (as bench.compare),
one with ``journalAdaptiveGroupWrites=true`` (the default), one with it false (a group ends only
at ``journalMaxGroupWaitMSec``, the size thresholds or ``journalFlushWhenQueueEmpty``). Per round,
modes alternating which goes first: the disk's small write + fdatasync; adds one at a time (100 B,
1 KiB: the latency floor); adds with 1000 in flight (100 B, 1 KiB over 1 and 16 ledgers, 16 KiB
over 16); adds paced at a fixed rate (p99 at equal load). Figures are medians over rounds, ratios
medians of per-round ratios; the bookies' CPU per million adds from /proc. Never asserts on
timings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import cli, machine
from bench.compare_plan import GROUP_COMMIT, SYNC_CHUNK

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))

import harness  # noqa: E402

from pybkx._core import run_load  # noqa: E402

MODES = {"adaptive": "true", "fixed wait": "false"}


@dataclass(frozen=True)
class Case:
    """One workload: ``in_flight`` adds of ``size`` bytes over ``ledgers`` ledgers."""

    name: str
    size: int
    ledgers: int
    in_flight: int
    count: int
    rate: float | None = None


def cases(quick: bool) -> list[Case]:
    scale = 4 if quick else 1
    return [
        Case("one at a time, 100 B", 100, 1, 1, 2_000 // scale),
        Case("one at a time, 1 KiB", 1024, 1, 1, 2_000 // scale),
        Case("1000 in flight, 100 B x1", 100, 1, 1000, 200_000 // scale),
        Case("1000 in flight, 100 B x16", 100, 16, 1000, 200_000 // scale),
        Case("1000 in flight, 1 KiB x1", 1024, 1, 1000, 200_000 // scale),
        Case("1000 in flight, 1 KiB x16", 1024, 16, 1000, 200_000 // scale),
        Case("1000 in flight, 16 KiB x16", 16384, 16, 1000, 25_000 // scale),
        Case("paced 20,000/s, 1 KiB", 1024, 1, 1000, 100_000 // scale, rate=20_000),
        Case("paced 80,000/s, 1 KiB", 1024, 1, 1000, 400_000 // scale, rate=80_000),
        Case("paced 20,000/s, 16 KiB", 16384, 1, 1000, 100_000 // scale, rate=20_000),
    ]


@dataclass
class Figures:
    """What one case measured on one mode, round by round."""

    rate: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    cpu_s_per_m: list[float] = field(default_factory=list)


@dataclass
class Bookie:
    process: harness.Process
    address: str
    next_ledger: int = 1000

    def ledgers(self, n: int) -> int:
        first = self.next_ledger
        self.next_ledger += n
        return first


@contextmanager
def bookies(root: Path) -> Iterator[dict[str, Bookie]]:
    """One pybkx bookie per mode, each in its own directory under ``root``."""
    with ExitStack() as stack:
        started: dict[str, Bookie] = {}
        for mode, adaptive in MODES.items():
            settings = {**GROUP_COMMIT, "journalAdaptiveGroupWrites": adaptive}
            conf = "".join(f"{k}={v}\n" for k, v in settings.items())
            workdir = root / mode.replace(" ", "-")
            workdir.mkdir()
            process, address = harness.start_pybkx_bookie(workdir, conf)
            stack.callback(process.stop)
            started[mode] = Bookie(process, address)
        yield started


def measure(bookie: Bookie, case: Case) -> dict[str, float]:
    """One run of ``case``; the bookie's CPU counted until it is idle again."""
    before = machine.cpu_seconds(bookie.process.pid)
    report: dict[str, Any] = run_load(
        bookie.address,
        "add",
        ledger_id=bookie.ledgers(case.ledgers),
        ledgers=case.ledgers,
        count=case.count,
        payload_size=case.size,
        in_flight=case.in_flight,
        rate=case.rate,
    )
    machine.wait_quiet([bookie.process.pid])
    cpu = machine.cpu_seconds(bookie.process.pid) - before
    if report["errors"]:
        raise RuntimeError(f"{case.name}: {report['errors']} adds failed")
    return {
        "rate": report["entries"] / report["seconds"],
        "p50_ms": report["p50_us"] / 1000,
        "p99_ms": report["p99_us"] / 1000,
        "cpu_s_per_m": cpu / report["entries"] * 1e6,
    }


def run(root: Path, rounds: int, quick: bool) -> dict[str, Any]:
    plan = cases(quick)
    figures = {(c.name, m): Figures() for c in plan for m in MODES}
    one_sync_ms: list[float] = []
    with bookies(root) as running:
        for rnd in range(rounds):
            disk = machine.disk_write_fdatasync(root, SYNC_CHUNK, 1.0 if quick else 2.0)
            one_sync_ms.append(1000 / disk.syncs_per_s if disk.syncs_per_s else float("nan"))
            order = list(MODES) if rnd % 2 == 0 else list(reversed(MODES))
            for case in plan:
                for mode in order:
                    got = measure(running[mode], case)
                    f = figures[(case.name, mode)]
                    for key, value in got.items():
                        getattr(f, key).append(value)
                    print(f"  round {rnd + 1}: {mode}: {case.name}: {got}", file=sys.stderr)
    return {"cases": plan, "figures": figures, "one_sync_ms": one_sync_ms}


def ratio(a: list[float], b: list[float]) -> float:
    """Median of per-round a/b."""
    pairs = [x / y for x, y in zip(a, b, strict=True) if y]
    return statistics.median(pairs) if pairs else float("nan")


def render(result: dict[str, Any], rounds: int) -> str:
    """The Markdown table of a run."""
    figures: dict[tuple[str, str], Figures] = result["figures"]
    sync = result["one_sync_ms"]
    med = statistics.median
    out = [
        "# Adaptive group commit beside the fixed group wait (one run)\n",
        f"{rounds} round(s), modes alternating which goes first; disk small write + fdatasync "
        f"{med(sync):.3f} ms (median of rounds). Both bookies: BookKeeper's group-commit "
        "settings (`journalMaxGroupWaitMSec=2`), `journalAdaptiveGroupWrites` true or false.\n",
        "| case | adaptive entries/s | p50/p99 ms | CPU s/M | fixed wait entries/s | p50/p99 ms "
        "| CPU s/M | adaptive/fixed entries/s | adaptive p50 / one fdatasync |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in result["cases"]:
        a, f = figures[(case.name, "adaptive")], figures[(case.name, "fixed wait")]
        floor = ratio(a.p50_ms, sync) if case.in_flight == 1 else float("nan")
        out.append(
            f"| {case.name} | {med(a.rate):,.0f} | {med(a.p50_ms):.2f}/{med(a.p99_ms):.2f} "
            f"| {med(a.cpu_s_per_m):.2f} | {med(f.rate):,.0f} "
            f"| {med(f.p50_ms):.2f}/{med(f.p99_ms):.2f} | {med(f.cpu_s_per_m):.2f} "
            f"| {ratio(a.rate, f.rate):.2f} | " + (f"{floor:.2f}" if floor == floor else "-") + " |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.group_commit", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a quarter of the counts")
    parser.add_argument("--dir", default=None, help="data directory (default: tmp)")
    parser.add_argument("--out", type=Path, default=None, help="report (default: bench/results/)")
    args = parser.parse_args(argv)
    results = REPO / "bench" / "results"
    out = args.out or results / ("group_commit-quick.md" if args.quick else "group_commit.md")
    with cli.work_dir(args.dir, "pybkx-group-commit-") as root:
        result = run(root, args.rounds, args.quick)
    text = render(result, args.rounds)
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
