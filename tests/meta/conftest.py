"""Fixtures for the metadata tests: one real ZooKeeper (Debian's package) per session, and stores
of every backend on a fresh namespace per test; everything opened here is closed at teardown."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pybkx.meta import MetadataStore, open_metadata_store

OpenStore = Callable[..., MetadataStore]

BACKENDS = [pytest.param("zookeeper", marks=pytest.mark.integration), "embedded"]


@pytest.fixture
def zk_root() -> str:
    """A ledgers root of this test's own: ``/t<random>/ledgers``."""
    return f"/t{uuid.uuid4().hex[:12]}/ledgers"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_uri(backend: str, request: pytest.FixtureRequest, tmp_path: Path, zk_root: str) -> str:
    """The URI of an empty store of ``backend`` for this test."""
    if backend == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        return f"zk+hierarchical://{server}{zk_root}"
    return f"embedded://{tmp_path}/meta"


@pytest.fixture
def open_store(store_uri: str) -> Iterator[OpenStore]:
    """``open_store(**conf)``: another store on the same URI (another session); all closed at
    teardown."""
    opened: list[MetadataStore] = []

    def _open(**conf: Any) -> MetadataStore:
        store = open_metadata_store(store_uri, **conf)
        opened.append(store)
        return store

    yield _open
    for store in reversed(opened):
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> MetadataStore:
    """A store on an initialised cluster."""
    opened = open_store()
    opened.init_new_cluster()
    return opened
