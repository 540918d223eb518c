"""Network interfaces: whether a name is an IP address, and an interface's IPv4 address, for
``listeningInterface``. Read-only system queries; it never opens a listening socket."""

from __future__ import annotations

import ipaddress
import socket
import struct
from typing import Final

__all__ = ["interface_ipv4", "interface_names", "is_ip"]

_SIOCGIFADDR: Final = 0x8915  # Linux ioctl: an interface's IPv4 address


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def interface_names() -> set[str]:
    try:
        return {name for _, name in socket.if_nameindex()}
    except OSError:
        return set()


def interface_ipv4(name: str) -> str | None:
    """The IPv4 address of a network interface, or None (none assigned, or not Linux)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    request = struct.pack("256s", name.encode()[:15])
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            reply = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
    except OSError:
        return None
    return socket.inet_ntoa(reply[20:24])
