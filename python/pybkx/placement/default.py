"""The default policy: random writable bookies (disk-weighted when enabled), ordered reads.
It must never look at network locations; any distinct bookies adhere to it."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping, Sequence

from pybkx import errors
from pybkx._core import check_quorums
from pybkx.placement.base import (
    BookieInfo,
    BookiesHealthInfo,
    EnsemblePlacementPolicy,
    FeatureProvider,
    PlacementPolicyAdherence,
    PlacementResult,
)
from pybkx.placement.conf import conf_bool, conf_int
from pybkx.placement.dns import DNSToSwitchMapping
from pybkx.placement.reorder import SlowBookies, reorder_read_sequence
from pybkx.placement.selection import disk_weights, pick_bookies
from pybkx.placement.stats import PlacementStats

__all__ = ["DefaultEnsemblePlacementPolicy"]


class DefaultEnsemblePlacementPolicy(EnsemblePlacementPolicy):
    """Random writable bookies, honouring exclusions.

    Keys: ``diskWeightBasedPlacementEnabled`` (false) with
    ``bookieMaxMultipleForWeightBasedPlacement`` (3): a bookie's chance follows its reported
    free disk space (``update_bookie_info``), capped at that multiple of the median;
    ``ensembleRandomReadReordering``, ``readReorderThresholdPendingRequests``,
    ``bookieFailureHistoryExpirationMSec`` for read ordering (BookKeeper's default policy keeps
    the write-set order; this one applies the common health-based order).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random()
        self._writable: frozenset[str] = frozenset()
        self._readonly: frozenset[str] = frozenset()
        self._info: dict[str, BookieInfo] = {}
        self._weights: dict[str, float] | None = None
        self.initialize({})

    def initialize(
        self,
        conf: Mapping[str, object],
        dns_resolver: DNSToSwitchMapping | None = None,
        feature_provider: FeatureProvider | None = None,
        stats: PlacementStats | None = None,
    ) -> DefaultEnsemblePlacementPolicy:
        """Read the keys above (``dns_resolver`` and ``feature_provider`` are not used).
        Raises ConfigError."""
        with self._lock:
            self.stats = stats if stats is not None else PlacementStats()
            self.weighted = conf_bool(conf, "diskWeightBasedPlacementEnabled", False)
            self.max_weight_multiple = conf_int(conf, "bookieMaxMultipleForWeightBasedPlacement", 3)
            self.randomize_reads = conf_bool(conf, "ensembleRandomReadReordering", False)
            self.reorder_threshold = conf_int(conf, "readReorderThresholdPendingRequests", 0)
            expiry_ms = conf_int(conf, "bookieFailureHistoryExpirationMSec", 60_000, minimum=0)
            self.slow = SlowBookies(expiry_ms)
            self._weights = None
        return self

    def uninitialize(self) -> None:
        self.slow.clear()

    def on_cluster_changed(self, writable: Iterable[str], readonly: Iterable[str]) -> set[str]:
        writable_now, readonly_now = frozenset(writable), frozenset(readonly)
        with self._lock:
            before = self._writable | self._readonly
            self.stats.inc("bookies_joined", len(writable_now - self._writable))
            self.stats.inc("bookies_left", len(self._writable - writable_now))
            self._writable, self._readonly = writable_now, readonly_now
            self._weights = None
        return set(before - writable_now - readonly_now)

    def update_bookie_info(self, info: Mapping[str, BookieInfo]) -> None:
        with self._lock:
            self._info.update(info)
            self._weights = None

    def _choose(self, candidates: set[str], count: int) -> list[str]:
        if len(candidates) < count:
            raise errors.NotEnoughBookiesException(
                f"need {count} writable bookies, {len(candidates)} eligible"
            )
        weights = None
        if self.weighted:
            if self._weights is None:
                self._weights = disk_weights(self._writable, self._info, self.max_weight_multiple)
            weights = self._weights
        return pick_bookies(sorted(candidates), count, weights, self._rng)

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        custom_metadata: Mapping[str, bytes] | None,
        exclude_bookies: Iterable[str],
    ) -> PlacementResult[list[str]]:
        check_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        with self._lock:
            chosen = self._choose(set(self._writable - set(exclude_bookies)), ensemble_size)
        return PlacementResult(chosen, PlacementPolicyAdherence.MEETS_STRICT)

    def replace_bookie(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        custom_metadata: Mapping[str, bytes] | None,
        current_ensemble: Sequence[str],
        bookie_to_replace: str,
        exclude_bookies: Iterable[str],
    ) -> PlacementResult[str]:
        current = list(current_ensemble)
        if current and bookie_to_replace not in current:
            raise errors.IncorrectParameterException(
                f"bookie {bookie_to_replace} is not in the ensemble {current}"
            )
        excluded = set(exclude_bookies) | set(current) | {bookie_to_replace}
        with self._lock:
            chosen = self._choose(set(self._writable - excluded), 1)[0]
        ensemble = [chosen if b == bookie_to_replace else b for b in current] or [chosen]
        return PlacementResult(
            chosen,
            self.is_ensemble_adhering_to_placement_policy(
                ensemble, write_quorum_size, ack_quorum_size
            ),
        )

    def is_ensemble_adhering_to_placement_policy(
        self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int
    ) -> PlacementPolicyAdherence:
        members = list(ensemble)
        if not members or len(set(members)) != len(members):
            return PlacementPolicyAdherence.FAIL
        return PlacementPolicyAdherence.MEETS_STRICT

    def are_acked_bookies_adhering_to_placement_policy(
        self, acked: Iterable[str], write_quorum_size: int, ack_quorum_size: int
    ) -> bool:
        return True

    def replace_to_adhere_placement_policy(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        exclude_bookies: Iterable[str],
        current_ensemble: Sequence[str],
    ) -> PlacementResult[list[str]]:
        current = list(current_ensemble)
        verdict = self.is_ensemble_adhering_to_placement_policy(
            current, write_quorum_size, ack_quorum_size
        )
        if verdict != PlacementPolicyAdherence.FAIL or not current:
            return PlacementResult(current, verdict)
        seen: set[str] = set()
        repeated: list[int] = []
        for index, bookie in enumerate(current):
            if bookie in seen:
                repeated.append(index)
            seen.add(bookie)
        with self._lock:
            candidates = set(self._writable - set(exclude_bookies) - seen)
            if len(candidates) < len(repeated):
                return PlacementResult([], PlacementPolicyAdherence.FAIL)
            fresh = self._choose(candidates, len(repeated))
        for index, bookie in zip(repeated, fresh, strict=True):
            current[index] = bookie
        return PlacementResult(current, PlacementPolicyAdherence.MEETS_STRICT)

    def register_slow_bookie(self, bookie: str, entry_id: int) -> None:
        if self.reorder_threshold <= 0:
            self.slow.register(bookie, entry_id)

    def reorder_read_sequence(
        self,
        ensemble: Sequence[str],
        health: BookiesHealthInfo | None,
        write_set: Sequence[int],
    ) -> list[int]:
        with self._lock:
            writable, readonly = self._writable, self._readonly
        order = reorder_read_sequence(
            ensemble,
            write_set,
            writable=writable,
            readonly=readonly,
            slow=self.slow,
            health=health,
            threshold_pending=self.reorder_threshold,
            randomize=self.randomize_reads,
            rng=self._rng,
        )
        if order != list(write_set):
            self.stats.inc("read_requests_reordered")
        return order
