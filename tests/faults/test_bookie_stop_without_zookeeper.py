"""Fault 3 of the fault probe: a bookie told to stop (SIGTERM) while ZooKeeper is unreachable
exits at once (it took over a minute: unregistering waited for ZooKeeper), and what it had
acknowledged is all there once ZooKeeper and the bookie are back."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from zookeeper_fixture import ZOOKEEPER_JARS, _free_port, _ruok

from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.faults]

#: What a stop with ZooKeeper down may take: the drain of requests and a checkpoint.
STOP_BOUND_S = 15.0


class ZooKeeper:
    """A ZooKeeper of this test's own, so it can be killed and started again on its port."""

    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.config = workdir / "zoo.cfg"
        self.config.write_text(
            f"tickTime=500\ndataDir={workdir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=ruok\nminSessionTimeout=1000\nforceSync=no\n"
        )
        self.log = workdir / "zookeeper.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [
            "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-cp",
            os.pathsep.join(str(p) for p in ZOOKEEPER_JARS),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.config),
        ]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not _ruok(self.port):
            assert time.monotonic() < deadline, "ZooKeeper did not start"
            time.sleep(0.1)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeper]:
    zk = ZooKeeper(tmp_path)
    zk.start()
    yield zk
    zk.kill()


def gone(pid: int) -> bool:
    state = subprocess.run(
        ["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, check=False
    ).stdout.strip()
    return not state or state.startswith("Z")


def test_sigterm_with_zookeeper_down_exits_at_once_and_keeps_what_it_acknowledged(
    zookeeper: ZooKeeper, tmp_path: Path
) -> None:
    uri = f"zk+hierarchical://127.0.0.1:{zookeeper.port}/stop/ledgers"
    with Sandbox(3, directory=tmp_path / "sandbox", zk_uri=uri, conf={"zkTimeout": 2000}) as sb:
        with BookKeeper(uri, zkTimeout=2000) as bk:
            lh = bk.create_ledger(3, 3, 3, password=b"pw")
            data = [f"acked-{i}".encode() for i in range(200)]
            lh.append_many(data)
            ledger_id = lh.ledger_id
        zookeeper.kill()
        pid = sb.pid(0)
        assert pid is not None
        started = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        while not gone(pid):
            assert time.monotonic() - started < STOP_BOUND_S, "the bookie did not exit"
            time.sleep(0.1)
        # ZooKeeper and the bookie come back: everything acknowledged is there.
        zookeeper.start()
        sb.restart_bookie(0)
        with BookKeeper(uri, zkTimeout=2000) as bk:
            rh = bk.open_ledger(ledger_id, b"pw")
            assert [e.payload for e in rh] == data
