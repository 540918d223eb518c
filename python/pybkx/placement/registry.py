"""Policy names (BookKeeper classes, short names, Python paths) to classes, and creation.
It must never hold placement logic."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from pybkx.config import ConfigError
from pybkx.placement.base import (
    EnsemblePlacementPolicy,
    FeatureProvider,
)
from pybkx.placement.conf import conf_str
from pybkx.placement.default import DefaultEnsemblePlacementPolicy
from pybkx.placement.dns import DNSToSwitchMapping
from pybkx.placement.local import LocalBookieEnsemblePlacementPolicy
from pybkx.placement.rackaware import RackawareEnsemblePlacementPolicy
from pybkx.placement.regionaware import RegionAwareEnsemblePlacementPolicy
from pybkx.placement.stats import PlacementStats
from pybkx.placement.zoneaware import ZoneawareEnsemblePlacementPolicy

__all__ = ["DEFAULT_POLICY", "POLICY_NAMES", "create_policy", "policy_class"]

DEFAULT_POLICY: Final = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
"""BookKeeper's client default for ``ensemblePlacementPolicy``."""

_CLIENT = "org.apache.bookkeeper.client."
_ALIASES: Final[dict[type[EnsemblePlacementPolicy], tuple[str, ...]]] = {
    DefaultEnsemblePlacementPolicy: (
        _CLIENT + "DefaultEnsemblePlacementPolicy",
        "DefaultEnsemblePlacementPolicy",
        "default",
        "random",
    ),
    RackawareEnsemblePlacementPolicy: (
        _CLIENT + "RackawareEnsemblePlacementPolicy",
        _CLIENT + "RackawareEnsemblePlacementPolicyImpl",
        "RackawareEnsemblePlacementPolicy",
        "RackawareEnsemblePlacementPolicyImpl",
        "rackaware",
        "rack-aware",
        "rack",
    ),
    RegionAwareEnsemblePlacementPolicy: (
        _CLIENT + "RegionAwareEnsemblePlacementPolicy",
        "RegionAwareEnsemblePlacementPolicy",
        "regionaware",
        "region-aware",
        "region",
    ),
    ZoneawareEnsemblePlacementPolicy: (
        _CLIENT + "ZoneawareEnsemblePlacementPolicy",
        _CLIENT + "ZoneawareEnsemblePlacementPolicyImpl",
        "ZoneawareEnsemblePlacementPolicy",
        "ZoneawareEnsemblePlacementPolicyImpl",
        "zoneaware",
        "zone-aware",
        "zone",
    ),
    LocalBookieEnsemblePlacementPolicy: (
        "org.apache.bookkeeper.bookie.LocalBookieEnsemblePlacementPolicy",
        "LocalBookieEnsemblePlacementPolicy",
        "localbookie",
        "local-bookie",
        "local",
    ),
}

POLICY_NAMES: Final[Mapping[str, type[EnsemblePlacementPolicy]]] = MappingProxyType(
    {
        name.lower(): cls
        for cls, names in _ALIASES.items()
        for name in (*names, f"{cls.__module__}.{cls.__name__}")
    }
)
"""Every accepted name, lower-cased, to its class."""


def policy_class(name: str) -> type[EnsemblePlacementPolicy]:
    """The policy class ``name`` designates: a BookKeeper class name, a short name (``rackaware``,
    ``region-aware``, ``zone``, ``default``, ``local``; any case), or the dotted path of a Python
    subclass of EnsemblePlacementPolicy. Raises ConfigError."""
    key = name.strip()
    cls = POLICY_NAMES.get(key.lower())
    if cls is not None:
        return cls
    module_name, _, class_name = key.replace(":", ".").rpartition(".")
    if module_name and not key.startswith("org.apache."):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            module = None
        found = getattr(module, class_name, None)
        if isinstance(found, type) and issubclass(found, EnsemblePlacementPolicy):
            return found
    known = sorted({n for names in _ALIASES.values() for n in names if "." not in n})
    raise ConfigError(
        f"unknown ensemblePlacementPolicy {name!r}; known: {', '.join(known)} "
        "(or a BookKeeper class name, or a Python class path)"
    )


def create_policy(
    conf: Mapping[str, object],
    dns_resolver: DNSToSwitchMapping | None = None,
    feature_provider: FeatureProvider | None = None,
    stats: PlacementStats | None = None,
) -> EnsemblePlacementPolicy:
    """A new policy of the class ``conf["ensemblePlacementPolicy"]`` names (rack-aware when
    unset, as in BookKeeper), initialized with ``conf``. Raises ConfigError."""
    name = conf_str(conf, "ensemblePlacementPolicy", DEFAULT_POLICY)
    assert name is not None
    policy = policy_class(name)()
    policy.initialize(conf, dns_resolver, feature_provider, stats)
    return policy
