"""Ensemble placement: the EnsemblePlacementPolicy contract, five policies, topology, DNS.
Only names are gathered here; it must never hold placement logic."""

from pybkx.errors import BKNotEnoughBookiesException, NotEnoughBookiesException
from pybkx.placement.base import (
    BookieInfo,
    BookiesHealthInfo,
    EnsemblePlacementPolicy,
    Feature,
    FeatureProvider,
    HasEnsembleSize,
    PlacementPolicyAdherence,
    PlacementResult,
    SettableFeatureProvider,
    StaticBookiesHealthInfo,
)
from pybkx.placement.default import DefaultEnsemblePlacementPolicy
from pybkx.placement.dns import (
    CachedDNSToSwitchMapping,
    DefaultingResolver,
    DNSToSwitchMapping,
    ScriptBasedMapping,
    StaticDNSToSwitchMapping,
    resolver_from_conf,
)
from pybkx.placement.local import LocalBookieEnsemblePlacementPolicy
from pybkx.placement.rackaware import RackawareEnsemblePlacementPolicy
from pybkx.placement.regionaware import RegionAwareEnsemblePlacementPolicy
from pybkx.placement.registry import DEFAULT_POLICY, POLICY_NAMES, create_policy, policy_class
from pybkx.placement.reorder import ReadClass, SlowBookies, reorder_read_sequence
from pybkx.placement.stats import PlacementStats
from pybkx.placement.topology import (
    DEFAULT_RACK,
    DEFAULT_REGION,
    DEFAULT_REGION_AND_RACK,
    DEFAULT_UPGRADE_DOMAIN,
    DEFAULT_ZONE,
    DEFAULT_ZONE_AND_UPGRADE_DOMAIN,
    InvalidTopologyError,
    NetworkTopology,
)
from pybkx.placement.topology_aware import TopologyAwarePolicy
from pybkx.placement.zoneaware import ZoneawareEnsemblePlacementPolicy

MEETS_STRICT = PlacementPolicyAdherence.MEETS_STRICT
MEETS_SOFT = PlacementPolicyAdherence.MEETS_SOFT
FAIL = PlacementPolicyAdherence.FAIL

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_RACK",
    "DEFAULT_REGION",
    "DEFAULT_REGION_AND_RACK",
    "DEFAULT_UPGRADE_DOMAIN",
    "DEFAULT_ZONE",
    "DEFAULT_ZONE_AND_UPGRADE_DOMAIN",
    "FAIL",
    "MEETS_SOFT",
    "MEETS_STRICT",
    "POLICY_NAMES",
    "BKNotEnoughBookiesException",
    "BookieInfo",
    "BookiesHealthInfo",
    "CachedDNSToSwitchMapping",
    "DNSToSwitchMapping",
    "DefaultEnsemblePlacementPolicy",
    "DefaultingResolver",
    "EnsemblePlacementPolicy",
    "Feature",
    "FeatureProvider",
    "HasEnsembleSize",
    "InvalidTopologyError",
    "LocalBookieEnsemblePlacementPolicy",
    "NetworkTopology",
    "NotEnoughBookiesException",
    "PlacementPolicyAdherence",
    "PlacementResult",
    "PlacementStats",
    "RackawareEnsemblePlacementPolicy",
    "ReadClass",
    "RegionAwareEnsemblePlacementPolicy",
    "ScriptBasedMapping",
    "SettableFeatureProvider",
    "SlowBookies",
    "StaticBookiesHealthInfo",
    "StaticDNSToSwitchMapping",
    "TopologyAwarePolicy",
    "ZoneawareEnsemblePlacementPolicy",
    "create_policy",
    "policy_class",
    "reorder_read_sequence",
    "resolver_from_conf",
]
