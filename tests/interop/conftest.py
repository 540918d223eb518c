"""Fixtures for the interop tests: the Java helper build, ZooKeeper, a real Apache BookKeeper
bookie, a pybkx bookie, and a driver for BookKeeper's own V2 per-bookie client.

Owns processes and their logs only; what is sent and expected lives in interop_scenario.py.
Every process started here is stopped at the end of the session; its output goes to a log file
whose tail is attached to every failing interop test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness
from harness import Process, java_argv

CLIENT_TIMEOUT = 120.0
T = TypeVar("T")

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


def _checked(call: Callable[[], T]) -> T:
    """Run a harness step; its failure fails the test with the process log's tail."""
    try:
        return call()
    except harness.HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def interop_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Working directory of this session's processes (data and logs)."""
    return tmp_path_factory.mktemp("interop")


@pytest.fixture(scope="session")
def processes() -> Iterator[list[Process]]:
    """Every process started for this session; all stopped at its end."""
    yield _STARTED
    for process in reversed(_STARTED):
        process.stop()


@pytest.fixture(scope="session")
def java_classpath() -> str:
    """Classpath of the Java helpers and BookKeeper (Maven build, cached by source hash)."""
    return _checked(harness.java_classpath)


@pytest.fixture(scope="session")
def zookeeper(java_classpath: str, interop_dir: Path, processes: list[Process]) -> str:
    """A standalone ZooKeeper (from BookKeeper's classpath) on loopback: ``"127.0.0.1:port"``."""
    process, address = _checked(lambda: harness.start_zookeeper(java_classpath, interop_dir))
    processes.append(process)
    return address


@pytest.fixture(scope="session")
def java_bookie(
    java_classpath: str, zookeeper: str, interop_dir: Path, processes: list[Process]
) -> str:
    """A real Apache BookKeeper bookie (metadata in ``zookeeper``): ``"127.0.0.1:port"``."""
    process, address = _checked(
        lambda: harness.start_java_bookie(java_classpath, zookeeper, interop_dir)
    )
    processes.append(process)
    return address


@pytest.fixture(scope="session")
def pybkx_bookie(interop_dir: Path, processes: list[Process]) -> Iterator[str]:
    """A pybkx bookie (``pybkx bookie --conf``, standalone): ``"127.0.0.1:port"``.

    Stopped with SIGTERM at the end of the session; it must exit 0 then.
    """
    process, address = _checked(lambda: harness.start_pybkx_bookie(interop_dir))
    processes.append(process)
    yield address
    code = process.stop()
    if code != 0:
        pytest.fail(str(process.error("did not exit 0 on SIGTERM")), pytrace=False)


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
