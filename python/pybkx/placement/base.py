"""The EnsemblePlacementPolicy contract: methods, results, adherence, health, features, config.
It must never choose bookies or hold cluster state; policies do."""

# Method names are BookKeeper's ``EnsemblePlacementPolicy`` in snake_case; bookie ids are
# BookKeeper's strings (``host:port``) and ``conf`` is a mapping of BookKeeper key names whose
# values may be strings (from a properties file) or typed values.

from __future__ import annotations

import abc
import random
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from pybkx import errors
from pybkx.placement.conf import conf_bool, conf_int, conf_str
from pybkx.placement.stats import PlacementStats

if TYPE_CHECKING:
    from pybkx.placement.dns import DNSToSwitchMapping

__all__ = [
    "BookieInfo",
    "BookiesHealthInfo",
    "EnsemblePlacementPolicy",
    "Feature",
    "FeatureProvider",
    "HasEnsembleSize",
    "PlacementPolicyAdherence",
    "PlacementResult",
    "PlacementStats",
    "SettableFeatureProvider",
    "StaticBookiesHealthInfo",
    "conf_bool",
    "conf_int",
    "conf_str",
]

T = TypeVar("T")


class PlacementPolicyAdherence(IntEnum):
    """How well an ensemble meets a policy; values are BookKeeper's (ordered: FAIL < STRICT)."""

    FAIL = 1
    MEETS_SOFT = 3
    MEETS_STRICT = 5


@dataclass(frozen=True, slots=True)
class PlacementResult(Generic[T]):
    """What ``new_ensemble``/``replace_bookie`` chose (``result``) and how it adheres."""

    result: T
    adherence: PlacementPolicyAdherence


@dataclass(frozen=True, slots=True)
class BookieInfo:
    """Disk space a bookie reported (GET_BOOKIE_INFO); its placement weight is the free space."""

    total_disk_space: int = 0
    free_disk_space: int = 0

    @property
    def weight(self) -> int:
        return self.free_disk_space


class BookiesHealthInfo(Protocol):
    """What the client knows about bookies' recent behaviour, for read ordering."""

    def get_bookie_failure_history(self, bookie: str) -> int:
        """The last entry id that failed on ``bookie``, or -1 when it has no failures."""

    def get_bookie_pending_requests(self, bookie: str) -> int:
        """Requests sent to ``bookie`` and not answered yet."""


@dataclass(frozen=True)
class StaticBookiesHealthInfo:
    """A BookiesHealthInfo over fixed maps (bookies not in a map: no failures, none pending)."""

    failures: Mapping[str, int]
    pending: Mapping[str, int]

    def get_bookie_failure_history(self, bookie: str) -> int:
        return self.failures.get(bookie, -1)

    def get_bookie_pending_requests(self, bookie: str) -> int:
        return self.pending.get(bookie, 0)


class HasEnsembleSize(Protocol):
    """Anything with an ``ensemble_size`` (``pybkx.meta.LedgerMetadata``)."""

    @property
    def ensemble_size(self) -> int:
        """How many bookies each ensemble of the ledger has."""


# --- feature flags --------------------------------------------------------------------------


class Feature:
    """A runtime switch (BookKeeper's ``Feature``): available when its availability is > 0.

    Policies look features up on every decision, so a change applies to the next call.
    """

    def __init__(self, name: str, availability: int = 0) -> None:
        self.name = name
        self._availability = availability

    def availability(self) -> int:
        return self._availability

    def is_available(self) -> bool:
        return self._availability > 0

    def set(self, available: bool) -> None:
        """Turn the feature on (availability 100) or off (0)."""
        self._availability = 100 if available else 0


class FeatureProvider(abc.ABC):
    """Named features, possibly in scopes (``scope("region1").get_feature("x")``)."""

    @abc.abstractmethod
    def get_feature(self, name: str) -> Feature:
        """The feature called ``name`` in this scope (created off when first asked for)."""

    @abc.abstractmethod
    def scope(self, name: str) -> FeatureProvider:
        """The provider of the features under ``name``."""


class SettableFeatureProvider(FeatureProvider):
    """An in-memory FeatureProvider; every feature starts off. Scopes share one store, so
    ``provider.set("region1.x", True)`` is ``provider.scope("region1").get_feature("x")``."""

    def __init__(self, prefix: str = "", store: dict[str, Feature] | None = None) -> None:
        self._prefix = prefix
        self._store: dict[str, Feature] = {} if store is None else store
        self._lock = threading.Lock()

    def get_feature(self, name: str) -> Feature:
        full = self._prefix + name
        with self._lock:
            feature = self._store.get(full)
            if feature is None:
                feature = self._store[full] = Feature(full)
            return feature

    def scope(self, name: str) -> SettableFeatureProvider:
        child = SettableFeatureProvider(f"{self._prefix}{name}.", self._store)
        child._lock = self._lock
        return child

    def set(self, name: str, available: bool) -> None:
        """Turn the feature ``name`` (scopes joined by dots) on or off."""
        self.get_feature(name).set(available)


# --- the contract ---------------------------------------------------------------------------


class EnsemblePlacementPolicy(abc.ABC):
    """Chooses the bookies of ledgers and the order replicas are read in.

    The life cycle is BookKeeper's: ``initialize`` once, ``on_cluster_changed`` whenever the
    registered bookies change, then any of the choosing and ordering methods from any thread,
    and ``uninitialize`` at the end. Inputs are never modified.
    """

    @abc.abstractmethod
    def initialize(
        self,
        conf: Mapping[str, object],
        dns_resolver: DNSToSwitchMapping | None = None,
        feature_provider: FeatureProvider | None = None,
        stats: PlacementStats | None = None,
    ) -> EnsemblePlacementPolicy:
        """Configure from BookKeeper keys; returns self. Raises ConfigError."""

    @property
    def places_by_topology(self) -> bool:
        """Whether ensembles are chosen by a configured network topology: when not, a placement
        that does not adhere to the policy is expected rather than worth a warning."""
        return False

    @abc.abstractmethod
    def uninitialize(self) -> None:
        """Release what ``initialize`` acquired (listeners); idempotent."""

    @abc.abstractmethod
    def on_cluster_changed(self, writable: Iterable[str], readonly: Iterable[str]) -> set[str]:
        """Take the current writable and read-only bookies; returns the dead ones: bookies that
        were writable or read-only before and are neither now."""

    @abc.abstractmethod
    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        custom_metadata: Mapping[str, bytes] | None,
        exclude_bookies: Iterable[str],
    ) -> PlacementResult[list[str]]:
        """Choose ``ensemble_size`` distinct writable bookies, none of ``exclude_bookies``.

        Raises NotEnoughBookiesException (alias BKNotEnoughBookiesException) when the cluster
        cannot supply them (or, when the policy is enforced, not in a placement that meets it),
        IncorrectParameterException for impossible sizes.
        """

    @abc.abstractmethod
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
        """Choose a writable bookie for ``bookie_to_replace``'s position: not in the ensemble,
        not excluded, not the replaced bookie. ``adherence`` is that of the ensemble with the
        new bookie at that position. Raises NotEnoughBookiesException when there is none (or,
        when the policy is enforced, none keeping the write quorums through that position
        valid), IncorrectParameterException when ``bookie_to_replace`` is not in a non-empty
        ``current_ensemble`` or the sizes do not fit it."""

    @abc.abstractmethod
    def register_slow_bookie(self, bookie: str, entry_id: int) -> None:
        """Note that ``bookie`` was slow to answer a read of ``entry_id`` (expires after
        ``bookieFailureHistoryExpirationMSec``)."""

    @abc.abstractmethod
    def reorder_read_sequence(
        self,
        ensemble: Sequence[str],
        health: BookiesHealthInfo | None,
        write_set: Sequence[int],
    ) -> list[int]:
        """The order to try the replicas of ``write_set`` (indexes into ``ensemble``) in; always
        a permutation of ``write_set``."""

    def reorder_read_lac_sequence(
        self,
        ensemble: Sequence[str],
        health: BookiesHealthInfo | None,
        write_set: Sequence[int],
    ) -> list[int]:
        """``reorder_read_sequence`` followed by the ensemble indexes missing from
        ``write_set`` in increasing order (a LAC read asks every bookie)."""
        ordered = self.reorder_read_sequence(ensemble, health, write_set)
        present = set(ordered)
        return ordered + [i for i in range(len(ensemble)) if i not in present]

    @abc.abstractmethod
    def update_bookie_info(self, info: Mapping[str, BookieInfo]) -> None:
        """Take the disk space bookies reported (used when disk-weighted placement is on)."""

    def get_sticky_read_bookie_index(
        self, metadata: HasEnsembleSize, current_index: int | None = None
    ) -> int:
        """The ensemble index sticky reads go to: random at first, then the next one after
        ``current_index`` (the one that failed)."""
        size = metadata.ensemble_size
        if size < 1:
            raise errors.IncorrectParameterException(f"ensemble size {size} has no bookies")
        if current_index is None:
            return random.randrange(size)
        return (current_index + 1) % size

    @abc.abstractmethod
    def is_ensemble_adhering_to_placement_policy(
        self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int
    ) -> PlacementPolicyAdherence:
        """How ``ensemble`` meets this policy (FAIL for an empty ensemble or a repeated
        bookie)."""

    @abc.abstractmethod
    def are_acked_bookies_adhering_to_placement_policy(
        self, acked: Iterable[str], write_quorum_size: int, ack_quorum_size: int
    ) -> bool:
        """Whether an add acknowledged by ``acked`` meets the policy's fault-domain minimum
        (used with ``enforceMinNumFaultDomainsForWrite``)."""

    @abc.abstractmethod
    def replace_to_adhere_placement_policy(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        exclude_bookies: Iterable[str],
        current_ensemble: Sequence[str],
    ) -> PlacementResult[list[str]]:
        """An ensemble that adheres (MEETS_SOFT or better), changing as few positions of
        ``current_ensemble`` as possible; it is returned unchanged when it already adheres.
        ``PlacementResult([], FAIL)`` when no adhering ensemble can be reached."""
