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
be formed.

The bookies' own background work runs meanwhile (``RunConfig.lifecycle``, ``autorecovery``):
garbage collection and compaction every few seconds of ledgers a deleter removes, and
AutoRecovery re-replicating the ledgers of a bookie whose registration lapses.

Run it from a test (tests/faults/test_nemesis.py) or by hand:
``python tests/faults/nemesis.py --duration 600 --seed 7``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checker import CheckResult, check
from netns import Network
from support.ports import free_port, zookeeper_answers
from support.wait import WaitTimeout, wait_until
from support.zookeeper import ZOOKEEPER_JARS

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.meta import open_metadata_store

logger = logging.getLogger("nemesis")

PYBKX = Path(sys.executable).with_name("pybkx")
PASSWORD = b"nemesis"
#: Ensemble, write and ack quorums the writers pick from.
QUORUMS = [(3, 3, 2), (3, 2, 2), (2, 2, 2), (3, 3, 3)]
APPEND_WAIT_S = 30.0
"""How long a writer waits for one append's outcome before recording it unknown."""
PROCESS_FAULTS = ("kill", "pause", "disk_slow", "disk_error")
ZK_FAULTS = ("zk_pause", "zk_kill")
NET_FAULTS = ("partition", "zk_partition", "loss")


@dataclass
class RunConfig:
    duration_s: float = 120.0
    seed: int = 1
    bookies: int = 5
    writers: int = 3
    readers: int = 2
    max_faulty: int = 1
    hold_s: tuple[float, float] = (0.5, 4.0)
    """How long a fault lasts."""
    gap_s: tuple[float, float] = (0.5, 2.5)
    """Time between two faults starting."""
    kinds: tuple[str, ...] = PROCESS_FAULTS + ZK_FAULTS
    net: bool = False
    """Bookies in network namespaces, and the network faults (root only)."""
    lifecycle: bool = True
    """A deleter removes closed ledgers (after reading them whole) while the bookies collect
    garbage and compact every few seconds."""
    autorecovery: bool = True
    """AutoRecovery in every bookie: a bookie whose registration lapses gets its ledgers
    re-replicated while it is away (open ledgers fenced after a short grace)."""


@dataclass
class RunResult:
    faults: Counter[str]
    result: CheckResult
    ledgers: int
    history: Path
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"faults {dict(sorted(self.faults.items()))} (total {sum(self.faults.values())}); "
            f"ledgers {self.ledgers}; acknowledged {self.result.acknowledged}; "
            f"violations {self.result.by_kind() or 0}"
        )


class Recorder:
    """The history: events appended under a lock, each also written to a JSON-lines file."""

    def __init__(self, path: Path) -> None:
        self.t0 = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._file = path.open("w")

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def record(self, **event: Any) -> None:
        event.setdefault("t", self.now())
        with self._lock:
            self.events.append(event)
            self._file.write(json.dumps(event) + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


class ZooKeeper:
    """A ZooKeeper that can be paused, killed and restarted on the same port and data."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1") -> None:
        self.host, self.port = host, free_port()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={workdir / 'data'}\nclientPort={self.port}\n"
            f"clientPortAddress={host}\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=ruok\nminSessionTimeout=1000\nforceSync=no\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        java = shutil.which("java")
        if java is None or not all(p.exists() for p in ZOOKEEPER_JARS):
            raise RuntimeError("ZooKeeper needs java and the Debian package zookeeper (make deps)")
        argv = [
            java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", os.pathsep.join(str(p) for p in ZOOKEEPER_JARS),
            "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.workdir / "zoo.cfg"),
        ]  # fmt: skip
        with (self.workdir / "zookeeper.log").open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        proc = self.proc

        def answering() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited while starting (log {self.workdir})")
            return zookeeper_answers(self.port, self.host)

        wait_until(
            answering, f"ZooKeeper answering (log {self.workdir})", timeout_s=60, interval_s=0.1
        )

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class BookieNode:
    """One ``pybkx bookie`` process with its directories, its disk-fault control file and,
    with a network, its namespace."""

    def __init__(
        self, index: int, root: Path, zk: str, net: Network | None, extra: str = ""
    ) -> None:
        self.index = index
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.net = net
        self.host = net.bookie_address(index) if net else "127.0.0.1"
        self.port = free_port() if net is None else 3181
        self.control = root / "disk-faults.json"
        self.conf = root / "bk_server.conf"
        self.conf.write_text(
            f"bookiePort={self.port}\nlisteningInterface={self.host}\n"
            f"advertisedAddress={self.host}\nallowLoopback=true\n"
            f"journalDirectories={root / 'journal'}\nledgerDirectories={root / 'ledgers'}\n"
            "journalPreAllocSizeMB=1\nflushInterval=1000\n"
            f"metadataServiceUri=zk+hierarchical://{zk}/ledgers\nzkTimeout=4000\n"
            "bookieShutdownTimeoutMs=5000\n" + (extra or "logSizeLimit=16777216\n")
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        argv = [str(PYBKX), "bookie", "--conf", str(self.conf)]
        if self.net is not None:
            argv = self.net.exec_argv(self.index, argv)
        env = dict(os.environ, PYBKX_TEST_DISK_FAULTS=str(self.control))
        with (self.root / "bookie.log").open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.paused = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send(self, sig: signal.Signals) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)
            self.paused = sig == signal.SIGSTOP

    def kill(self) -> None:
        self.send(signal.SIGCONT)
        self.send(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.send(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def disk_faults(self, specs: list[dict[str, Any]]) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps(specs))
        tmp.replace(self.control)


class Cluster:
    def __init__(self, workdir: Path, config: RunConfig) -> None:
        self.workdir = workdir
        self.net = Network.create(config.bookies) if config.net else None
        self.zk = ZooKeeper(workdir / "zk", self.net.zk_host if self.net else "127.0.0.1")
        self.uri = f"zk+hierarchical://{self.zk.address}/ledgers"
        extra = ""
        if config.lifecycle:
            # Small logs that seal often, so compaction has sealed sparse logs to rewrite.
            extra += (
                "logSizeLimit=262144\ngcWaitTime=2000\nminorCompactionInterval=4\n"
                "majorCompactionInterval=11\nmajorCompactionThreshold=0.8\n"
                "gcOverreplicatedLedgerWaitTime=5000\n"
            )
        if config.autorecovery:
            extra += (
                "autoRecoveryDaemonEnabled=true\nlostBookieRecoveryDelay=0\n"
                "openLedgerRereplicationGracePeriod=3000\nrwRereplicateBackoffMs=500\n"
            )
        self.bookies = [
            BookieNode(i, workdir / f"bookie{i}", self.zk.address, self.net, extra)
            for i in range(config.bookies)
        ]

    def start(self) -> None:
        self.zk.start()
        with open_metadata_store(self.uri) as store:
            store.init_new_cluster()
        for b in self.bookies:
            b.start()
        self.wait_registered(len(self.bookies), 60)

    def wait_registered(self, count: int, timeout_s: float) -> None:
        def registered() -> bool:
            with open_metadata_store(self.uri, zkTimeout=4000) as store:
                return len(store.writable_bookies()) >= count

        wait_until(
            registered,
            f"{count} bookies registered",
            timeout_s=timeout_s,
            interval_s=0.2,
            ignoring=(errors.BKException,),
        )

    def heal_everything(self) -> None:
        """Every bookie without disk faults, running and resumed, and registered again."""
        for b in self.bookies:
            b.disk_faults([])
            if not b.alive():
                b.start()
            b.send(signal.SIGCONT)
        self.wait_registered(len(self.bookies), 120)

    def close(self) -> None:
        for b in self.bookies:
            with contextlib.suppress(Exception):
                b.stop()
        self.zk.stop()
        if self.net is not None:
            self.net.destroy()


class Nemesis:
    """Starts a random fault every ``gap_s``, heals it after ``hold_s``; counts by kind."""

    def __init__(self, cluster: Cluster, config: RunConfig, rng: random.Random, rec: Recorder):
        self.cluster, self.config, self.rng, self.rec = cluster, config, rng, rec
        self.counts: Counter[str] = Counter()
        self.heals: list[tuple[float, str, Callable[[], None]]] = []
        self.faulty: set[int] = set()
        self.zk_faulty = False
        self.restarts = 0
        self.stop = threading.Event()

    def run(self) -> None:
        next_fault = time.monotonic() + self.rng.uniform(*self.config.gap_s)
        while not self.stop.is_set():
            now = time.monotonic()
            for item in [h for h in self.heals if h[0] <= now]:
                self.heals.remove(item)
                self._heal(item)
            self._restart_exited()
            if now >= next_fault:
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
        kinds = list(self.config.kinds)
        self.rng.shuffle(kinds)
        for kind in kinds:
            action = self._plan(kind)
            if action is None:
                continue
            what, do, heal = action
            try:
                do()
            except Exception as exc:
                logger.warning("fault %s failed: %s", what, exc)
                with contextlib.suppress(Exception):
                    heal()  # undoes what was done and frees the bookie's slot
                continue
            self.counts[kind] += 1
            self.rec.record(type="nemesis", ledger=-1, op="fault", what=what)
            self.heals.append(
                (time.monotonic() + self.rng.uniform(*self.config.hold_s), what, heal)
            )
            return

    def _plan(self, kind: str) -> tuple[str, Callable[[], None], Callable[[], None]] | None:
        """A fault of ``kind`` to start now: what it is, what does it, what heals it (and frees
        its slot); None when none can start (ZooKeeper or every slot already faulty, no
        network for a network fault)."""
        if kind in ZK_FAULTS:
            return self._plan_zk(kind)
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


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class Workload:
    """Writers (new ledgers with mixed quorums, pipelined appends), tailing readers, a
    recovery opener that fences ledgers still being written and (with ``lifecycle``) a deleter
    that reads closed ledgers whole, then deletes them."""

    def __init__(self, uri: str, config: RunConfig, rng: random.Random, rec: Recorder) -> None:
        self.uri, self.config, self.rec = uri, config, rec
        self.seed = rng.randrange(2**32)
        self.stop = threading.Event()
        self.ledgers: set[int] = set()
        self.writing: set[int] = set()
        self.closed: set[int] = set()
        self.deleted: set[int] = set()
        self.lock = threading.Lock()
        self.errors: Counter[str] = Counter()

    def client(self) -> BookKeeper:
        return BookKeeper(
            self.uri,
            zkTimeout=4000,
            addEntryTimeoutSec=2,
            readEntryTimeoutSec=2,
            bookieReplacementTimeoutMs=4000,
        )

    def threads(self) -> list[threading.Thread]:
        out = [
            threading.Thread(target=self._guard, args=(self._writer, f"w{i}"), daemon=True)
            for i in range(self.config.writers)
        ]
        out += [
            threading.Thread(target=self._guard, args=(self._reader, f"r{i}"), daemon=True)
            for i in range(self.config.readers)
        ]
        out.append(threading.Thread(target=self._guard, args=(self._fencer, "f"), daemon=True))
        if self.config.lifecycle:
            out.append(threading.Thread(target=self._guard, args=(self._deleter, "d"), daemon=True))
        return out

    def _guard(self, body: Callable[[str, random.Random], None], name: str) -> None:
        rng = random.Random(f"{self.seed}-{name}")
        while not self.stop.is_set():
            try:
                body(name, rng)
            except Exception as exc:  # recorded as outcomes where they matter; go on
                self.errors[type(exc).__name__] += 1
                logger.debug("%s: %s", name, exc)
                self.stop.wait(0.2)

    def _writer(self, name: str, rng: random.Random) -> None:
        with self.client() as bk:
            while not self.stop.is_set():
                e, qw, qa = rng.choice(QUORUMS)
                try:
                    lh = bk.create_ledger(e, qw, qa, password=PASSWORD)
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                    self.stop.wait(0.3)
                    continue
                lid = lh.ledger_id
                with self.lock:
                    self.ledgers.add(lid)
                    self.writing.add(lid)
                self.rec.record(type="create", ledger=lid, writer=name, quorums=[e, qw, qa])
                try:
                    # Some ledgers are written slowly, so that recovery openers fence them
                    # while their writer still appends.
                    pace = rng.choice([0.0, 0.0, 0.002, 0.01])
                    healthy = self._append_many(lh, name, rng.randrange(20, 600), rng, pace)
                    if healthy:
                        lh.close()
                        md = lh.metadata
                        self.rec.record(
                            type="close", ledger=lid, last_entry=md.last_entry_id, length=md.length
                        )
                        with self.lock:
                            self.closed.add(lid)
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                finally:
                    with self.lock:
                        self.writing.discard(lid)

    def _append_many(self, lh: Any, name: str, count: int, rng: random.Random, pace: float) -> bool:
        """Up to 16 appends in flight; False once one failed or got no answer (the ledger is
        then left for recovery)."""
        lid = lh.ledger_id
        window: list[tuple[Any, float, bytes]] = []
        healthy = True

        def settle(block: bool) -> None:
            nonlocal healthy
            while window and (block or window[0][0].done()):
                future, sent, data = window.pop(0)
                event: dict[str, Any] = dict(
                    type="append", ledger=lid, sent=sent, hash=digest(data), size=len(data)
                )
                try:
                    entry = future.result(APPEND_WAIT_S)
                    event.update(status="ok", entry=entry)
                except FutureTimeout:
                    event.update(status="unknown")
                    healthy = False
                except errors.BKException as exc:
                    event.update(status="fail", error=type(exc).__name__)
                    healthy = False
                self.rec.record(**event)

        for i in range(count):
            if self.stop.is_set() or not healthy:
                break
            data = f"{name}/{lid}/{i}/{rng.getrandbits(64):x}".encode() * rng.randrange(1, 20)
            sent = self.rec.now()
            try:
                future = lh.append_async(data)
            except errors.BKException as exc:
                self.rec.record(
                    type="append", ledger=lid, sent=sent, status="fail", hash=digest(data),
                    size=len(data), error=type(exc).__name__,
                )  # fmt: skip
                healthy = False
                break
            window.append((future, sent, data))
            settle(block=len(window) >= 16)
            if pace:
                self.stop.wait(pace)
        settle(block=True)
        return healthy and not self.stop.is_set()

    def _reader(self, name: str, rng: random.Random) -> None:
        handles: dict[int, Any] = {}
        with self.client() as bk:
            while not self.stop.is_set():
                self.stop.wait(rng.uniform(0.1, 0.5))
                with self.lock:
                    choices = sorted(self.ledgers)
                if not choices:
                    continue
                lid = rng.choice(choices[-10:])
                rh = handles.get(lid)
                if rh is None:
                    try:
                        rh = bk.open_ledger(lid, PASSWORD, recovery=False)
                    except errors.BKException as exc:
                        self.errors[type(exc).__name__] += 1
                        continue
                    handles[lid] = rh
                try:
                    lac = rh.last_add_confirmed if rh.is_closed else rh.read_last_add_confirmed()
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                    continue
                self.rec.record(type="lac", ledger=lid, observer=f"{name}:{id(rh)}", lac=lac)
                if lac < 0:
                    continue
                first = max(0, lac - rng.randrange(1, 50))
                try:
                    entries = rh.read(first, lac)
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                    continue
                self.rec.record(
                    type="read",
                    ledger=lid,
                    reader=name,
                    entries=[[x.entry_id, digest(x.payload), len(x.payload)] for x in entries],
                )

    def _fencer(self, name: str, rng: random.Random) -> None:
        with self.client() as bk:
            while not self.stop.is_set():
                self.stop.wait(rng.uniform(0.5, 2.0))
                with self.lock:
                    writing = sorted(self.writing)
                if not writing:
                    continue
                lid = rng.choice(writing)
                try:
                    rh = bk.open_ledger(lid, PASSWORD, recovery=True)
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                    continue
                self.rec.record(type="fence", ledger=lid, by=name)
                md = rh.metadata
                self.rec.record(
                    type="close", ledger=lid, last_entry=md.last_entry_id, length=md.length
                )
                with self.lock:
                    self.closed.add(lid)

    def _deleter(self, name: str, rng: random.Random) -> None:
        """Every second or two: a closed ledger older than the ones readers tail is read whole
        (a final read: it must hold every acknowledged entry) and then deleted, so the bookies'
        garbage collection and compaction have work while faults go on."""
        with self.client() as bk:
            while not self.stop.is_set():
                self.stop.wait(rng.uniform(0.5, 2.0))
                with self.lock:
                    newest = sorted(self.ledgers)[-20:]
                    choices = sorted(self.closed - self.writing - set(newest))
                if not choices:
                    continue
                lid = rng.choice(choices)
                rh = bk.open_ledger(lid, PASSWORD, recovery=False)
                entries = read_whole(rh, rh.metadata.last_entry_id)
                self.rec.record(type="read", ledger=lid, reader=name, final=True, entries=entries)
                with self.lock:
                    # Whatever the delete's outcome, the ledger is no longer verified at the
                    # end: its final read is the one above.
                    self.closed.discard(lid)
                    self.ledgers.discard(lid)
                    self.deleted.add(lid)
                bk.delete_ledger(lid)
                self.rec.record(type="delete", ledger=lid, by=name)


def read_whole(rh: Any, last_entry_id: int) -> list[list[Any]]:
    """Entries 0..``last_entry_id`` as a read event lists them: [id, hash, size]."""
    entries: list[list[Any]] = []
    for start in range(0, last_entry_id + 1, 500):
        stop = min(last_entry_id, start + 499)
        entries += [[x.entry_id, digest(x.payload), len(x.payload)] for x in rh.read(start, stop)]
    return entries


def verify(uri: str, ledgers: list[int], rec: Recorder, timeout_s: float = 300.0) -> list[str]:
    """Recover every ledger (closing the open ones) and read it whole: the final reads. All of
    them within ``timeout_s``; returns what could not be verified."""
    problems: list[str] = []
    deadline = time.monotonic() + timeout_s
    with BookKeeper(uri, zkTimeout=10000, readEntryTimeoutSec=5) as bk:
        for lid in ledgers:
            problem = verify_ledger(bk, lid, rec, max(0.0, deadline - time.monotonic()))
            if problem is not None:
                problems.append(problem)
    return problems


def verify_ledger(bk: BookKeeper, lid: int, rec: Recorder, timeout_s: float) -> str | None:
    """Recover ledger ``lid`` and record its close and final read, retried while the cluster
    heals (once a second, for ``timeout_s``); returns why it could not be verified, if so."""

    verified = "verified"

    def recovered_and_read() -> str:
        """``verified``, or why the ledger never will be; other BKExceptions are retried."""
        try:
            rh = bk.open_ledger(lid, PASSWORD, recovery=True)
            md = rh.metadata
            rec.record(type="close", ledger=lid, last_entry=md.last_entry_id, length=md.length)
            entries = read_whole(rh, md.last_entry_id)
            rec.record(type="read", ledger=lid, reader="verify", final=True, entries=entries)
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            # Recorded once its creation returned and never deleted: it must be there.
            return "its metadata is gone"
        return verified

    try:
        outcome = wait_until(
            recovered_and_read,
            f"ledger {lid} recovered and read",
            timeout_s=timeout_s,
            interval_s=1.0,
            ignoring=(errors.BKException,),
        )
    except WaitTimeout as timeout:
        return f"ledger {lid} not verified: {type(timeout.last).__name__}: {timeout.last}"
    return None if outcome == verified else f"ledger {lid} not verified: {outcome}"


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
        nemesis = Nemesis(cluster, config, rng, rec)
        notes += _run_for_the_duration(config, workload, nemesis)
        cluster.heal_everything()
        notes += verify(cluster.uri, sorted(workload.ledgers), rec)
        notes += _what_happened(config, workload, nemesis, workdir)
        ledgers = len(workload.ledgers)
    finally:
        rec.close()
        cluster.close()
    return RunResult(nemesis.counts, check(rec.events), ledgers, history, notes)


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
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    if args.net and (reason := Network.unavailable()) is not None:
        print(f"note: no network faults: {reason}")
        args.net = False
    kinds = PROCESS_FAULTS + ZK_FAULTS + (NET_FAULTS if args.net else ())
    config = RunConfig(
        duration_s=args.duration, seed=args.seed, bookies=args.bookies, kinds=kinds, net=args.net
    )
    workdir = args.workdir or Path(f"/tmp/pybkx-nemesis-{args.seed}")
    with _quiet():
        result = run(config, workdir)
    print(f"seed {args.seed}: {result.summary()}")
    for note in result.notes:
        print(f"note: {note}")
    if not result.result.ok:
        print(result.result.report())
    print(f"history: {result.history}")
    return 0 if result.result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
