"""The auditor's periodic checks with real bookie processes running AutoRecovery: a bookie that
comes back without its data (stopped, its journal and ledger files removed, its cookie kept,
restarted within ``lostBookieRecoveryDelay``) is never lost in the registry's eyes, so the
lost-bookie audit marks nothing; the replicas check (GET_LIST_OF_ENTRIES_OF_LEDGER), or the
all-ledgers check (first and last entry read from each bookie), finds the entries it no longer
holds, marks the ledger and a worker copies them to another bookie. Also the operator's side:
``pybkx shell triggeraudit`` and the admin API's ``trigger_audit`` and ``decommission``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from recovery_helpers import FAST, assert_replicated, create_on, payload
from support.wait import wait_until

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.meta import MetadataStore
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

#: Far longer than the test: a lost bookie's own audit never marks anything by itself.
LONG_DELAY_S = 600
PERIODIC = {
    "lostBookieRecoveryDelay": LONG_DELAY_S,
    "zkTimeout": 2000,
    "autoRecoveryDaemonEnabled": True,
    "openLedgerRereplicationGracePeriod": 1000,
    "rwRereplicateBackoffMs": 500,
    "auditorPeriodicBookieCheckInterval": 0,  # once, at election
}
#: One periodic check every 2 s, the other off.
REPLICAS_CHECK = {"auditorReplicasCheckInterval": 2, "auditorPeriodicCheckInterval": 0}
LEDGERS_CHECK = {"auditorReplicasCheckInterval": 0, "auditorPeriodicCheckInterval": 2}
#: How long an auditor's election, a periodic check or a heal may take here.
AUDIT_TIMEOUT_S = 45.0


def put(url: str, body: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(admin_url: str, name: str) -> float:
    """One unlabelled sample of a bookie's ``/metrics``."""
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    values = [float(line.split()[1]) for line in text.splitlines() if line.split()[:1] == [name]]
    assert len(values) == 1, (name, values)
    return values[0]


def named(store: MetadataStore, ledger_id: int) -> set[str]:
    md = store.read_ledger_metadata(ledger_id).value
    return {b for ensemble in md.ensembles.values() for b in ensemble}


@pytest.fixture
def checks() -> dict[str, int]:
    """The periodic checks' intervals (a test parametrizes ``checks`` to choose others)."""
    return REPLICAS_CHECK


@pytest.fixture(params=["embedded", "zookeeper"])
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, checks: dict[str, int]
) -> Iterator[Sandbox]:
    """Four bookies running AutoRecovery with a short periodic check."""
    uri = None
    if request.param == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        uri = f"zk+hierarchical://{server}/periodic-{os.getpid()}-{time.time_ns()}/ledgers"
    conf = {**PERIODIC, **checks}
    with Sandbox(4, directory=tmp_path / "sandbox", zk_uri=uri, conf=conf) as sandbox:
        yield sandbox


def wipe_data(bookie_dir: Path) -> None:
    """Remove a stopped bookie's journal and ledger files, keeping its cookies (VERSION)."""
    for sub in ("journal", "ledgers"):
        for path in (bookie_dir / sub / "current").iterdir():
            if path.name not in ("VERSION", "LOCK"):
                path.unlink()


@pytest.mark.parametrize("checks", [REPLICAS_CHECK, LEDGERS_CHECK], ids=["replicas", "ledgers"])
def test_a_periodic_check_heals_a_bookie_that_came_back_empty(cluster: Sandbox) -> None:
    with BookKeeper(cluster.metadata_uri, **FAST) as bk:
        store = bk.store
        election = store.auditor_election("test-observer")
        wait_until(lambda: election.leader() is not None, "an auditor", timeout_s=AUDIT_TIMEOUT_S)
        auditor = election.leader()
        victim = next(b for b in cluster.bookie_addresses if b != auditor)
        striped = create_on(bk, (3, 2, 2), {victim}, 400)
        striped.close()
        whole = create_on(bk, (3, 3, 2), {victim}, 200)
        whole.close()
        ids = [striped.ledger_id, whole.ledger_id]
        stamps = ("replicascheckctime", "checkallledgersctime")
        wait_until(
            lambda: any(store.check_ctime(n) is not None for n in stamps),
            "a check",
            timeout_s=AUDIT_TIMEOUT_S,
        )
        assert not store.underreplicated_ledgers()  # healthy ledgers are left alone

        # A maintenance restart, as BookKeeper's docs advise it: the lost-bookie audit delayed.
        assert store.lost_bookie_recovery_delay() == LONG_DELAY_S
        index = cluster.bookie_addresses.index(victim)
        cluster.stop_bookie(index)
        cluster.wait_unregistered([index])
        wipe_data(cluster.directory / f"bookie-{index}")
        cluster.restart_bookie(index)

        # Within AUDIT_TIMEOUT_S, far inside the delay: the lost-bookie audit marked nothing.
        wait_until(
            lambda: (
                not any(victim in named(store, i) for i in ids)
                and not store.underreplicated_ledgers()
            ),
            "every ledger healed off the emptied bookie, and unmarked",
            timeout_s=AUDIT_TIMEOUT_S,
        )
        assert victim in store.writable_bookies()  # it was never lost
        for ledger_id in ids:
            assert_replicated(bk, ledger_id, {victim})
        # The auditor's and workers' counters on the bookies' /metrics.
        auditor_url = cluster.admin_urls[cluster.bookie_addresses.index(auditor)]
        assert metric(auditor_url, "auditor_NUM_UNDER_REPLICATED_LEDGERS") >= len(ids)
        worked = "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED"
        assert sum(metric(url, worked) for url in cluster.admin_urls) >= len(ids)


@pytest.mark.parametrize("checks", [LEDGERS_CHECK], ids=["ledgers"])
def test_an_open_ledgers_ended_segment_heals_under_its_writer(cluster: Sandbox) -> None:
    """An open ledger with two segments (a bookie stopped and back made its writer change
    ensemble); a bookie of the first segment comes back empty. The all-ledgers check marks the
    ended segment, a worker copies it while the writer keeps the ledger open, and the writer's
    close afterwards keeps the worker's ensemble; then the closed last segment heals too."""
    with BookKeeper(cluster.metadata_uri, **FAST) as bk:
        store = bk.store
        election = store.auditor_election("test-observer")
        wait_until(lambda: election.leader() is not None, "an auditor", timeout_s=AUDIT_TIMEOUT_S)
        auditor = election.leader()
        others = [b for b in cluster.bookie_addresses if b != auditor]
        lh = create_on(bk, (3, 2, 2), set(others[:2]), 0)  # holds exactly one of the two
        held = next(b for b in others[:2] if b in lh.metadata.last_ensemble)
        victim = next(b for b in lh.metadata.last_ensemble if b not in (held, auditor))
        lh.append_many([payload(lh.ledger_id, e) for e in range(100)])
        # The writer replaces a stopped bookie: the first segment ends at entry 99.
        away = cluster.bookie_addresses.index(held)
        cluster.stop_bookie(away)
        cluster.wait_unregistered([away])
        lh.append_many([payload(lh.ledger_id, e) for e in range(100, 150)])
        assert len(lh.metadata.ensembles) == 2
        cluster.restart_bookie(away)

        index = cluster.bookie_addresses.index(victim)
        cluster.stop_bookie(index)
        cluster.wait_unregistered([index])
        wipe_data(cluster.directory / f"bookie-{index}")
        cluster.restart_bookie(index)

        def first_segment_healed() -> bool:
            md = store.read_ledger_metadata(lh.ledger_id).value
            return victim not in md.ensembles[0] and not store.underreplicated_ledgers()

        wait_until(
            first_segment_healed,
            "the ended segment healed under the writer",
            timeout_s=AUDIT_TIMEOUT_S,
        )
        assert not store.read_ledger_metadata(lh.ledger_id).value.is_closed
        lh.close()
        md = store.read_ledger_metadata(lh.ledger_id).value
        assert victim not in md.ensembles[0]  # the close kept the worker's change
        wait_until(
            lambda: (
                victim not in named(store, lh.ledger_id) and not store.underreplicated_ledgers()
            ),
            "the closed ledger healed",
            timeout_s=AUDIT_TIMEOUT_S,
        )
        assert_replicated(bk, lh.ledger_id, {victim})


def test_triggeraudit_and_decommission_over_http(cluster: Sandbox) -> None:
    with BookKeeper(cluster.metadata_uri, **FAST) as bk:
        store = bk.store
        election = store.auditor_election("test-observer")
        wait_until(lambda: election.leader() is not None, "an auditor", timeout_s=AUDIT_TIMEOUT_S)
        auditor = election.leader()
        admin = cluster.admin_urls[cluster.bookie_addresses.index(auditor)]

        before = store.lost_bookie_recovery_delay_version() or 0
        run = subprocess.run(
            [sys.executable, "-m", "pybkx", "shell", "triggeraudit", "--uri", cluster.metadata_uri],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        assert f"lostBookieRecoveryDelay {LONG_DELAY_S} s stored again" in run.stdout
        status, text = put(f"{admin}/api/v1/autorecovery/trigger_audit")
        assert (status, json.loads(text)) == (200, "Success trigger audit.")
        assert store.lost_bookie_recovery_delay_version() == before + 2
        assert store.lost_bookie_recovery_delay() == LONG_DELAY_S  # the value is unchanged

        victim = next(b for b in cluster.bookie_addresses if b != auditor)
        lh = create_on(bk, (3, 2, 2), {victim}, 300)
        lh.close()
        index = cluster.bookie_addresses.index(victim)
        cluster.kill_bookie(index)
        cluster.wait_unregistered([index])
        # The lost bookie's audit waits LONG_DELAY_S; decommissioning triggers it at once.
        body = json.dumps({"bookie_src": victim, "delete_cookie": "true"}).encode()
        status, text = put(f"{admin}/api/v1/autorecovery/decommission", body)
        assert status == 200 and victim in text, text

        def cookie_gone() -> bool:
            try:
                store.read_cookie(victim)
            except errors.CookieNotFoundException:
                return True
            return False

        wait_until(
            cookie_gone, "the decommissioned bookie's cookie deleted", timeout_s=AUDIT_TIMEOUT_S
        )
        assert victim not in named(store, lh.ledger_id)
        assert not store.underreplicated_ledgers()
        assert_replicated(bk, lh.ledger_id, {victim})
