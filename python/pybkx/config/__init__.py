"""Configuration under Apache BookKeeper's key names: files, flags and keyword arguments parsed,
typed and checked once, with "did you mean" for misspelt keys. It never opens storage or sockets.

``ServerConfig`` configures a bookie, ``ClientConfig`` a client; both are frozen dataclasses
whose attributes the Rust core reads directly (one set of defaults, here)."""

from pybkx.config.client import ClientConfig
from pybkx.config.properties import parse_properties
from pybkx.config.server import (
    MAX_LOG_SIZE_LIMIT,
    NULL_STATS_PROVIDER,
    PROMETHEUS_STATS_PROVIDER,
    ServerConfig,
)
from pybkx.config.values import ConfigError

__all__ = [
    "MAX_LOG_SIZE_LIMIT",
    "NULL_STATS_PROVIDER",
    "PROMETHEUS_STATS_PROVIDER",
    "ClientConfig",
    "ConfigError",
    "ServerConfig",
    "parse_properties",
]
