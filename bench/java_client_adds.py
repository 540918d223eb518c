"""Adds through Apache BookKeeper 4.17.3's own Java ledger client (``BookKeeper`` and
``LedgerHandle``, V2 wire protocol, CRC32C digest) against a pybkx bookie and against the Java
bookie, in one run. ``make bench-java-client`` or ``python -m bench.java_client_adds [--quick]``.

Owns this side by side: ZooKeeper, the two bookies, the client runs and the report
(bench/results/java_client_adds[-quick].md and .json); it never asserts on timings, and it sends
traffic only to the processes it started on loopback.

Each bookie registers under a ledgers root of its own in one ZooKeeper (``/ledgers-pybkx``,
``/ledgers-java``), so a client sees exactly one bookie and every ledger is E=Qw=Qa=1. Both
bookies run as in ``bench.compare``: journal and ledger directories on the same disk,
``journalSyncData=true`` and the same group-commit settings (``GROUP_COMMIT``), the Java bookie
with BookKeeper's launch defaults (1 GiB heap, G1). The load is
tests/interop/java/.../ClientAddLoad.java, a new JVM per run (same JVM options for both
systems): one ledger per client thread, either ``addEntry`` in a loop (one add in flight per
thread) or ``asyncAddEntry`` with a window of adds in flight. Each run warms up its JVM with
``asyncAddEntry`` adds on its ledgers before the clock starts, and each bookie takes 500,000 adds
before the first round (its JIT and caches warm; not reported). ``--quick``: a quarter of every
count, one round. Rounds alternate which system
goes first; within a round each case runs on both systems back to back. Figures are medians
over rounds; the ratio is the median of the per-round pybkx/Java ratios of entries/s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))
sys.path.insert(0, str(REPO))

import harness  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402

from bench import cli, machine  # noqa: E402
from bench.compare import start_java_bookie  # noqa: E402
from bench.compare_plan import GROUP_COMMIT, LABEL, SYNC_CHUNK, SYSTEMS  # noqa: E402

RESULTS = REPO / "bench" / "results"
# A build of the Java helpers of its own: a rebuild here never replaces the jar that a running
# interop test session uses (target/interop-java).
BUILD_DIR = REPO / "target" / "java-client-bench"
ROOTS = {"pybkx": "/ledgers-pybkx", "java": "/ledgers-java"}
CLIENT_MAIN = "pybkx.interop.ClientAddLoad"
CLIENT_HEAP = "1g"
CLIENT_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Case:
    """One client workload: ``count`` adds of ``size`` bytes over ``threads`` ledgers."""

    key: str
    size: int
    threads: int
    window: int  # 0: addEntry, one in flight per thread; N: asyncAddEntry, N in flight per thread
    count: int  # adds over all threads (default run)
    warmup: int  # adds per thread before the clock starts (default run)

    @property
    def title(self) -> str:
        size = f"{self.size >> 10} KiB" if self.size >= 1024 else f"{self.size} B"
        threads = f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        mode = "addEntry" if self.window == 0 else f"asyncAddEntry, {self.window:,} in flight"
        return f"{size}, {threads}, {mode}"


# Warm-up adds go asyncAddEntry with 1,000 in flight whatever the case's mode (ClientAddLoad's
# warmup_window), so the client JVM has compiled its add path before the clock starts.
CASES = (
    Case("100B-1t-sync", 100, 1, 0, 5_000, 30_000),
    Case("1KiB-4t-sync", 1024, 4, 0, 20_000, 10_000),
    Case("100B-async-1000", 100, 1, 1000, 1_000_000, 100_000),
    Case("1KiB-async-1000", 1024, 1, 1000, 1_000_000, 100_000),
    Case("16KiB-4t-sync", 16384, 4, 0, 12_000, 4_000),
)
# Run against each bookie before the first round and not reported: the Java bookie's JIT (and
# pybkx's caches) warm before anything is measured.
BOOKIE_WARMUP = Case("bookie-warmup", 1024, 1, 1000, 500_000, 10_000)
QUICK_DIVISOR = 4
# Cores of other work on the machine during a run above which its round's ratio is marked.
BUSY_OTHER = 0.25


@dataclass
class Run:
    round: int
    system: str
    case: str
    entries: int
    seconds: float
    entries_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    client_cpu_s: float  # the client JVM over the measurement
    bookie_cpu_s: float  # from the client's start until the bookie is idle again
    adds: int  # every add the bookie took in that time: the measured ones and the warm-up
    other_cores: float  # busy cores of everything else while the client ran (a shared machine)

    # What ClientAddLoad prints that a run keeps.
    CLIENT_FIGURES: ClassVar[tuple[str, ...]] = (
        "entries",
        "seconds",
        "entries_per_s",
        "mb_per_s",
        "p50_ms",
        "p99_ms",
        "p999_ms",
        "max_ms",
        "client_cpu_s",
    )


@dataclass
class Bookies:
    """The two bookies of the run and the ZooKeeper they registered in."""

    zookeeper: str
    processes: dict[str, harness.Process]


# --- processes -----------------------------------------------------------------------------------


def metadata_uri(zookeeper: str, system: str) -> str:
    return f"zk+hierarchical://{zookeeper}{ROOTS[system]}"


def registered(zookeeper: str, root: str) -> bool:
    """Whether a bookie is registered writable under ``root``."""
    zk = KazooClient(hosts=zookeeper, timeout=5.0)
    try:
        zk.start(timeout=5.0)
        path = f"{root}/available"
        return zk.exists(path) is not None and any(c != "readonly" for c in zk.get_children(path))
    finally:
        zk.stop()
        zk.close()


def start_pybkx(zookeeper: str, workdir: Path, overrides: dict[str, str]) -> harness.Process:
    """A pybkx bookie with ``GROUP_COMMIT`` and ``overrides``, registered in a new cluster at
    ``/ledgers-pybkx``."""
    uri = metadata_uri(zookeeper, "pybkx")
    pybkx = Path(sys.executable).with_name("pybkx")
    subprocess.run(
        [str(pybkx), "shell", "initnewcluster", "--uri", uri],
        check=True,
        capture_output=True,
        timeout=60,
    )
    settings = {**GROUP_COMMIT, **overrides, "metadataServiceUri": uri}
    conf = "".join(f"{k}={v}\n" for k, v in settings.items())
    process, _ = harness.start_pybkx_bookie(workdir, conf)
    harness.wait_until(process, lambda: registered(zookeeper, ROOTS["pybkx"]), "registered")
    return process


@contextlib.contextmanager
def bookies(root: Path, overrides: dict[str, str]) -> Iterator[tuple[str, Bookies]]:
    """``(classpath, Bookies)``: ZooKeeper and both bookies (``GROUP_COMMIT``, then
    ``overrides``), each under its own ledgers root; all stopped on exit."""
    started: list[harness.Process] = []
    try:
        print("building the Java helpers (Maven, cached)", file=sys.stderr)
        classpath = harness.java_classpath(BUILD_DIR)
        print("starting ZooKeeper and both bookies", file=sys.stderr)
        zk, zookeeper = harness.start_zookeeper(classpath, root)
        started.append(zk)
        processes: dict[str, harness.Process] = {}
        for system in SYSTEMS:
            workdir = root / system
            workdir.mkdir()
            if system == "java":
                # After GROUP_COMMIT on the command line: the later setting wins.
                extra = (
                    *(f"{k}={v}" for k, v in overrides.items()),
                    f"metadataServiceUri={metadata_uri(zookeeper, 'java')}",
                )
                processes[system] = start_java_bookie(
                    classpath, zookeeper, workdir, extra_conf=extra
                ).process
            else:
                processes[system] = start_pybkx(zookeeper, workdir, overrides)
            started.append(processes[system])
        yield classpath, Bookies(zookeeper, processes)
    finally:
        for process in reversed(started):
            process.stop()


# --- measuring -----------------------------------------------------------------------------------


@dataclass
class Usage:
    """CPU seconds so far: the machine's busy time, one bookie's, this process's children's."""

    wall: float
    busy: float
    bookie: float
    client: float

    @classmethod
    def now(cls, bookie_pid: int) -> Usage:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cls(
            time.monotonic(),
            machine.machine_busy_seconds(),
            machine.cpu_seconds(bookie_pid),
            children.ru_utime + children.ru_stime,
        )

    def minus(self, before: Usage) -> Usage:
        """What was used since ``before``; ``other`` is the busy time of everything else."""
        return Usage(
            self.wall - before.wall,
            self.busy - before.busy,
            self.bookie - before.bookie,
            self.client - before.client,
        )

    @property
    def other(self) -> float:
        return max(0.0, self.busy - self.bookie - self.client)


def client_argv(classpath: str, zookeeper: str, system: str, case: Case, quick: bool) -> list[str]:
    divisor = QUICK_DIVISOR if quick else 1
    argv = harness.java_argv(
        classpath,
        CLIENT_MAIN,
        zookeeper,
        ROOTS[system],
        str(case.threads),
        str(case.count // divisor),
        str(case.size),
        "1",
        "1",
        "1",
        f"window={case.window}",
        f"warmup={max(1, case.warmup // divisor)}",
        heap=CLIENT_HEAP,
    )
    return [argv[0], f"-Xms{CLIENT_HEAP}", *argv[1:]]


def run_client(
    classpath: str, cluster: Bookies, system: str, case: Case, rnd: int, args: argparse.Namespace
) -> Run:
    """One client JVM against one system; the bookie's CPU over the run is charged to it."""
    argv = client_argv(classpath, cluster.zookeeper, system, case, args.quick)
    log = Path(args.workdir) / f"client-{rnd + 1}-{system}-{case.key}.log"
    bookie = cluster.processes[system]
    before = Usage.now(bookie.pid)
    with log.open("wb") as stderr:
        done = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=stderr, timeout=CLIENT_TIMEOUT_S, check=False
        )
    during = Usage.now(bookie.pid).minus(before)
    machine.wait_quiet([bookie.pid])  # the bookie's flushes after the run are part of its cost
    cpu = machine.cpu_seconds(bookie.pid) - before.bookie
    lines = [line for line in done.stdout.decode().splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if done.returncode != 0 or "entries_per_s" not in result:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise harness.HarnessError(
            f"{LABEL[system]} {case.key}: client exited {done.returncode} with {result}; "
            f"log {log}:\n{tail}"
        )
    figures = {f: result[f] for f in Run.CLIENT_FIGURES}
    return Run(
        round=rnd,
        system=system,
        case=case.key,
        bookie_cpu_s=cpu,
        adds=result["entries"] + result["warmup_per_thread"] * result["threads"],
        other_cores=during.other / during.wall,
        **figures,
    )


def order(rnd: int) -> tuple[str, ...]:
    return SYSTEMS if rnd % 2 == 0 else tuple(reversed(SYSTEMS))


def run_rounds(
    classpath: str, cluster: Bookies, args: argparse.Namespace, record: dict[str, Any]
) -> list[Run]:
    for system in SYSTEMS:
        print(f"warming up the {LABEL[system]} bookie", file=sys.stderr)
        run_client(classpath, cluster, system, BOOKIE_WARMUP, -1, args)
    runs: list[Run] = []
    for rnd in range(args.rounds):
        disk = machine.disk_write_fdatasync(Path(args.workdir), SYNC_CHUNK, 1.0)
        record["syncs_per_s"].append(disk.syncs_per_s)
        for case in CASES:
            for system in order(rnd):
                run = run_client(classpath, cluster, system, case, rnd, args)
                runs.append(run)
                print(
                    f"round {rnd + 1}/{args.rounds} {LABEL[system]:>5} {case.title}: "
                    f"{run.entries_per_s:,.0f} entries/s, p50 {run.p50_ms:.2f} ms, "
                    f"p99 {run.p99_ms:.2f} ms",
                    file=sys.stderr,
                )
    return runs


# --- report --------------------------------------------------------------------------------------


def median_of(runs: list[Run], system: str, case: str, field: str) -> float:
    return float(
        statistics.median(getattr(r, field) for r in runs if r.system == system and r.case == case)
    )


def ratios(runs: list[Run], case: str) -> list[tuple[float, bool]]:
    """The per-round pybkx/Java ratios of entries/s, each with whether other work on the
    machine took more than ``BUSY_OTHER`` cores during either run of the pair."""
    by_round: dict[int, dict[str, Run]] = {}
    for r in runs:
        if r.case == case:
            by_round.setdefault(r.round, {})[r.system] = r
    return [
        (
            pair["pybkx"].entries_per_s / pair["java"].entries_per_s,
            max(pair["pybkx"].other_cores, pair["java"].other_cores) > BUSY_OTHER,
        )
        for _, pair in sorted(by_round.items())
        if len(pair) == 2
    ]


def table(runs: list[Run]) -> list[str]:
    lines = [
        "| adds (E=Qw=Qa=1, V2, CRC32C) | pybkx entries/s | Java entries/s | pybkx/Java "
        "| per round | pybkx p50 / p99 ms | Java p50 / p99 ms |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for case in CASES:
        rates = {s: median_of(runs, s, case.key, "entries_per_s") for s in SYSTEMS}
        lat = {
            s: f"{median_of(runs, s, case.key, 'p50_ms'):.2f} / "
            f"{median_of(runs, s, case.key, 'p99_ms'):.2f}"
            for s in SYSTEMS
        }
        per_round = ratios(runs, case.key)
        shown = ", ".join(f"{r:.2f}{'*' if busy else ''}" for r, busy in per_round)
        lines.append(
            f"| {case.title} | {rates['pybkx']:,.0f} | {rates['java']:,.0f} "
            f"| {statistics.median(r for r, _ in per_round):.2f} | {shown} "
            f"| {lat['pybkx']} | {lat['java']} |"
        )
    if any(busy for case in CASES for _, busy in ratios(runs, case.key)):
        lines += [
            "",
            f"\\* other work on the machine took more than {BUSY_OTHER} of a core during that "
            "round's pybkx or Java run.",
        ]
    return lines


def cost_table(runs: list[Run]) -> list[str]:
    """Client cores while measuring and bookie CPU per million adds, medians over rounds."""
    lines = [
        "| CPU (medians over rounds) | client JVM cores while measuring, pybkx / Java "
        "| bookie CPU s per million adds, pybkx / Java |",
        "|---|---:|---:|",
    ]
    for case in CASES:
        mine = [r for r in runs if r.case == case.key]
        cores = {
            s: statistics.median(r.client_cpu_s / r.seconds for r in mine if r.system == s)
            for s in SYSTEMS
        }
        cpu = {
            s: statistics.median(r.bookie_cpu_s / r.adds * 1e6 for r in mine if r.system == s)
            for s in SYSTEMS
        }
        lines.append(
            f"| {case.title} | {cores['pybkx']:.2f} / {cores['java']:.2f} "
            f"| {cpu['pybkx']:.1f} / {cpu['java']:.1f} |"
        )
    other = [r.other_cores for r in runs]
    return [
        *lines,
        "",
        "Bookie CPU runs from the client JVM's start until the bookie is idle again, warm-up "
        "adds included; for the addEntry cases it is mostly the bookie's cost of being up that "
        "long. Other work on the machine while a client ran (busy cores that were neither the "
        f"bookie nor the client): median {statistics.median(other):.2f}, max {max(other):.2f} "
        f"of {os.cpu_count()}.",
    ]


def group_note(settings: dict[str, str]) -> str:
    """How each bookie ends a journal group at these settings: what one add at a time waits."""
    if settings.get("journalFlushWhenQueueEmpty") == "true":
        java = "ends a group as soon as its queue is empty (journalFlushWhenQueueEmpty=true)"
    else:
        java = (
            "holds a group up to journalMaxGroupWaitMSec "
            f"({settings.get('journalMaxGroupWaitMSec')} ms, journalFlushWhenQueueEmpty=false) "
            "before its fdatasync"
        )
    if settings.get("journalAdaptiveGroupWrites") == "true":
        pybkx = "adaptive group commit ends a group at once when no fdatasync is in flight"
    else:
        pybkx = "journal groups as BookKeeper's does (journalAdaptiveGroupWrites=false)"
    return (
        f"With one add in flight per thread, an add waits for its journal group: the Java bookie "
        f"{java}; pybkx's {pybkx}."
    )


def report(runs: list[Run], record: dict[str, Any], quick: bool) -> str:
    m = record["machine"]
    syncs = ", ".join(f"{s:,.0f}" for s in record["syncs_per_s"])
    divisor = QUICK_DIVISOR if quick else 1
    settings = record["settings"]
    overrides = record["overrides"]
    overridden = ""
    if overrides:
        overridden = ", then " + ", ".join(f"`{k}={v}`" for k, v in overrides.items())
    counts = ", ".join(f"{c.key} {c.count // divisor:,}" for c in CASES)
    lines = [
        f"# Adds through the Java ledger client: pybkx vs Apache BookKeeper 4.17.3"
        f"{' (quick)' if quick else ''}",
        "",
        f"{record['date']}; {m['cpu']}, {m['memory']}, {m['kernel']}; {m['disk']}; {m['java']}.",
        f"{len(record['syncs_per_s'])} round(s), alternating which system goes first; "
        f"fdatasyncs/s of 4 KiB at each round's start: {syncs}.",
        "",
        *table(runs),
        "",
        "Client: BookKeeper 4.17.3's `LedgerHandle` (`useV2WireProtocol=true`, `throttle=0`: "
        "the default caps a ledger handle at 5,000 adds/s), a new JVM per run "
        f"(-Xms/-Xmx {CLIENT_HEAP}), one ledger per thread. Adds per run (all threads): {counts}; "
        "before the clock starts each run warms up with asyncAddEntry (1,000 in flight) on its "
        f"ledgers, and each bookie took {BOOKIE_WARMUP.count // divisor:,} adds of 1 KiB before "
        f"round 1. Both bookies: `journalSyncData=true` and `bench.compare_plan.GROUP_COMMIT`"
        f"{overridden}; each alone in its own ledgers root. Entries/s and latencies are medians "
        "over rounds; pybkx/Java is the median of the per-round ratios.",
        "",
        group_note(settings),
        "",
        *cost_table(runs),
        "",
    ]
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------------


def measure(
    args: argparse.Namespace, overrides: dict[str, str]
) -> tuple[list[Run], dict[str, Any]]:
    """Every round of the run, and its record (machine, settings, disk, the runs)."""
    with cli.work_dir(args.dir, "pybkx-java-client-") as root:
        args.workdir = str(root)
        record: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine.describe(root),
            "settings": {**GROUP_COMMIT, **overrides},
            "overrides": overrides,
            "cases": [asdict(c) for c in CASES],
            "quick": args.quick,
            "syncs_per_s": [],
        }
        started = time.monotonic()
        with bookies(root, overrides) as (classpath, cluster):
            runs = run_rounds(classpath, cluster, args, record)
        record["seconds"] = time.monotonic() - started
    record["runs"] = [asdict(r) for r in runs]
    return runs, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.java_client_adds",
        description="Adds through Apache BookKeeper's Java ledger client: a pybkx bookie beside "
        "the Java bookie, rounds alternating which goes first.",
    )
    parser.add_argument("--quick", action="store_true", help="1/4 of the adds, 1 round")
    parser.add_argument("--rounds", type=int, help="rounds (default 3, quick 1)")
    parser.add_argument("--dir", help="working directory (default: a temporary one, removed)")
    cli.add_settings_option(parser, "a bookie setting for both bookies, over GROUP_COMMIT")
    parser.add_argument(
        "--output",
        help="name of the results under bench/results/ (default java_client_adds[-quick])",
    )
    parser.add_argument(
        "--render", metavar="JSON", help="rewrite the Markdown report of saved results only"
    )
    args = parser.parse_args(argv)
    if args.render:
        record = json.loads(Path(args.render).read_text())
        runs = [Run(**r) for r in record["runs"]]
        text = report(runs, record, record["quick"])
        Path(args.render).with_suffix(".md").write_text(text)
        print(text)
        return 0
    args.rounds = args.rounds or (1 if args.quick else 3)
    name = args.output or ("java_client_adds-quick" if args.quick else "java_client_adds")
    runs, record = measure(args, cli.settings_of(parser, args.set))
    text = report(runs, record, args.quick)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(text)
    (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(text)
    print(f"written: bench/results/{name}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
