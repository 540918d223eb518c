"""The nemesis's cluster: a real ZooKeeper and real ``pybkx bookie`` processes, each bookie
with its directories, its configuration, its disk-fault control file, with ``net`` its network
namespace and with the ``disk_full`` fault a small tmpfs of its own for its journal and ledgers;
started, signalled, stopped, and healed back to all running and registered.

Owns the processes only: it never decides when a fault happens or which (``nemesis.Nemesis``
does, through the handles here) and never reads or writes a ledger.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from netns import Network
from plan import RunConfig
from support.disks import FILLER, mount_tmpfs, unmount
from support.ports import free_port, zookeeper_answers
from support.wait import wait_until
from support.zookeeper import ZOOKEEPER_JARS

from pybkx import errors
from pybkx.meta import open_metadata_store

PYBKX = Path(sys.executable).with_name("pybkx")
SERVING = b"pybkx.bookie.process: bookie serving "
"""What a bookie logs once it serves and is registered."""

DISK_FULL_KEYS = {
    # The disk checker looks twice a second (BookKeeper's default is 10 s), and deleted
    # ledgers are collected every second, so a freed disk is seen within the fault's bound.
    "diskCheckInterval": "500",
    "gcWaitTime": "1000",
    # Journal files of 1 MiB and none kept behind the checkpoint: the journal lets go of what
    # the deletes free instead of holding it in one file that grows for the whole run, and the
    # fill comes after a checkpoint has let the ballast's journal files go (so no checkpoint
    # gives back room during the fault: only the deletes can).
    "journalMaxSizeMB": "1",
    "journalMaxBackups": "0",
}
"""Keys of the bookies of a run with ``disk_full`` (beside BookKeeper's defaults for
``diskUsageThreshold`` 0.95 and ``diskUsageLwmThreshold`` 0.90, and the derived reserve)."""


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
        self,
        index: int,
        root: Path,
        zk: str,
        net: Network | None,
        extra: str = "",
        disk: Path | None = None,
    ) -> None:
        self.index = index
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.disk = disk
        """Where the bookie's own small file system is mounted (journal and ledgers on it)."""
        data = disk or root
        self.net = net
        self.host = net.bookie_address(index) if net else "127.0.0.1"
        self.port = free_port() if net is None else 3181
        self.control = root / "disk-faults.json"
        self.conf = root / "bk_server.conf"
        self.conf.write_text(
            f"bookiePort={self.port}\nlisteningInterface={self.host}\n"
            f"advertisedAddress={self.host}\nallowLoopback=true\n"
            f"journalDirectories={data / 'journal'}\nledgerDirectories={data / 'ledgers'}\n"
            "journalPreAllocSizeMB=1\nflushInterval=1000\n"
            f"metadataServiceUri=zk+hierarchical://{zk}/ledgers\nzkTimeout=4000\n"
            "bookieShutdownTimeoutMs=5000\n" + (extra or "logSizeLimit=16777216\n")
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._log_from = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        argv = [str(PYBKX), "bookie", "--conf", str(self.conf)]
        if self.net is not None:
            argv = self.net.exec_argv(self.index, argv)
        env = dict(os.environ, PYBKX_TEST_DISK_FAULTS=str(self.control))
        with (self.root / "bookie.log").open("ab") as out:
            self._log_from = out.tell()
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.paused = False

    def serving(self) -> bool:
        """Whether the process started last is alive and has logged that it serves (it
        registered: a start refused while its previous session's registration lives exits
        instead)."""
        if not self.alive():
            return False
        with (self.root / "bookie.log").open("rb") as log:
            log.seek(self._log_from)
            return SERVING in log.read()

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

    def unfill(self) -> None:
        """Removes the foreign file that filled the bookie's disk, if any."""
        if self.disk is not None:
            (self.disk / FILLER).unlink(missing_ok=True)


class Cluster:
    def __init__(self, workdir: Path, config: RunConfig) -> None:
        self.workdir = workdir
        self.net = Network.create(config.bookies) if config.net else None
        self.zk = ZooKeeper(workdir / "zk", self.net.zk_host if self.net else "127.0.0.1")
        self.uri = f"zk+hierarchical://{self.zk.address}/ledgers"
        self.disk_mib = config.disk_mib if "disk_full" in config.kinds else None
        """Each bookie's tmpfs size; None: the bookies' directories on the work directory."""
        self.mounted: list[Path] = []
        keys: dict[str, str] = {}
        if config.lifecycle:
            # Small logs that seal often, so compaction has sealed sparse logs to rewrite.
            keys.update(
                logSizeLimit="262144",
                gcWaitTime="2000",
                minorCompactionInterval="4",
                majorCompactionInterval="11",
                majorCompactionThreshold="0.8",
                gcOverreplicatedLedgerWaitTime="5000",
            )
        if config.autorecovery:
            keys.update(
                autoRecoveryDaemonEnabled="true",
                lostBookieRecoveryDelay="0",
                openLedgerRereplicationGracePeriod="3000",
                rwRereplicateBackoffMs="500",
            )
        if self.disk_mib is not None:
            keys.update(DISK_FULL_KEYS)
            keys.setdefault("logSizeLimit", str(4 << 20))  # several logs on a small disk
        extra = "".join(f"{key}={value}\n" for key, value in keys.items())
        self.bookies = [
            BookieNode(
                i,
                workdir / f"bookie{i}",
                self.zk.address,
                self.net,
                extra,
                disk=workdir / f"bookie{i}" / "disk" if self.disk_mib is not None else None,
            )
            for i in range(config.bookies)
        ]

    def start(self) -> None:
        """ZooKeeper, the cluster's metadata, each bookie's disk (with ``disk_full``) and the
        bookies, all registered. Raises RuntimeError when a disk cannot be mounted."""
        if self.disk_mib is not None:
            for b in self.bookies:
                assert b.disk is not None
                reason = mount_tmpfs(b.disk, self.disk_mib)
                if reason is not None:
                    raise RuntimeError(f"no disk of its own for bookie{b.index}: {reason}")
                self.mounted.append(b.disk)
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
        """Every bookie without disk faults or a foreign file on its disk, resumed, serving
        (started again while it exits: a start is refused while the registration of the
        process killed before it lives) and registered again."""
        for b in self.bookies:
            b.disk_faults([])
            b.unfill()
            b.send(signal.SIGCONT)

        def every_bookie_serving() -> bool:
            for b in self.bookies:
                if not b.alive():
                    b.start()
            return all(b.serving() for b in self.bookies)

        wait_until(every_bookie_serving, "every bookie serving", timeout_s=120, interval_s=0.5)
        self.wait_registered(len(self.bookies), 120)

    def close(self) -> None:
        for b in self.bookies:
            with contextlib.suppress(Exception):
                b.stop()
        self.zk.stop()
        for disk in self.mounted:
            unmount(disk)
        if self.net is not None:
            self.net.destroy()
