"""DNS-to-switch mappings: static tables (in memory and from a file), the script mapping with its
cache, the default-location decorator, and building a mapping from configuration."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from placement_helpers import PrefixMapping

from pybkx.config import ConfigError
from pybkx.placement import (
    CachedDNSToSwitchMapping,
    DefaultingResolver,
    InvalidTopologyError,
    PlacementStats,
    ScriptBasedMapping,
    StaticDNSToSwitchMapping,
    resolver_from_conf,
)
from pybkx.placement.dns import host_of


def test_host_of_strips_the_port_only() -> None:
    assert host_of("10.0.0.1:3181") == "10.0.0.1"
    assert host_of("bookie-1.example:3181") == "bookie-1.example"
    assert host_of("[::1]:3181") == "::1"
    assert host_of("bookie-1") == "bookie-1"


def test_static_mapping_matches_the_bookie_id_before_its_host() -> None:
    """pulsar#20918: racks keyed by host:port must be found, not silently ignored."""
    mapping = StaticDNSToSwitchMapping(
        {"10.0.0.1:3181": "/r1/rack1", "10.0.0.1": "/r9/rack9", "10.0.0.2": "/r2/rack2"}
    )
    assert mapping.resolve(["10.0.0.1:3181", "10.0.0.1:4000", "10.0.0.2:3181", "x:1"]) == [
        "/r1/rack1",
        "/r9/rack9",
        "/r2/rack2",
        None,
    ]


def test_static_mapping_rejects_malformed_locations() -> None:
    with pytest.raises(InvalidTopologyError):
        StaticDNSToSwitchMapping({"a": "rack-without-slash"})


def test_static_mapping_changes_reach_listeners() -> None:
    mapping = StaticDNSToSwitchMapping({"a:1": "/r1"})
    heard: list[list[str]] = []
    mapping.register_rack_change_listener(heard.append)
    mapping.set("a:1", "/r2")
    mapping.set("a:1", "/r2")  # unchanged: no notification
    mapping.update({"b:1": "/r3", "a:1": "/r2"})
    mapping.remove("b:1")
    assert heard == [["a:1"], ["b:1"], ["b:1"]]
    mapping.unregister_rack_change_listener(heard.append)
    mapping.set("a:1", "/r5")
    assert len(heard) == 3


def test_table_file_is_read_and_reloaded(tmp_path: Path) -> None:
    table = tmp_path / "racks.txt"
    table.write_text("# host rack\n10.0.0.1 /r1/rack1\n10.0.0.2:3181   /r1/rack2  # comment\n")
    mapping = StaticDNSToSwitchMapping.from_file(table)
    assert mapping.resolve(["10.0.0.1:3181", "10.0.0.2:3181"]) == ["/r1/rack1", "/r1/rack2"]
    heard: list[list[str]] = []
    mapping.register_rack_change_listener(heard.append)
    table.write_text("10.0.0.1 /r2/rack7\n")
    mapping.reload_cached_mappings()
    assert mapping.resolve(["10.0.0.1:3181", "10.0.0.2:3181"]) == ["/r2/rack7", None]
    assert sorted(heard[0]) == ["10.0.0.1", "10.0.0.2:3181"]


def test_table_file_errors_name_the_line(tmp_path: Path) -> None:
    table = tmp_path / "racks.txt"
    table.write_text("10.0.0.1 /r1 extra\n")
    with pytest.raises(ConfigError, match=r"racks\.txt:1"):
        StaticDNSToSwitchMapping.from_file(table)
    with pytest.raises(ConfigError):
        StaticDNSToSwitchMapping.from_file(tmp_path / "missing.txt")


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "topology.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_script_mapping_runs_in_batches_and_caches(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    script = _script(
        tmp_path,
        f'echo "$@" >> {calls}\nfor h in "$@"; do echo "/rack-$h"; done\n',
    )
    mapping = ScriptBasedMapping(script, max_args=2)
    names = ["10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"]
    assert mapping.resolve(names) == ["/rack-10.0.0.1", "/rack-10.0.0.2", "/rack-10.0.0.3"]
    assert calls.read_text().splitlines() == ["10.0.0.1 10.0.0.2", "10.0.0.3"]
    assert mapping.resolve(names[:1]) == ["/rack-10.0.0.1"]
    assert len(calls.read_text().splitlines()) == 2  # answered from the cache
    mapping.reload_cached_mappings()
    mapping.resolve(names[:1])
    assert len(calls.read_text().splitlines()) == 3


def test_script_failures_leave_names_unresolved_and_uncached(tmp_path: Path) -> None:
    flag = tmp_path / "broken"
    flag.write_text("")
    script = _script(tmp_path, f'[ -e {flag} ] && exit 3\necho "/r1/a"\n')
    mapping = ScriptBasedMapping(script)
    assert mapping.resolve(["h:1"]) == [None]
    os.unlink(flag)
    assert mapping.resolve(["h:1"]) == ["/r1/a"]


def test_script_with_the_wrong_number_of_answers_is_ignored(tmp_path: Path) -> None:
    mapping = ScriptBasedMapping(_script(tmp_path, 'echo "/r1 /r2 /r3"\n'))
    assert mapping.resolve(["a:1", "b:1"]) == [None, None]


def test_script_must_be_an_executable(tmp_path: Path) -> None:
    plain = tmp_path / "plain.sh"
    plain.write_text("echo /r1\n")
    with pytest.raises(ConfigError):
        ScriptBasedMapping(plain)


def test_defaulting_resolver_counts_every_unresolved_name() -> None:
    stats = PlacementStats()
    resolver = DefaultingResolver(StaticDNSToSwitchMapping({"a": "/r1"}), "/default-rack", stats)
    assert resolver.resolve(["a:1", "b:1", "c:1"]) == ["/r1", "/default-rack", "/default-rack"]
    assert stats.get("failed_to_resolve_network_location_count") == 2


def test_defaulting_resolver_survives_a_broken_mapping() -> None:
    class Broken(StaticDNSToSwitchMapping):
        def resolve(self, names: object) -> list[str | None]:
            raise RuntimeError("boom")

    resolver = DefaultingResolver(Broken(), "/default-rack")
    assert resolver.resolve(["a:1"]) == ["/default-rack"]


def test_cached_mapping_only_asks_for_unknown_names() -> None:
    asked: list[list[str]] = []

    class Counting(StaticDNSToSwitchMapping):
        def resolve(self, names: object) -> list[str | None]:
            asked.append(list(names))  # type: ignore[call-overload]
            return super().resolve(names)  # type: ignore[arg-type]

    cached = CachedDNSToSwitchMapping(Counting({"a": "/r1", "b": "/r2"}))
    assert cached.resolve(["a", "b", "a"]) == ["/r1", "/r2", "/r1"]
    assert cached.resolve(["b", "zz"]) == ["/r2", None]
    assert asked == [["a", "b"], ["zz"]]


def test_resolver_from_conf(tmp_path: Path) -> None:
    assert resolver_from_conf({}) is None  # the script mapping without a script
    script = _script(tmp_path, 'echo "/r1"\n')
    built = resolver_from_conf({"networkTopologyScriptFileName": str(script)})
    assert isinstance(built, ScriptBasedMapping)
    table = tmp_path / "t.txt"
    table.write_text("a /r1\n")
    static = resolver_from_conf(
        {"reppDnsResolverClass": "static", "networkTopologyTableFileName": str(table)}
    )
    assert isinstance(static, StaticDNSToSwitchMapping)
    assert static.resolve(["a:1"]) == ["/r1"]
    dotted = resolver_from_conf(
        {"reppDnsResolverClass": "placement_helpers.PrefixMapping", "prefix": "/z"}
    )
    assert isinstance(dotted, PrefixMapping)
    assert dotted.resolve(["h:1"]) == ["/z/h"]
    with pytest.raises(ConfigError):
        resolver_from_conf({"reppDnsResolverClass": "static"})
    with pytest.raises(ConfigError, match="not available"):
        resolver_from_conf(
            {"reppDnsResolverClass": "org.apache.pulsar.zookeeper.ZkBookieRackAffinityMapping"}
        )
