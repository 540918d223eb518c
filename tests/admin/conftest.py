"""Fixtures for the operations tests: real clusters (a sandbox of bookie processes with their
admin HTTP servers) on the embedded store and on the session's ZooKeeper, and an HTTP client
that returns status, headers and body whatever the status. Owns setup only."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybkx.tools.sandbox import Sandbox

ZK_TIMEOUT_MS = 4000


@pytest.fixture(scope="module", params=["embedded", "zookeeper"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sandbox]:
    """A running 3-bookie cluster for the module, on each metadata backend."""
    zk_uri = None
    if request.param == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        zk_uri = f"zk+hierarchical://{server}/t{uuid.uuid4().hex[:12]}/ledgers"
    directory = tmp_path_factory.mktemp(f"cluster-{request.param}")
    sandbox = Sandbox(
        3,
        zk_uri=zk_uri,
        directory=Path(directory),
        conf={"zkTimeout": ZK_TIMEOUT_MS, "flushInterval": 500},
    )
    sandbox.start()
    try:
        yield sandbox
    finally:
        sandbox.stop()
