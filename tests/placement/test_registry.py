"""Choosing a policy by name (``ensemblePlacementPolicy``) and the public names."""

from __future__ import annotations

import pytest

import pybkx.placement as placement
from pybkx import errors
from pybkx.config import ConfigError
from pybkx.placement import (
    DefaultEnsemblePlacementPolicy,
    LocalBookieEnsemblePlacementPolicy,
    RackawareEnsemblePlacementPolicy,
    RegionAwareEnsemblePlacementPolicy,
    ZoneawareEnsemblePlacementPolicy,
    create_policy,
    policy_class,
)


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        (
            "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
            RackawareEnsemblePlacementPolicy,
        ),
        (
            "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicyImpl",
            RackawareEnsemblePlacementPolicy,
        ),
        ("RackawareEnsemblePlacementPolicy", RackawareEnsemblePlacementPolicy),
        ("rack-aware", RackawareEnsemblePlacementPolicy),
        (
            "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy",
            RegionAwareEnsemblePlacementPolicy,
        ),
        ("RegionAware", RegionAwareEnsemblePlacementPolicy),
        (
            "org.apache.bookkeeper.client.ZoneawareEnsemblePlacementPolicy",
            ZoneawareEnsemblePlacementPolicy,
        ),
        ("zone", ZoneawareEnsemblePlacementPolicy),
        (
            "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy",
            DefaultEnsemblePlacementPolicy,
        ),
        ("default", DefaultEnsemblePlacementPolicy),
        (
            "org.apache.bookkeeper.bookie.LocalBookieEnsemblePlacementPolicy",
            LocalBookieEnsemblePlacementPolicy,
        ),
        ("local", LocalBookieEnsemblePlacementPolicy),
        (
            "pybkx.placement.zoneaware.ZoneawareEnsemblePlacementPolicy",
            ZoneawareEnsemblePlacementPolicy,
        ),
    ],
)
def test_bookkeeper_and_short_names_choose_the_policy(name: str, cls: type) -> None:
    assert policy_class(name) is cls


def test_python_classes_can_be_named_by_path() -> None:
    assert policy_class("pybkx.placement.default:DefaultEnsemblePlacementPolicy") is (
        DefaultEnsemblePlacementPolicy
    )


def test_unknown_names_are_configuration_errors() -> None:
    for name in ("nope", "org.apache.bookkeeper.client.TestPolicy", "pybkx.errors.BKException"):
        with pytest.raises(ConfigError, match="unknown ensemblePlacementPolicy"):
            policy_class(name)


def test_create_policy_defaults_to_rack_aware_like_bookkeeper() -> None:
    policy = create_policy({"ignoreLocalNodeInPlacementPolicy": "true"})
    assert isinstance(policy, RackawareEnsemblePlacementPolicy)
    zone = create_policy(
        {"ensemblePlacementPolicy": "zoneaware", "enforceStrictZoneawarePlacement": "false"}
    )
    assert isinstance(zone, ZoneawareEnsemblePlacementPolicy) and not zone.strict
    local = create_policy({"ensemblePlacementPolicy": "local", "bookieId": "me:3181"})
    assert local.new_ensemble(1, 1, 1, None, ()).result == ["me:3181"]


def test_both_exception_names_are_exported_and_equal() -> None:
    assert placement.BKNotEnoughBookiesException is errors.NotEnoughBookiesException
    assert errors.BKNotEnoughBookiesException is placement.NotEnoughBookiesException
    assert errors.BKNotEnoughBookiesException.code == -6
    for name in placement.__all__:
        assert hasattr(placement, name), name
