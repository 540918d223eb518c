"""`pybkx bookie` as an operator runs it: it serves, stops cleanly on a signal, fails in one line.

Owns the bookie process's life cycle seen from outside; must never touch its files while it runs.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

import pybkx._core as core
from pybkx import errors
from pybkx._core import LedgerStorage
from pybkx.bookie import Bookie
from pybkx.config import ClientConfig, ServerConfig
from pybkx.meta import open_metadata_store

pytestmark = pytest.mark.integration

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


# --- helpers ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


def accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


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
        deadline = time.monotonic() + timeout_s
        while not accepts_tcp(port):
            if self.proc.poll() is not None:
                pytest.fail(
                    f"bookie exited ({self.proc.returncode}) before listening on {port}:\n"
                    f"{self.stderr()}\n{self.stdout()[-3000:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"bookie not listening on {port} after {timeout_s}s:\n{self.stdout()}")
            time.sleep(0.05)

    def wait_started(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until the bookie has finished starting (registered, "bookie serving" logged)."""
        deadline = time.monotonic() + timeout_s
        while "bookie serving bookie_id=" not in self.stdout():
            if self.proc.poll() is not None:
                pytest.fail(f"bookie exited ({self.proc.returncode}) while starting")
            if time.monotonic() > deadline:
                pytest.fail(f"bookie not started after {timeout_s}s:\n{self.stdout()[-3000:]}")
            time.sleep(0.05)

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


# --- a bookie that starts, serves and stops ---------------------------------------------------


@needs_server
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_bookie_accepts_tcp_and_exits_0_on_a_signal(
    tmp_path: Path, start_bookie: Any, sig: signal.Signals
) -> None:
    port = free_port()
    conf = write_conf(tmp_path, port)
    bookie = start_bookie("--conf", str(conf))
    bookie.wait_listening(port)
    assert bookie.stop(sig) == 0
    assert "Traceback" not in bookie.stderr()
    assert bookie.stderr() == ""
    log = bookie.stdout()
    assert "bookie serving" in log
    assert f"listen=127.0.0.1:{port}" in log
    assert "ledger storage closed (checkpointed)" in log
    # The directories were released and hold a consistent storage.
    with storage_of(conf) as storage:
        assert storage.list_ledgers() == []
    assert (tmp_path / "journal" / "current").is_dir()
    assert (tmp_path / "ledgers" / "current").is_dir()


@needs_server
def test_an_acknowledged_entry_survives_sigterm_and_restart(
    tmp_path: Path, start_bookie: Any
) -> None:
    port = free_port()
    conf = write_conf(tmp_path, port)
    address = f"127.0.0.1:{port}"
    first = start_bookie("--conf", str(conf))
    first.wait_listening(port)
    with bookie_client() as client:
        for future in add_entries(client, address, range(0, 50)):
            assert future.result(REQUEST_TIMEOUT_S) is None
        # More adds in flight while SIGTERM arrives: the server drains them before closing.
        in_flight = add_entries(client, address, range(50, 2050))
        first.proc.send_signal(signal.SIGTERM)
        acked = list(range(0, 50))
        for entry_id, future in zip(range(50, 2050), in_flight, strict=True):
            try:
                future.result(REQUEST_TIMEOUT_S + 5)
            except errors.BKException:
                continue  # not acknowledged: it may or may not be stored
            acked.append(entry_id)
    assert first.wait(STOP_TIMEOUT_S) == 0, first.stderr()
    assert first.stderr() == ""

    # Checkpointed on the way out: the storage opens directly and holds every acked entry.
    with storage_of(conf) as storage:
        assert LEDGER_ID in storage.list_ledgers()
        for entry_id in acked:
            stored = storage.read_entry(LEDGER_ID, entry_id)
            assert stored.endswith(payload(entry_id))

    second = start_bookie("--conf", str(conf))
    second.wait_listening(port)
    with bookie_client() as client:
        for entry_id in acked:
            assert read_payload(client, address, entry_id) == payload(entry_id)
    assert second.stop() == 0


@needs_server
def test_readonly_flag_refuses_adds_and_still_serves_reads(
    tmp_path: Path, start_bookie: Any
) -> None:
    port = free_port()
    conf = write_conf(tmp_path, port)
    address = f"127.0.0.1:{port}"
    writable = start_bookie("--conf", str(conf))
    writable.wait_listening(port)
    with bookie_client() as client:
        add_entries(client, address, range(0, 1))[0].result(REQUEST_TIMEOUT_S)
    assert writable.stop() == 0

    read_only = start_bookie("--conf", str(conf), "--readonly")
    read_only.wait_listening(port)
    with bookie_client() as client:
        with pytest.raises(errors.WriteOnReadOnlyBookieException):
            add_entries(client, address, range(1, 2))[0].result(REQUEST_TIMEOUT_S)
        assert read_payload(client, address, 0) == payload(0)
    assert read_only.stop() == 0
    assert "read_only=True" in read_only.stdout()


@needs_server
def test_flags_override_the_conf_file(tmp_path: Path, start_bookie: Any) -> None:
    file_port, flag_port = free_port(), free_port()
    conf = write_conf(tmp_path, file_port)
    journal, ledgers = tmp_path / "flag-journal", tmp_path / "flag-ledgers"
    bookie = start_bookie(
        "--conf",
        str(conf),
        "--port",
        str(flag_port),
        "--journal-dirs",
        str(journal),
        "--ledger-dirs",
        f"{ledgers}1,{ledgers}2",
    )
    bookie.wait_listening(flag_port)
    assert not accepts_tcp(file_port)
    assert bookie.stop() == 0
    assert (journal / "current").is_dir()
    assert (Path(f"{ledgers}1") / "current").is_dir()
    assert not (tmp_path / "journal").exists()


@needs_server
def test_without_conf_defaults_and_flags_are_enough(tmp_path: Path, start_bookie: Any) -> None:
    port = free_port()
    bookie = start_bookie(
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--journal-dirs",
        str(tmp_path / "j"),
        "--ledger-dirs",
        str(tmp_path / "l"),
    )
    bookie.wait_listening(port)
    assert bookie.stop() == 0
    assert "(standalone)" in bookie.stdout()


@needs_server
def test_metadata_service_uri_makes_the_bookie_register(tmp_path: Path, start_bookie: Any) -> None:
    port = free_port()
    uri = f"embedded://{tmp_path / 'metadata'}"
    with open_metadata_store(uri) as store:  # bookies join initialised clusters only
        store.init_new_cluster()
    conf = write_conf(tmp_path, port, f"metadataServiceUri={uri}\n")
    bookie = start_bookie("--conf", str(conf))
    bookie.wait_listening(port)
    assert bookie.stop() == 0
    log = bookie.stdout()
    assert f"bookie registered bookie_id=127.0.0.1:{port} read_only=False metadata={uri}" in log
    assert "bookie unregistered" in log
    assert (tmp_path / "journal" / "current" / "VERSION").is_file()  # the cookie


# --- failures: one line on stderr, non-zero exit ----------------------------------------------


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("bookiePort=abc", "bookiePort"),
        ("bookiePort=70000", "bookiePort"),
        ("ledgerDirectories=", "ledgerDirectories"),
        ("journalSyncData=maybe", "journalSyncData"),
    ],
)
def test_a_bad_config_fails_with_one_line_naming_key_and_file(
    tmp_path: Path, start_bookie: Any, line: str, key: str
) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(f"# broken\n{line}\n")
    bookie = start_bookie("--conf", str(conf))
    assert_one_line_failure(bookie, key, str(conf))


def test_a_missing_config_file_fails_with_one_line(tmp_path: Path, start_bookie: Any) -> None:
    conf = tmp_path / "missing.conf"
    bookie = start_bookie("--conf", str(conf))
    assert_one_line_failure(bookie, str(conf))


@needs_server
def test_a_second_bookie_on_the_same_directories_fails_with_one_line(
    tmp_path: Path, start_bookie: Any
) -> None:
    port, other_port = free_port(), free_port()
    conf = write_conf(tmp_path, port)
    first = start_bookie("--conf", str(conf))
    first.wait_listening(port)
    second = start_bookie("--conf", str(conf), "--port", str(other_port))
    assert_one_line_failure(second, "cannot open ledger storage", "in use")
    assert not accepts_tcp(other_port)
    assert accepts_tcp(port)  # the first one is unharmed
    assert first.stop() == 0


@needs_server
def test_a_port_in_use_fails_with_one_line_and_releases_the_storage(
    tmp_path: Path, start_bookie: Any
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        conf = write_conf(tmp_path, port)
        bookie = start_bookie("--conf", str(conf))
        assert_one_line_failure(bookie, f"cannot listen on 127.0.0.1:{port}")
    with storage_of(conf) as storage:  # the failed bookie closed its storage
        assert storage.list_ledgers() == []


@needs_server
def test_a_loopback_identity_is_refused_for_a_cluster_bookie(
    tmp_path: Path, start_bookie: Any
) -> None:
    port = free_port()
    conf = write_conf(
        tmp_path,
        port,
        "metadataServiceUri=zk+hierarchical://127.0.0.1:1/ledgers\n",
        allow_loopback=False,
    )
    bookie = start_bookie("--conf", str(conf))
    assert_one_line_failure(bookie, "allowLoopback", "loopback")
