"""Test-only: disk faults injected into a running bookie process from outside it, for fault
suites that drive real bookie processes (tests/faults/nemesis.py).

Off unless the environment variable ``PYBKX_TEST_DISK_FAULTS`` names a control file. Then a
daemon thread looks at that file every 100 ms; whenever it changes, every fault is cleared and
the faults it lists are injected (through ``pybkx._core.inject_disk_fault``, the storage's
file-system seam). The file holds a JSON list of objects: ``path`` (a path prefix), ``ops``
(file operations), and any of ``errno``, ``delay_ms``, ``times``; a missing or empty file means
no fault. Never set it on a production bookie.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from pybkx._core import clear_disk_faults, inject_disk_fault

__all__ = ["ENV", "start_from_environment"]

logger = logging.getLogger(__name__)

#: The environment variable naming the control file.
ENV = "PYBKX_TEST_DISK_FAULTS"
_POLL_S = 0.1


def start_from_environment() -> threading.Thread | None:
    """Start watching the control file named by ``PYBKX_TEST_DISK_FAULTS``; None (and nothing
    started) when it is not set. Never raises."""
    name = os.environ.get(ENV)
    if not name:
        return None
    path = Path(name)
    logger.warning("test hook on: disk faults are injected from %s (%s)", path, ENV)
    thread = threading.Thread(target=_watch, args=(path,), name="pybkx-disk-faults", daemon=True)
    thread.start()
    return thread


def _watch(path: Path) -> None:
    seen: tuple[int, int, int] | None = None
    while True:
        try:
            st = path.stat()
            key: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key != seen:
            seen = key
            _apply(path if key is not None else None)
        time.sleep(_POLL_S)


def _apply(path: Path | None) -> None:
    clear_disk_faults()
    if path is None:
        logger.warning("test hook: disk faults cleared")
        return
    try:
        specs: list[dict[str, Any]] = json.loads(path.read_text() or "[]")
    except (OSError, ValueError) as exc:
        logger.error("test hook: cannot read %s: %s", path, exc)
        return
    for spec in specs:
        try:
            inject_disk_fault(
                str(spec["path"]),
                [str(op) for op in spec["ops"]],
                errno=spec.get("errno"),
                delay_ms=spec.get("delay_ms"),
                times=spec.get("times"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            logger.error("test hook: bad disk fault %r: %s", spec, exc)
            continue
        logger.warning("test hook: disk fault injected: %s", json.dumps(spec, sort_keys=True))
    if not specs:
        logger.warning("test hook: disk faults cleared")
