"""``pybkx shell recover`` (BookKeeper's manual recovery) against real bookie processes: a
bookie killed for good under closed and open ledgers (E=3/Qw=2 and E=Qw=3) is healed so that
every entry is on Qw live bookies of its write set, byte-identical, and no ensemble names it;
the open ledger's writer is fenced; a ledger whose copies are all gone is reported
unrecoverable, never skipped in silence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from recovery_helpers import FAST, assert_replicated, create_on, payload

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration


def shell(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pybkx", "shell", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def recover_json(uri: str, *args: str) -> tuple[int, Any]:
    run = shell("recover", "--uri", uri, "--json", *args)
    assert run.stdout, run.stderr
    return run.returncode, json.loads(run.stdout)


@pytest.fixture(params=["embedded", "zookeeper"])
def sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sandbox]:
    """Four bookie processes on the embedded store or on a real ZooKeeper."""
    zk_uri = None
    if request.param == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        zk_uri = f"zk+hierarchical://{server}/recovery-{os.getpid()}-{time.time_ns()}/ledgers"
    with Sandbox(
        4, directory=tmp_path / "sandbox", zk_uri=zk_uri, conf={"zkTimeout": 2000}
    ) as sandbox:
        yield sandbox


def test_a_lost_bookie_is_healed_and_its_open_ledger_fenced(sandbox: Sandbox) -> None:
    uri = sandbox.metadata_uri
    with BookKeeper(uri, **FAST) as bk:
        striped = bk.create_ledger(3, 2, 2, password=b"pw")
        victim = striped.metadata.last_ensemble[1]
        striped.append_many([payload(striped.ledger_id, e) for e in range(2000)])
        striped.close()
        whole = create_on(bk, (3, 3, 3), {victim}, 800)
        whole.close()
        open_ledger = create_on(bk, (3, 2, 2), {victim}, 500)
        ids = [striped.ledger_id, whole.ledger_id, open_ledger.ledger_id]

        sandbox.kill_bookie(sandbox.bookie_addresses.index(bk.address_of(victim)))
        sandbox.wait_unregistered([sandbox.bookie_addresses.index(bk.address_of(victim))])

        code, listed = recover_json(uri, victim, "--query")
        assert code == 0 and listed["ledgers"] == ids
        code, plan = recover_json(uri, victim, "--dry-run")
        assert code == 0
        assert {step["ledger"] for step in plan["plan"]} == set(ids)
        assert all(victim not in step["to"] for step in plan["plan"] if step["to"] != "")
        # A dry run changes nothing.
        assert victim in bk.store.read_ledger_metadata(striped.ledger_id).value.last_ensemble

        code, report = recover_json(uri, victim, "-f")
        assert code == 0, report
        assert report["healed"] == ids and report["entriesCopied"] > 0
        for ledger_id in ids:
            assert_replicated(bk, ledger_id, {victim})
        # The open ledger was fenced and closed: its writer adds nothing more.
        with pytest.raises((errors.LedgerFencedException, errors.LedgerClosedException)):
            open_ledger.append(b"after recovery")
        assert bk.store.read_ledger_metadata(open_ledger.ledger_id).value.last_entry_id == 499

        # Nothing is left to recover.
        code, again = recover_json(uri, victim, "-f")
        assert code == 0 and again["ledgersAffected"] == []


def test_lost_copies_are_reported_unrecoverable(tmp_path: Path) -> None:
    with Sandbox(5, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sandbox:
        uri = sandbox.metadata_uri
        with BookKeeper(uri, **FAST) as bk:
            doomed = bk.create_ledger(3, 2, 2, password=b"pw")
            doomed.append_many([payload(doomed.ledger_id, e) for e in range(300)])
            doomed.close()
            # Both copies of every entry at write-set start 0 are on these two.
            dead = set(doomed.metadata.last_ensemble[:2])
            healable = create_on(bk, (2, 2, 2), dead, 300)
            healable.close()
            for bookie in dead:
                sandbox.kill_bookie(sandbox.bookie_addresses.index(bk.address_of(bookie)))

            # One ledger at a time, so that the stop at the unrecoverable one is seen.
            code, report = recover_json(uri, *sorted(dead), "-f", "--parallel", "1")
            assert code == 1
            assert list(report["unrecoverable"]) == [str(doomed.ledger_id)]
            assert report["notReached"] == [healable.ledger_id] and report["healed"] == []

            run = shell("recover", "--uri", uri, *sorted(dead), "-f", "-sku")
            assert run.returncode == 1
            assert f"ledger {doomed.ledger_id}: UNRECOVERABLE" in run.stderr
            assert "1 of 2 ledgers healed" in run.stdout
            assert_replicated(bk, healable.ledger_id, dead)


def test_bad_input_is_refused_before_anything_changes(sandbox: Sandbox) -> None:
    victim = sandbox.bookie_addresses[0]
    run = shell("recover", "--uri", sandbox.metadata_uri, victim, "--target", victim, "-f")
    assert run.returncode == 2 and "one of the bookies being recovered" in run.stderr
    run = shell("recover", "--uri", sandbox.metadata_uri)
    assert run.returncode == 2
    # Without -f and with no answer on stdin, nothing is done.
    with BookKeeper(sandbox.metadata_uri, **FAST) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        lh.append(b"x")
        lh.close()
        member = lh.metadata.last_ensemble[0]
    run = shell("recover", "--uri", sandbox.metadata_uri, member)
    assert run.returncode == 1 and "not confirmed" in run.stderr


def test_a_stopped_bookie_is_decommissioned(sandbox: Sandbox) -> None:
    uri = sandbox.metadata_uri
    run = shell("triggeraudit", "--uri", uri)  # no AutoRecovery here: no auditor to wake
    assert run.returncode == 1 and "no auditor" in run.stderr, run.stderr
    with BookKeeper(uri, **FAST) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        lh.append_many([payload(lh.ledger_id, e) for e in range(500)])
        lh.close()
        victim, alive = lh.metadata.last_ensemble[0], lh.metadata.last_ensemble[1]
        run = shell("decommissionbookie", "--uri", uri, "-bookieid", alive, "-f")
        assert run.returncode == 1 and "still registered" in run.stderr
        index = sandbox.bookie_addresses.index(bk.address_of(victim))
        sandbox.kill_bookie(index)
        sandbox.wait_unregistered([index])
        run = shell("decommissionbookie", "--uri", uri, "-bookieid", victim, "-f")
        assert run.returncode == 0, run.stderr
        assert "decommissioned" in run.stdout
        assert_replicated(bk, lh.ledger_id, {victim})
        with pytest.raises(errors.CookieNotFoundException):
            bk.store.read_cookie(victim)
