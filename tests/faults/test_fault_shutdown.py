"""Fault 3: SIGTERM while ZooKeeper is unreachable must still stop the bookie within its
documented bound (``bookieShutdownTimeoutMs``): drain, checkpoint, exit; nothing acknowledged lost.

Owns the bookie's shutdown seen from outside, with ZooKeeper paused (SIGSTOP: connections stay
open and unanswered) or killed (connections refused).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from test_bookie_process import (
    LEDGER_ID,
    REQUEST_TIMEOUT_S,
    add_entries,
    bookie_client,
    free_port,
    needs_server,
    payload,
    read_payload,
    storage_of,
    write_conf,
)
from test_bookie_process import start_bookie as start_bookie
from zookeeper_fixture import run_zookeeper

from pybkx.meta import open_metadata_store

SHUTDOWN_TIMEOUT_MS = 3000
EXIT_MARGIN_S = 12.0
"""Slack over the configured bound for the interpreter to exit on a loaded machine (the fault
was a bookie that never exited)."""


@needs_server
@pytest.mark.parametrize("zk_fault", [signal.SIGSTOP, signal.SIGKILL], ids=["paused", "killed"])
def test_sigterm_with_zookeeper_down_exits_within_the_shutdown_bound(
    tmp_path: Path, start_bookie: Any, zk_fault: signal.Signals
) -> None:
    zk_dir = tmp_path / "zk"
    zk_dir.mkdir()
    with run_zookeeper(zk_dir) as (zk_address, zk_process):
        uri = f"zk+hierarchical://{zk_address}/ledgers"
        with open_metadata_store(uri) as store:
            store.init_new_cluster()
        port = free_port()
        address = f"127.0.0.1:{port}"
        conf = write_conf(
            tmp_path,
            port,
            f"metadataServiceUri={uri}\nzkTimeout=4000\n"
            f"bookieShutdownTimeoutMs={SHUTDOWN_TIMEOUT_MS}\n",
        )
        bookie = start_bookie("--conf", str(conf))
        bookie.wait_listening(port)
        # Fully started (registered): the fault is a running bookie losing ZooKeeper. (Losing it
        # during the start is another fault: the registration then waits for ZooKeeper.)
        bookie.wait_started()
        with bookie_client() as client:
            for future in add_entries(client, address, range(0, 100)):
                assert future.result(REQUEST_TIMEOUT_S) is None

        zk_process.send_signal(zk_fault)
        if zk_fault == signal.SIGKILL:
            zk_process.wait(10)
        time.sleep(0.5)  # the bookie's session notices (or not) before the signal
        bookie.proc.send_signal(signal.SIGTERM)
        code = bookie.wait(SHUTDOWN_TIMEOUT_MS / 1000 + EXIT_MARGIN_S)
        log = bookie.stdout()
        assert code == 0, f"{bookie.stderr()}\n{log[-3000:]}"
        assert "Traceback" not in bookie.stderr()
        assert "ledger storage closed (checkpointed)" in log
        assert "bookie stopped" in log

        # Checkpointed on the way out: every acknowledged entry is in the storage.
        with storage_of(conf) as storage:
            for entry_id in range(0, 100):
                assert storage.read_entry(LEDGER_ID, entry_id).endswith(payload(entry_id))

        if zk_fault == signal.SIGSTOP:
            # ZooKeeper back: the bookie restarts (its cookie checks out) and serves them.
            zk_process.send_signal(signal.SIGCONT)
            second = start_bookie("--conf", str(conf))
            second.wait_listening(port)
            with bookie_client() as client:
                for entry_id in (0, 57, 99):
                    assert read_payload(client, address, entry_id) == payload(entry_id)
            assert second.stop() == 0
