"""The cross-replica check on real bookies: one replica made to differ (a forged entry, valid
by its client digest, written over it as a recovery add; a metadata change that names a bookie
holding no copy) is found, named, and rewritten from the majority, after which a reader of each
replica reads the same bytes; two replicas that disagree are reported, not repaired. Through
``pybkx shell crossreplicacheck``, a bookie's admin endpoints, and a bookie's own cycle."""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from recovery_helpers import FAST, payload
from support.shell import run_shell, shell_json
from support.wait import wait_until

from pybkx._core import FLAG_RECOVERY_ADD, DigestManager, master_key
from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

#: No background scrub or check: the test decides when the replicas are compared.
NO_CYCLE = {"zkTimeout": 2000, "scrubIntervalSeconds": 0}
PASSWORD = b"pw"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    directory = tmp_path_factory.mktemp("xreplica") / "sandbox"
    with Sandbox(3, directory=directory, conf=NO_CYCLE) as sandbox:
        yield sandbox


@pytest.fixture
def bk(cluster: Sandbox) -> Iterator[BookKeeper]:
    with BookKeeper(cluster.metadata_uri, **FAST) as client:
        yield client


def written(bk: BookKeeper, quorums: tuple[int, int, int], entries: int) -> int:
    """A closed ledger; with Qa == Qw every copy is stored once it is closed (a later copy of
    an add still on its way could overwrite the one a test forges)."""
    with bk.create_ledger(*quorums, password=PASSWORD) as handle:
        handle.append_many([payload(handle.ledger_id, e) for e in range(entries)])
        return handle.ledger_id


def forge(bk: BookKeeper, ledger_id: int, entry_id: int, bookie: str) -> bytes:
    """Write another body for ``entry_id`` on ``bookie`` alone, valid by its client digest, as
    a recovery add (what a faulty recovery or a buggy bookie could leave)."""
    digest = DigestManager(ledger_id, PASSWORD, "CRC32C")
    body = b"forged:" + bytes(entry_id % 251 for _ in range(64))
    packaged = digest.package(entry_id, entry_id - 1, 4096, body)
    bk.bookies.add(
        bk.address_of(bookie),
        ledger_id,
        entry_id,
        master_key(PASSWORD),
        packaged,
        FLAG_RECOVERY_ADD,
    ).result(10)
    return packaged


def stored(bk: BookKeeper, bookie: str, ledger_id: int, entry_id: int) -> bytes:
    data: bytes = bk.bookies.read(bk.address_of(bookie), ledger_id, entry_id).result(10)
    return data


def shell_check(cluster: Sandbox, *args: str) -> tuple[int, dict[str, Any]]:
    return shell_json("crossreplicacheck", cluster.metadata_uri, *args)


def findings(report: dict[str, Any]) -> set[tuple[str, str, tuple[int, ...], tuple[int, ...]]]:
    return {
        (f["bookie"], f["kind"], tuple(f["entries"]), tuple(f["repaired"]))
        for f in report["findings"]
    }


def test_a_forged_copy_on_one_of_three_replicas_is_named_and_rewritten(
    cluster: Sandbox, bk: BookKeeper
) -> None:
    ledger = written(bk, (3, 3, 3), 20)
    (ensemble,) = bk.store.read_ledger_metadata(ledger).value.ensembles.values()
    odd = ensemble[1]
    good = stored(bk, ensemble[0], ledger, 7)
    assert forge(bk, ledger, 7, odd) == stored(bk, odd, ledger, 7) != good

    code, report = shell_check(cluster, "--ledger", str(ledger), "--no-repair")
    assert code == 1
    assert findings(report) == {(odd, "differs", (7,), ())}
    assert stored(bk, odd, ledger, 7) != good  # reporting changed nothing

    code, report = shell_check(cluster, "--ledger", str(ledger))
    assert code == 0, report
    assert findings(report) == {(odd, "differs", (7,), (7,))}
    assert report["notAsked"] == {}
    assert {stored(bk, b, ledger, 7) for b in ensemble} == {good}
    code, report = shell_check(cluster, "--ledger", str(ledger))
    assert (code, report["findings"], report["differing"]) == (0, [], 0)
    handle = bk.open_ledger(ledger, PASSWORD)
    assert [e.payload for e in handle.read(0, 19)] == [payload(ledger, e) for e in range(20)]


def test_two_replicas_that_disagree_are_reported_not_repaired(
    cluster: Sandbox, bk: BookKeeper
) -> None:
    ledger = written(bk, (2, 2, 2), 10)
    (ensemble,) = bk.store.read_ledger_metadata(ledger).value.ensembles.values()
    before = stored(bk, ensemble[0], ledger, 3)
    forged = forge(bk, ledger, 3, ensemble[1])

    code, report = shell_check(cluster, "--ledger", str(ledger))
    assert code == 1
    assert findings(report) == {(b, "no-majority", (3,), ()) for b in ensemble}
    assert all("none has a majority" in f["detail"] for f in report["findings"])
    assert (stored(bk, ensemble[0], ledger, 3), stored(bk, ensemble[1], ledger, 3)) == (
        before,
        forged,
    )
    plain = run_shell("crossreplicacheck", cluster.metadata_uri, "--ledger", str(ledger))
    assert plain.returncode == 1, plain.stderr
    assert plain.stdout.count("no-majority") == 2
    assert "2 differing, 0 repaired" in plain.stdout


def test_a_replica_lacking_the_entries_gets_them_from_the_other(
    cluster: Sandbox, bk: BookKeeper
) -> None:
    # A two-replica ledger whose metadata is then made to name, in place of one of its
    # bookies, the third bookie, which holds no copy of it.
    ledger = written(bk, (2, 2, 2), 12)
    current = bk.store.read_ledger_metadata(ledger)
    (ensemble,) = current.value.ensembles.values()
    (newcomer,) = set(cluster.bookie_addresses) - set(ensemble)
    bk.store.write_ledger_metadata(
        ledger,
        dataclasses.replace(current.value, ensembles={0: (ensemble[0], newcomer)}),
        current.version,
    )

    code, report = shell_check(cluster, "--ledger", str(ledger))
    assert code == 0, report
    assert findings(report) == {(newcomer, "missing", tuple(range(12)), tuple(range(12)))}
    for entry in range(12):
        assert stored(bk, newcomer, ledger, entry) == stored(bk, ensemble[0], ledger, entry)


def test_a_striped_ledger_compares_each_write_set_on_its_own_bookies(
    cluster: Sandbox, bk: BookKeeper
) -> None:
    ledger = written(bk, (3, 2, 2), 30)
    md = bk.store.read_ledger_metadata(ledger).value
    (ensemble,) = md.ensembles.values()
    holders = [ensemble[i] for i in md.write_set(10)]
    forge(bk, ledger, 10, holders[1])
    # Two copies of entry 10: no majority; every other entry agrees although no two bookies
    # hold the same set of entries.
    code, report = shell_check(cluster, "--ledger", str(ledger), "--no-repair")
    assert code == 1
    assert findings(report) == {(b, "no-majority", (10,), ()) for b in holders}
    assert report["entries"] == 60


def test_the_bookie_endpoints_answer_a_digest_and_run_a_check(
    cluster: Sandbox, bk: BookKeeper
) -> None:
    ledger = written(bk, (3, 3, 3), 8)
    (ensemble,) = bk.store.read_ledger_metadata(ledger).value.ensembles.values()
    urls = dict(zip(cluster.bookie_addresses, cluster.admin_urls, strict=True))
    answers = []
    for bookie in ensemble:
        url = f"{urls[bookie]}/api/v1/bookie/ledger_digest?ledger_id={ledger}&first=0&last=7"
        with urllib.request.urlopen(url, timeout=30) as response:
            answers.append(json.loads(response.read()))
    assert len({(a["entries"], a["digest"]) for a in answers}) == 1
    assert answers[0]["entries"] == 8 and answers[0]["unreadable"] == 0
    base = f"{urls[ensemble[0]]}/api/v1/bookie/ledger_digest?ledger_id={ledger}"
    for bad in ("&first=0", "&first=5&last=4", "&first=0&last=7&stride=0"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + bad, timeout=30)
        assert refused.value.code == 400, bad
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}&first=0&last=20000&entries=true", timeout=30)
    assert refused.value.code == 400

    good = stored(bk, ensemble[0], ledger, 5)
    forge(bk, ledger, 5, ensemble[2])
    check = urllib.request.Request(
        f"{urls[ensemble[1]]}/api/v1/bookie/cross_replica_check?ledger_id={ledger}",
        method="POST",
    )
    with urllib.request.urlopen(check, timeout=60) as response:
        report = json.loads(response.read())
    assert findings(report) == {(ensemble[2], "differs", (5,), (5,))}
    assert {stored(bk, b, ledger, 5) for b in ensemble} == {good}


def test_each_bookie_checks_the_fragments_it_heads_in_its_scrub_cycle(tmp_path: Path) -> None:
    conf = {"zkTimeout": 2000, "scrubIntervalSeconds": 1}
    with (
        Sandbox(3, directory=tmp_path / "sandbox", conf=conf) as cluster,
        BookKeeper(cluster.metadata_uri, **FAST) as bk,
    ):
        ledger = written(bk, (3, 3, 3), 10)
        (ensemble,) = bk.store.read_ledger_metadata(ledger).value.ensembles.values()
        good = stored(bk, ensemble[0], ledger, 4)
        forge(bk, ledger, 4, ensemble[2])
        wait_until(
            lambda: stored(bk, ensemble[2], ledger, 4) == good,
            timeout_s=60,
            what="the odd replica rewritten by the cycle of the bookie heading the fragment",
        )
        admin = dict(zip(cluster.bookie_addresses, cluster.admin_urls, strict=True))[ensemble[0]]

        def repaired_count() -> int:
            url = f"{admin}/api/v1/bookie/cross_replica_check"
            with urllib.request.urlopen(url, timeout=30) as response:
                status = json.loads(response.read())
            return int(status["counts"]["repaired"])

        # Counted once the check of the ledger ends, a moment after its repair.
        wait_until(lambda: repaired_count() == 1, "the repair counted")
        with urllib.request.urlopen(f"{admin}/metrics", timeout=30) as response:
            metrics = response.read().decode()
        assert re.search(
            r"^pybkx_scrub_replica_repaired_entries(\{[^}]*\})? 1(\.0)?$", metrics, re.M
        )
        log = cluster.log_path(cluster.bookie_addresses.index(ensemble[0])).read_text()
        assert log.count(f"cross-replica check: ledger {ledger}: {ensemble[2]}") == 1


def test_a_replica_whose_entry_log_was_cut_gets_the_lost_entries_back(tmp_path: Path) -> None:
    with (
        Sandbox(3, directory=tmp_path / "sandbox", conf=NO_CYCLE) as cluster,
        BookKeeper(cluster.metadata_uri, **FAST) as bk,
    ):
        ledger = written(bk, (3, 3, 3), 200)
        victim = 2
        address = cluster.bookie_addresses[victim]
        # Cut with the bookie stopped: its clean stop wrote every entry to the log and indexed
        # it, so the index points past the end of the file for the second half at least.
        cluster.stop_bookie(victim)
        current = cluster.directory / f"bookie-{victim}" / "ledgers" / "current"
        (log,) = [p for p in current.glob("*.log") if p.stem != "index"]
        with log.open("r+b") as f:
            f.truncate(log.stat().st_size // 2)
        cluster.restart_bookie(victim)

        code, report = shell_check(cluster, "--ledger", str(ledger))
        assert code == 0, report
        ((bookie, kind, lost, repaired),) = findings(report)
        assert (bookie, kind) == (address, "missing")
        # The tail at least is gone (the storage may refuse more of a log cut short).
        assert lost == repaired and lost[-1] == 199, len(lost)
        others = [b for b in cluster.bookie_addresses if b != address]
        for entry in range(200):
            copies = {stored(bk, b, ledger, entry) for b in [*others, address]}
            assert len(copies) == 1, entry
