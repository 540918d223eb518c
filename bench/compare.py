"""Side by side: a pybkx bookie and the real Apache BookKeeper 4.17 bookie, driven in turn by the
same load generator (issue 6). ``make bench-compare`` or ``python -m bench.compare [--quick]``.

Owns the plan, the measurement loop and the report (Markdown, JSON and a PNG chart under
bench/results/); it must never assert on timings, and it sends traffic only to the processes it
started on loopback.

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
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))

import harness  # noqa: E402

from pybkx._core import run_load  # noqa: E402

SYSTEMS = ("pybkx", "java")
LABEL = {"pybkx": "pybkx", "java": "Java"}
SIZES = (100, 1024, 16384)
LEDGER_COUNTS = (1, 16)
BATCH = 100
READ_LEDGER = 7  # the ledger the read runs use; add runs use ids from 1000 up
READ_PAYLOAD = 100
# Bytes per fdatasync of the disk baseline: journalBufferedWritesThreshold (the largest group a
# journal writes at once) and a larger size, since both journals may cover several groups with
# one sync. The disk limit is the better of the two.
DISK_CHUNKS = (512 * 1024, 4 << 20)
SYNC_CHUNK = 4096
RESULTS = REPO / "bench" / "results"

# The journal settings both bookies get: BookKeeper 4.17's defaults, written out.
GROUP_COMMIT = {
    "journalSyncData": "true",
    "journalMaxGroupWaitMSec": "2",
    "journalBufferedWritesThreshold": str(512 * 1024),
    "journalBufferedEntriesThreshold": "0",
    "journalFlushWhenQueueEmpty": "false",
    "journalWriteBufferSizeKB": "64",
    "journalPreAllocSizeMB": "16",
    "flushInterval": "10000",
}

# BookKeeper's bin/common.sh defaults (heap, direct memory, G1), GC threads left to the JVM.
JAVA_BOOKIE_JVM = [
    "-Xms1g",
    "-Xmx1g",
    "-XX:MaxDirectMemorySize=2g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=10",
    "-XX:+ParallelRefProcEnabled",
    "-XX:+UnlockExperimentalVMOptions",
    "-XX:+DoEscapeAnalysis",
    "-XX:G1NewSizePercent=50",
    "-XX:+DisableExplicitGC",
    "-XX:-ResizePLAB",
]


@dataclass
class Plan:
    """How much each run does; ``--quick`` and the default differ only here."""

    rounds: int
    add_counts: dict[int, int]
    read_entries: int
    paced_seconds: float
    disk_seconds: float
    net_seconds: float
    in_flight: int
    read_in_flight: int
    connections: int


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(1, {100: 50_000, 1024: 50_000, 16384: 5_000}, 200_000, 2.0, 1.5, 0.5, 0, 0, 0)
    else:
        plan = Plan(
            3, {100: 200_000, 1024: 200_000, 16384: 25_000}, 1_000_000, 6.0, 3.0, 1.0, 0, 0, 0
        )
    plan.rounds = args.rounds or plan.rounds
    plan.read_entries = args.read_entries or plan.read_entries
    plan.in_flight = args.in_flight
    plan.read_in_flight = args.read_in_flight
    plan.connections = args.connections
    return plan


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


@dataclass
class Run:
    """One load-generator run against one bookie."""

    round: int
    system: str
    kind: str  # add | paced | read | batch
    size: int
    ledgers: int
    in_flight: int
    requests: int
    entries: int
    bytes: int
    errors: int
    seconds: float
    p50_us: int
    p99_us: int
    p999_us: int
    cpu_s: float
    rate: float | None = None

    @property
    def entries_per_s(self) -> float:
        return self.entries / self.seconds if self.seconds else 0.0

    @property
    def cpu_s_per_m(self) -> float:
        return self.cpu_s / self.entries * 1e6 if self.entries else float("nan")


@dataclass
class Results:
    started: str
    quick: bool
    plan: dict[str, Any]
    machine: dict[str, str]
    settings: dict[str, str]
    runs: list[Run] = field(default_factory=list)
    disk: list[dict[str, float]] = field(default_factory=list)
    loopback_bytes_per_s: list[float] = field(default_factory=list)
    memory_kib: dict[str, dict[str, int]] = field(default_factory=dict)
    setup_s: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


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
            "read": "single reads",
            "batch": "batch reads",
        }
        self.progress.describe(
            f"round {rnd + 1}: {LABEL[bookie.system]} {what[kind]}"
            + (f" {fmt_size(size)} x{ledgers}" if kind in ("add", "paced") else "")
        )
        workload = "add" if kind in ("add", "paced") else "read"
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
    bookies = runner.bookies
    rates: dict[int, float] = {}
    common = {"in_flight": plan.in_flight, "connections": plan.connections}
    for rnd in range(plan.rounds):
        baselines(root, plan, runner.results, runner.progress)
        for size in SIZES:
            for ledgers in LEDGER_COUNTS:
                for system in order(rnd):
                    b = bookies[system]
                    runner.measure(
                        rnd,
                        b,
                        "add",
                        size,
                        ledger_id=b.ledgers(ledgers),
                        ledgers=ledgers,
                        count=plan.add_counts[size],
                        payload_size=size,
                        **common,
                    )
        for size in SIZES:
            if size not in rates:  # half the slower system's closed-loop rate, from round 1
                closed = [
                    r.entries_per_s
                    for r in runner.results.runs
                    if r.kind == "add" and r.size == size and r.ledgers == 1 and r.round == 0
                ]
                rates[size] = 0.5 * min(closed)
            count = max(1, int(rates[size] * plan.paced_seconds))
            for system in order(rnd):
                b = bookies[system]
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
                    **common,
                )
        for kind, batch in (("read", None), ("batch", BATCH)):
            for system in order(rnd):
                runner.measure(
                    rnd,
                    bookies[system],
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
    per_round = 2 + len(SIZES) * len(LEDGER_COUNTS) * 2 + len(SIZES) * 2 + 2 * 2
    return 2 + plan.rounds * per_round  # + the two read preparations


# --- summary -------------------------------------------------------------------------------------


def fmt_size(size: int) -> str:
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    return f"{size >> 10} KiB" if size >= 1024 else f"{size} B"


def fmt(x: float, digits: int = 0) -> str:
    if x != x:  # NaN
        return "-"
    return f"{x:,.{digits}f}"


def ms(us: float) -> str:
    return fmt(us / 1000, 2)


@dataclass
class Cell:
    """One system's figures for one workload, over all rounds."""

    runs: list[Run]

    def med(self, attr: str) -> float:
        values = [float(getattr(r, attr)) for r in self.runs]
        return statistics.median(values) if values else float("nan")

    @property
    def rate(self) -> float:
        return self.med("entries_per_s")

    @property
    def mb_per_s(self) -> float:
        values = [r.bytes / r.seconds / 1e6 for r in self.runs if r.seconds]
        return statistics.median(values) if values else float("nan")

    @property
    def cpu_per_m(self) -> float:
        entries = sum(r.entries for r in self.runs)
        return sum(r.cpu_s for r in self.runs) / entries * 1e6 if entries else float("nan")

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.runs)


def cells(results: Results, kind: str, size: int, ledgers: int) -> dict[str, Cell]:
    return {
        s: Cell(
            [
                r
                for r in results.runs
                if (r.kind, r.size, r.ledgers, r.system) == (kind, size, ledgers, s)
            ]
        )
        for s in SYSTEMS
    }


def paired_ratio(by: dict[str, Cell], attr: str = "entries_per_s") -> float:
    """Median over rounds of pybkx/Java for ``attr``."""
    java = {r.round: float(getattr(r, attr)) for r in by["java"].runs}
    ratios = [
        float(getattr(r, attr)) / java[r.round] for r in by["pybkx"].runs if java.get(r.round)
    ]
    return statistics.median(ratios) if ratios else float("nan")


def disk_share(results: Results, cell: Cell) -> float:
    """Median over rounds of a run's MB/s over the disk limit measured in the same round."""
    shares = [
        r.bytes / r.seconds / 1e6 / results.disk[r.round]["mb_per_s"]
        for r in cell.runs
        if r.seconds and r.round < len(results.disk) and results.disk[r.round]["mb_per_s"]
    ]
    return statistics.median(shares) if shares else float("nan")


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def render(results: Results) -> str:
    out: list[str] = []
    w = out.append
    mode = "quick" if results.quick else "default"
    plan = results.plan
    w(f"# pybkx vs Apache BookKeeper 4.17: side by side ({mode} run)\n")
    w(
        f"Measured {results.started} in {results.seconds / 60:.1f} min by `python -m bench.compare"
        f"{' --quick' if results.quick else ''}`; {plan['rounds']} round(s), systems alternating "
        "which goes first. Figures are medians over rounds; ratios are medians of per-round "
        "pybkx/Java ratios.\n"
    )
    w("**Machine**: " + "; ".join(f"{k} {v}" for k, v in results.machine.items()) + "\n")
    w(
        "**Settings (both bookies)**: "
        + ", ".join(f"`{k}={v}`" for k, v in results.settings.items())
        + "; journal and ledger directories on the same disk. Java bookie: BookKeeper 4.17.3, "
        "default ledger storage (SortedLedgerStorage), `" + " ".join(JAVA_BOOKIE_JVM) + "`. "
        "pybkx bookie: `pybkx bookie --conf` (standalone). Load generator: pybkx's Rust V2 "
        f"client in the harness process, {plan['connections']} connection(s), adds with "
        f"{plan['in_flight']} in flight, reads with {plan['read_in_flight']} in flight; CRC32C "
        "digests.\n"
    )
    disk = statistics.median(d["mb_per_s"] for d in results.disk)
    small = statistics.median(d["small_syncs_per_s"] for d in results.disk)
    net = statistics.median(results.loopback_bytes_per_s)
    w("## The machine's limits (same run)\n")
    w("| what | figure |")
    w("|---|---:|")
    for chunk in DISK_CHUNKS:
        mb = statistics.median(d[f"mb_per_s_{chunk >> 10}k"] for d in results.disk)
        w(f"| disk: sequential write + fdatasync, {fmt_size(chunk)} per sync | {fmt(mb, 1)} MB/s |")
    w(f"| disk limit (the better of the two, median over rounds) | {fmt(disk, 1)} MB/s |")
    w(
        f"| disk: write + fdatasync, {SYNC_CHUNK >> 10} KiB per sync | {fmt(small)} syncs/s "
        f"({fmt(1000 / small, 2) if small else '-'} ms each) |"
    )
    w(f"| loopback TCP, one connection | {fmt(net / 1e9, 2)} GB/s |\n")

    w("## Adds, as fast as the window allows\n")
    w(
        f"{plan['in_flight']} adds in flight; counts per run: "
        + ", ".join(f"{fmt_size(int(s))} {n:,}" for s, n in plan["add_counts"].items())
        + ".\n"
    )
    w(
        "| entry | ledgers | pybkx entries/s | MB/s | p50/p99/p99.9 ms | CPU s/M | "
        "Java entries/s | MB/s | p50/p99/p99.9 ms | CPU s/M | pybkx/Java entries/s |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in SIZES:
        for ledgers in LEDGER_COUNTS:
            by = cells(results, "add", size, ledgers)
            row = [fmt_size(size), str(ledgers)]
            for s in SYSTEMS:
                c = by[s]
                row += [
                    fmt(c.rate) + (f" ({c.errors} errors)" if c.errors else ""),
                    fmt(c.mb_per_s, 1),
                    f"{ms(c.med('p50_us'))}/{ms(c.med('p99_us'))}/{ms(c.med('p999_us'))}",
                    fmt(c.cpu_per_m, 2),
                ]
            row.append(fmt(paired_ratio(by), 2))
            w("| " + " | ".join(row) + " |")
    w("")
    w("## Add latency at equal load\n")
    w(
        "The same adds (1 ledger) sent open loop at one rate for both systems: half the slower "
        "one's closed-loop throughput. Latency counts from each request's due time.\n"
    )
    w(
        "| entry | rate entries/s | pybkx p50/p99/p99.9 ms | Java p50/p99/p99.9 ms | "
        "p99 pybkx/Java | pybkx CPU s/M | Java CPU s/M |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|")
    for size in SIZES:
        by = cells(results, "paced", size, 1)
        p, j = by["pybkx"], by["java"]
        rate = p.runs[0].rate if p.runs and p.runs[0].rate else float("nan")
        w(
            f"| {fmt_size(size)} | {fmt(rate)} "
            f"| {ms(p.med('p50_us'))}/{ms(p.med('p99_us'))}/{ms(p.med('p999_us'))} "
            f"| {ms(j.med('p50_us'))}/{ms(j.med('p99_us'))}/{ms(j.med('p999_us'))} "
            f"| {fmt(paired_ratio(by, 'p99_us'), 2)} | {fmt(p.cpu_per_m, 2)} "
            f"| {fmt(j.cpu_per_m, 2)} |"
        )
    w("")
    w("## Reads from cache\n")
    w(
        f"{plan['read_entries']:,} entries of {READ_PAYLOAD} B, written and read once before "
        f"(so cached); {plan['read_in_flight']} requests in flight.\n"
    )
    w(
        "| read | pybkx entries/s | p50/p99 ms (per request) | CPU s/M | Java entries/s "
        "| p50/p99 ms | CPU s/M | pybkx/Java |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    reads = {k: cells(results, k, READ_PAYLOAD, 1) for k in ("read", "batch")}
    for kind, label in (("read", "single READ"), ("batch", f"BATCH_READ_ENTRY({BATCH})")):
        by = reads[kind]
        p, j = by["pybkx"], by["java"]
        w(
            f"| {label} | {fmt(p.rate)} | {ms(p.med('p50_us'))}/{ms(p.med('p99_us'))} "
            f"| {fmt(p.cpu_per_m, 2)} | {fmt(j.rate)} "
            f"| {ms(j.med('p50_us'))}/{ms(j.med('p99_us'))} "
            f"| {fmt(j.cpu_per_m, 2)} | {fmt(paired_ratio(by), 2)} |"
        )
    batch_gain = {s: reads["batch"][s].rate / reads["read"][s].rate for s in SYSTEMS}
    w("")
    w(
        f"Batch over single read: pybkx {fmt(batch_gain['pybkx'], 1)}x, Java "
        f"{fmt(batch_gain['java'], 1)}x (BP-62 reports 22x).\n"
    )
    w("## Memory\n")
    w("| | pybkx | Java | pybkx/Java |")
    w("|---|---:|---:|---:|")
    for key, label in (("VmHWM", "peak RSS (VmHWM) MiB"), ("VmRSS", "RSS at the end MiB")):
        p = results.memory_kib.get("pybkx", {}).get(key, 0) / 1024
        j = results.memory_kib.get("java", {}).get(key, 0) / 1024
        w(f"| {label} | {fmt(p)} | {fmt(j)} | {fmt(p / j if j else float('nan'), 2)} |")
    w("")

    w("## Against the targets of issue 6\n")
    w("| target | measured | |")
    w("|---|---|---|")
    for size in (100, 1024):
        for ledgers in LEDGER_COUNTS:
            r = paired_ratio(cells(results, "add", size, ledgers))
            w(
                f"| adds {fmt_size(size)} x{ledgers} ledger(s) ≥ 2x Java | {fmt(r, 2)}x "
                f"| {verdict(r >= 2)} |"
            )
    for ledgers in LEDGER_COUNTS:
        by = cells(results, "add", 16384, ledgers)
        share, java_share = (disk_share(results, by[s]) for s in SYSTEMS)
        w(
            f"| adds 16 KiB x{ledgers} ≥ 80% of the disk limit | {fmt(100 * share)}% "
            f"(Java {fmt(100 * java_share)}%) | {verdict(share >= 0.8)} |"
        )
    gain = batch_gain["pybkx"]
    w(f"| batch read ≥ 20x single read | {fmt(gain, 1)}x | {verdict(gain >= 20)} |")
    r = paired_ratio(reads["batch"])
    w(f"| batch read ≥ 2x Java's batch read | {fmt(r, 2)}x | {verdict(r >= 2)} |")
    for size in SIZES:
        r = paired_ratio(cells(results, "paced", size, 1), "p99_us")
        w(
            f"| p99 add latency ≤ Java's at equal load, {fmt_size(size)} | {fmt(r, 2)}x Java's "
            f"| {verdict(r <= 1)} |"
        )
    errors = sum(r.errors for r in results.runs)
    w("")
    w(
        f"Failed requests over the whole run: {errors}. Bookie CPU counts utime + stime of the "
        "bookie process from the start of a run until it is idle again (its background flushes "
        "included); the load generator's own CPU is not counted. The disk limit is the better "
        "of sequential write + fdatasync with 512 KiB (journalBufferedWritesThreshold, the "
        "largest group a journal writes at once) and 4 MiB per sync (both journals may cover "
        "several groups with one sync); 16 KiB adds write each byte twice (journal and entry "
        "log), the limit counts it once. The 16 KiB share of the disk limit pairs each run with "
        "the disk baseline of its own round (the shared disk drifts between rounds)."
    )
    return "\n".join(out) + "\n"


def chart(results: Results, path: Path) -> bool:
    """A PNG of the main figures; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    colors = {"pybkx": "#d9730d", "java": "#3a6ea5"}
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    width = 0.38

    def bars(ax: Any, labels: list[str], values: dict[str, list[float]], title: str) -> None:
        xs = range(len(labels))
        for i, s in enumerate(SYSTEMS):
            ax.bar(
                [x + (i - 0.5) * width for x in xs],
                values[s],
                width,
                label=LABEL[s],
                color=colors[s],
            )
        ax.set_xticks(list(xs), labels, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)

    add_labels = [f"{fmt_size(s)}\nx{n}" for s in SIZES for n in LEDGER_COUNTS]
    adds = {
        s: [cells(results, "add", z, n)[s].rate for z in SIZES for n in LEDGER_COUNTS]
        for s in SYSTEMS
    }
    bars(axes[0][0], add_labels, adds, "adds/s (entry size x ledgers), higher is better")
    axes[0][0].set_yscale("log")
    paced = {
        s: [cells(results, "paced", z, 1)[s].med("p99_us") / 1000 for z in SIZES] for s in SYSTEMS
    }
    bars(
        axes[0][1],
        [fmt_size(z) for z in SIZES],
        paced,
        "p99 add latency at equal load (ms), lower is better",
    )
    reads = {
        s: [cells(results, k, READ_PAYLOAD, 1)[s].rate for k in ("read", "batch")] for s in SYSTEMS
    }
    bars(
        axes[1][0],
        ["single READ", f"BATCH_READ_ENTRY({BATCH})"],
        reads,
        "entries read/s from cache, higher is better",
    )
    axes[1][0].set_yscale("log")
    cpu_labels = [f"add {fmt_size(z)} x16" for z in SIZES] + ["read", "batch read"]
    cpu = {
        s: [cells(results, "add", z, 16)[s].cpu_per_m for z in SIZES]
        + [cells(results, k, READ_PAYLOAD, 1)[s].cpu_per_m for k in ("read", "batch")]
        for s in SYSTEMS
    }
    bars(axes[1][1], cpu_labels, cpu, "bookie CPU s per million entries, lower is better")
    axes[1][1].set_yscale("log")
    m = results.machine
    fig.suptitle(
        f"pybkx vs Apache BookKeeper 4.17 bookie ({'quick' if results.quick else 'default'} run, "
        f"{results.started})\n{m['cpu']}, {m['memory']}, {m['disk']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(results: Results, out: Path) -> None:
    """``out``.md, .json and .png; the Markdown also goes to stdout."""
    report = render(results)
    png = out.with_suffix(".png")
    if chart(results, png):
        report += f"\n![pybkx vs Java]({png.name})\n"
    else:
        report += "\n(no chart: matplotlib is not installed; `make bench-compare` installs it)\n"
    out.with_suffix(".md").write_text(report)
    out.with_suffix(".json").write_text(json.dumps(asdict(results), indent=1) + "\n")
    print(report)
    written = [out.with_suffix(".md"), out.with_suffix(".json")] + ([png] if png.exists() else [])
    print("written: " + ", ".join(map(str, written)), file=sys.stderr)


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
