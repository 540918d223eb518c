"""A bookie's identity from its configuration: the ``host:port`` it registers and is known by,
following BookKeeper's rule. Name resolution only; it never opens a socket."""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING

from pybkx.config.values import ConfigError

if TYPE_CHECKING:
    from pybkx.config.server import ServerConfig

__all__ = ["bookie_address", "is_loopback"]


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def bookie_address(config: ServerConfig, port: int) -> str:
    """The ``host:port`` this bookie is known by, following BookKeeper's rule.

    ``advertisedAddress`` if set; else the address of ``listeningInterface``; else the local host
    name's address. A loopback address is refused unless ``allowLoopback`` when the bookie is meant
    to join a cluster (a metadata service is configured), because every such bookie would claim
    the same identity; a standalone bookie may use one. Raises ConfigError.
    """
    if config.advertised_address is not None:
        return f"{config.advertised_address}:{port}"
    registering = config.metadata_uri() is not None
    if config.listening_interface is not None:
        host = config.listening_address()
        what = f"listeningInterface {config.listening_interface}"
    else:
        host = socket.gethostname()
        what = f"the local host name {host}"
    try:
        address = socket.gethostbyname(host)
    except OSError as exc:
        if registering:
            raise ConfigError(
                f"cannot resolve {what} to an address for the bookie id: {exc}; "
                "set advertisedAddress"
            ) from None
        address = host
    if registering and is_loopback(address) and not config.allow_loopback:
        raise ConfigError(
            f"invalid allowLoopback in {config.source}: the bookie address {address}:{port} "
            f"(from {what}) is a loopback address; set allowLoopback=true, listeningInterface "
            "or advertisedAddress"
        )
    return f"{address}:{port}"
