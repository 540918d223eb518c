"""Helpers for the placement tests: bookie ids, clusters built from location maps, and
policies on static mappings, plus the hypothesis profile name. It never asserts."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pybkx.placement import DNSToSwitchMapping, StaticDNSToSwitchMapping, TopologyAwarePolicy
from pybkx.placement.dns import host_of

PROFILE = "placement-heavy" if os.environ.get("PYBKX_PLACEMENT_PROFILE") == "heavy" else "placement"
"""The hypothesis profile the placement property tests load (conftest.py registers both)."""

P = TypeVar("P", bound=TopologyAwarePolicy)


def bookie(n: int) -> str:
    """A bookie id that resolves without DNS (an IP literal and a port)."""
    return f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}:3181"


def cluster(locations: Iterable[str]) -> dict[str, str]:
    """Bookie id -> location, one bookie per entry of ``locations``."""
    return {bookie(n): location for n, location in enumerate(locations)}


def make_policy(
    cls: type[P],
    locations: Mapping[str, str],
    conf: Mapping[str, Any] | None = None,
    writable: Iterable[str] | None = None,
    readonly: Iterable[str] = (),
    **kwargs: Any,
) -> P:
    """``cls`` initialized over a static mapping of ``locations`` (the local node resolves to
    nowhere unless ``local_node`` is given), with ``writable`` (all mapped bookies by default)
    and ``readonly`` registered."""
    options = {"ignoreLocalNodeInPlacementPolicy": "true", **(conf or {})}
    policy = cls()
    policy.initialize(options, StaticDNSToSwitchMapping(dict(locations)), **kwargs)
    policy.on_cluster_changed(list(locations) if writable is None else writable, readonly)
    return policy


class PrefixMapping(DNSToSwitchMapping):
    """A custom mapping configured through ``set_conf`` (for reppDnsResolverClass)."""

    prefix = "/p"

    def set_conf(self, conf: Mapping[str, object]) -> None:
        self.prefix = str(conf.get("prefix", self.prefix))

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        return [f"{self.prefix}/{host_of(n)}" for n in names]

    def reload_cached_mappings(self) -> None:
        self._notify([])
