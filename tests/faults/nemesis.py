"""A nemesis and a workload, Jepsen style: real bookie processes and a real ZooKeeper, faults
composed at random on a schedule while writers, tailing readers and recovery openers work, every
operation recorded in a history that ``checker.check`` judges afterwards.

Faults (each healed after a random hold): ``kill`` (SIGKILL, restarted later), ``pause``
(SIGSTOP/SIGCONT), ``zk_pause`` (SIGSTOP ZooKeeper), ``zk_kill`` (SIGKILL ZooKeeper, restarted on
its data), ``disk_slow`` and ``disk_error`` (the bookie's journal and ledger files made slow or
failing through ``PYBKX_TEST_DISK_FAULTS``, the test-only hook of ``pybkx bookie``), and, as root
with network namespaces (``net=True``), ``partition`` (a bookie's link cut: clients and
ZooKeeper lose it) and ``zk_partition`` / ``loss`` (nftables rules: the bookie loses ZooKeeper
only, or a share of its packets; ``make faults-deps`` installs nftables). At most
``max_faulty`` bookies are faulty at once, so that the ensembles the workload asks for can still
be formed. As root, ``disk_full`` (``diskfull.py``) fills every bookie's own small disk to 100%
with a foreign file, deletes ledgers, and requires each bookie to be writable again by itself
within a bound, no restart; it runs alone, every ``disk_full_every_s``.

The bookies' own background work runs meanwhile (``RunConfig.lifecycle``, ``autorecovery``):
garbage collection and compaction every few seconds of ledgers a deleter removes, and
AutoRecovery re-replicating the ledgers of a bookie whose registration lapses.

This file owns the faults (``Nemesis``: which fault, on which bookie, when it heals) and the run
(``run``: the cluster started, workload and nemesis for the duration, everything healed, every
ledger verified, the history checked; ``main``, the command line). The processes are
``cluster.py``'s; the workload, its history and the final verification ``workload.py``'s; what a
run is asked to do ``plan.py``'s. None of them imports this file, and it never reads or writes a
ledger itself.

Run it from a test (tests/faults/test_nemesis.py) or by hand:
``python tests/faults/nemesis.py --duration 600 --seed 7``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checker import CheckResult, check
from cluster import BookieNode, Cluster
from diskfull import DiskFull, DiskFullRound, summary
from netns import Network
from plan import NET_FAULTS, PROCESS_FAULTS, SPACE_FAULTS, ZK_FAULTS, RunConfig
from support.disks import tmpfs_unavailable
from workload import APPEND_WAIT_S, Recorder, Workload, verify

logger = logging.getLogger("nemesis")


@dataclass
class RunResult:
    faults: Counter[str]
    result: CheckResult
    ledgers: int
    history: Path
    notes: list[str] = field(default_factory=list)
    disk_full: list[DiskFullRound] = field(default_factory=list)
    """What each ``disk_full`` round found (empty without that kind)."""

    @property
    def ok(self) -> bool:
        """The history checked clean and every ``disk_full`` round held its bounds."""
        return self.result.ok and not any(r.problems for r in self.disk_full)

    def summary(self) -> str:
        return (
            f"faults {dict(sorted(self.faults.items()))} (total {sum(self.faults.values())}); "
            f"ledgers {self.ledgers}; acknowledged {self.result.acknowledged}; "
            f"violations {self.result.by_kind() or 0}"
        )


class Nemesis:
    """Starts a random fault every ``gap_s``, heals it after ``hold_s``; counts by kind. With
    ``disk_full`` (its ``DiskFull``), a round of it every ``disk_full_every_s``, alone."""

    def __init__(
        self,
        cluster: Cluster,
        config: RunConfig,
        rng: random.Random,
        rec: Recorder,
        disk_full: DiskFull | None = None,
    ):
        self.cluster, self.config, self.rng, self.rec = cluster, config, rng, rec
        self.disk_full = disk_full
        self.counts: Counter[str] = Counter()
        self.heals: list[tuple[float, str, Callable[[], None]]] = []
        self.faulty: set[int] = set()
        self.zk_faulty = False
        self.restarts = 0
        self.skipped: list[str] = []
        """Why each ``disk_full`` round that could not start within a period was skipped."""
        self.last_failure = ""
        self.stop = threading.Event()

    def run(self) -> None:
        next_fault = time.monotonic() + self.rng.uniform(*self.config.gap_s)
        every = self.config.disk_full_every_s
        due = time.monotonic() + every / 2 if self.disk_full else float("inf")
        next_disk_full = due
        while not self.stop.is_set():
            now = time.monotonic()
            for item in [h for h in self.heals if h[0] <= now]:
                self.heals.remove(item)
                self._heal(item)
            self._restart_exited()
            if now >= next_disk_full:
                # Due: no new fault starts until those holding a bookie or ZooKeeper heal.
                if not self.faulty and not self.zk_faulty:
                    if self._start("disk_full"):
                        due = next_disk_full = time.monotonic() + every
                    elif time.monotonic() - due > every:
                        # Tried for a whole period: the other faults get their turn again.
                        self.skipped.append(self.last_failure)
                        self.rec.record(
                            type="nemesis", ledger=-1, op="skip", what=self.last_failure
                        )
                        due = next_disk_full = time.monotonic() + every
                    else:
                        next_disk_full = time.monotonic() + 1.0
            elif now >= next_fault:
                self._inject()
                next_fault = now + self.rng.uniform(*self.config.gap_s)
            self.stop.wait(0.05)
        for item in list(self.heals):
            self._heal(item)
        self.heals.clear()

    def _restart_exited(self) -> None:
        """A bookie no fault holds that has exited by itself (a restart refused, say, while
        its previous session's registration had not expired yet) is started again."""
        for b in self.cluster.bookies:
            if b.index in self.faulty or b.proc is None or b.proc.poll() is None:
                continue
            self.restarts += 1
            self.rec.record(type="nemesis", ledger=-1, op="restart", what=f"bookie{b.index} exited")
            try:
                b.start()
            except OSError as exc:
                logger.warning("restarting bookie%d failed: %s", b.index, exc)

    def _heal(self, item: tuple[float, str, Callable[[], None]]) -> None:
        _, what, heal = item
        try:
            heal()
            self.rec.record(type="nemesis", ledger=-1, op="heal", what=what)
        except Exception as exc:  # a heal must never stop the run
            logger.warning("healing %s failed: %s", what, exc)

    def _inject(self) -> None:
        """A random fault of the run's kinds (``disk_full`` has its own schedule)."""
        kinds = [k for k in self.config.kinds if k not in SPACE_FAULTS]
        self.rng.shuffle(kinds)
        for kind in kinds:
            if self._start(kind):
                return

    def _start(self, kind: str) -> bool:
        """Starts a fault of ``kind`` and schedules its heal; False when none could start."""
        action = self._plan(kind)
        if action is None:
            return False
        what, do, heal = action
        try:
            do()
        except Exception as exc:
            logger.warning("fault %s failed: %s", what, exc)
            self.last_failure = f"{what}: {type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                heal()  # undoes what was done and frees the bookie's slot
            return False
        self.counts[kind] += 1
        self.rec.record(type="nemesis", ledger=-1, op="fault", what=what)
        self.heals.append((time.monotonic() + self.rng.uniform(*self.config.hold_s), what, heal))
        return True

    def _plan(self, kind: str) -> tuple[str, Callable[[], None], Callable[[], None]] | None:
        """A fault of ``kind`` to start now: what it is, what does it, what heals it (and frees
        its slot); None when none can start (ZooKeeper or every slot already faulty, no
        network for a network fault)."""
        if kind in ZK_FAULTS:
            return self._plan_zk(kind)
        if kind == "disk_full":
            return self._plan_disk_full()
        healthy = [b for b in self.cluster.bookies if b.index not in self.faulty]
        if len(self.faulty) >= self.config.max_faulty or not healthy:
            return None
        b = self.rng.choice(healthy)
        action = self._bookie_fault(kind, b)
        if action is None:
            return None
        self.faulty.add(b.index)
        what, do, undo = action
        return what, do, then(undo, lambda: self.faulty.discard(b.index))

    def _plan_disk_full(self) -> tuple[str, Callable[[], None], Callable[[], None]] | None:
        """Every bookie and ZooKeeper held for the whole round, so that no other fault
        composes with it: the bound it checks is the bookies' own."""
        if self.disk_full is None or self.faulty or self.zk_faulty:
            return None
        every = {b.index for b in self.cluster.bookies}
        self.faulty |= every
        self.zk_faulty = True

        def release() -> None:
            self.faulty -= every
            self.zk_faulty = False

        return "disk_full every bookie", self.disk_full.fill, then(self.disk_full.free, release)

    def _plan_zk(self, kind: str) -> tuple[str, Callable[[], None], Callable[[], None]] | None:
        if self.zk_faulty:
            return None
        self.zk_faulty = True
        zk = self.cluster.zk

        def zk_done() -> None:
            self.zk_faulty = False

        if kind == "zk_pause":
            return (
                "zk_pause",
                lambda: zk.signal(signal.SIGSTOP),
                then(lambda: zk.signal(signal.SIGCONT), zk_done),
            )
        return "zk_kill", zk.kill, then(zk.start, zk_done)

    def _bookie_fault(
        self, kind: str, b: BookieNode
    ) -> tuple[str, Callable[[], None], Callable[[], None]] | None:
        """What a fault of ``kind`` does to bookie ``b`` and what undoes it."""
        name = f"{kind} bookie{b.index}"
        if kind == "kill":
            return name, b.kill, b.start
        if kind == "pause":
            return name, lambda: b.send(signal.SIGSTOP), lambda: b.send(signal.SIGCONT)
        if kind in ("disk_slow", "disk_error"):
            ops = ["write", "sync"] if kind == "disk_slow" else ["sync", "write"]
            spec: dict[str, Any] = {"path": str(b.root), "ops": ops}
            if kind == "disk_slow":
                spec["delay_ms"] = self.rng.choice([20, 100, 400])
            else:
                spec["errno"] = 5  # EIO
                spec["times"] = self.rng.choice([1, 3])
            return name, lambda: b.disk_faults([spec]), lambda: b.disk_faults([])
        return self._network_fault(kind, b, name)

    def _network_fault(
        self, kind: str, b: BookieNode, name: str
    ) -> tuple[str, Callable[[], None], Callable[[], None]] | None:
        """A network fault on bookie ``b``'s namespace; None without namespaces."""
        net = self.cluster.net
        if net is None:
            return None
        if kind == "partition":
            return name, lambda: net.cut(b.index), lambda: net.mend(b.index)
        if kind == "zk_partition":
            zk = self.cluster.zk
            return name, lambda: net.block_zk(b.index, zk.port), lambda: net.unblock(b.index)
        if kind == "loss":
            share = self.rng.choice([5, 20, 50])
            return (
                f"{name} {share}%",
                lambda: net.lose(b.index, share),
                lambda: net.unblock(b.index),
            )
        return None


def then(*steps: Callable[[], object]) -> Callable[[], None]:
    """One action running ``steps`` in order."""

    def run() -> None:
        for step in steps:
            step()

    return run


#: What the bookies' background work logs, counted over a run's bookie logs.
BACKGROUND_LINES = {
    "ledgers collected": "gc: deleted ledger ",
    "over-replicated copies removed": "(over-replicated: no ensemble names us)",
    "entry logs compacted": "compaction: ",
    "ledgers re-replicated": "pybkx.recovery.auto: ledger ",
}


def background_work(workdir: Path) -> dict[str, int]:
    """How often each kind of background work happened in the bookies during a run."""
    counts = dict.fromkeys(BACKGROUND_LINES, 0)
    for log in workdir.glob("bookie*/bookie.log"):
        for line in log.read_text(errors="replace").splitlines():
            for what, marker in BACKGROUND_LINES.items():
                if marker in line and (
                    what != "ledgers re-replicated" or line.endswith(" replicated")
                ):
                    counts[what] += 1
    return counts


def run(config: RunConfig, workdir: Path) -> RunResult:
    """One randomized run: start the cluster, run workload and nemesis for ``duration_s``,
    heal everything, verify every ledger, check the history."""
    rng = random.Random(config.seed)
    workdir.mkdir(parents=True, exist_ok=True)
    history = workdir / "history.jsonl"
    rec = Recorder(history)
    config, notes = _without_faults_nftables_lacks(config)
    cluster = Cluster(workdir, config)
    try:
        cluster.start()
        workload = Workload(cluster.uri, config, rng, rec)
        disk_full = DiskFull(cluster, workload, config, rec) if cluster.disk_mib else None
        nemesis = Nemesis(cluster, config, rng, rec, disk_full)
        notes += _run_for_the_duration(config, workload, nemesis)
        cluster.heal_everything()
        notes += verify(cluster.uri, sorted(workload.ledgers), rec)
        notes += _what_happened(config, workload, nemesis, workdir)
        ledgers = len(workload.ledgers)
    finally:
        rec.close()
        cluster.close()
    rounds = disk_full.rounds if disk_full else []
    return RunResult(nemesis.counts, check(rec.events), ledgers, history, notes, rounds)


def _without_faults_nftables_lacks(config: RunConfig) -> tuple[RunConfig, list[str]]:
    """``config`` without the network faults that need nftables when it is missing, and a note
    saying so."""
    if not config.net or shutil.which("nft") is not None:
        return config, []
    dropped = [k for k in config.kinds if k in ("zk_partition", "loss")]
    if not dropped:
        return config, []
    note = f"without nftables (make faults-deps) no {', '.join(dropped)} faults"
    return replace(config, kinds=tuple(k for k in config.kinds if k not in dropped)), [note]


def _run_for_the_duration(config: RunConfig, workload: Workload, nemesis: Nemesis) -> list[str]:
    """Workload and nemesis for ``duration_s``, then both stopped; a note on workload threads
    that did not stop."""
    threads = workload.threads()
    for t in threads:
        t.start()
    nemesis_thread = threading.Thread(target=nemesis.run, daemon=True)
    nemesis_thread.start()
    time.sleep(config.duration_s)  # not a wait: the run lasts this long
    nemesis.stop.set()
    nemesis_thread.join(120)
    workload.stop.set()
    for t in threads:
        t.join(APPEND_WAIT_S + 60)
    stuck = [t.name for t in threads if t.is_alive()]
    return [f"workload threads still running after the stop: {stuck}"] if stuck else []


def _what_happened(
    config: RunConfig, workload: Workload, nemesis: Nemesis, workdir: Path
) -> list[str]:
    """Notes on the run beside the faults: restarts, deletes, background work, client errors."""
    notes = []
    if nemesis.restarts:
        notes.append(
            f"bookies that exited by themselves and were started again: {nemesis.restarts} "
            "(see bookie*/bookie.log)"
        )
    if workload.deleted:
        notes.append(f"ledgers deleted (read whole first): {len(workload.deleted)}")
    if config.lifecycle or config.autorecovery:
        notes.append(f"bookies' background work: {background_work(workdir)}")
    if workload.errors:
        notes.append(f"client errors seen (expected under faults): {dict(workload.errors)}")
    if nemesis.disk_full is not None and nemesis.disk_full.rounds:
        rounds = nemesis.disk_full.rounds
        notes.append(summary(rounds, config.writable_again_s))
        notes += [f"disk_full: {problem}" for r in rounds for problem in r.problems]
    if nemesis.skipped:
        notes.append(
            f"disk_full rounds that could not start for a whole period: {len(nemesis.skipped)} "
            f"(the last: {nemesis.skipped[-1]})"
        )
    return notes


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    logging.basicConfig(level=logging.WARNING)
    yield


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--bookies", type=int, default=5)
    parser.add_argument("--net", action="store_true", help="namespaces and network faults")
    parser.add_argument(
        "--disk-full",
        action="store_true",
        help="every bookie on a small tmpfs of its own, filled to 100%% now and then (root)",
    )
    parser.add_argument("--disk-mib", type=int, default=48, help="each bookie's tmpfs, MiB")
    parser.add_argument(
        "--disk-full-every", type=float, default=20.0, help="seconds between disk_full rounds"
    )
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    if args.net and (reason := Network.unavailable()) is not None:
        print(f"note: no network faults: {reason}")
        args.net = False
    workdir = args.workdir or Path(f"/tmp/pybkx-nemesis-{args.seed}")
    if args.disk_full and (reason := tmpfs_unavailable(workdir / "tmpfs-probe")) is not None:
        print(f"note: no disk_full faults: {reason}")
        args.disk_full = False
    kinds = PROCESS_FAULTS + ZK_FAULTS + (NET_FAULTS if args.net else ())
    kinds += SPACE_FAULTS if args.disk_full else ()
    config = RunConfig(
        duration_s=args.duration,
        seed=args.seed,
        bookies=args.bookies,
        kinds=kinds,
        net=args.net,
        disk_mib=args.disk_mib,
        disk_full_every_s=args.disk_full_every,
    )
    with _quiet():
        result = run(config, workdir)
    print(f"seed {args.seed}: {result.summary()}")
    for note in result.notes:
        print(f"note: {note}")
    if not result.result.ok:
        print(result.result.report())
    print(f"history: {result.history}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
