"""Fixtures for the interop tests: the Java helper build, ZooKeeper, a real Apache BookKeeper
bookie, a pybkx bookie, and a driver for BookKeeper's own V2 per-bookie client.

Owns processes and their logs only; what is sent and expected lives in interop_scenario.py.
Every process started here is stopped at the end of the session; its output goes to a log file
whose tail is attached to every failing interop test.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parents[2]
JAVA_PROJECT = Path(__file__).resolve().parent / "java"
BUILD_DIR = REPO / "target" / "interop-java"  # outside the source tree, ignored by git
STARTUP_TIMEOUT = 60.0
CLIENT_TIMEOUT = 120.0

# The JVM flags BookKeeper's launch scripts use on JDK 17, plus a small footprint.
JVM_OPTS = [
    "-XX:+UseSerialGC",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
    # PYBKX_INTEROP_JAVA_LOG=info (or debug) makes the Java side verbose.
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=" + os.environ.get("PYBKX_INTEROP_JAVA_LOG", "warn"),
]


# --- processes ------------------------------------------------------------------------------


class Process:
    """A child process whose stdout and stderr go to ``log``."""

    def __init__(self, name: str, argv: list[str], log: Path, cwd: Path | None = None) -> None:
        self.name = name
        self.log = log
        with log.open("ab") as out:
            self.popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd
            )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError as exc:
            return f"(cannot read {self.log}: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def fail(self, message: str) -> None:
        pytest.fail(
            f"{self.name}: {message} (exit code {self.popen.poll()}); log {self.log}, last lines:\n"
            f"{self.tail()}",
            pytrace=False,
        )

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


_STARTED: list[Process] = []  # every process of this session, for the failure report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of every process log to a failing interop test."""
    report = yield
    if report.failed:
        for process in _STARTED:
            report.sections.append((f"{process.name} log ({process.log})", process.tail()))
    return report


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def wait_until(process: Process, ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not ready():
        if not process.alive():
            process.fail(f"exited before {what}")
        if time.monotonic() > deadline:
            process.stop()
            process.fail(f"not {what} after {STARTUP_TIMEOUT:.0f} s")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def interop_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Data directories and process logs of this session."""
    return tmp_path_factory.mktemp("interop")


@pytest.fixture(scope="session")
def start_process(interop_dir: Path) -> Iterator[Callable[..., Process]]:
    """``start_process(name, argv)``: a Process logged to ``<interop_dir>/<name>.log``, stopped
    (SIGTERM) at the end of the session unless the fixture using it stopped it earlier."""
    started: list[Process] = []

    def start(name: str, argv: list[str]) -> Process:
        process = Process(name, argv, interop_dir / f"{name}.log", cwd=interop_dir)
        started.append(process)
        _STARTED.append(process)
        return process

    yield start
    for process in reversed(started):
        process.stop()


# --- the Java helpers -----------------------------------------------------------------------


def _java_sources_hash() -> str:
    digest = hashlib.sha256()
    files = [JAVA_PROJECT / "pom.xml", *sorted((JAVA_PROJECT / "src").rglob("*"))]
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(JAVA_PROJECT)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"interop tests need `{name}` (JDK 17 and Maven) on PATH", pytrace=False)
    return path


@pytest.fixture(scope="session")
def java_classpath() -> str:
    """Classpath of the Java helpers and BookKeeper, built with Maven once per source change.

    The build goes to target/interop-java with a stamp holding the hash of the pom and the
    sources; an unchanged hash skips Maven. A build failure is an error of the tests using it.
    """
    _tool("java")
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    jar, classpath_file, stamp = (
        BUILD_DIR / "pybkx-interop.jar",
        BUILD_DIR / "classpath.txt",
        BUILD_DIR / "sources.sha256",
    )
    with (BUILD_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (parallel sessions)
        wanted = _java_sources_hash()
        fresh = jar.exists() and classpath_file.exists() and stamp.exists()
        if not fresh or stamp.read_text().strip() != wanted:
            stamp.unlink(missing_ok=True)
            argv = [
                _tool("mvn"),
                "-q",
                "-B",
                "-Dstyle.color=never",
                f"-Dinterop.build.dir={BUILD_DIR}",
                f"-Dmdep.outputFile={classpath_file}",
                "clean",
                "package",
                "dependency:build-classpath",
            ]
            build = subprocess.run(
                argv, cwd=JAVA_PROJECT, capture_output=True, text=True, timeout=1800, check=False
            )
            if build.returncode != 0 or not jar.exists():
                output = "\n".join((build.stdout + build.stderr).splitlines()[-60:])
                pytest.fail(
                    f"Maven build of {JAVA_PROJECT} failed (exit {build.returncode}):\n{output}",
                    pytrace=False,
                )
            stamp.write_text(wanted + "\n")
    return f"{jar}{os.pathsep}{classpath_file.read_text().strip()}"


def java_argv(classpath: str, main: str, *args: str, heap: str = "128m") -> list[str]:
    return [_tool("java"), f"-Xmx{heap}", *JVM_OPTS, "-cp", classpath, main, *args]


# --- ZooKeeper and bookies ------------------------------------------------------------------


def _ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"ruok")
            return sock.recv(16) == b"imok"
    except OSError:
        return False


@pytest.fixture(scope="session")
def zookeeper(java_classpath: str, interop_dir: Path, start_process: Callable[..., Process]) -> str:
    """A standalone ZooKeeper (from BookKeeper's classpath) on loopback: ``"127.0.0.1:port"``."""
    port = free_port()
    data = interop_dir / "zookeeper"
    data.mkdir()
    config = interop_dir / "zoo.cfg"
    config.write_text(
        "tickTime=500\n"
        "initLimit=10\n"
        "syncLimit=5\n"
        f"dataDir={data}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok\n"
    )
    process = start_process(
        "zookeeper",
        java_argv(java_classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)),
    )
    wait_until(process, lambda: _ruok(port), "answering ruok")
    return f"127.0.0.1:{port}"


@pytest.fixture(scope="session")
def java_bookie(
    java_classpath: str, zookeeper: str, interop_dir: Path, start_process: Callable[..., Process]
) -> str:
    """A real Apache BookKeeper bookie (metadata in ``zookeeper``): ``"127.0.0.1:port"``."""
    port = free_port()
    process = start_process(
        "java-bookie",
        java_argv(
            java_classpath,
            "pybkx.interop.JavaBookie",
            str(port),
            zookeeper,
            str(interop_dir / "java-bookie"),
            heap="256m",
        ),
    )

    def ready() -> bool:
        return "READY" in process.log.read_text(errors="replace") and accepts(port)

    wait_until(process, ready, "serving")
    return f"127.0.0.1:{port}"


@pytest.fixture(scope="session")
def pybkx_bookie(interop_dir: Path, start_process: Callable[..., Process]) -> Iterator[str]:
    """A pybkx bookie (``pybkx bookie --conf``, standalone): ``"127.0.0.1:port"``.

    Stopped with SIGTERM at the end of the session; it must exit 0 then.
    """
    executable = Path(sys.executable).with_name("pybkx")
    if not executable.exists():
        executable = Path(_tool("pybkx"))
    port = free_port()
    data = interop_dir / "pybkx-bookie"
    config = interop_dir / "pybkx-bookie.conf"
    config.write_text(
        f"bookiePort={port}\n"
        f"journalDirectories={data / 'journal'}\n"
        f"ledgerDirectories={data / 'ledgers'}\n"
        "listeningInterface=lo\n"  # loopback only, as the Java bookie
        "allowLoopback=true\n"
    )
    process = start_process("pybkx-bookie", [str(executable), "bookie", "--conf", str(config)])
    wait_until(process, lambda: accepts(port), "accepting connections")
    yield f"127.0.0.1:{port}"
    code = process.stop()
    if code != 0:
        process.fail("did not exit 0 on SIGTERM")


# --- BookKeeper's client --------------------------------------------------------------------


RunJavaClient = Callable[[str, list[dict[str, Any]]], list[dict[str, Any]]]


@pytest.fixture(scope="session")
def run_java_client(java_classpath: str, interop_dir: Path) -> RunJavaClient:
    """``run_java_client(address, ops) -> results``: run ops (dicts, see InteropClient.java)
    with BookKeeper's V2 per-bookie client against one bookie, one result dict per op."""
    runs = iter(range(1, 1_000_000))

    def run(address: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        n = next(runs)
        script = interop_dir / f"java-client-{n}.jsonl"
        script.write_text("".join(json.dumps(op) + "\n" for op in ops))
        log = interop_dir / f"java-client-{n}.log"
        argv = java_argv(
            java_classpath, "pybkx.interop.InteropClient", address, str(script), heap="128m"
        )
        argv.insert(1, "-XX:TieredStopAtLevel=1")  # short-lived: start fast
        with log.open("wb") as stderr:
            done = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=stderr, timeout=CLIENT_TIMEOUT, check=False
            )
        results = [json.loads(line) for line in done.stdout.decode().splitlines() if line]
        if done.returncode != 0 or len(results) != len(ops):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            pytest.fail(
                f"Java client against {address} exited {done.returncode} after "
                f"{len(results)} of {len(ops)} operations (script {script}); stderr:\n{tail}",
                pytrace=False,
            )
        return results

    return run
