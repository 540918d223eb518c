"""Apache BookKeeper's own Java client on a ledger pybkx offloaded to object storage: the
ledger's metadata now carries the offload record (custom metadata ``pybkx.offloadContext``) and
the Java client still opens it and reads every entry byte-identical, as it did before.

The bookies still serve the ledger from their local copies (reads from the object are the next
step); this checks that the record is metadata BookKeeper's client accepts.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.s3server import S3Server, running_s3_server
from test_ledgers_with_java_client import Java, java_entries

from pybkx.client import BookKeeper
from pybkx.config.objectstore import ObjectStorageSettings
from pybkx.offload import ObjectStore, context_of, offload_ledger
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.interop


@pytest.fixture
def cluster(zookeeper_server: str, tmp_path: Path) -> Iterator[Sandbox]:
    uri = f"zk+hierarchical://{zookeeper_server}/offload-{uuid.uuid4().hex}/ledgers"
    with Sandbox(3, zk_uri=uri, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sb:
        yield sb


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Server]:
    with running_s3_server(tmp_path / "objects") as server:
        yield server


def test_java_reads_an_offloaded_ledger_byte_identical(
    java_classpath: str, cluster: Sandbox, s3: S3Server, tmp_path: Path
) -> None:
    data = [hashlib.sha256(str(e).encode()).digest() * (1 + e % 50) for e in range(400)]
    password = b"offload-pw"
    store = ObjectStore(
        ObjectStorageSettings(
            bucket="interop",
            endpoint=f"http://{s3.endpoint}",
            access_key=s3.access_key,
            secret_key=s3.secret_key,
        )
    )
    with BookKeeper(cluster.metadata_uri, zkTimeout=2000) as bk:
        lh = bk.create_ledger(3, 2, 2, "CRC32C", password)
        lh.append_many(data)
        lh.close()
        ledger = lh.ledger_id
        assert offload_ledger(bk, store, ledger, password).action == "written"
        recorded = context_of(bk.open_ledger(ledger, password, recovery=False).metadata)
        assert recorded is not None and recorded.complete
    ops: list[dict[str, Any]] = [
        {
            "op": "open",
            "ledger": ledger,
            "password_hex": password.hex(),
            "digest": "CRC32C",
            "recovery": False,
        },
        {"op": "read", "ledger": ledger, "first": 0, "last": 399},
    ]
    opened, read = Java(java_classpath, cluster, tmp_path).run(ops)
    assert opened.get("error") is None, opened
    assert (opened["lac"], opened["closed"]) == (399, True)
    assert opened["length"] == sum(map(len, data))
    assert read.get("error") is None, read
    assert read["entries"] == java_entries(data, 0, 399)
