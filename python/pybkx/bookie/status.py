"""The bookie's persisted read-only state (``persistBookieStatusEnabled``): BookKeeper's
``BOOKIE_STATUS`` file in each ledger directory's ``current/``, so that a bookie an operator (or
a full disk) made read-only is still read-only after a restart. Same file, same line as
BookKeeper's: ``<layout version>,<READ_ONLY|READ_WRITE>,<update time ms>,<manually set>``.
It only reads and writes those files; the bookie decides what the state means."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STATUS_FILE", "BookieStatus", "read_status", "write_status"]

logger = logging.getLogger(__name__)

#: BookKeeper's file name (``BookKeeperConstants.BOOKIE_STATUS_FILENAME``).
STATUS_FILE = "BOOKIE_STATUS"
_LAYOUT_VERSION = 1
_MODES = {"READ_ONLY": True, "READ_WRITE": False}


@dataclass(frozen=True)
class BookieStatus:
    """A persisted state: read-only or not, whether an operator set it (a state the disk
    checker must not undo), and when (milliseconds since the epoch; the newest copy wins)."""

    read_only: bool
    manual: bool
    updated_ms: int

    def line(self) -> str:
        mode = "READ_ONLY" if self.read_only else "READ_WRITE"
        return f"{_LAYOUT_VERSION},{mode},{self.updated_ms},{str(self.manual).lower()}\n"


def parse(text: str) -> BookieStatus | None:
    """A status line as BookKeeper writes it (3 fields, older bookies: manually set; or 4);
    None for anything else."""
    parts = [p.strip() for p in text.strip().splitlines()[0].split(",")] if text.strip() else []
    if len(parts) not in (3, 4) or parts[0] != str(_LAYOUT_VERSION) or parts[1] not in _MODES:
        return None
    try:
        updated = int(parts[2])
    except ValueError:
        return None
    manual = parts[3].lower() == "true" if len(parts) == 4 else True
    return BookieStatus(read_only=_MODES[parts[1]], manual=manual, updated_ms=updated)


def _path(ledger_dir: str | Path) -> Path:
    return Path(ledger_dir) / "current" / STATUS_FILE


def read_status(ledger_dirs: Sequence[str | Path]) -> BookieStatus | None:
    """The newest status found in ``ledger_dirs`` (unreadable or malformed copies are skipped
    with a warning); None when there is none. Never raises."""
    newest: BookieStatus | None = None
    for d in ledger_dirs:
        path = _path(d)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except OSError as exc:
            logger.warning("reading %s failed: %s", path, exc)
            continue
        status = parse(text)
        if status is None:
            logger.warning("%s does not hold a bookie status: %r", path, text[:80])
        elif newest is None or status.updated_ms > newest.updated_ms:
            newest = status
    return newest


def write_status(ledger_dirs: Sequence[str | Path], read_only: bool, manual: bool) -> bool:
    """Persists the state in every ledger directory (each written whole, then renamed into
    place), best effort as BookKeeper's: True when at least one copy was written. Never
    raises."""
    status = BookieStatus(read_only, manual and read_only, int(time.time() * 1000))
    written = 0
    for d in ledger_dirs:
        path = _path(d)
        tmp = path.with_name(STATUS_FILE + ".tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(status.line())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            written += 1
        except OSError as exc:
            logger.warning("writing %s failed (fine if another directory has it): %s", path, exc)
    if not written:
        logger.warning("the bookie status (%s) was persisted nowhere", status.line().strip())
    return written > 0
