"""What location-aware policies share: the EnsemblePlacementPolicy contract over network
locations (configuration, the search for ensembles and replacements, adherence, read order),
the subclass supplying the rules and verdicts. It must never define a placement rule itself;
where bookies are is ``locations``'s, the order candidates are tried in ``candidates``'s.
"""

# Locking: ``_lock`` guards the state (the bookies' locations, the candidate index, weights)
# and is held only for in-memory work; ``_change_lock`` serialises configuration, cluster and
# rack changes (see ``locations``).

from __future__ import annotations

import abc
import itertools
import logging
import random
import socket
import threading
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import ClassVar, Final

from pybkx import errors
from pybkx._core import check_quorums
from pybkx.config import ConfigError
from pybkx.placement.base import (
    BookieInfo,
    BookiesHealthInfo,
    EnsemblePlacementPolicy,
    FeatureProvider,
    PlacementPolicyAdherence,
    PlacementResult,
    SettableFeatureProvider,
)
from pybkx.placement.candidates import CandidateIndex, CandidateOrder, PlacementHint
from pybkx.placement.conf import conf_bool, conf_int
from pybkx.placement.dns import (
    DefaultingResolver,
    DNSToSwitchMapping,
    resolver_from_conf,
)
from pybkx.placement.locations import BookieLocations
from pybkx.placement.reorder import SlowBookies, reorder_read_sequence
from pybkx.placement.selection import (
    Cell,
    SearchBudgetExceeded,
    SearchState,
    WindowRule,
    assign_cells,
    disk_weights,
    pick_bookies,
    window_starts,
    windows_containing,
)
from pybkx.placement.stats import PlacementStats
from pybkx.placement.topology import NetworkTopology

__all__ = ["TopologyAwarePolicy"]

logger = logging.getLogger(__name__)

MAX_RELOCATION_SEARCHES: Final = 10_000
"""Bound on the searches ``replace_to_adhere_placement_policy`` runs."""

FAIL: Final = PlacementPolicyAdherence.FAIL
MEETS_SOFT: Final = PlacementPolicyAdherence.MEETS_SOFT
MEETS_STRICT: Final = PlacementPolicyAdherence.MEETS_STRICT


class TopologyAwarePolicy(EnsemblePlacementPolicy):
    """Base of the policies that place by network location. Subclasses define the default
    location, the location depth, the search levels (rules, strictest first), the per-write-
    quorum verdict and the acked-bookies check."""

    DEFAULT_LOCATION: ClassVar[str]
    LEVELS: ClassVar[int | None] = None
    MIN_LEVELS: ClassVar[int] = 1

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._change_lock = threading.Lock()
        self._rng = random.Random()
        self._mapping: DNSToSwitchMapping | None = None
        self._configure({}, None, None, None, None)

    # --- configuration ----------------------------------------------------------------------

    @property
    def places_by_topology(self) -> bool:
        return self._mapping is not None

    def initialize(
        self,
        conf: Mapping[str, object],
        dns_resolver: DNSToSwitchMapping | None = None,
        feature_provider: FeatureProvider | None = None,
        stats: PlacementStats | None = None,
        *,
        local_node: str | None = None,
    ) -> TopologyAwarePolicy:
        """Configure from BookKeeper keys (see the policy's docs). ``dns_resolver`` overrides
        ``reppDnsResolverClass``; ``local_node`` (a host or bookie id) overrides the local host
        address used to find the client's own location. Forgets known bookies.

        Raises ConfigError for invalid settings, or when no resolver can be built while the
        policy is enforced (everything would be in the default location).
        """
        mapping = dns_resolver if dns_resolver is not None else self._mapping_from_conf(conf)
        self._configure(conf, mapping, feature_provider, stats, local_node)
        return self

    def _configure(
        self,
        conf: Mapping[str, object],
        mapping: DNSToSwitchMapping | None,
        feature_provider: FeatureProvider | None,
        stats: PlacementStats | None,
        local_node: str | None,
    ) -> None:
        with self._change_lock, self._lock:
            if self._mapping is not None:
                self._mapping.unregister_rack_change_listener(self._on_rack_change)
            self.conf = dict(conf)
            self.stats = stats if stats is not None else PlacementStats()
            self.features: FeatureProvider = (
                feature_provider if feature_provider is not None else SettableFeatureProvider()
            )
            self.randomize_reads = conf_bool(conf, "ensembleRandomReadReordering", False)
            self.reorder_threshold = conf_int(conf, "readReorderThresholdPendingRequests", 0)
            self.weighted = conf_bool(conf, "diskWeightBasedPlacementEnabled", False)
            self.max_weight_multiple = conf_int(conf, "bookieMaxMultipleForWeightBasedPlacement", 3)
            expiry_ms = conf_int(conf, "bookieFailureHistoryExpirationMSec", 60_000, minimum=0)
            self.slow = SlowBookies(expiry_ms)
            self._configure_policy(conf)
            self._candidates: CandidateIndex | None = None
            self._weights: dict[str, float] | None = None
            self._info: dict[str, BookieInfo] = {}
            self._mapping = mapping
            self._where = BookieLocations(
                type(self).__name__,
                DefaultingResolver(mapping, self.DEFAULT_LOCATION, self.stats),
                NetworkTopology(levels=self.LEVELS, min_levels=self.MIN_LEVELS),
                self.stats,
                lock=self._lock,
                change_lock=self._change_lock,
                changed=self._changed,
                retry_unresolved=mapping is not None,
            )
            if mapping is not None:
                mapping.register_rack_change_listener(self._on_rack_change)
            self._local: Cell | None = self._local_cell(conf, local_node)

    def _mapping_from_conf(self, conf: Mapping[str, object]) -> DNSToSwitchMapping | None:
        try:
            mapping = resolver_from_conf(conf)
        except ConfigError as exc:
            if self._requires_resolver(conf):
                raise
            logger.warning(
                "%s: no usable network location resolver (%s); every bookie is in %s",
                type(self).__name__,
                exc,
                self.DEFAULT_LOCATION,
            )
            return None
        if mapping is None:
            if self._requires_resolver(conf):
                raise ConfigError(
                    f"{type(self).__name__} is enforced but no network topology is configured "
                    "(set networkTopologyScriptFileName or reppDnsResolverClass)"
                )
            logger.info(
                "%s: no network topology script configured; every bookie is in %s",
                type(self).__name__,
                self.DEFAULT_LOCATION,
            )
        return mapping

    def _local_cell(self, conf: Mapping[str, object], local_node: str | None) -> Cell | None:
        if self._mapping is None:
            return None
        if local_node is None:
            if conf_bool(conf, "ignoreLocalNodeInPlacementPolicy", False):
                return None
            try:
                host = socket.gethostname()
                if not conf_bool(conf, "useHostnameResolveLocalNodePlacementPolicy", False):
                    host = socket.gethostbyname(host)
            except OSError as exc:
                logger.warning("cannot find the local host's address: %s", exc)
                return None
            local_node = host
        location = self._where.resolve_one(local_node)
        if location == self.DEFAULT_LOCATION:
            return None
        return Cell.of(location)

    def uninitialize(self) -> None:
        with self._change_lock, self._lock:
            if self._mapping is not None:
                self._mapping.unregister_rack_change_listener(self._on_rack_change)

    # --- subclass hooks ---------------------------------------------------------------------

    @abc.abstractmethod
    def _configure_policy(self, conf: Mapping[str, object]) -> None:
        """Read the policy's own keys. Raises ConfigError."""

    def _requires_resolver(self, conf: Mapping[str, object]) -> bool:
        """Whether missing location information must fail ``initialize``."""
        return False

    def _placement_exclusions(self) -> tuple[frozenset[str], frozenset[str]]:
        """Locations and domains new bookies must not be placed in now (e.g. the default rack
        when enforced, a region disallowed by a feature); asked once per placement."""
        return frozenset(), frozenset()

    def _prepare(self, pool: Mapping[Cell, Sequence[str]], fixed: Sequence[Cell | None]) -> None:
        """Called with the candidate pool and the positions already taken (None: open) before
        each search, under the lock, so the policy can derive what its levels and preferences
        need from them."""

    @abc.abstractmethod
    def _levels(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int, replacing: bool
    ) -> list[list[WindowRule]]:
        """Rule sets to search with, strictest first; the last is the weakest acceptable (an
        empty list accepts any distinct bookies). Raises IncorrectParameterException."""

    DOMAIN_MATTERS: ClassVar[bool] = False
    """Whether the domain (region, zone) of a location ranks it (``_domain_key``)."""

    def _domain_key(
        self, state: SearchState, position: int, domain: str, hint: PlacementHint
    ) -> tuple[int, ...]:
        """Rank of the locations of ``domain`` for ``position`` (lower first); only asked when
        DOMAIN_MATTERS."""
        return ()

    @abc.abstractmethod
    def _cell_key(
        self, state: SearchState, position: int, cell: Cell | None, hint: PlacementHint
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Rank of ``cell`` for ``position`` as (before-domain, after-domain) parts, lower
        first; ``cell`` None stands for any location unused so far and not in ``hint``. A
        location ranks by (before, domain key, after), ties broken at random by weight."""

    def _symmetry_key(self, state: SearchState, cell: Cell) -> Hashable:
        """Cells with equal keys are interchangeable for every rule (default: unused cells of
        equal remaining capacity)."""
        if state.cell_counts.get(cell, 0):
            return cell
        return ("unused", min(state.capacity[cell], state.open_positions))

    @abc.abstractmethod
    def _window_verdict(
        self, window: Sequence[Cell], write_quorum: int, ack_quorum: int
    ) -> PlacementPolicyAdherence:
        """How one write quorum's locations meet the policy."""

    def _ensemble_verdict(
        self, cells: Sequence[Cell], write_quorum: int, ack_quorum: int
    ) -> PlacementPolicyAdherence:
        """Checks on the whole ensemble beyond its write quorums (default: none)."""
        return MEETS_STRICT

    @abc.abstractmethod
    def _acked_adhering(self, cells: Sequence[Cell], write_quorum: int, ack_quorum: int) -> bool:
        """The acked-bookies rule over the acked bookies' locations."""

    def _read_region(self, bookie: str) -> str | None:
        """The region of ``bookie`` for read ordering (None: reads are not region-aware)."""
        return None

    def _my_read_region(self) -> str | None:
        return None

    def _check_new_ensemble(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        """Policy-specific validation of a new ensemble's sizes."""

    def _allow_relaxed_replace(
        self, fixed: Sequence[Cell | None], index: int, write_quorum: int, ack_quorum: int
    ) -> bool:
        """Whether a replacement may fall back to weaker levels than ``_levels`` allows
        because the rest of the ensemble already breaks the rules (default: no)."""
        return False

    def _adherence_exclusions(self) -> frozenset[str]:
        """Locations whose bookies make any write quorum FAIL (never used to relocate)."""
        return self._placement_exclusions()[0]

    def _validate_result(self, cells: Sequence[Cell], write_quorum: int, ack_quorum: int) -> bool:
        """A last check of a new ensemble's locations (default: accept)."""
        return True

    # --- bookies and their locations --------------------------------------------------------------

    def on_cluster_changed(self, writable: Iterable[str], readonly: Iterable[str]) -> set[str]:
        return self._where.cluster_changed(writable, readonly)

    def on_bookie_rack_change(self, bookies: Iterable[str] | None = None) -> None:
        """Resolve ``bookies`` (every bookie seen, when None) again and move those whose
        location changed. Names may be bookie ids or their host names."""
        self._where.racks_changed(bookies)

    def network_location(self, bookie: str) -> str:
        """Where ``bookie`` is (or was last seen); resolved now if it was never seen."""
        return self._where.locations([bookie])[0]

    def refresh_network_locations(self) -> None:
        """Reload the resolver's cached mappings and resolve every bookie again. Raises
        ConfigError when a file-backed mapping can no longer be read."""
        if self._mapping is not None:
            self._mapping.reload_cached_mappings()
        self.on_bookie_rack_change(None)

    def _on_rack_change(self, names: list[str]) -> None:
        self.on_bookie_rack_change(names)

    def _changed(self) -> None:
        self._candidates = None
        self._weights = None

    def writable_bookies_in_default_location(self) -> int:
        """Writable bookies whose location is unknown (BookKeeper's gauge
        ``num_writable_bookies_in_default_rack``)."""
        return self._where.writable_in_default_location()

    def update_bookie_info(self, info: Mapping[str, BookieInfo]) -> None:
        with self._lock:
            self._info.update(info)
            self._changed()

    # --- choosing ---------------------------------------------------------------------------

    def _index(self) -> CandidateIndex:
        """The candidate locations of the current cluster (cached until it changes)."""
        if self._candidates is None:
            pool = {
                self._where.cell(location): tuple(sorted(self._where.topology.bookies_at(location)))
                for location in self._where.topology.locations()
            }
            self._candidates = CandidateIndex.of(pool, self._weights_now(), self.DOMAIN_MATTERS)
        return self._candidates

    def _pool(self, excluded: set[str]) -> tuple[dict[Cell, Sequence[str]], Mapping[Cell, int]]:
        """The bookies new ones may be chosen from, by location (the writable bookies outside
        ``excluded`` and outside the policy's excluded locations and domains), and how many
        each location holds."""
        index = self._index()
        bad_locations, bad_domains = self._placement_exclusions()
        pool: dict[Cell, Sequence[str]]
        capacity: Mapping[Cell, int]
        if bad_locations or bad_domains:
            pool = {
                cell: bookies
                for cell, bookies in index.pool.items()
                if cell.location not in bad_locations and cell.domain not in bad_domains
            }
            capacity = {cell: len(bookies) for cell, bookies in pool.items()}
        else:
            pool, capacity = dict(index.pool), index.capacity
        changed: dict[Cell, int] = {}
        for bookie in excluded:
            location = self._where.topology.location_of(bookie)
            if location is None:
                continue
            cell = self._where.cell(location)
            bookies = pool.get(cell)
            if bookies is not None:
                kept = tuple(b for b in bookies if b != bookie)
                if kept:
                    pool[cell] = kept
                else:
                    del pool[cell]
                changed[cell] = len(kept)
        if changed:
            capacity = {**capacity, **changed}
        return pool, capacity

    def _weights_now(self) -> dict[str, float] | None:
        if not self.weighted:
            return None
        if self._weights is None:
            self._weights = disk_weights(self._where.writable, self._info, self.max_weight_multiple)
        return self._weights

    def _search(
        self,
        ensemble_size: int,
        write_quorum: int,
        fixed: Sequence[Cell | None],
        capacity: Mapping[Cell, int],
        levels: Sequence[Sequence[WindowRule]],
        hint: PlacementHint,
    ) -> list[Cell] | None:
        order = CandidateOrder(
            self._index().groups,
            self._cell_key,
            self._domain_key if self.DOMAIN_MATTERS else None,
            hint,
            self._rng,
        )
        for rules in levels:
            try:
                cells = assign_cells(
                    ensemble_size,
                    write_quorum,
                    fixed,
                    capacity,
                    rules,
                    order,
                    self._symmetry_key,
                )
            except SearchBudgetExceeded as exc:
                logger.warning("%s: placement search gave up: %s", type(self).__name__, exc)
                cells = None
            if cells is not None:
                return cells
        return None

    def _fill(
        self,
        cells: Sequence[Cell],
        fixed: Sequence[str | None],
        pool: Mapping[Cell, Sequence[str]],
    ) -> list[str]:
        weights = self._weights_now()
        wanted: dict[Cell, list[int]] = {}
        for position, cell in enumerate(cells):
            if fixed[position] is None:
                wanted.setdefault(cell, []).append(position)
        out = list(fixed)
        for cell, positions in wanted.items():
            chosen = pick_bookies(pool[cell], len(positions), weights, self._rng)
            for position, bookie in zip(positions, chosen, strict=True):
                out[position] = bookie
        result: list[str] = []
        for member in out:
            assert member is not None
            result.append(member)
        return result

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        custom_metadata: Mapping[str, bytes] | None,
        exclude_bookies: Iterable[str],
    ) -> PlacementResult[list[str]]:
        check_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        self._check_new_ensemble(ensemble_size, write_quorum_size, ack_quorum_size)
        excluded = set(exclude_bookies)
        with self._lock:
            pool, capacity = self._pool(excluded)
            self._prepare(pool, [None] * ensemble_size)
            levels = self._levels(ensemble_size, write_quorum_size, ack_quorum_size, False)
            hint = PlacementHint(first_position=0, local=self._local)
            cells = self._search(
                ensemble_size, write_quorum_size, [None] * ensemble_size, capacity, levels, hint
            )
            if cells is not None and not self._validate_result(
                cells, write_quorum_size, ack_quorum_size
            ):
                logger.error("%s: placement %s failed validation", type(self).__name__, cells)
                cells = None
            if cells is None:
                available = sum(len(b) for b in pool.values())
                raise errors.NotEnoughBookiesException(
                    f"{type(self).__name__}: cannot place {ensemble_size} bookies "
                    f"(Qw={write_quorum_size}, Qa={ack_quorum_size}) over {available} "
                    f"eligible bookies in {len(pool)} locations"
                )
            ensemble = self._fill(cells, [None] * ensemble_size, pool)
            verdict = self._verdict(cells, write_quorum_size, ack_quorum_size)
        return PlacementResult(ensemble, verdict)

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
        if not current:
            result = self.new_ensemble(1, 1, 1, None, set(exclude_bookies) | {bookie_to_replace})
            return PlacementResult(result.result[0], result.adherence)
        if bookie_to_replace not in current:
            raise errors.IncorrectParameterException(
                f"bookie {bookie_to_replace} is not in the ensemble {current}"
            )
        size = len(current)
        check_quorums(size, write_quorum_size, ack_quorum_size)
        write_quorum, ack_quorum = write_quorum_size, ack_quorum_size
        index = current.index(bookie_to_replace)
        locations = self._where.locations(current)
        excluded = set(exclude_bookies) | set(current)
        with self._lock:
            fixed_cells: list[Cell | None] = [self._where.cell(loc) for loc in locations]
            replaced = fixed_cells[index]
            fixed_cells[index] = None
            pool, capacity = self._pool(excluded)
            self._prepare(pool, fixed_cells)
            levels = self._levels(size, write_quorum, ack_quorum, True)
            if self._allow_relaxed_replace(fixed_cells, index, write_quorum, ack_quorum):
                levels = [*levels, []]
            hint = PlacementHint(replaced=replaced)
            cells = self._search(size, write_quorum, fixed_cells, capacity, levels, hint)
            if cells is None:
                raise errors.NotEnoughBookiesException(
                    f"{type(self).__name__}: no eligible bookie to replace {bookie_to_replace} "
                    f"in {current}"
                )
            fixed: list[str | None] = list(current)
            fixed[index] = None
            ensemble = self._fill(cells, fixed, pool)
            verdict = self._verdict(cells, write_quorum, ack_quorum)
        return PlacementResult(ensemble[index], verdict)

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
        if verdict != FAIL or not current:
            return PlacementResult(current, verdict)
        size = len(current)
        check_quorums(size, write_quorum_size, ack_quorum_size)
        write_quorum, ack_quorum = write_quorum_size, ack_quorum_size
        exclude = set(exclude_bookies)
        locations = self._where.locations(current)
        with self._lock:
            cells = [self._where.cell(loc) for loc in locations]
            if self._ensemble_verdict(cells, write_quorum, ack_quorum) == FAIL:
                return PlacementResult([], FAIL)
            unusable = self._adherence_exclusions()
            everything, _ = self._pool(exclude | set(current))
            pool = {c: bookies for c, bookies in everything.items() if c.location not in unusable}
            capacity = {cell: len(bookies) for cell, bookies in pool.items()}
            self._prepare(pool, cells)
            levels = self._levels(size, write_quorum, ack_quorum, False)
            forced = self._must_move(current, exclude)
            failing = self._failing_windows(cells, write_quorum, ack_quorum)
            relocations = _relocations(size, forced, failing, levels)
            for searches, (rules, free) in enumerate(relocations, 1):
                if searches > MAX_RELOCATION_SEARCHES:
                    logger.warning(
                        "%s: gave up relocating %s after %d searches",
                        type(self).__name__,
                        current,
                        searches - 1,
                    )
                    return PlacementResult([], FAIL)
                fixed_cells: list[Cell | None] = [
                    None if i in free else cells[i] for i in range(size)
                ]
                found = self._search(
                    size, write_quorum, fixed_cells, capacity, [rules], PlacementHint()
                )
                if found is None:
                    continue
                found_verdict = self._verdict(found, write_quorum, ack_quorum)
                if found_verdict == FAIL:
                    continue
                fixed = [None if i in free else current[i] for i in range(size)]
                return PlacementResult(self._fill(found, fixed, pool), found_verdict)
        return PlacementResult([], FAIL)

    def _must_move(self, current: Sequence[str], exclude: set[str]) -> set[int]:
        """The positions of ``current`` whose bookie may not stay: excluded, no longer
        writable, or a repeat of an earlier position's."""
        seen: set[str] = set()
        forced: set[int] = set()
        for i, bookie in enumerate(current):
            if bookie in exclude or bookie not in self._where.writable or bookie in seen:
                forced.add(i)
            seen.add(bookie)
        return forced

    def _failing_windows(
        self, cells: Sequence[Cell], write_quorum: int, ack_quorum: int
    ) -> list[list[int]]:
        """The write quorums (as positions) of an ensemble at ``cells`` that FAIL the policy."""
        size = len(cells)
        failing: list[list[int]] = []
        for start in window_starts(size, write_quorum):
            positions = _window(size, write_quorum, start)
            window = [cells[p] for p in positions]
            if self._window_verdict(window, write_quorum, ack_quorum) == FAIL:
                failing.append(positions)
        return failing

    # --- adherence --------------------------------------------------------------------------

    def _verdict(
        self, cells: Sequence[Cell], write_quorum: int, ack_quorum: int
    ) -> PlacementPolicyAdherence:
        size = len(cells)
        if size == 0 or not size >= write_quorum >= 1:
            return FAIL  # an ensemble smaller than its write quorum cannot hold Qw copies
        verdict = self._ensemble_verdict(cells, write_quorum, ack_quorum)
        for start in window_starts(size, write_quorum):
            if verdict == FAIL:
                break
            window = [cells[p] for p in _window(size, write_quorum, start)]
            verdict = min(verdict, self._window_verdict(window, write_quorum, ack_quorum))
        return verdict

    def is_ensemble_adhering_to_placement_policy(
        self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int
    ) -> PlacementPolicyAdherence:
        members = list(ensemble)
        if not members or len(set(members)) != len(members):
            return FAIL
        locations = self._where.locations(members)
        with self._lock:
            cells = [self._where.cell(loc) for loc in locations]
            return self._verdict(cells, write_quorum_size, ack_quorum_size)

    def are_acked_bookies_adhering_to_placement_policy(
        self, acked: Iterable[str], write_quorum_size: int, ack_quorum_size: int
    ) -> bool:
        members = list(dict.fromkeys(acked))
        locations = self._where.locations(members)
        with self._lock:
            cells = [self._where.cell(loc) for loc in locations]
            return self._acked_adhering(cells, write_quorum_size, ack_quorum_size)

    # --- reads ------------------------------------------------------------------------------

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
            writable, readonly = self._where.writable, self._where.readonly
        my_region = self._my_read_region()
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
            region_of=self._read_region if my_region is not None else None,
            my_region=my_region,
        )
        if order != list(write_set):
            self.stats.inc("read_requests_reordered")
        return order

    # --- helpers for subclasses -------------------------------------------------------------

    @staticmethod
    def _overlap(state: SearchState, position: int, cell: Cell) -> int:
        """How many write quorums through ``position`` already hold ``cell``."""
        if not state.cell_counts.get(cell, 0):
            return 0
        held = {p for p, other in enumerate(state.assignment) if other is cell or other == cell}
        return sum(
            1
            for window in windows_containing(state.ensemble_size, state.write_quorum, position)
            if not held.isdisjoint(window)
        )

    @staticmethod
    def _domain_overlap(state: SearchState, position: int, domain: str) -> int:
        """How many write quorums through ``position`` already hold a bookie of ``domain``."""
        if not state.domain_counts.get(domain, 0):
            return 0
        count = 0
        for window in windows_containing(state.ensemble_size, state.write_quorum, position):
            for p in window:
                other = state.assignment[p]
                if other is not None and other.domain == domain:
                    count += 1
                    break
        return count


def _window(size: int, write_quorum: int, start: int) -> list[int]:
    return [(start + i) % size for i in range(write_quorum)]


def _relocations(
    size: int,
    forced: set[int],
    failing: Sequence[Sequence[int]],
    levels: Sequence[Sequence[WindowRule]],
) -> Iterator[tuple[Sequence[WindowRule], set[int]]]:
    """What ``replace_to_adhere_placement_policy`` tries, in order: the positions set free
    (``forced`` and as few others as possible, among them one of every failing write quorum,
    which would stay as it is otherwise), each count with the levels strongest first."""
    others = [i for i in range(size) if i not in forced]
    for extra in range(len(others) + 1):
        for rules in levels:
            for chosen in itertools.combinations(others, extra):
                free = forced | set(chosen)
                if all(free.intersection(w) for w in failing):
                    yield rules, free
