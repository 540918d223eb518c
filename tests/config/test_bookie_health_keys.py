"""The client's bookie-health keys (quarantine and sticky reads): BookKeeper's names and defaults,
values checked once with the key named. Owns their parsing only; the behaviour is tested with
real bookies in tests/client/test_bookie_health.py."""

from __future__ import annotations

import pytest

from pybkx.config import ClientConfig, ConfigError


def test_defaults_are_bookkeepers() -> None:
    config = ClientConfig()
    assert config.bookie_health_check_enabled is False
    assert config.bookie_health_check_interval_seconds == 60
    assert config.bookie_error_threshold_per_interval == 100
    assert config.bookie_quarantine_time_seconds == 1800
    assert config.bookie_quarantine_ratio == 1.0
    assert config.sticky_reads_enabled is False


def test_keys_parse_from_bookkeeper_spellings() -> None:
    config = ClientConfig.of(
        bookieHealthCheckEnabled="true",
        bookieHealthCheckIntervalSeconds="5",
        bookieErrorThresholdPerInterval="0x10",
        bookieQuarantineTimeSeconds=30,
        bookieQuarantineRatio="0.5",
        stickyReadSEnabled="TRUE",
    )
    assert config.bookie_health_check_enabled is True
    assert config.bookie_health_check_interval_seconds == 5
    assert config.bookie_error_threshold_per_interval == 16
    assert config.bookie_quarantine_time_seconds == 30
    assert config.bookie_quarantine_ratio == 0.5
    assert config.sticky_reads_enabled is True
    assert config.settings()["stickyReadSEnabled"] is True


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("bookieHealthCheckIntervalSeconds", 0),
        ("bookieErrorThresholdPerInterval", 0),
        ("bookieQuarantineTimeSeconds", -1),
        ("bookieQuarantineRatio", 1.5),
        ("bookieQuarantineRatio", "half"),
        ("bookieHealthCheckEnabled", "maybe"),
        ("stickyReadSEnabled", "2"),
    ],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        ClientConfig.of(**{key: value})


def test_the_sticky_key_is_also_taken_as_its_setter_spells_it() -> None:
    # BookKeeper's setStickyReadsEnabled writes the key "stickyReadSEnabled".
    assert ClientConfig.of(stickyReadsEnabled="true").sticky_reads_enabled is True
    both = ClientConfig.of(stickyReadsEnabled="true", stickyReadSEnabled="false")
    assert both.sticky_reads_enabled is False
    assert "stickyReadsEnabled" not in both.extra
