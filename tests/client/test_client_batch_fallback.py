"""Batch reads fall back to single reads as BP-62 says: when bookies close the connection on
BATCH_READ_ENTRY (what a bookie older than 4.17 does with the unknown opcode 7), for whole and
striped (E > Qw) ledgers alike, and when ``batchReadEnabled`` is off.

A striped ledger on bookies that ignore pybkx's strided batch read (as Java's do) is read in
runs of the entries each bookie holds consecutively.

Owns those fallback rules; the pre-4.17 bookie is a real pybkx bookie behind a proxy that drops
any connection carrying opcode 7 (the only way to get such a bookie without an old release),
the stride-blind one a pybkx bookie behind a proxy that clears the flag.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pybkx._core import FLAG_STRIDED_READ, BookieServer, LedgerStorage
from pybkx.client import BookKeeper
from pybkx.config import ServerConfig
from pybkx.meta import BookieServiceInfo, open_metadata_store


class Proxy:
    """A TCP proxy in front of a bookie that passes each V2 request frame through ``rewrite``
    (None: close the client's connection), and counts the frames per opcode."""

    def __init__(self, target_port: int, rewrite: Callable[[bytes], bytes | None]) -> None:
        self.target_port = target_port
        self.rewrite = rewrite
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.seen: Counter[int] = Counter()
        self.dropped = 0
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(
                target=self._pump_requests, args=(client, upstream), daemon=True
            ).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump_requests(self, src: socket.socket, dst: socket.socket) -> None:
        buf = b""
        try:
            while data := src.recv(65536):
                buf += data
                while len(buf) >= 8:
                    (length,) = struct.unpack(">i", buf[:4])
                    if len(buf) < 4 + length:
                        break
                    frame, buf = buf[: 4 + length], buf[4 + length :]
                    self.seen[opcode(frame)] += 1
                    passed = self.rewrite(frame)
                    if passed is None:
                        self.dropped += 1
                        raise ConnectionAbortedError
                    dst.sendall(passed)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()


def opcode(frame: bytes) -> int:
    """The opcode of a V2 frame (length prefix included)."""
    return frame[5] if frame[4] > 0 else frame[7]


def drop_batch_reads(frame: bytes) -> bytes | None:
    """What a bookie older than 4.17 does: opcode 7 is unknown, the connection is closed."""
    return None if opcode(frame) == 7 else frame


def ignore_strides(frame: bytes) -> bytes | None:
    """What a Java 4.17 bookie does with pybkx's strided batch read: it does not know the flag
    (nor reads the stride after the BP-62 fields), so it answers consecutive entries."""
    if opcode(frame) != 7 or frame[4] == 0:
        return frame
    (flags,) = struct.unpack(">H", frame[6:8])
    return frame[:6] + struct.pack(">H", flags & ~FLAG_STRIDED_READ) + frame[8:]


def proxied_bookies(
    tmp_path: Path, rewrite: Callable[[bytes], bytes | None]
) -> Iterator[tuple[str, list[Proxy]]]:
    """Three bookies, registered under the addresses of proxies that apply ``rewrite``."""
    uri = f"embedded://{tmp_path / 'meta'}"
    store = open_metadata_store(uri)
    store.init_new_cluster()
    storages, servers, proxies = [], [], []
    for i in range(3):
        config = ServerConfig.of(
            journalDirectories=str(tmp_path / f"b{i}" / "j"),
            ledgerDirectories=str(tmp_path / f"b{i}" / "l"),
        )
        storage = LedgerStorage(config)
        server = BookieServer(storage, config, "127.0.0.1", 0)
        proxy = Proxy(server.port, rewrite)
        store.register_bookie(
            f"127.0.0.1:{proxy.port}", False, BookieServiceInfo.for_address("127.0.0.1", proxy.port)
        )
        storages.append(storage)
        servers.append(server)
        proxies.append(proxy)
    yield uri, proxies
    store.close()
    for proxy, server, storage in zip(proxies, servers, storages, strict=True):
        proxy.close()
        server.stop(1000)
        storage.close()


@pytest.fixture
def old_bookies(tmp_path: Path) -> Iterator[tuple[str, list[Proxy]]]:
    """Bookies that close the connection on opcode 7."""
    yield from proxied_bookies(tmp_path, drop_batch_reads)


@pytest.fixture
def stride_blind_bookies(tmp_path: Path) -> Iterator[tuple[str, list[Proxy]]]:
    """Bookies that serve BP-62 batch reads but not pybkx's strided ones (as Java's)."""
    yield from proxied_bookies(tmp_path, ignore_strides)


def test_batch_read_falls_back_when_bookies_drop_opcode_7(
    old_bookies: tuple[str, list[Proxy]],
) -> None:
    uri, proxies = old_bookies
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(2, 2, 2)
        lh.append_many([b"entry-%d" % e for e in range(50)])
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        first = rh.batch_read(0, 50, 1 << 20)
        assert [e.payload for e in first] == [b"entry-%d" % e for e in range(50)]
        dropped = sum(p.dropped for p in proxies)
        assert dropped >= 1
        # The fallback is permanent for the handle: no further batch requests.
        again = rh.batch_read(10, 20, 1 << 20)
        assert [e.entry_id for e in again] == list(range(10, 30))
        assert sum(p.dropped for p in proxies) == dropped


def test_striped_ledgers_fall_back_too_and_disabled_batching_sends_no_batch(
    old_bookies: tuple[str, list[Proxy]],
) -> None:
    uri, proxies = old_bookies
    with BookKeeper(uri) as bk:
        striped = bk.create_ledger(3, 2, 2)
        striped.append_many([b"s%d" % e for e in range(300)])
        striped.close()
        rh = bk.open_ledger(striped.ledger_id)
        got = rh.batch_read(0, 300, 1 << 20)
        assert [e.payload for e in got] == [b"s%d" % e for e in range(300)]
        dropped = sum(p.dropped for p in proxies)
        assert dropped >= 1
        assert [e.entry_id for e in rh.entries(5, 250)] == list(range(5, 251))
        assert sum(p.dropped for p in proxies) == dropped
        # Iteration notices it too: a fresh handle's first reads in flight drop, then it
        # reads singly for good.
        fresh = bk.open_ledger(striped.ledger_id)
        assert [e.payload for e in fresh.entries(batch_entries=50)] == [
            b"s%d" % e for e in range(300)
        ]
        dropped_by_iteration = sum(p.dropped for p in proxies)
        assert dropped_by_iteration > dropped
        assert [e.entry_id for e in fresh.entries(batch_entries=50)] == list(range(300))
        assert sum(p.dropped for p in proxies) == dropped_by_iteration
        plain = bk.create_ledger(2, 2, 2)
        plain.append_many([b"p%d" % e for e in range(30)])
        plain.close()
    dropped = sum(p.dropped for p in proxies)
    with BookKeeper(uri, batchReadEnabled=False) as bk:
        for ledger_id, prefix in ((plain.ledger_id, b"p"), (striped.ledger_id, b"s")):
            got = bk.open_ledger(ledger_id).batch_read(0, 30, 1 << 20)
            assert [e.payload for e in got] == [prefix + b"%d" % e for e in range(30)]
    assert sum(p.dropped for p in proxies) == dropped


def test_asyncio_and_arrow_iteration_fall_back_as_entries_does(
    old_bookies: tuple[str, list[Proxy]],
) -> None:
    """The three iteration faces share one read window: a fresh handle's batched reads in
    flight drop their connections, the chunks that failed are read again singly, and every
    entry arrives in order."""
    uri, _ = old_bookies
    payloads = [b"a%d" % e for e in range(300)]
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(3, 2, 2)
        lh.append_many(payloads)
        lh.close()

        async def read_all() -> list[bytes]:
            rh = bk.open_ledger(lh.ledger_id)
            return [e.payload async for e in rh.aentries(batch_entries=50)]

        assert asyncio.run(read_all()) == payloads
        batches = bk.open_ledger(lh.ledger_id).arrow_batches(0, 299, 50)
        assert [p for b in batches for p in b.column("payload").to_pylist()] == payloads


def test_striped_ledgers_on_stride_blind_bookies_are_read_in_runs(
    stride_blind_bookies: tuple[str, list[Proxy]],
) -> None:
    uri, proxies = stride_blind_bookies
    payloads = [b"r%d" % e for e in range(600)]
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(3, 2, 2)
        lh.append_many(payloads)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        assert [e.payload for e in rh.batch_read(0, 600, 1 << 20)] == payloads
        first = sum((p.seen for p in proxies), Counter())
        # Learning that the bookies ignore strides costs a few requests; then runs of Qw = 2.
        assert 300 <= first[7] <= 320 and first[2] <= 10
        assert [e.payload for e in rh.entries()] == payloads
        second = sum((p.seen for p in proxies), Counter()) - first
        assert 300 <= second[7] <= 310 and second[2] <= 10
        assert sum(p.dropped for p in proxies) == 0
