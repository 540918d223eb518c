"""Tiered ledger directories and entry-log placement (Alluxio's worker tiers, allocators and
reviewers, applied to entry logs): the value parsers and the tier list built from a bookie's
``tieredStorage*`` keys. Data and parsing only; the storage applies it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from pybkx.config.values import InvalidValue, dirs, optional_str

__all__ = [
    "ALLOCATORS",
    "ANNOTATORS",
    "MAX_TIERS",
    "REVIEWERS",
    "Tier",
    "build_tiers",
    "byte_sizes",
    "class_name",
]

MAX_TIERS: Final = 4
"""``tieredStorageLevels`` may be 0 (no tiers: ``ledgerDirectories``) up to this."""

ALLOCATORS: Final = ("MaxFreeAllocator", "GreedyAllocator", "RoundRobinAllocator")
REVIEWERS: Final = ("ProbabilisticBufferReviewer", "AcceptingReviewer")
ANNOTATORS: Final = ("LRUAnnotator", "LRFUAnnotator")

_SIZE_RE: Final = re.compile(r"\s*([0-9]+)\s*([KMGTP]?)I?B?\s*", re.IGNORECASE)
_UNITS: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def byte_size(value: object) -> int:
    """A size in bytes: ``1048576``, ``64M``, ``64MB``, ``1g`` (binary units, as Alluxio)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE_RE.fullmatch(str(value)) if isinstance(value, str) else None
    if match is None:
        raise InvalidValue(f"expected a size such as 64M or 1073741824, got {value!r}")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def byte_sizes(value: object) -> tuple[int, ...] | None:
    """Comma-separated sizes (``64M,64M``); None or blank: none given."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise InvalidValue(f"expected comma-separated sizes, got {value!r}")
    return tuple(byte_size(item) for item in items)


def class_name(names: Sequence[str]) -> Callable[[object], str]:
    """One of ``names``, given bare or with a package prefix (``alluxio...MaxFreeAllocator``)."""

    def parse(value: object) -> str:
        text = optional_str(value)
        if text is None:
            return names[0]
        simple = text.rsplit(".", 1)[-1]
        if simple not in names:
            raise InvalidValue(f"expected one of {', '.join(names)}, got {text!r}")
        return simple

    return parse


@dataclass(frozen=True)
class Tier:
    """One storage tier: its alias, its directories and each one's quota (None: the size of its
    file system)."""

    level: int
    alias: str
    dirs: tuple[str, ...]
    quotas: tuple[int | None, ...]


def build_tiers(
    levels: int,
    aliases: Sequence[str | None],
    dir_lists: Sequence[object],
    quota_lists: Sequence[tuple[int, ...] | None],
) -> tuple[Tier, ...]:
    """The tiers of ``tieredStorageLevels=levels`` from the per-level values (index = level).

    Every level below ``levels`` needs its directories; none at or above it may be given. With
    fewer quotas than directories the last quota applies to the rest (as Alluxio). Raises
    InvalidValue naming the key.
    """
    tiers: list[Tier] = []
    for level in range(MAX_TIERS):
        raw_dirs = dir_lists[level] if level < len(dir_lists) else None
        quotas = quota_lists[level] if level < len(quota_lists) else None
        alias = aliases[level] if level < len(aliases) else None
        if level < levels:
            tiers.append(_tier(level, levels, raw_dirs, quotas, alias))
        elif raw_dirs is not None or quotas is not None or alias is not None:
            raise InvalidValue(
                f"tieredStorageLevel{level}* is set but tieredStorageLevels={levels}"
            )
    seen: set[str] = set()
    for tier in tiers:
        for d in tier.dirs:
            if d in seen:
                raise InvalidValue(f"directory {d} is in more than one storage tier")
            seen.add(d)
    return tuple(tiers)


def _tier(
    level: int,
    levels: int,
    raw_dirs: object,
    quotas: tuple[int, ...] | None,
    alias: str | None,
) -> Tier:
    """Tier ``level`` (one of ``levels``) from its keys' values. Raises InvalidValue."""
    if raw_dirs is None:
        raise InvalidValue(
            f"tieredStorageLevel{level}Dirs is required with tieredStorageLevels={levels}"
        )
    try:
        level_dirs = dirs(raw_dirs)
    except InvalidValue as exc:
        raise InvalidValue(f"tieredStorageLevel{level}Dirs: {exc}") from None
    per_dir: list[int | None] = [None] * len(level_dirs)
    if quotas:
        if len(quotas) > len(level_dirs):
            raise InvalidValue(
                f"tieredStorageLevel{level}DirsQuota has {len(quotas)} sizes for "
                f"{len(level_dirs)} directories"
            )
        per_dir = [quotas[min(i, len(quotas) - 1)] for i in range(len(level_dirs))]
    return Tier(level, alias or f"level{level}", level_dirs, tuple(per_dir))
