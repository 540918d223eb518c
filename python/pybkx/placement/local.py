"""The local-bookie policy: every ledger on the bookie this process runs (ensemble of one).
It must never pick another bookie, so it never replaces one."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence

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
)
from pybkx.placement.conf import conf_str
from pybkx.placement.dns import DNSToSwitchMapping
from pybkx.placement.stats import PlacementStats

__all__ = ["LocalBookieEnsemblePlacementPolicy"]

_ADDRESS_KEYS = (
    "advertisedAddress",
    "listeningInterface",
    "bookiePort",
    "allowLoopback",
    "metadataServiceUri",
    "zkServers",
)


class LocalBookieEnsemblePlacementPolicy(EnsemblePlacementPolicy):
    """Ensembles of exactly the local bookie.

    The bookie id comes from the bookie's configuration in ``conf``: ``bookieId``, else the
    address BookKeeper derives from ``advertisedAddress`` / ``listeningInterface`` / the host
    name and ``bookiePort`` (3181). ``new_ensemble`` raises IncorrectParameterException for
    an ensemble larger than one and NotEnoughBookiesException when the local bookie is
    excluded or (once cluster membership is known) not writable; ``replace_bookie`` always
    raises NotEnoughBookiesException. Adherence is MEETS_STRICT for ``[local bookie]`` only
    (BookKeeper answers MEETS_STRICT for anything).
    """

    def __init__(self, bookie_id: str | None = None) -> None:
        self._lock = threading.Lock()
        self.bookie_id = bookie_id
        self._writable: frozenset[str] | None = None
        self._info: dict[str, BookieInfo] = {}
        self._slow: dict[str, int] = {}
        self.stats = PlacementStats()

    def initialize(
        self,
        conf: Mapping[str, object],
        dns_resolver: DNSToSwitchMapping | None = None,
        feature_provider: FeatureProvider | None = None,
        stats: PlacementStats | None = None,
    ) -> LocalBookieEnsemblePlacementPolicy:
        """Find the local bookie id in ``conf``. Raises ConfigError when it cannot be derived."""
        if stats is not None:
            self.stats = stats
        bookie_id = conf_str(conf, "bookieId")
        if bookie_id is None:
            bookie_id = _derived_bookie_id(conf)
        with self._lock:
            self.bookie_id = bookie_id
            self._writable = None
        return self

    def uninitialize(self) -> None:
        with self._lock:
            self._writable = None

    def _local(self) -> str:
        if self.bookie_id is None:
            raise errors.NotEnoughBookiesException("the local bookie id is not configured")
        return self.bookie_id

    def on_cluster_changed(self, writable: Iterable[str], readonly: Iterable[str]) -> set[str]:
        writable_now = frozenset(writable)
        with self._lock:
            before = self._writable or frozenset()
            self._writable = writable_now
        return set(before - writable_now - set(readonly))

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        custom_metadata: Mapping[str, bytes] | None,
        exclude_bookies: Iterable[str],
    ) -> PlacementResult[list[str]]:
        check_quorums(ensemble_size, write_quorum_size, ack_quorum_size)
        if ensemble_size > 1:
            raise errors.IncorrectParameterException(
                f"the local bookie policy places ensembles of one bookie, not {ensemble_size}"
            )
        local = self._local()
        with self._lock:
            writable = self._writable
        if local in set(exclude_bookies) or (writable is not None and local not in writable):
            raise errors.NotEnoughBookiesException(
                f"the local bookie {local} is excluded or not writable"
            )
        return PlacementResult([local], PlacementPolicyAdherence.MEETS_STRICT)

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
        raise errors.NotEnoughBookiesException(
            f"the local bookie policy has no bookie to replace {bookie_to_replace} with"
        )

    def register_slow_bookie(self, bookie: str, entry_id: int) -> None:
        """Recorded for inspection only: with one bookie there is no other to read first."""
        with self._lock:
            self._slow[bookie] = entry_id

    def reorder_read_sequence(
        self,
        ensemble: Sequence[str],
        health: BookiesHealthInfo | None,
        write_set: Sequence[int],
    ) -> list[int]:
        return list(write_set)

    def update_bookie_info(self, info: Mapping[str, BookieInfo]) -> None:
        """Recorded for inspection only: the local bookie is used whatever its free space."""
        with self._lock:
            self._info.update(info)

    def is_ensemble_adhering_to_placement_policy(
        self, ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int
    ) -> PlacementPolicyAdherence:
        if self.bookie_id is not None and list(ensemble) == [self.bookie_id]:
            return PlacementPolicyAdherence.MEETS_STRICT
        return PlacementPolicyAdherence.FAIL

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
        if verdict != PlacementPolicyAdherence.FAIL:
            return PlacementResult(current, verdict)
        if len(current) != 1:
            return PlacementResult([], PlacementPolicyAdherence.FAIL)
        try:
            return self.new_ensemble(1, 1, 1, None, exclude_bookies)
        except errors.NotEnoughBookiesException:
            return PlacementResult([], PlacementPolicyAdherence.FAIL)


def _derived_bookie_id(conf: Mapping[str, object]) -> str:
    """The id a bookie with this configuration registers under (BookKeeper's rule)."""
    from pybkx.config import ServerConfig

    overrides = {key: conf[key] for key in _ADDRESS_KEYS if key in conf}
    config = ServerConfig.load(None, overrides, overrides_source="placement configuration")
    try:
        return config.bookie_address(config.bookie_port)
    except ConfigError as exc:
        raise ConfigError(f"cannot derive the local bookie id: {exc}") from None
