"""A brute-force placement checker for the tests: adherence verdicts computed straight from the
definitions (every write quorum, every Qa-subset), and exhaustive searches for the best
ensemble, replacement and relocation. Slow on purpose; it never shares code with pybkx."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

FAIL, SOFT, STRICT = 1, 3, 5

DEFAULT_RACK = "/default-rack"
DEFAULT_REGION_RACK = "/default-region/default-rack"
DEFAULT_ZONE_UD = "/default-zone/default-upgradedomain"


def quorums(ensemble: Sequence[str], wq: int) -> list[list[str]]:
    """Every write quorum (window of Qw consecutive positions, wrapping), one per start."""
    n = len(ensemble)
    return [[ensemble[(start + j) % n] for j in range(wq)] for start in range(n)]


def parts(location: str) -> list[str]:
    return location.split("/")[1:]


@dataclass(frozen=True)
class RackRules:
    min_racks: int = 2
    enforce: bool = False

    def verdict(self, loc: Mapping[str, str], ensemble: Sequence[str], wq: int, aq: int) -> int:
        if not ensemble or len(set(ensemble)) != len(ensemble) or wq > len(ensemble):
            return FAIL
        for quorum in quorums(ensemble, wq):
            racks = {loc[b] for b in quorum}
            if len(racks) < min(wq, self.min_racks):
                return FAIL
            if self.enforce and DEFAULT_RACK in racks:
                return FAIL
        return STRICT

    def acked(self, loc: Mapping[str, str], acked: Iterable[str], wq: int, aq: int) -> bool:
        return len({loc[b] for b in acked}) >= min(wq, self.min_racks)


@dataclass(frozen=True)
class RegionRules:
    min_racks: int = 2
    enforce: bool = False
    durability: int = 0  # regions an acknowledged entry must reach (<= 1: no rule)
    regions_now: int = 0  # regions the cluster offers (for MEETS_STRICT)

    def verdict(self, loc: Mapping[str, str], ensemble: Sequence[str], wq: int, aq: int) -> int:
        if not ensemble or len(set(ensemble)) != len(ensemble) or wq > len(ensemble):
            return FAIL
        result = STRICT
        for quorum in quorums(ensemble, wq):
            racks = {loc[b] for b in quorum}
            if (self.enforce or self.durability > 1) and DEFAULT_REGION_RACK in racks:
                return FAIL
            if len(racks) < min(wq, self.min_racks):
                return FAIL
            if self.durability > 1:
                for acked in itertools.combinations(quorum, aq):
                    if len({parts(loc[b])[0] for b in acked}) < self.durability:
                        return FAIL
            if len({parts(loc[b])[0] for b in quorum}) < min(wq, self.regions_now):
                result = SOFT
        return result

    def acked(self, loc: Mapping[str, str], acked: Iterable[str], wq: int, aq: int) -> bool:
        members = list(acked)
        if len({loc[b] for b in members}) < min(wq, self.min_racks):
            return False
        return self.durability <= 1 or len({parts(loc[b])[0] for b in members}) >= self.durability


@dataclass(frozen=True)
class ZoneRules:
    min_zones: int = 2
    desired_zones: int = 3

    def verdict(self, loc: Mapping[str, str], ensemble: Sequence[str], wq: int, aq: int) -> int:
        if not ensemble or len(set(ensemble)) != len(ensemble) or wq > len(ensemble):
            return FAIL
        if len(ensemble) % wq != 0 or wq <= self.min_zones:
            return FAIL
        result = STRICT
        for quorum in quorums(ensemble, wq):
            if any(loc[b] == DEFAULT_ZONE_UD for b in quorum):
                return FAIL
            zones: dict[str, list[str]] = {}
            for b in quorum:
                zone, ud = parts(loc[b])
                zones.setdefault(zone, []).append(ud)
            if len(zones) < self.min_zones:
                return FAIL
            for uds in zones.values():
                if len(uds) > 1 and len(set(uds)) < 2:
                    return FAIL
            if len(zones) < min(wq, self.desired_zones):
                result = SOFT
        return result

    def acked(self, loc: Mapping[str, str], acked: Iterable[str], wq: int, aq: int) -> bool:
        members = list(acked)
        zones = {parts(loc[b])[0] for b in members}
        return len(zones) >= min(wq, self.min_zones) and len(members) >= aq


Rules = RackRules | RegionRules | ZoneRules


def best_ensemble(
    rules: Rules,
    loc: Mapping[str, str],
    candidates: Sequence[str],
    size: int,
    wq: int,
    aq: int,
) -> int | None:
    """The best verdict any ensemble of ``size`` distinct candidates reaches (None: too few).

    Enumerates location sequences with multiplicities, not bookies, so it stays small."""
    by_location: dict[str, int] = {}
    for b in candidates:
        by_location[loc[b]] = by_location.get(loc[b], 0) + 1
    if sum(by_location.values()) < size:
        return None
    best = FAIL
    names = sorted(by_location)
    for sequence in itertools.product(names, repeat=size):
        if any(sequence.count(n) > by_location[n] for n in set(sequence)):
            continue
        fake = {f"x{i}": n for i, n in enumerate(sequence)}
        best = max(best, rules.verdict(fake, list(fake), wq, aq))
        if best == STRICT:
            break
    return best


def best_replacement(
    rules: Rules,
    loc: Mapping[str, str],
    ensemble: Sequence[str],
    index: int,
    candidates: Iterable[str],
    wq: int,
    aq: int,
) -> int | None:
    """The best verdict a single replacement at ``index`` reaches (None: no candidate)."""
    best: int | None = None
    for b in candidates:
        trial = list(ensemble)
        trial[index] = b
        verdict = rules.verdict(loc, trial, wq, aq)
        best = verdict if best is None else max(best, verdict)
    return best


def min_relocation(
    rules: Rules,
    loc: Mapping[str, str],
    ensemble: Sequence[str],
    forced: set[int],
    candidates: Sequence[str],
    wq: int,
    aq: int,
) -> int | None:
    """The fewest positions to change (always including ``forced``) for a verdict better than
    FAIL, using candidates not in the ensemble; None when impossible. Enumerates locations
    with multiplicities (the verdicts only see locations)."""
    size = len(ensemble)
    capacity: dict[str, int] = {}
    for b in candidates:
        if b not in ensemble:
            capacity[loc[b]] = capacity.get(loc[b], 0) + 1
    names = sorted(capacity)
    others = [i for i in range(size) if i not in forced]
    for extra in range(len(others) + 1):
        for chosen in itertools.combinations(others, extra):
            free = sorted(forced | set(chosen))
            for sequence in itertools.product(names, repeat=len(free)):
                if any(sequence.count(n) > capacity[n] for n in set(sequence)):
                    continue
                fake = {f"p{i}": loc[b] for i, b in enumerate(ensemble)}
                for position, name in zip(free, sequence, strict=True):
                    fake[f"p{position}"] = name
                if rules.verdict(fake, [f"p{i}" for i in range(size)], wq, aq) != FAIL:
                    return len(free)
    return None
