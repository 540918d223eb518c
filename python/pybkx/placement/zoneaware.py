"""The zone-aware policy: write quorums over desired (at least minimum) zones, UDs apart.
It must never accept a location that is not exactly /zone/upgradedomain."""

# Verdicts, as BookKeeper's ZoneawareEnsemblePlacementPolicyImpl computes them:
#   FAIL          E is not a multiple of Qw, Qw <= minNumZones, a bookie's location is unknown
#                 (the default fault domain), a write quorum spans fewer than minNumZones zones,
#                 or a zone with several bookies in a write quorum puts them on one upgrade
#                 domain;
#   MEETS_SOFT    some write quorum spans fewer than min(Qw, desiredNumZones) zones;
#   MEETS_STRICT  otherwise.

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from pybkx import errors
from pybkx.config import ConfigError
from pybkx.placement.base import (
    PlacementPolicyAdherence,
)
from pybkx.placement.candidates import PlacementHint
from pybkx.placement.conf import conf_bool, conf_int
from pybkx.placement.selection import Cell, SearchState, WindowRule, ZoneSpread
from pybkx.placement.topology import DEFAULT_ZONE_AND_UPGRADE_DOMAIN
from pybkx.placement.topology_aware import TopologyAwarePolicy

__all__ = ["ZoneawareEnsemblePlacementPolicy"]


class ZoneawareEnsemblePlacementPolicy(TopologyAwarePolicy):
    """Places each write quorum over min(Qw, desired) zones when possible, else over at least
    ``minNumZonesPerWriteQuorum``; bookies of one zone in a write quorum sit on at least two
    upgrade domains.

    Keys: ``minNumZonesPerWriteQuorum`` (2), ``desiredNumZonesPerWriteQuorum`` (3),
    ``enforceStrictZoneawarePlacement`` (true), plus the common ones (disk weights, read
    reordering, ``reppDnsResolverClass``).

    Guarantees with strict placement: ``new_ensemble`` raises IncorrectParameterException when
    E is not a multiple of Qw or Qw <= minNumZones, never uses a bookie of the default fault
    domain, returns MEETS_STRICT whenever such an ensemble exists, else MEETS_SOFT, else raises
    NotEnoughBookiesException (the search is complete). Without strict placement it makes the
    same attempts and then settles for any distinct bookies (where BookKeeper picks randomly).
    """

    DEFAULT_LOCATION = DEFAULT_ZONE_AND_UPGRADE_DOMAIN
    LEVELS = 2

    def _configure_policy(self, conf: Mapping[str, object]) -> None:
        self.min_zones = conf_int(conf, "minNumZonesPerWriteQuorum", 2, minimum=1)
        self.desired_zones = conf_int(conf, "desiredNumZonesPerWriteQuorum", 3, minimum=1)
        self.strict = conf_bool(conf, "enforceStrictZoneawarePlacement", True)
        if self.min_zones > self.desired_zones:
            raise ConfigError(
                f"minNumZonesPerWriteQuorum ({self.min_zones}) cannot exceed "
                f"desiredNumZonesPerWriteQuorum ({self.desired_zones})"
            )
        self._zone_cells: dict[str, list[Cell]] = {}

    def _requires_resolver(self, conf: Mapping[str, object]) -> bool:
        return conf_bool(conf, "enforceStrictZoneawarePlacement", True)

    def _placement_exclusions(self) -> tuple[frozenset[str], frozenset[str]]:
        if not self.strict:
            return frozenset(), frozenset()
        return frozenset({self.DEFAULT_LOCATION}), frozenset()

    def _adherence_exclusions(self) -> frozenset[str]:
        return frozenset({self.DEFAULT_LOCATION})

    def _check_new_ensemble(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        if not self.strict:
            return
        if ensemble_size % write_quorum:
            raise errors.IncorrectParameterException(
                f"with enforceStrictZoneawarePlacement the ensemble size ({ensemble_size}) must "
                f"be a multiple of the write quorum ({write_quorum})"
            )
        if write_quorum <= self.min_zones:
            raise errors.IncorrectParameterException(
                f"with enforceStrictZoneawarePlacement the write quorum ({write_quorum}) must "
                f"exceed minNumZonesPerWriteQuorum ({self.min_zones})"
            )

    def _prepare(self, pool: Mapping[Cell, Sequence[str]], fixed: Sequence[Cell | None]) -> None:
        zones: dict[str, list[Cell]] = {}
        for cell in pool:
            zones.setdefault(cell.domain, []).append(cell)
        self._zone_cells = zones

    def _levels(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int, replacing: bool
    ) -> list[list[WindowRule]]:
        levels: list[list[WindowRule]] = [
            [ZoneSpread(min(write_quorum, self.desired_zones), self.DEFAULT_LOCATION)],
            [ZoneSpread(min(write_quorum, self.min_zones), self.DEFAULT_LOCATION)],
        ]
        if not self.strict:
            levels.append([])
        return levels

    DOMAIN_MATTERS = True

    def _domain_key(
        self, state: SearchState, position: int, domain: str, hint: PlacementHint
    ) -> tuple[int, ...]:
        return (self._domain_overlap(state, position, domain), state.domain_counts.get(domain, 0))

    def _cell_key(
        self, state: SearchState, position: int, cell: Cell | None, hint: PlacementHint
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if cell is None or not state.cell_counts.get(cell, 0):
            return (), (0, 0)
        return (), (1, self._overlap(state, position, cell))

    def _symmetry_key(self, state: SearchState, cell: Cell) -> Hashable:
        open_positions = state.open_positions
        if state.cell_counts.get(cell, 0) or cell.location == self.DEFAULT_LOCATION:
            return cell  # used, or refused by the rules: like no other cell
        if state.domain_counts.get(cell.domain, 0):
            return ("unused-ud", cell.domain, min(state.capacity[cell], open_positions))
        zone = self._zone_cells.get(cell.domain, [cell])
        default = self.DEFAULT_LOCATION
        signature = tuple(
            sorted(
                (min(state.capacity.get(c, 0), open_positions), c.location == default) for c in zone
            )
        )
        return ("unused-zone", signature, min(state.capacity[cell], open_positions))

    def _ensemble_verdict(
        self, cells: Sequence[Cell], write_quorum: int, ack_quorum: int
    ) -> PlacementPolicyAdherence:
        if len(cells) % write_quorum or write_quorum <= self.min_zones:
            return PlacementPolicyAdherence.FAIL
        return PlacementPolicyAdherence.MEETS_STRICT

    def _window_verdict(
        self, window: Sequence[Cell], write_quorum: int, ack_quorum: int
    ) -> PlacementPolicyAdherence:
        zones: dict[str, set[str]] = {}
        counts: dict[str, int] = {}
        for cell in window:
            if cell.location == self.DEFAULT_LOCATION:
                return PlacementPolicyAdherence.FAIL
            zones.setdefault(cell.domain, set()).add(cell.subdomain)
            counts[cell.domain] = counts.get(cell.domain, 0) + 1
        if len(zones) < self.min_zones:
            return PlacementPolicyAdherence.FAIL
        if any(counts[zone] > 1 and len(uds) < 2 for zone, uds in zones.items()):
            return PlacementPolicyAdherence.FAIL
        if len(zones) < min(write_quorum, self.desired_zones):
            return PlacementPolicyAdherence.MEETS_SOFT
        return PlacementPolicyAdherence.MEETS_STRICT

    def _acked_adhering(self, cells: Sequence[Cell], write_quorum: int, ack_quorum: int) -> bool:
        zones = {cell.domain for cell in cells}
        return len(zones) >= min(write_quorum, self.min_zones) and len(cells) >= ack_quorum
