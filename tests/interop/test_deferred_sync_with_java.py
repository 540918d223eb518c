"""WriteFlag.DEFERRED_SYNC and ``force()`` across implementations: BookKeeper 4.17.3's own ledger
client (V3) writes a deferred-sync ledger on pybkx bookies, forces it and halts without closing;
every bookie is then killed (-9) and restarted and the forced entries are all there, for pybkx's
client and for Java's. And pybkx's client writes a deferred-sync ledger on a real Java bookie."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ledgers_with_java_client import Java

from pybkx import WriteFlag
from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.interop

PASSWORD = b"deferred"

#: One operation to a running LedgerClient, its result back (``Java.session``).
Send = Callable[[dict[str, Any]], dict[str, Any]]


def payloads(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() * (1 + i % 4) for i in range(n)]


@pytest.fixture
def cluster(zookeeper_server: str, tmp_path: Path) -> Iterator[Sandbox]:
    """3 pybkx bookies registered in the session ZooKeeper under a fresh root."""
    uri = f"zk+hierarchical://{zookeeper_server}/interop-{uuid.uuid4().hex}/ledgers"
    with Sandbox(3, zk_uri=uri, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sb:
        yield sb


def test_a_java_deferred_sync_ledger_forced_on_pybkx_bookies_survives_kill_9(
    cluster: Sandbox, java_classpath: str, tmp_path: Path
) -> None:
    data = payloads(150, "java-deferred")
    java = Java(java_classpath, cluster, tmp_path, ("useV2WireProtocol=false",))

    def append(send: Send, first: int, last: int) -> dict[str, Any]:
        return send(
            {"op": "append", "writer": "w", "payloads_hex": [p.hex() for p in data[first:last]]}
        )

    with java.session() as send:
        created = send(
            {
                "op": "create_with_write_flags",
                "writer": "w",
                "ensemble": 3,
                "write_quorum": 3,
                "ack_quorum": 2,
                "digest": "CRC32C",
                "password_hex": PASSWORD.hex(),
                "write_flags": ["DEFERRED_SYNC"],
            }
        )
        assert "error" not in created, created
        ledger_id = created["ledger"]
        appended = append(send, 0, 100)
        assert appended["lac"] == -1, appended  # the LAC waits for force()
        assert send({"op": "force", "writer": "w"})["lac"] == 99
        appended = append(send, 100, 150)
        assert appended["lac"] == 99, appended
        assert send({"op": "force", "writer": "w"})["lac"] == 149
        send({"op": "halt"})  # the JVM stops without closing the ledger
    for index in range(3):
        cluster.kill_bookie(index)
    # A killed bookie's registration lasts until its ZooKeeper session expires: only then does
    # a registration mean the restarted process.
    cluster.wait_unregistered(range(3))
    for index in range(3):
        cluster.restart_bookie(index)
    with BookKeeper(cluster.metadata_uri, zkTimeout=2000) as bk:
        rh = bk.open_ledger(ledger_id, PASSWORD)
        assert rh.is_closed and rh.last_add_confirmed == 149
        assert [e.payload for e in rh] == data
    with java.session() as send:
        opened = send(
            {
                "op": "open",
                "ledger": ledger_id,
                "password_hex": PASSWORD.hex(),
                "digest": "CRC32C",
                "recovery": True,
            }
        )
        assert opened["closed"] and opened["lac"] == 149, opened
        read = send({"op": "read", "ledger": ledger_id, "first": 0, "last": 149})
        sizes = [entry["size"] for entry in read["entries"]]
        assert sizes == [len(p) for p in data]


def test_pybkx_deferred_sync_on_a_java_bookie(java_bookie: str, zookeeper: str) -> None:
    uri = f"zk+hierarchical://{zookeeper}/ledgers"
    with BookKeeper(uri, useV2WireProtocol=False, zkTimeout=2000) as bk:
        # The session's Java bookie serves other tests that read ledger 0 expecting nothing
        # there: an empty ledger (metadata only, nothing on the bookie) takes the first id.
        bk.create_ledger(1, 1, 1).close()
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD, write_flags={WriteFlag.DEFERRED_SYNC})
        data = payloads(40, "pybkx-deferred")
        lh.append_many(data)
        assert lh.last_add_confirmed == -1
        assert lh.force() == 39
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, PASSWORD)
        assert rh.last_add_confirmed == 39
        assert [e.payload for e in rh] == data
