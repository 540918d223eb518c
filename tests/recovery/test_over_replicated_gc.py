"""A bookie back after its ledgers were re-replicated elsewhere holds copies no ensemble names:
its garbage collection removes them every ``gcOverreplicatedLedgerWaitTime`` (BookKeeper's
over-replicated ledger GC), and keeps every ledger an ensemble still names it in.

Owns over-replicated removal; deleted ledgers are tests/admin/test_periodic_gc.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from recovery_helpers import FAST, assert_replicated, create_on, payload
from support.wait import wait_until

from pybkx import errors
from pybkx._core import BookieClient
from pybkx.client import BookKeeper
from pybkx.config import ClientConfig
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

WAIT_S = 60.0


@pytest.fixture(params=["embedded", "zookeeper"])
def sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sandbox]:
    zk_uri = None
    if request.param == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        zk_uri = f"zk+hierarchical://{server}/overrep-{os.getpid()}-{time.time_ns()}/ledgers"
    conf = {"zkTimeout": 2000, "gcWaitTime": 300, "gcOverreplicatedLedgerWaitTime": 500}
    with Sandbox(4, directory=tmp_path / "sandbox", zk_uri=zk_uri, conf=conf) as sandbox:
        yield sandbox


def gc_details(sandbox: Sandbox, index: int) -> dict[str, Any]:
    url = f"{sandbox.admin_urls[index]}/api/v1/bookie/gc_details"
    with urllib.request.urlopen(url, timeout=30) as response:
        details: dict[str, Any] = json.loads(response.read())[0]
    return details


def test_a_returning_bookie_drops_the_copies_moved_elsewhere_and_keeps_the_rest(
    sandbox: Sandbox,
) -> None:
    uri = sandbox.metadata_uri
    with BookKeeper(uri, **FAST) as bk:
        moved = bk.create_ledger(2, 2, 2, password=b"pw")
        victim = moved.metadata.last_ensemble[0]
        moved.append_many([payload(moved.ledger_id, e) for e in range(100)])
        moved.close()
        index = sandbox.bookie_addresses.index(bk.address_of(victim))

        sandbox.stop_bookie(index)
        sandbox.wait_unregistered([index])
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pybkx",
                "shell",
                "recover",
                "--uri",
                uri,
                "--json",
                "-f",
                victim,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert_replicated(bk, moved.ledger_id, {victim})

        sandbox.restart_bookie(index)
        # A ledger written on the returned bookie afterwards: an ensemble names it.
        kept = create_on(bk, (2, 2, 2), {victim}, 50)
        kept.close()

        details = wait_until(
            lambda: gc_details(sandbox, index),
            "the over-replicated copy removed",
            timeout_s=WAIT_S,
            interval_s=0.2,
            accept=lambda details: details["overReplicatedLedgerCounter"] >= 1,
        )
        assert details["overReplicatedLedgerCounter"] == 1
        # More passes leave the kept ledger alone.
        runs = details["gcRuns"]
        details = wait_until(
            lambda: gc_details(sandbox, index),
            "three more GC passes",
            timeout_s=WAIT_S,
            interval_s=0.2,
            accept=lambda details: details["gcRuns"] >= runs + 3,
        )
        assert details["overReplicatedLedgerCounter"] == 1

        raw = BookieClient(ClientConfig.of(readEntryTimeoutSec=5))
        try:
            with pytest.raises((errors.NoSuchLedgerExistsException, errors.NoSuchEntryException)):
                raw.read(bk.address_of(victim), moved.ledger_id, 0).result(10)
            assert raw.read(bk.address_of(victim), kept.ledger_id, 0).result(10)
        finally:
            raw.close()
        assert_replicated(bk, kept.ledger_id, set())
        assert_replicated(bk, moved.ledger_id, {victim})
