"""Fixtures for the tests: temporary bookie directories, a storage opener, the session ZooKeeper.

Owns test setup only; must never leave a LedgerStorage open (it locks its directories).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The shared helpers (the ``support`` package) sit beside the tests; make them importable
# whatever pytest's import mode is.
sys.path.insert(0, str(Path(__file__).parent))

from support.storage import OpenStorage, storage_config

# One session ZooKeeper for every test directory.
from support.zookeeper import zookeeper_server  # noqa: F401

from pybkx._core import LedgerStorage
from pybkx.bookie import open_ledger_storage


@pytest.fixture(scope="session", autouse=True)
def private_pybkx_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test (and every process a test starts) uses a home of its own for ``~/.pybkx``: a
    test's `pybkx sandbox` never becomes the default cluster of the machine's user, and no
    metadata URI of the user's shell leaks into a test."""
    home = tmp_path_factory.mktemp("pybkx-home")
    saved = {k: os.environ.get(k) for k in ("PYBKX_HOME", "PYBKX_METADATA_URI")}
    os.environ["PYBKX_HOME"] = str(home)
    os.environ.pop("PYBKX_METADATA_URI", None)
    yield home
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def config(tmp_path: Path) -> dict[str, Any]:
    """Small-limit config over one journal and one ledger directory under ``tmp_path``."""
    return storage_config(tmp_path)


@pytest.fixture
def open_storage() -> Iterator[OpenStorage]:
    """``open_storage(config, **overrides)``: a LedgerStorage closed at teardown at the latest."""
    opened: list[LedgerStorage] = []

    def _open(config: dict[str, Any], **overrides: Any) -> LedgerStorage:
        storage = open_ledger_storage(**{**config, **overrides})
        opened.append(storage)
        return storage

    yield _open
    for storage in reversed(opened):
        storage.close()


@pytest.fixture
def storage(config: dict[str, Any], open_storage: OpenStorage) -> LedgerStorage:
    """An open storage on the ``config`` directories."""
    return open_storage(config)
