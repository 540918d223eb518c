"""The sandbox: a local cluster of real bookie processes that registers, loses and regains bookies.

Owns the sandbox's life cycle seen from Python and from `pybkx sandbox`; must never leave a
bookie process running after a test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.wait import wait_until

from pybkx.meta import open_metadata_store
from pybkx.tools.sandbox import Sandbox, SandboxError, zk_uri_from

pytestmark = pytest.mark.integration

SMALL_BOOKIE = {"journalPreAllocSizeMB": 1, "flushInterval": 0, "zkTimeout": 2000}


def process_exists(pid: int) -> bool:
    """True if ``pid`` is a live process (not reaped, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def bookie_pids_under(directory: Path) -> list[int]:
    """Processes whose command line names a configuration under ``directory``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(directory) in cmdline and "bookie" in cmdline and process_exists(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def test_a_three_bookie_sandbox_loses_and_regains_a_bookie() -> None:
    sandbox = Sandbox(3, conf=SMALL_BOOKIE)
    with sandbox:
        directory = sandbox.directory
        addresses = sandbox.bookie_addresses
        assert len(set(addresses)) == 3
        assert all(address.startswith("127.0.0.1:") for address in addresses)
        assert sandbox.metadata_uri == f"embedded://{directory / 'metadata'}"
        store = sandbox.metadata_store
        assert store.writable_bookies() == set(addresses)
        assert store.all_bookies() == set(addresses)  # every bookie stamped its cookie
        pids = [sandbox.pid(i) for i in range(3)]
        assert all(pid is not None and process_exists(pid) for pid in pids)

        assert sandbox.kill_bookie(1) == -signal.SIGKILL
        assert not sandbox.is_alive(1)
        wait_until(
            lambda: store.writable_bookies() == {addresses[0], addresses[2]},
            "the killed bookie's registration is gone",
            timeout_s=5,
        )
        assert sandbox.poll() == []  # a kill the sandbox was asked for is no surprise

        sandbox.restart_bookie(1)
        assert store.writable_bookies() == set(addresses)  # same port, same cookie
        assert sandbox.pid(1) not in pids

        # A clean stop of one bookie unregisters it at once.
        assert sandbox.stop_bookie(2) == 0
        assert store.writable_bookies() == {addresses[0], addresses[1]}
        sandbox.restart_bookie(2)
        all_pids = [pid for pid in pids if pid is not None] + [sandbox.pid(1), sandbox.pid(2)]

    assert not sandbox.running
    assert not directory.exists()  # a temporary directory is removed
    assert not any(pid is not None and process_exists(pid) for pid in all_pids)


def test_a_bookie_dying_on_its_own_is_reported_once(tmp_path: Path) -> None:
    with Sandbox(2, directory=tmp_path / "sb", conf=SMALL_BOOKIE) as sandbox:
        pid = sandbox.pid(0)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not sandbox.is_alive(0), "bookie 0 dead", timeout_s=5)
        assert sandbox.poll() == [(0, -signal.SIGKILL)]
        assert sandbox.poll() == []
    assert (tmp_path / "sb" / "bookie-0" / "bookie.log").is_file()  # a given directory stays
    assert bookie_pids_under(tmp_path / "sb") == []


def test_a_kept_directory_starts_again_with_the_same_bookies(tmp_path: Path) -> None:
    with Sandbox(2, directory=tmp_path, conf=SMALL_BOOKIE) as first:
        addresses = first.bookie_addresses
    with Sandbox(2, directory=tmp_path, conf=SMALL_BOOKIE) as second:
        assert second.bookie_addresses == addresses  # the cookies still match
        assert second.metadata_store.writable_bookies() == set(addresses)


def test_a_failing_bookie_fails_the_start_in_one_line(tmp_path: Path) -> None:
    with open_metadata_store(f"embedded://{tmp_path / 'metadata'}") as store:
        store.init_new_cluster()
    # Bookie 0's ledger directory is a file: its storage cannot open.
    (tmp_path / "bookie-0").mkdir()
    (tmp_path / "bookie-0" / "ledgers").write_text("not a directory")
    sandbox = Sandbox(2, directory=tmp_path, conf=SMALL_BOOKIE, start_timeout_s=20)
    with pytest.raises(SandboxError, match=r"bookie 0 \(127\.0\.0\.1:\d+\) ended before regist"):
        sandbox.start()
    assert not sandbox.running
    assert bookie_pids_under(tmp_path) == []


def test_a_sandbox_on_zookeeper(zookeeper_server: str) -> None:
    uri = f"zk+hierarchical://{zookeeper_server}/sandbox-{os.getpid()}-{time.time_ns()}/ledgers"
    with Sandbox(2, zk_uri=uri, conf=SMALL_BOOKIE) as sandbox:
        assert sandbox.metadata_uri == uri
        assert sandbox.metadata_store.writable_bookies() == set(sandbox.bookie_addresses)
        directory = sandbox.directory
    assert bookie_pids_under(directory) == []
    assert zk_uri_from("h1:2181,h2:2181") == "zk+hierarchical://h1:2181;h2:2181/ledgers"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_pybkx_sandbox_prints_the_cluster_and_stops_on_a_signal(
    tmp_path: Path, sig: signal.Signals
) -> None:
    command = [sys.executable, "-m", "pybkx", "sandbox", "--bookies", "2", "--dir", str(tmp_path)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        assert process.stdout is not None
        lines = []
        deadline = time.monotonic() + 30
        while not lines or not lines[-1].startswith("sandbox ready"):
            line = process.stdout.readline()
            if not line or time.monotonic() > deadline:
                pytest.fail(f"no 'sandbox ready': {lines} {process.stderr}")
            lines.append(line.rstrip("\n"))
        uri = f"embedded://{tmp_path / 'metadata'}"
        assert f"metadataServiceUri={uri}" in lines
        addresses = [line.split()[2] for line in lines if line.startswith("bookie ")]
        assert len(addresses) == 2
        with open_metadata_store(uri) as store:
            assert store.writable_bookies() == set(addresses)
            # The shell finds the running sandbox as a client does: no --uri needed.
            listed = subprocess.run(
                [sys.executable, "-m", "pybkx", "shell", "listbookies", "--json"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert listed.returncode == 0, listed.stderr
            for address in addresses:
                assert address in listed.stdout
            process.send_signal(sig)
            out, err = process.communicate(timeout=30)
            assert process.returncode == 0, err
            assert out.rstrip().endswith("sandbox stopped")
            assert store.writable_bookies() == frozenset()
        assert bookie_pids_under(tmp_path) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_client_writes_and_reads_through_the_sandbox() -> None:
    client = pytest.importorskip("pybkx.client")
    with Sandbox(3, conf=SMALL_BOOKIE) as sandbox:
        bk = client.BookKeeper(sandbox.metadata_uri)
        try:
            writer = bk.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
            payloads = [f"entry {i}".encode() for i in range(20)]
            assert writer.append(payloads[0]) == 0
            assert writer.append_many(payloads[1:]) == 19
            writer.close()

            reader = bk.open_ledger(writer.ledger_id, b"", recovery=True)
            assert reader.last_add_confirmed == 19
            assert [e.payload for e in reader.read(0, 19)] == payloads
            reader.close()
        finally:
            bk.close()
