"""Ports for the tests: a free loopback one to give a server, and probes of what listens on one
(a TCP accept, ZooKeeper's ``ruok``).

Owns those probes only; must never hold a port open (a free port is free when returned).
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port of 127.0.0.1 that no one listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def accepts_tcp(port: int) -> bool:
    """Whether something listening on 127.0.0.1:``port`` accepts a connection within 1 s."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def zookeeper_answers(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a ZooKeeper at ``host:port`` answers its ``ruok`` with ``imok`` (it listens; it
    may not serve sessions yet)."""
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"ruok")
            return sock.recv(16) == b"imok"
    except OSError:
        return False
