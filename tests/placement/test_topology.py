"""NetworkTopology: locations as a tree with bookies as leaves, kept current on changes."""

from __future__ import annotations

import pytest

from pybkx.placement import InvalidTopologyError, NetworkTopology
from pybkx.placement.topology import normalize_location, split_location


def test_locations_are_normalized_and_malformed_ones_rejected() -> None:
    assert normalize_location(" /r1/rack2/ ") == "/r1/rack2"
    assert split_location("/r1/rack2") == ("r1", "rack2")
    for bad in ("rack1", "/", "", "/a//b", "/a/ b", "~/a", "/a,b"):
        with pytest.raises(InvalidTopologyError):
            normalize_location(bad)


def test_add_places_a_bookie_and_counts_racks() -> None:
    topology = NetworkTopology()
    assert topology.add("b1:3181", "/r1/rack1")
    assert topology.add("b2:3181", "/r1/rack2")
    assert topology.add("b3:3181", "/r1/rack2")
    assert topology.num_racks == 2
    assert topology.location_of("b3:3181") == "/r1/rack2"
    assert topology.bookies_at("/r1/rack2") == {"b2:3181", "b3:3181"}
    assert topology.domains() == {"/r1"}
    assert len(topology) == 3 and "b1:3181" in topology


def test_adding_a_known_bookie_elsewhere_moves_it_and_prunes_empty_racks() -> None:
    topology = NetworkTopology()
    topology.add("b1:3181", "/r1/rack1")
    assert not topology.add("b1:3181", "/r1/rack1")  # no change
    assert topology.move("b1:3181", "/r2/rack9")
    assert topology.locations() == ["/r2/rack9"]
    assert topology.leaves("/r1") == set()
    assert topology.leaves("/r2") == {"b1:3181"}
    with pytest.raises(KeyError):
        topology.move("unknown:1", "/r1/rack1")


def test_remove_takes_the_bookie_out_of_every_scope() -> None:
    topology = NetworkTopology()
    topology.add("b1:3181", "/r1/rack1")
    topology.add("b2:3181", "/r1/rack1")
    assert topology.remove("b1:3181")
    assert not topology.remove("b1:3181")
    assert topology.leaves() == {"b2:3181"}
    assert topology.count_leaves("/r1") == 1


def test_scopes_select_subtrees_and_their_complement() -> None:
    topology = NetworkTopology()
    for n, location in enumerate(["/r1/a", "/r1/b", "/r2/a", "/r3/c"]):
        topology.add(f"b{n}:3181", location)
    assert topology.leaves("/r1") == {"b0:3181", "b1:3181"}
    assert topology.leaves("/r2/a") == {"b2:3181"}
    assert topology.leaves("~/r1,/r3") == {"b2:3181"}
    assert topology.leaves("/nowhere") == set()
    assert topology.count_leaves("", exclude=["b0:3181"]) == 3


def test_mixed_depths_coexist_unless_the_topology_fixes_them() -> None:
    """BK#2490: a bookie without a region next to /region/rack bookies must not vanish."""
    free = NetworkTopology()
    free.add("b1:3181", "/region1/rack1")
    free.add("b2:3181", "/default-rack")
    assert free.num_racks == 2

    fixed = NetworkTopology(levels=2)
    fixed.add("b1:3181", "/zone1/ud1")
    with pytest.raises(InvalidTopologyError):
        fixed.add("b2:3181", "/zone1")
    assert "b2:3181" not in fixed

    regions = NetworkTopology(min_levels=2)
    with pytest.raises(InvalidTopologyError):
        regions.add("b3:3181", "/rack-only")
    regions.add("b3:3181", "/r1/rack1/row2")
    assert regions.domains(2) == {"/r1/rack1"}
