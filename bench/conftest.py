"""Fixtures of the pytest-benchmark suite: storage directories, a filled ledger storage and a
pybkx bookie process on loopback. Run with ``pytest bench --benchmark-only``.

Owns setting up what the benchmarks measure; it never measures anything itself, and nothing in
the suite asserts on timings (results are compared with pytest-benchmark's own tools).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interop"))

import harness

from bench.compare_plan import GROUP_COMMIT
from pybkx._core import LedgerStorage
from pybkx.bookie import open_ledger_storage

FILLED_LEDGERS = 8
FILLED_ENTRIES_PER_LEDGER = 20_000
FILLED_PAYLOAD = 100


def storage_config(root: Path, **extra: object) -> dict[str, object]:
    """LedgerStorage keyword arguments: journal and ledgers under ``root``, BookKeeper's
    group-commit defaults, ``extra`` on top."""
    (root / "journal").mkdir(parents=True, exist_ok=True)
    (root / "ledgers").mkdir(parents=True, exist_ok=True)
    config: dict[str, object] = {
        "journalDirectories": [str(root / "journal")],
        "ledgerDirectories": [str(root / "ledgers")],
    }
    for key, value in GROUP_COMMIT.items():
        config[key] = value == "true" if value in ("true", "false") else int(value)
    config.update(extra)
    return config


@pytest.fixture(scope="session")
def filled_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LedgerStorage]:
    """A LedgerStorage holding FILLED_LEDGERS ledgers of FILLED_ENTRIES_PER_LEDGER entries."""
    root = tmp_path_factory.mktemp("filled")
    storage = open_ledger_storage(**storage_config(root, journalSyncData=False))
    payload = b"r" * FILLED_PAYLOAD
    for ledger in range(1, FILLED_LEDGERS + 1):
        for first in range(0, FILLED_ENTRIES_PER_LEDGER, 4096):
            n = min(4096, FILLED_ENTRIES_PER_LEDGER - first)
            storage.add_entries(ledger, [(first + i, payload) for i in range(n)])
    storage.checkpoint()
    yield storage
    storage.close()


@pytest.fixture(scope="session")
def bookie(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A pybkx bookie process (``pybkx bookie --conf``) on loopback: ``"127.0.0.1:port"``."""
    workdir = tmp_path_factory.mktemp("bookie")
    conf = "".join(f"{k}={v}\n" for k, v in GROUP_COMMIT.items())
    try:
        process, address = harness.start_pybkx_bookie(workdir, conf)
    except harness.HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield address
    process.stop()
