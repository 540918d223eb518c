"""Bookies for the tests: `pybkx bookie` processes with their logs, in-process bookies on
loopback, a config file, a per-bookie client and the entries it adds and reads back.

Owns starting, watching and stopping test bookies; must never assert what a bookie does (the
tests that use it do).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

import pybkx._core as core
from pybkx._core import LedgerStorage
from pybkx.bookie import Bookie
from pybkx.config import ClientConfig, ServerConfig
from support.ports import accepts_tcp, free_port
from support.wait import WaitTimeout, wait_until

PYBKX = Path(sys.executable).with_name("pybkx")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
FAIL_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0

LEDGER_ID = 7
PASSWORD = b"secret"

needs_server = pytest.mark.skipif(
    not hasattr(core, "BookieServer"),
    reason="this build of pybkx._core has no BookieServer/BookieClient yet (make build)",
)

if not PYBKX.exists():
    pytest.skip(f"{PYBKX} not installed (make build)", allow_module_level=True)


#: Disk thresholds this machine's disk (not a small tmpfs) is within.
ROOMY = {
    "diskUsageThreshold": "0.99",
    "diskUsageWarnThreshold": "0.98",
    "diskUsageLwmThreshold": "0.98",
}


def local_bookie(tmp_path: Path, **keys: str) -> Bookie:
    """An in-process standalone bookie on loopback (not started): journal and ledgers (unless
    tiers are given) under ``tmp_path``, no preallocation, ROOMY thresholds, then ``keys``."""
    config = {
        "bookiePort": str(free_port()),
        "listeningInterface": "127.0.0.1",
        "allowLoopback": "true",
        "journalDirectories": str(tmp_path / "journal"),
        "journalPreAllocSizeMB": "0",
        **ROOMY,
        **keys,
    }
    if "tieredStorageLevels" not in keys:
        config.setdefault("ledgerDirectories", str(tmp_path / "ledgers"))
    return Bookie(ServerConfig.of(**config))


def disk_bookie(tmp_path: Path, uri: str | None, disk: Path, **extra: object) -> Bookie:
    """An in-process bookie (not started) with journal and ledgers on ``disk``, the disk checked
    every 100 ms against thresholds a few MiB of tmpfs crosses, registered at ``uri`` if given;
    then ``extra``."""
    keys: dict[str, object] = {
        "bookiePort": free_port(),
        "listeningInterface": "127.0.0.1",
        "allowLoopback": "true",
        "journalDirectories": str(disk / "journal"),
        "ledgerDirectories": str(disk / "ledgers"),
        "journalPreAllocSizeMB": 0,
        "logSizeLimit": 256 * 1024,
        "flushInterval": 0,
        "diskCheckInterval": 100,
        "diskUsageThreshold": 0.7,
        "diskUsageWarnThreshold": 0.6,
        "diskUsageLwmThreshold": 0.5,
        "minUsableSizeForHighPriorityWrites": 64 * 1024,
        **extra,
    }
    if uri is not None:
        keys["metadataServiceUri"] = uri
        keys["zkTimeout"] = 4000
    return Bookie(ServerConfig.of(**{k: str(v) for k, v in keys.items()}))


def wait_for_disk_checks(bookie: Bookie, count: int) -> None:
    """Until the running bookie's disk checker has checked ``count`` more times and the bookie
    has acted on each of those verdicts (the checker's thread acts on a verdict before its next
    check begins, so ``count`` + 1 checks are awaited)."""
    checker = bookie.disk_checker
    assert checker is not None, "the bookie's disk checker is not running"
    first = checker.checks
    wait_until(
        lambda: checker.checks > first + count,
        f"{count} more disk checks acted on",
        timeout_s=10,
    )


def write_conf(root: Path, port: int, extra: str = "", *, allow_loopback: bool = True) -> Path:
    """A small loopback bookie under ``root``; ``extra`` lines are appended."""
    conf = root / "bk_server.conf"
    conf.write_text(
        "# pybkx test bookie\n"
        f"bookiePort={port}\n"
        "listeningInterface=127.0.0.1\n"
        f"allowLoopback={str(allow_loopback).lower()}\n"
        f"journalDirectories={root / 'journal'}\n"
        f"ledgerDirectories={root / 'ledgers'}\n"
        "journalPreAllocSizeMB=1\n"
        "logSizeLimit=16777216\n"
        "diskReservedSpaceMB=8\n"  # not the derived hundreds of MiB on a shared disk
        "flushInterval=0\n" + extra
    )
    return conf


def storage_of(conf: Path) -> LedgerStorage:
    """Open the bookie's storage directly (only while no bookie runs on it)."""
    return LedgerStorage(ServerConfig.from_file(conf))


def payload(entry_id: int) -> bytes:
    return f"entry {entry_id} ".encode() * (1 + entry_id % 7)


class BookieProcess:
    """``pybkx bookie ARGS`` with stdout (logs) and stderr in files under ``log_dir``."""

    def __init__(self, args: list[str], log_dir: Path, name: str) -> None:
        self.stdout_path = log_dir / f"{name}.stdout"
        self.stderr_path = log_dir / f"{name}.stderr"
        self._files: list[IO[bytes]] = [self.stdout_path.open("wb"), self.stderr_path.open("wb")]
        self.proc = subprocess.Popen(
            [str(PYBKX), "bookie", *args], stdout=self._files[0], stderr=self._files[1]
        )

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_listening(self, port: int, timeout_s: float = START_TIMEOUT_S) -> None:
        def listening() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"bookie exited ({self.proc.returncode}) before listening on {port}:\n"
                    f"{self.stderr()}\n{self.stdout()[-3000:]}"
                )
            return accepts_tcp(port)

        try:
            wait_until(listening, f"bookie listening on {port}", timeout_s=timeout_s)
        except WaitTimeout:
            pytest.fail(f"bookie not listening on {port} after {timeout_s}s:\n{self.stdout()}")

    def wait_started(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until the bookie has finished starting (registered, "bookie serving" logged)."""

        def started() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"bookie exited ({self.proc.returncode}) while starting")
            return "bookie serving bookie_id=" in self.stdout()

        try:
            wait_until(started, "bookie serving", timeout_s=timeout_s)
        except WaitTimeout:
            pytest.fail(f"bookie not started after {timeout_s}s:\n{self.stdout()[-3000:]}")

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"bookie still running after {timeout_s}s:\n{self.stdout()[-3000:]}")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send ``sig`` and return the exit code (failing if it takes too long)."""
        self.proc.send_signal(sig)
        return self.wait(STOP_TIMEOUT_S)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in self._files:
            f.close()


@pytest.fixture
def start_bookie(tmp_path: Path) -> Iterator[Any]:
    """``start_bookie(*args)``: a running ``pybkx bookie`` process, killed at teardown if alive."""
    started: list[BookieProcess] = []

    def _start(*args: str) -> BookieProcess:
        bookie = BookieProcess(list(args), tmp_path, f"bookie{len(started)}")
        started.append(bookie)
        return bookie

    yield _start
    for bookie in started:
        bookie.close()


def assert_one_line_failure(bookie: BookieProcess, *fragments: str) -> str:
    """The bookie exits non-zero with exactly one stderr line holding ``fragments``."""
    code = bookie.wait(FAIL_TIMEOUT_S)
    stderr = bookie.stderr()
    assert code != 0, f"expected a failure, exit code 0; stdout:\n{bookie.stdout()}"
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{stderr}"
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


@contextlib.contextmanager
def bookie_client() -> Iterator[Any]:
    client = core.BookieClient(
        ClientConfig.of(addEntryTimeoutSec=REQUEST_TIMEOUT_S, readEntryTimeoutSec=REQUEST_TIMEOUT_S)
    )
    try:
        yield client
    finally:
        client.close()


def add_entries(client: Any, address: str, entry_ids: range) -> list[Any]:
    """Send ADDs for ``entry_ids`` of LEDGER_ID (pipelined); return their futures."""
    digest = core.DigestManager(LEDGER_ID, PASSWORD, "CRC32C")
    key = core.master_key(PASSWORD)
    length = sum(len(payload(e)) for e in range(entry_ids.start))
    futures = []
    for entry_id in entry_ids:
        data = payload(entry_id)
        length += len(data)
        entry = digest.package(entry_id, entry_id - 1, length, data)
        futures.append(client.add(address, LEDGER_ID, entry_id, key, entry))
    return futures


def read_payload(client: Any, address: str, entry_id: int) -> bytes:
    digest = core.DigestManager(LEDGER_ID, PASSWORD, "CRC32C")
    entry = client.read(address, LEDGER_ID, entry_id).result(REQUEST_TIMEOUT_S)
    verified = digest.verify(entry, entry_id)
    assert verified.entry_id == entry_id
    return verified.payload
