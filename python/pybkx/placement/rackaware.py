"""The rack-aware policy (the client default): write quorums on minNumRacksPerWriteQuorum.
It must never look at regions, nor use the default rack when enforced."""

# A rack is a bookie's whole network location (``/rack1``, or ``/region/rack`` from a resolver
# that returns regions too). Locations of different depths may coexist, unlike BookKeeper,
# whose topology drops a bookie whose depth differs (BK#2490).

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pybkx.placement.base import (
    PlacementPolicyAdherence,
)
from pybkx.placement.candidates import PlacementHint
from pybkx.placement.conf import conf_bool, conf_int
from pybkx.placement.selection import Cell, MinLocations, SearchState, WindowRule
from pybkx.placement.topology import DEFAULT_RACK
from pybkx.placement.topology_aware import TopologyAwarePolicy

__all__ = ["RackawareEnsemblePlacementPolicy"]


class RackawareEnsemblePlacementPolicy(TopologyAwarePolicy):
    """Places each write quorum on at least m = min(Qw, ``minNumRacksPerWriteQuorum``) racks.

    Keys: ``minNumRacksPerWriteQuorum`` (2), ``enforceMinNumRacksPerWriteQuorum`` (false),
    ``ignoreLocalNodeInPlacementPolicy``, ``useHostnameResolveLocalNodePlacementPolicy``,
    ``diskWeightBasedPlacementEnabled``, ``bookieMaxMultipleForWeightBasedPlacement`` (3),
    ``ensembleRandomReadReordering``, ``readReorderThresholdPendingRequests`` (0),
    ``bookieFailureHistoryExpirationMSec`` (60000), ``reppDnsResolverClass`` and its keys.

    Guarantees: ``new_ensemble`` returns a MEETS_STRICT ensemble whenever one exists among the
    eligible bookies (the search is complete). Without enforcement it falls back to the best
    spread it can find (adherence FAIL); with enforcement it raises NotEnoughBookiesException
    instead, and bookies in the default rack (unknown location) are never chosen nor accepted
    by the adherence check. ``replace_bookie`` prefers, among replacements keeping the write
    quorums through that position valid, the replaced bookie's rack, then unused racks.
    Adherence is FAIL or MEETS_STRICT (never MEETS_SOFT), as in BookKeeper.
    """

    DEFAULT_LOCATION = DEFAULT_RACK
    MIN_LEVELS = 1

    def _configure_policy(self, conf: Mapping[str, object]) -> None:
        self.min_racks = conf_int(conf, "minNumRacksPerWriteQuorum", 2, minimum=1)
        self.enforce_min_racks = conf_bool(conf, "enforceMinNumRacksPerWriteQuorum", False)

    def _requires_resolver(self, conf: Mapping[str, object]) -> bool:
        return conf_bool(conf, "enforceMinNumRacksPerWriteQuorum", False)

    def _placement_exclusions(self) -> tuple[frozenset[str], frozenset[str]]:
        if not self.enforce_min_racks:
            return frozenset(), frozenset()
        return frozenset({self.DEFAULT_LOCATION}), frozenset()

    def _rack_rules(self, write_quorum: int) -> list[WindowRule]:
        need = min(write_quorum, self.min_racks)
        return [MinLocations(need)] if need > 1 else []

    def _levels(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int, replacing: bool
    ) -> list[list[WindowRule]]:
        strict = self._rack_rules(write_quorum)
        if self.enforce_min_racks or not strict:
            return [strict]
        return [strict, []]

    def _cell_key(
        self, state: SearchState, position: int, cell: Cell | None, hint: PlacementHint
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        local = hint.local if position == hint.first_position else None
        not_local = 1 if local is not None and cell != local else 0
        not_replaced = 1 if hint.replaced is not None and cell != hint.replaced else 0
        if cell is None or not state.cell_counts.get(cell, 0):
            return (not_local, not_replaced), (0, 0)
        return (not_local, not_replaced), (1, self._overlap(state, position, cell))

    def _window_verdict(
        self, window: Sequence[Cell], write_quorum: int, ack_quorum: int
    ) -> PlacementPolicyAdherence:
        racks = {cell.location for cell in window}
        if len(racks) < min(write_quorum, self.min_racks):
            return PlacementPolicyAdherence.FAIL
        if self.enforce_min_racks and self.DEFAULT_LOCATION in racks:
            return PlacementPolicyAdherence.FAIL
        return PlacementPolicyAdherence.MEETS_STRICT

    def _acked_adhering(self, cells: Sequence[Cell], write_quorum: int, ack_quorum: int) -> bool:
        return len({cell.location for cell in cells}) >= min(write_quorum, self.min_racks)
