"""Recovery beside Apache BookKeeper's own tools: BookKeeper's shell reads the under-replication
state pybkx keeps on ZooKeeper (markers, the AutoRecovery switch, the lost-bookie delay) and
pybkx reads what BookKeeper's shell sets; BookKeeper's ``whoisauditor`` and ``triggeraudit``
find and wake pybkx's auditor; a ledger healed by ``pybkx shell recover`` after a
bookie was killed for good reads back whole through BookKeeper's client."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.wait import wait_until
from test_operations_against_java import bookie_shell, shell_conf

import pybkx
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.interop

#: How long an auditor's election or the healing of a ledger may take here.
HEAL_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(zookeeper: str, tmp_path: Path) -> Iterator[Sandbox]:
    """4 pybkx bookies under a fresh root of the interop ZooKeeper."""
    uri = f"zk+hierarchical://{zookeeper}/recovery-{uuid.uuid4().hex[:12]}/ledgers"
    with Sandbox(4, zk_uri=uri, directory=tmp_path / "sandbox", conf={"zkTimeout": 4000}) as sb:
        yield sb


def test_bookkeepers_shell_reads_and_sets_pybkx_under_replication_state(
    java_classpath: str, cluster: Sandbox, tmp_path: Path
) -> None:
    conf = shell_conf(tmp_path, cluster.metadata_uri)
    store = cluster.metadata_store
    store.mark_ledger_underreplicated(12, ["10.0.0.9:3181"])
    store.mark_ledger_underreplicated(2**33 + 1, ["10.0.0.9:3181"])
    listed = "\n".join(bookie_shell(java_classpath, conf, "listunderreplicated"))
    assert re.search(r"\b12\b", listed) and str(2**33 + 1) in listed, listed

    store.set_lost_bookie_recovery_delay(17)
    delay = "\n".join(bookie_shell(java_classpath, conf, "lostbookierecoverydelay", "-get"))
    assert "17" in delay, delay
    bookie_shell(java_classpath, conf, "lostbookierecoverydelay", "-set", "23")
    assert store.lost_bookie_recovery_delay() == 23

    bookie_shell(java_classpath, conf, "autorecovery", "-disable")
    assert not store.replication_enabled()
    bookie_shell(java_classpath, conf, "autorecovery", "-enable")
    assert store.replication_enabled()


def test_a_ledger_healed_by_pybkx_reads_whole_through_bookkeepers_client(
    java_classpath: str, cluster: Sandbox, tmp_path: Path
) -> None:
    with pybkx.BookKeeper(cluster.metadata_uri, zkTimeout=4000) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"")
        lh.append_many([f"entry-{i}".encode() for i in range(60)])
        lh.close()
        lost = lh.metadata.last_ensemble[0]
    cluster.kill_bookie(cluster.bookie_addresses.index(lost))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pybkx",
            "shell",
            "recover",
            "--uri",
            cluster.metadata_uri,
            lost,
            "-f",
        ],
        check=True,
        timeout=120,
        capture_output=True,
    )
    conf = shell_conf(tmp_path, cluster.metadata_uri)
    metadata = "\n".join(
        bookie_shell(java_classpath, conf, "ledgermetadata", "-l", str(lh.ledger_id))
    )
    assert lost not in metadata
    read = bookie_shell(java_classpath, conf, "readledger", "-l", str(lh.ledger_id), "-m")
    assert [line for line in read if line.startswith("entry-")] == [f"entry-{i}" for i in range(60)]


def test_bookkeepers_triggeraudit_wakes_the_pybkx_auditor(
    java_classpath: str, zookeeper: str, tmp_path: Path
) -> None:
    """A bookie killed under a long lostBookieRecoveryDelay waits; BookKeeper's ``whoisauditor``
    names pybkx's auditor and its ``triggeraudit`` makes that auditor mark and heal at once."""
    uri = f"zk+hierarchical://{zookeeper}/triggeraudit-{uuid.uuid4().hex[:12]}/ledgers"
    conf_keys = {
        "zkTimeout": 4000,
        "autoRecoveryDaemonEnabled": True,
        "lostBookieRecoveryDelay": 600,
        "rwRereplicateBackoffMs": 500,
    }
    with Sandbox(4, zk_uri=uri, directory=tmp_path / "sandbox", conf=conf_keys) as cluster:
        conf = shell_conf(tmp_path, cluster.metadata_uri)
        store = cluster.metadata_store
        election = store.auditor_election("test-observer")
        wait_until(lambda: election.leader() is not None, "an auditor", timeout_s=HEAL_TIMEOUT_S)
        auditor = election.leader()
        said = "\n".join(bookie_shell(java_classpath, conf, "whoisauditor"))
        assert auditor is not None and auditor in said, said

        with pybkx.BookKeeper(cluster.metadata_uri, zkTimeout=4000) as bk:
            lh = bk.create_ledger(3, 2, 2, password=b"")
            lh.append_many([f"entry-{i}".encode() for i in range(100)])
            lh.close()
            lost = next(b for b in lh.metadata.last_ensemble if b != auditor)
        index = cluster.bookie_addresses.index(lost)
        cluster.kill_bookie(index)
        cluster.wait_unregistered([index])
        # Not a wait: two seconds in which the auditor sees the bookie lost and, its audit
        # delayed 600 s, must mark nothing.
        time.sleep(2)
        assert not store.underreplicated_ledgers()

        bookie_shell(java_classpath, conf, "triggeraudit")

        def healed() -> bool:
            md = store.read_ledger_metadata(lh.ledger_id).value
            names = {b for ensemble in md.ensembles.values() for b in ensemble}
            return lost not in names and not store.underreplicated_ledgers()

        wait_until(
            healed, "the ledger healed after BookKeeper's triggeraudit", timeout_s=HEAL_TIMEOUT_S
        )
