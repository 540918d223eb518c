"""Adv ledgers and explicit LAC between Apache BookKeeper's own ledger client (Java 4.17.3) and
pybkx's client on one pybkx cluster: Java reads (and recovers) adv ledgers pybkx wrote with
out-of-order entry ids, pybkx reads ones Java wrote with ``createLedgerAdv`` (a chosen ledger
id, ids out of order), and each side's reader sees the other's idle writer's last entry through
WRITE_LAC / READ_LAC (V3, ``explicitLacInterval``).

Owns only these two features' interop; the Java side is java/.../LedgerClient.java, run by the
``Java`` helper of test_ledgers_with_java_client.py.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.wait import wait_until
from test_ledgers_with_java_client import Case, Expect, Java

from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.interop

ENTRIES = 60
V3 = ("useV2WireProtocol=false",)
CASES = [Case(3, 2, 2, "CRC32C"), Case(2, 2, 2, "MAC"), Case(3, 3, 2, "CRC32")]


@pytest.fixture
def cluster(zookeeper_server: str, tmp_path: Path) -> Iterator[Sandbox]:
    """3 pybkx bookies registered in the session ZooKeeper under a fresh root."""
    uri = f"zk+hierarchical://{zookeeper_server}/interop-{uuid.uuid4().hex}/ledgers"
    with Sandbox(3, zk_uri=uri, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sb:
        yield sb


def shuffled_ids(seed: str) -> list[int]:
    """0..ENTRIES-1 in an order where later ids often come first (gaps filled later)."""
    ids = list(range(ENTRIES))
    random.Random(seed).shuffle(ids)
    return ids


def data_of(seed: str) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(0, 900)) for _ in range(ENTRIES)]


def expected_entries(data: list[bytes], order: list[int]) -> list[dict[str, Any]]:
    """What LedgerClient prints for entries 0..ENTRIES-1 of an adv ledger whose entries were
    added in ``order``: the length field grows in the order of the adds, as BookKeeper's
    ``LedgerHandleAdv`` counts it."""
    length_after: dict[int, int] = {}
    total = 0
    for entry_id in order:
        total += len(data[entry_id])
        length_after[entry_id] = total
    return [
        {
            "id": i,
            "size": len(data[i]),
            "sha256": hashlib.sha256(data[i]).hexdigest(),
            "length_field": length_after[i],
        }
        for i in range(ENTRIES)
    ]


@pytest.mark.parametrize("protocol", ["V2", "V3"])
def test_java_reads_adv_ledgers_pybkx_wrote(
    cluster: Sandbox, java_classpath: str, tmp_path: Path, protocol: str
) -> None:
    expect = Expect(cluster)
    settings = V3 if protocol == "V3" else ()
    java = Java(java_classpath, cluster, tmp_path, settings)
    written = []
    with BookKeeper(cluster.metadata_uri, zkTimeout=2000) as bk:
        for case in CASES:
            order, data = shuffled_ids(case.name), data_of(case.name)
            lh = bk.create_ledger_adv(
                case.ensemble,
                case.write_quorum,
                case.ack_quorum,
                "HMAC" if case.digest == "MAC" else case.digest,
                case.password,
            )
            futures = [lh.append_async(i, data[i]) for i in order]
            assert [f.result(30) for f in futures] == order
            closed = case.name != "E3-Qw3-Qa2-CRC32"  # this one Java recovers
            if closed:
                lh.close()
            written.append((case, lh.ledger_id, order, data, closed))
        ops: list[dict[str, Any]] = []
        for case, ledger_id, *_ in written:
            ops.append(case.open_op(ledger_id, recovery=True))
            ops.append({"op": "read", "ledger": ledger_id, "first": 0, "last": ENTRIES - 1})
        results = java.run(ops)
    for i, (case, _, order, data, closed) in enumerate(written):
        where = f"{case.name} {protocol} {'closed' if closed else 'recovered'}"
        opened, read = results[2 * i], results[2 * i + 1]
        if expect.ok(where, opened):
            expect.equal(where, "Java: LAC", opened["lac"], ENTRIES - 1)
            expect.equal(where, "Java: closed", opened["closed"], True)
        if expect.ok(where, read):
            expect.entries(where, read["entries"], expected_entries(data, order))
    expect.check()


def test_pybkx_reads_adv_ledgers_java_wrote(
    cluster: Sandbox, java_classpath: str, tmp_path: Path
) -> None:
    expect = Expect(cluster)
    java = Java(java_classpath, cluster, tmp_path)
    chosen = 4_242_000
    ops: list[dict[str, Any]] = []
    plans = []
    for n, case in enumerate(CASES):
        order, data = shuffled_ids("java-" + case.name), data_of("java-" + case.name)
        create = {**case.create_op(f"w{n}"), "adv": True, "ledger_id": chosen + n}
        ops += [
            create,
            {
                "op": "append",
                "writer": f"w{n}",
                "entry_ids": order,
                "payloads_hex": [data[i].hex() for i in order],
            },
            {"op": "close", "writer": f"w{n}"},
        ]
        plans.append((case, chosen + n, order, data))
    results = java.run(ops)
    with BookKeeper(cluster.metadata_uri, zkTimeout=2000) as bk:
        for n, (case, ledger_id, order, data) in enumerate(plans):
            where = f"{case.name} (Java createLedgerAdv)"
            if not all(expect.ok(where, r) for r in results[3 * n : 3 * n + 3]):
                continue
            expect.equal(where, "Java: chosen ledger id", results[3 * n]["ledger"], ledger_id)
            acked = sorted(results[3 * n + 1]["acked"])
            expect.equal(where, "Java: acked", acked, list(range(ENTRIES)))
            rh = bk.open_ledger(ledger_id, case.password)
            expect.equal(where, "pybkx: LAC", rh.last_add_confirmed, ENTRIES - 1)
            got = rh.read(0, ENTRIES - 1)
            expect.equal(where, "pybkx: payloads", [e.payload for e in got], data)
            lengths = [e["length_field"] for e in expected_entries(data, order)]
            expect.equal(where, "pybkx: length fields", [e.ledger_length for e in got], lengths)
    expect.check()


def test_explicit_lac_from_a_pybkx_writer_reaches_a_java_reader(
    cluster: Sandbox, java_classpath: str, tmp_path: Path
) -> None:
    case = Case(3, 2, 2, "CRC32C")
    java = Java(java_classpath, cluster, tmp_path, V3)
    with BookKeeper(
        cluster.metadata_uri, zkTimeout=2000, useV2WireProtocol=False, explicitLacInterval=100
    ) as bk:
        lh = bk.create_ledger(3, 2, 2, "CRC32C", case.password)
        assert lh.append_many([b"e%d" % i for i in range(ENTRIES)]) == ENTRIES - 1
        with java.session() as send:
            assert "error" not in send(case.open_op(lh.ledger_id, recovery=False))
            read_explicit = {"op": "read_explicit_lac", "ledger": lh.ledger_id}
            wait_until(
                lambda: send(read_explicit).get("lac") == ENTRIES - 1,
                "Java's readExplicitLastConfirmed reaches the idle pybkx writer's last entry",
            )
            # Java's V3 readLastAddConfirmed goes through READ_LAC as well.
            assert send({"op": "read_lac", "ledger": lh.ledger_id})["lac"] == ENTRIES - 1
        lh.close()


def test_explicit_lac_from_a_java_writer_reaches_a_pybkx_reader(
    cluster: Sandbox, java_classpath: str, tmp_path: Path
) -> None:
    case = Case(3, 2, 2, "CRC32C")
    java = Java(java_classpath, cluster, tmp_path, (*V3, "explicitLacInterval=100"))
    with (
        BookKeeper(cluster.metadata_uri, zkTimeout=2000, useV2WireProtocol=False) as bk,
        java.session() as send,
    ):
        created = send(case.create_op("w"))
        assert "error" not in created
        payloads = [(b"j%d" % i).hex() for i in range(ENTRIES)]
        assert send({"op": "append", "writer": "w", "payloads_hex": payloads})["lac"] == (
            ENTRIES - 1
        )
        rh = bk.open_ledger(created["ledger"], case.password, recovery=False)
        wait_until(
            lambda: rh.read_explicit_lac() == ENTRIES - 1,
            "pybkx's read_explicit_lac reaches the idle Java writer's last entry",
        )
        assert rh.read(ENTRIES - 1, ENTRIES - 1)[0].payload == b"j%d" % (ENTRIES - 1)
        assert "error" not in send({"op": "close", "writer": "w"})
