"""Where a bookie's entry-log bytes go, per storage tier: live (ledgers its metadata names on
this bookie), deleted but not yet collected (their ledgers are gone from the index; their logs
still hold them), orphaned (stored, metadata gone: the next GC pass deletes them),
over-replicated (closed ledgers no ensemble names this bookie in), compactable (the dead bytes
a major compaction would win back: those of logs at most ``majorCompactionThreshold`` live), and
the logs' own overhead (headers, ledger maps, padding). It measures; it never deletes, moves or
compacts (``bookie.gc`` and the storage's lifecycle do).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pybkx.bookie.gc import LocalOrphans

if TYPE_CHECKING:
    from pybkx._core import LedgerStorage
    from pybkx.config import ServerConfig

__all__ = ["TierSpace", "account_space", "compaction_progress"]

DEFAULT_TIER = "default"
"""The tier name of ``ledgerDirectories`` on a bookie without ``tieredStorageLevels``."""


@dataclass
class TierSpace:
    """The entry-log bytes of one tier, by what they hold (bytes as the ledgers maps count
    them; ``overhead`` is the rest of the files' sizes)."""

    tier: str
    entry_logs: int = 0
    file_bytes: int = 0
    live: int = 0
    deleted: int = 0
    orphaned: int = 0
    over_replicated: int = 0
    compactable: int = 0
    ledgers: set[int] = field(default_factory=set)

    @property
    def overhead(self) -> int:
        return max(
            0, self.file_bytes - self.live - self.deleted - self.orphaned - self.over_replicated
        )

    def as_json(self) -> dict[str, object]:
        """BookKeeper-style camelCase fields (pybkx's own endpoint: BookKeeper has none)."""
        return {
            "tier": self.tier,
            "entryLogs": self.entry_logs,
            "fileBytes": self.file_bytes,
            "liveBytes": self.live,
            "deletedBytes": self.deleted,
            "orphanedBytes": self.orphaned,
            "overReplicatedBytes": self.over_replicated,
            "compactableBytes": self.compactable,
            "overheadBytes": self.overhead,
            "ledgers": len(self.ledgers),
        }


def account_space(
    storage: LedgerStorage, config: ServerConfig, orphans: LocalOrphans | None = None
) -> list[TierSpace]:
    """Each tier's entry-log bytes by what they hold, top tier first. ``orphans``: what the
    garbage collector found (``GarbageCollector.orphans``; None: counted as live, as a
    standalone bookie has no metadata to compare). Raises BookieException (the storage)."""
    tier_of = _tier_of_directories(config)
    located = _entry_log_files(tier_of)
    stored = set(storage.list_ledgers())
    orphaned = set(orphans.without_metadata) if orphans else set()
    over = set(orphans.over_replicated) if orphans else set()
    threshold = config.major_compaction_threshold
    tiers: dict[str, TierSpace] = {
        name: TierSpace(name) for name in dict.fromkeys(tier_of.values())
    }
    for log_id, ledgers in storage.entry_log_ledgers().items():
        where = located.get(log_id)
        if where is None:
            continue  # removed since the maps were read
        tier, size = where
        space = tiers[tier]
        space.entry_logs += 1
        space.file_bytes += size
        live_here = 0
        for ledger_id, nbytes in ledgers.items():
            if ledger_id not in stored:
                space.deleted += nbytes
                continue
            space.ledgers.add(ledger_id)
            if ledger_id in orphaned:
                space.orphaned += nbytes
            elif ledger_id in over:
                space.over_replicated += nbytes
            else:
                space.live += nbytes
            live_here += nbytes
        total = sum(ledgers.values())
        if total and live_here / total <= threshold:
            space.compactable += total - live_here
    return list(tiers.values())


def _tier_of_directories(config: ServerConfig) -> dict[str, str]:
    """Ledger directory -> its tier's name, top tier first."""
    tiers = config.tiers
    if not tiers:
        return dict.fromkeys(config.ledger_directories, DEFAULT_TIER)
    return {d: tier.alias for tier in tiers for d in tier.dirs}


def _entry_log_files(tier_of: dict[str, str]) -> dict[int, tuple[str, int]]:
    """Entry log id -> (its tier, its file's size), from the directories' ``current/``."""
    found: dict[int, tuple[str, int]] = {}
    for directory, tier in tier_of.items():
        try:
            entries = list(os.scandir(Path(directory) / "current"))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if not name.endswith(".log") or name == "index.log":
                continue
            try:
                found[int(name[:-4], 16)] = (tier, entry.stat().st_size)
            except (ValueError, OSError):
                continue
    return found


def compaction_progress(
    stats: dict[str, int], now_ms: int | None = None
) -> dict[str, object] | None:
    """The compaction under way, from the storage's ``pybkx_compaction_*`` gauges
    (``LedgerStorage.stats()``): logs and bytes planned and done, seconds running, and an ETA
    at the rate so far (None before the first log is done); None while none runs."""
    started = stats.get("pybkx_compaction_started_ms", 0)
    if not started:
        return None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    elapsed_s = max(0.0, (now_ms - started) / 1000)
    planned = stats.get("pybkx_compaction_bytes_planned", 0)
    done = stats.get("pybkx_compaction_bytes_done", 0)
    eta = elapsed_s * (planned - done) / done if done else None
    return {
        "logsPlanned": stats.get("pybkx_compaction_logs_planned", 0),
        "logsDone": stats.get("pybkx_compaction_logs_done", 0),
        "bytesPlanned": planned,
        "bytesDone": done,
        "runningSeconds": round(elapsed_s, 3),
        "etaSeconds": None if eta is None else round(eta, 1),
    }
