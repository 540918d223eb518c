"""Fault 1: clients that pipeline READs and never read the replies must not grow the bookie's
memory (the probe saw 13 GB of RSS and an OOM kill). The bookie bounds the response bytes it
holds per connection (``serverWriteBufferHighWaterMark``/``LowWaterMark``) and in total
(``serverResponseBufferTotalBytes``) and stops reading a connection past them; other clients are
still served.

Owns the bookie process's memory under non-reading clients, measured from /proc.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.bookies import (
    REQUEST_TIMEOUT_S,
    bookie_client,
    needs_server,
    write_conf,
)
from support.bookies import start_bookie as start_bookie
from support.ports import free_port
from support.v2_wire import read_request

import pybkx._core as core

LEDGER_ID = 16
PASSWORD = b"secret"
BIG = 1 << 20
SMALL = 100
CONNECTIONS = 10
PRESSURE_S = 4.0
RSS_GROWTH_BOUND = 256 << 20
"""Well above what the bounds allow (64 MiB in total plus a response each) and far below what
the unbounded bookie reached in the same time (gigabytes)."""


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def add(client: Any, address: str, entry_id: int, data: bytes, length: int) -> None:
    digest = core.DigestManager(LEDGER_ID, PASSWORD, "CRC32C")
    entry = digest.package(entry_id, entry_id - 1, length, data)
    client.add(address, LEDGER_ID, entry_id, core.master_key(PASSWORD), entry).result(
        REQUEST_TIMEOUT_S
    )


def flood(port: int, request: bytes, count: int, stop: threading.Event) -> None:
    """Pipeline ``count`` copies of ``request`` and never read a reply (until ``stop``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.connect(("127.0.0.1", port))
        sock.settimeout(0.2)
        data = memoryview(request * count)
        while data and not stop.is_set():
            try:
                sent = sock.send(data[: 64 * 1024])
            except TimeoutError:
                continue  # the bookie stopped reading us: good, keep pushing
            except OSError:
                return
            data = data[sent:]
        stop.wait(PRESSURE_S * 3)


@needs_server
@pytest.mark.parametrize(("entry_id", "count"), [(0, 4000), (1, 400_000)], ids=["1MiB", "100B"])
def test_clients_that_never_read_replies_do_not_grow_the_bookie(
    tmp_path: Path, start_bookie: Any, entry_id: int, count: int
) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    bookie = start_bookie("--conf", str(write_conf(tmp_path, port)))
    bookie.wait_listening(port)
    with bookie_client() as client:
        add(client, address, 0, b"x" * BIG, BIG)
        add(client, address, 1, b"y" * SMALL, BIG + SMALL)
        before = rss_bytes(bookie.proc.pid)

        stop = threading.Event()
        threads = [
            threading.Thread(
                target=flood, args=(port, read_request(LEDGER_ID, entry_id), count, stop)
            )
            for _ in range(CONNECTIONS)
        ]
        for thread in threads:
            thread.start()
        try:
            peak = before
            deadline = time.monotonic() + PRESSURE_S
            while time.monotonic() < deadline:
                peak = max(peak, rss_bytes(bookie.proc.pid))
                time.sleep(0.1)  # not a wait: the RSS is sampled while the flood lasts
            # Another client is served meanwhile.
            read = client.read(address, LEDGER_ID, 1).result(REQUEST_TIMEOUT_S)
            assert bytes(read).endswith(b"y" * SMALL)
            peak = max(peak, rss_bytes(bookie.proc.pid))
        finally:
            stop.set()
            for thread in threads:
                thread.join(PRESSURE_S * 4)
    growth = peak - before
    print(f"bookie RSS {before >> 20} MiB -> peak {peak >> 20} MiB (+{growth >> 20} MiB)")
    assert growth < RSS_GROWTH_BOUND, f"RSS grew {growth >> 20} MiB"
    with contextlib.suppress(Exception):
        bookie.proc.send_signal(signal.SIGTERM)
    assert bookie.wait(30) == 0
