"""The session's ZooKeeper for tests: one real server from Debian's ``zookeeper`` package on a
free loopback port with a temporary data directory. Owns starting and stopping it only."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from support.ports import free_port, zookeeper_answers
from support.wait import WaitTimeout, wait_until

ZOOKEEPER_JARS = [
    Path("/etc/zookeeper/conf"),
    Path("/usr/share/java/zookeeper.jar"),
    Path("/usr/share/java/slf4j-simple.jar"),
]
STARTUP_TIMEOUT_S = 30.0


def _session_opens(port: int, timeout_s: float) -> bool:
    """Whether a client session can be created within ``timeout_s``.

    ``ruok`` is answered as soon as the server listens, before it serves sessions; on a busy
    machine the first session of a JVM just started took over 10 s (a test then failed in its
    set-up with the product's default ``zkTimeout``), so the server is ready only once one opens.
    """
    client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=timeout_s)
    try:
        client.start(timeout=timeout_s)
        return True
    except KazooTimeoutError:
        return False
    finally:
        client.stop()
        client.close()


def _wait_serving(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until the server opens sessions; fails with the log's tail if it exits or times out."""

    def did_not_start() -> NoReturn:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        pytest.fail(f"ZooKeeper did not start (log {log}):\n{tail}", pytrace=False)

    deadline = time.monotonic() + STARTUP_TIMEOUT_S

    def serving() -> bool:
        if process.poll() is not None:
            did_not_start()
        return zookeeper_answers(port) and _session_opens(
            port, max(1.0, deadline - time.monotonic())
        )

    try:
        wait_until(serving, "ZooKeeper serving", timeout_s=STARTUP_TIMEOUT_S, interval_s=0.1)
    except WaitTimeout:
        did_not_start()


@contextlib.contextmanager
def run_zookeeper(
    workdir: Path, *, config_lines: Sequence[str] = (), jvm_options: Sequence[str] = ()
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A standalone ZooKeeper on a free loopback port with its data under ``workdir``:
    ``("127.0.0.1:port", process)``; stopped (SIGCONT, SIGTERM, then SIGKILL) on exit, so a
    test may pause or kill it. ``config_lines`` are added to its zoo.cfg, ``jvm_options``
    (``-Dkey=value``) to its JVM (e.g. SASL: an ``authProvider`` line and a JAAS file).

    Fails (not skips) when the Debian package is missing: ``make deps`` installs it.
    """
    missing = [str(path) for path in ZOOKEEPER_JARS if not path.exists()]
    java = shutil.which("java")
    if missing or java is None:
        pytest.fail(
            f"ZooKeeper for the tests needs java and the Debian package `zookeeper` "
            f"(`make deps`); missing: {', '.join(missing) or 'java'}",
            pytrace=False,
        )
    port = free_port()
    config = workdir / "zoo.cfg"
    config.write_text(
        "tickTime=500\n"
        f"dataDir={workdir / 'data'}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok\n"
        "minSessionTimeout=1000\n"
        "forceSync=no\n" + "".join(line + "\n" for line in config_lines)
    )
    log = workdir / "zookeeper.log"
    argv = [
        java,
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        *jvm_options,
        "-cp",
        os.pathsep.join(str(path) for path in ZOOKEEPER_JARS),
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(config),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_serving(process, port, log)
        yield f"127.0.0.1:{port}", process
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's ZooKeeper on a free loopback port: ``"127.0.0.1:port"``."""
    with run_zookeeper(tmp_path_factory.mktemp("zookeeper")) as (address, _process):
        yield address
