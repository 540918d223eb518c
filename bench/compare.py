"""Side by side: a pybkx bookie and the real Apache BookKeeper 4.17 bookie, driven in turn by the
same load generator (issue 6). ``make bench-compare`` or ``python -m bench.compare [--quick]``.

Owns running the side by side: the bookies' processes, the rounds and the measurements (what
is run is ``bench.compare_plan``; the report, Markdown, JSON and a PNG chart under
bench/results/, is ``bench.compare_report``); it must never assert on timings, and it sends
traffic only to the processes it started on loopback.

Both bookies run as separate processes with their journal and ledger directories under one
directory (one disk), ``journalSyncData=true`` and the same group-commit settings (BookKeeper's
defaults, given explicitly to both). The Java bookie runs with BookKeeper's own launch defaults
(1 GiB heap, G1). The load generator is pybkx's Rust V2 client (``pybkx._core.run_load``) in
this process, with a configurable window of requests in flight. Per system:

- adds of 100 B, 1 KiB and 16 KiB over 1 and 16 ledgers, as fast as the window allows:
  entries/s, MB/s, latency p50/p99/p99.9;
- the same adds paced at one rate for both (half the slower system's throughput): latency at
  equal load, counted from each request's due time;
- N single READs and N entries by BATCH_READ_ENTRY(100) of a ledger whose entries are cached;
- CPU seconds per million entries (utime + stime of the bookie process from /proc, including
  the background work a run leaves, which is waited out) and peak RSS (VmHWM).

In the same run: the disk's sequential write + fdatasync limit and loopback TCP bandwidth.
Rounds alternate which system goes first, so drift of the shared machine hits both; figures are
medians over rounds and ratios medians of the per-round pybkx/Java ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine
from bench.compare_plan import (
    BATCH,
    DISK_CHUNKS,
    GROUP_COMMIT,
    JAVA_BOOKIE_JVM,
    LABEL,
    LEDGER_COUNTS,
    LOW_LOAD_SIZES,
    READ_LEDGER,
    READ_PAYLOAD,
    SIZES,
    SYNC_CHUNK,
    SYSTEMS,
    Plan,
    make_plan,
)
from bench.compare_report import RESULTS, Results, Run, fmt_size, write_report

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))

import harness  # noqa: E402

from pybkx._core import run_load  # noqa: E402


@dataclass
class Bookie:
    system: str
    process: harness.Process
    address: str
    next_ledger: int = 1000

    @property
    def pid(self) -> int:
        return self.process.pid

    def ledgers(self, n: int) -> int:
        """``n`` fresh ledger ids; returns the first."""
        first = self.next_ledger
        self.next_ledger += n
        return first


# --- processes -----------------------------------------------------------------------------------


def start_java_bookie(
    classpath: str,
    zookeeper: str,
    workdir: Path,
    port: int | None = None,
    extra_conf: tuple[str, ...] = (),
) -> Bookie:
    """The Java bookie on ``port`` (default: a free one) with its data in
    ``workdir/java-bookie``; ``extra_conf``: more ``key=value`` settings."""
    port = port or harness.free_port()
    jvm = [o for o in harness.JVM_OPTS if "GC" not in o]
    argv = [
        harness.tool("java"),
        *JAVA_BOOKIE_JVM,
        *jvm,
        "-cp",
        classpath,
        "pybkx.interop.JavaBookie",
        str(port),
        zookeeper,
        str(workdir / "java-bookie"),
        *(f"{k}={v}" for k, v in GROUP_COMMIT.items()),
        *extra_conf,
    ]
    process = harness.Process("java-bookie", argv, workdir / "java-bookie.log")

    def ready() -> bool:
        return "READY" in process.log.read_text(errors="replace") and harness.accepts(port)

    harness.wait_until(process, ready, "serving")
    return Bookie("java", process, f"127.0.0.1:{port}")


def start_pybkx_bookie(workdir: Path) -> Bookie:
    conf = "".join(f"{k}={v}\n" for k, v in GROUP_COMMIT.items())
    process, address = harness.start_pybkx_bookie(workdir, conf)
    return Bookie("pybkx", process, address)


# --- measuring -----------------------------------------------------------------------------------


class Runner:
    """Runs the load generator against one bookie at a time and charges it the CPU it used."""

    def __init__(self, bookies: dict[str, Bookie], results: Results, progress: Progress) -> None:
        self.bookies = bookies
        self.results = results
        self.progress = progress

    def quiet(self) -> None:
        machine.wait_quiet([b.pid for b in self.bookies.values()])

    def load(self, bookie: Bookie, workload: str, **kw: Any) -> tuple[dict[str, Any], float]:
        """One run_load, its bookie's CPU seconds (background work waited out) and nothing else."""
        cpu_before = machine.cpu_seconds(bookie.pid)
        report = run_load(bookie.address, workload, **kw)
        self.quiet()
        cpu = machine.cpu_seconds(bookie.pid) - cpu_before
        if not bookie.process.alive():
            raise bookie.process.error("died during a run")
        return report, cpu

    def measure(self, rnd: int, bookie: Bookie, kind: str, size: int, **kw: Any) -> Run:
        """One run of ``kind`` (add, paced, read, batch); ``kw`` go to run_load."""
        ledgers = int(kw.get("ledgers", 1))
        what = {
            "add": "adds",
            "paced": "paced adds",
            "low": "adds one at a time",
            "read": "single reads",
            "batch": "batch reads",
        }
        self.progress.describe(
            f"round {rnd + 1}: {LABEL[bookie.system]} {what[kind]}"
            + (f" {fmt_size(size)} x{ledgers}" if kind in ("add", "paced", "low") else "")
        )
        workload = "add" if kind in ("add", "paced", "low") else "read"
        report, cpu = self.load(bookie, workload, **kw)
        run = Run(
            round=rnd,
            system=bookie.system,
            kind=kind,
            size=size,
            ledgers=ledgers,
            in_flight=kw["in_flight"],
            requests=report["requests"],
            entries=report["entries"],
            bytes=report["bytes"],
            errors=report["errors"],
            seconds=report["seconds"],
            p50_us=report["p50_us"],
            p99_us=report["p99_us"],
            p999_us=report["p999_us"],
            cpu_s=cpu,
            rate=kw.get("rate"),
        )
        self.results.runs.append(run)
        self.progress.advance()
        return run


def order(rnd: int) -> tuple[str, ...]:
    return SYSTEMS if rnd % 2 == 0 else tuple(reversed(SYSTEMS))


def baselines(root: Path, plan: Plan, results: Results, progress: Progress) -> None:
    progress.describe("disk: sequential write + fdatasync")
    disk: dict[str, float] = {}
    for chunk in DISK_CHUNKS:
        r = machine.disk_write_fdatasync(root, chunk, plan.disk_seconds / len(DISK_CHUNKS))
        disk[f"mb_per_s_{chunk >> 10}k"] = r.mb_per_s
    small = machine.disk_write_fdatasync(root, SYNC_CHUNK, plan.disk_seconds / 2)
    disk["mb_per_s"] = max(disk.values())
    disk["small_syncs_per_s"] = small.syncs_per_s
    results.disk.append(disk)
    progress.advance()
    progress.describe("loopback TCP bandwidth")
    results.loopback_bytes_per_s.append(machine.loopback_bandwidth(plan.net_seconds))
    progress.advance()


def prepare_reads(runner: Runner, bookie: Bookie, plan: Plan) -> None:
    """Writes the read ledger and reads it once in batches, so the reads are from cache."""
    runner.progress.describe(
        f"{LABEL[bookie.system]}: writing {plan.read_entries:,} entries to read"
    )
    started = time.perf_counter()
    for workload, kw in (
        ("add", {"payload_size": READ_PAYLOAD, "in_flight": plan.in_flight}),
        ("read", {"batch": BATCH, "in_flight": plan.read_in_flight}),
    ):
        report, _ = runner.load(
            bookie, workload, ledger_id=READ_LEDGER, count=plan.read_entries, **kw
        )
        if report["errors"] or report["entries"] != plan.read_entries:
            raise harness.HarnessError(
                f"{bookie.system}: preparing the read ledger: {report['errors']} errors, "
                f"{report['entries']} of {plan.read_entries} entries"
            )
    runner.results.setup_s[bookie.system] = time.perf_counter() - started
    runner.progress.advance()


def run_rounds(runner: Runner, plan: Plan, root: Path) -> None:
    rates: dict[int, float] = {}
    for rnd in range(plan.rounds):
        baselines(root, plan, runner.results, runner.progress)
        add_runs(runner, plan, rnd)
        low_load_runs(runner, plan, rnd)
        paced_runs(runner, plan, rnd, rates)
        read_runs(runner, plan, rnd)


def add_runs(runner: Runner, plan: Plan, rnd: int) -> None:
    """Adds as fast as the window allows, every size and ledger count."""
    for size in SIZES:
        for ledgers in LEDGER_COUNTS:
            for system in order(rnd):
                b = runner.bookies[system]
                runner.measure(
                    rnd,
                    b,
                    "add",
                    size,
                    ledger_id=b.ledgers(ledgers),
                    ledgers=ledgers,
                    count=plan.add_counts[size],
                    payload_size=size,
                    in_flight=plan.in_flight,
                    connections=plan.connections,
                )


def low_load_runs(runner: Runner, plan: Plan, rnd: int) -> None:
    """Adds one at a time: each its own group commit."""
    for size in LOW_LOAD_SIZES:
        for system in order(rnd):
            b = runner.bookies[system]
            runner.measure(
                rnd,
                b,
                "low",
                size,
                ledger_id=b.ledgers(1),
                ledgers=1,
                count=plan.low_load_count,
                payload_size=size,
                in_flight=1,
                connections=1,
            )


def paced_runs(runner: Runner, plan: Plan, rnd: int, rates: dict[int, float]) -> None:
    """Adds open loop at half the slower system's closed-loop rate (from round 1)."""
    for size in SIZES:
        if size not in rates:
            closed = [
                r.entries_per_s
                for r in runner.results.runs
                if r.kind == "add" and r.size == size and r.ledgers == 1 and r.round == 0
            ]
            rates[size] = 0.5 * min(closed)
        count = max(1, int(rates[size] * plan.paced_seconds))
        for system in order(rnd):
            b = runner.bookies[system]
            runner.measure(
                rnd,
                b,
                "paced",
                size,
                ledger_id=b.ledgers(1),
                ledgers=1,
                count=count,
                payload_size=size,
                rate=rates[size],
                in_flight=plan.in_flight,
                connections=plan.connections,
            )


def read_runs(runner: Runner, plan: Plan, rnd: int) -> None:
    """Single and batch reads of the prepared ledger."""
    for kind, batch in (("read", None), ("batch", BATCH)):
        for system in order(rnd):
            runner.measure(
                rnd,
                runner.bookies[system],
                kind,
                READ_PAYLOAD,
                ledger_id=READ_LEDGER,
                count=plan.read_entries,
                batch=batch,
                in_flight=plan.read_in_flight,
                connections=plan.connections,
            )


# --- progress ------------------------------------------------------------------------------------


class Progress:
    """A rich progress bar on stderr (quiet when it is not a terminal), or plain lines."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._bar: Any = None
        self._task: Any = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Progress:
        try:
            from rich import progress as rp
            from rich.console import Console
        except ImportError:
            print("(rich is not installed: no progress bar; `make bench-compare` installs it)")
            return self
        self._bar = rp.Progress(
            rp.SpinnerColumn(),
            rp.TextColumn("{task.description:<44}"),
            rp.BarColumn(),
            rp.MofNCompleteColumn(),
            rp.TimeElapsedColumn(),
            rp.TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self._stack.enter_context(self._bar)
        self._task = self._bar.add_task("starting", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def describe(self, text: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=text)

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)


def total_steps(plan: Plan) -> int:
    per_round = (
        2 + len(SIZES) * len(LEDGER_COUNTS) * 2 + len(LOW_LOAD_SIZES) * 2 + len(SIZES) * 2 + 2 * 2
    )
    return 2 + plan.rounds * per_round  # + the two read preparations


# --- main ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def cluster(root: Path, progress: Progress) -> Iterator[dict[str, Bookie]]:
    """ZooKeeper, the Java bookie and the pybkx bookie; all stopped on exit."""
    started: list[harness.Process] = []
    try:
        progress.describe("building the Java helper (Maven, cached)")
        classpath = harness.java_classpath()
        progress.describe("starting ZooKeeper and both bookies")
        zk, address = harness.start_zookeeper(classpath, root)
        started.append(zk)
        bookies: dict[str, Bookie] = {}
        for system in SYSTEMS:
            workdir = root / system
            workdir.mkdir()
            if system == "java":
                bookies[system] = start_java_bookie(classpath, address, workdir)
            else:
                bookies[system] = start_pybkx_bookie(workdir)
            started.append(bookies[system].process)
        yield bookies
    finally:
        for process in reversed(started):
            process.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="smaller counts, one round")
    parser.add_argument("--rounds", type=int, default=0, help="rounds (default 3, quick 1)")
    parser.add_argument("--in-flight", type=int, default=1000, help="adds in flight")
    parser.add_argument("--read-in-flight", type=int, default=64, help="reads in flight")
    parser.add_argument("--connections", type=int, default=1, help="TCP connections per bookie")
    parser.add_argument(
        "--read-entries",
        type=int,
        default=0,
        help="entries read per read run (default 1,000,000, quick 200,000)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="data directory (default: tmp)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="report path without suffix (default bench/results/compare[-quick])",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        help="only rewrite the report and chart from a results JSON file",
    )
    args = parser.parse_args(argv)
    if args.render:
        raw = json.loads(args.render.read_text())
        raw["runs"] = [Run(**r) for r in raw["runs"]]
        write_report(Results(**raw), args.render.with_suffix(""))
        return 0
    plan = make_plan(args)

    parent = args.dir or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="pybkx-compare-", dir=parent))
    out = args.out or RESULTS / ("compare-quick" if args.quick else "compare")
    out.parent.mkdir(parents=True, exist_ok=True)
    results = Results(
        started=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        quick=args.quick,
        plan=asdict(plan),
        machine=machine.describe(root),
        settings=dict(GROUP_COMMIT),
    )
    t0 = time.perf_counter()
    try:
        with Progress(total_steps(plan)) as progress, cluster(root, progress) as bookies:
            runner = Runner(bookies, results, progress)
            runner.quiet()
            for system in SYSTEMS:
                prepare_reads(runner, bookies[system], plan)
            run_rounds(runner, plan, root)
            for system, bookie in bookies.items():
                results.memory_kib[system] = machine.memory_kib(bookie.pid)
    except harness.HarnessError as exc:
        print(f"bench.compare: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results.seconds = time.perf_counter() - t0

    write_report(results, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
