"""Storages for the tests: the small-limit configuration over fresh directories that the
``config``, ``open_storage`` and ``storage`` fixtures (conftest.py) open.

Owns where a test storage's directories go and its limits; must never open a storage itself.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pybkx._core import LedgerStorage

MIB = 1 << 20

OpenStorage = Callable[..., "LedgerStorage"]
"""``open_storage(config, **overrides)`` fixture type (see conftest.py)."""


def storage_config(
    root: Path,
    *,
    journals: int = 1,
    ledgers: int = 1,
    index: bool = False,
    **overrides: Any,
) -> dict[str, Any]:
    """LedgerStorage kwargs over fresh directories under ``root``, with small test limits."""
    journal_dirs = [root / f"journal{i}" for i in range(journals)]
    ledger_dirs = [root / f"ledgers{i}" for i in range(ledgers)]
    for d in [*journal_dirs, *ledger_dirs]:
        d.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "journalDirectories": [str(d) for d in journal_dirs],
        "ledgerDirectories": [str(d) for d in ledger_dirs],
        "journalPreAllocSizeMB": 1,
        "journalMaxSizeMB": 64,
        "logSizeLimit": 64 * MIB,
        "flushInterval": 0,
    }
    if index:
        index_dir = root / "index0"
        index_dir.mkdir(parents=True, exist_ok=True)
        config["indexDirectories"] = [str(index_dir)]
    config.update(overrides)
    return config
