"""Batch reads fall back to single reads as BP-62 says: when bookies close the connection on
BATCH_READ_ENTRY (what a bookie older than 4.17 does with the unknown opcode 7), when the ledger
is striped (E > Qw), and when ``batchReadEnabled`` is off.

Owns those fallback rules; the pre-4.17 bookie is a real pybkx bookie behind a proxy that drops
any connection carrying opcode 7 (the only way to get such a bookie without an old release).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybkx._core import BookieServer, LedgerStorage
from pybkx.client import BookKeeper
from pybkx.config import ServerConfig
from pybkx.meta import BookieServiceInfo, open_metadata_store


class DropsBatchReads:
    """A TCP proxy in front of a bookie that closes a client's connection as soon as the client
    sends a V2 frame with opcode 7, and counts how often it did."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
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
                    if (frame[4] > 0 and frame[5] == 7) or (frame[4] == 0 and frame[7] == 7):
                        self.dropped += 1
                        raise ConnectionAbortedError
                    dst.sendall(frame)
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


@pytest.fixture
def old_bookies(tmp_path: Path) -> Iterator[tuple[str, list[DropsBatchReads]]]:
    """Three bookies, registered under the addresses of proxies that refuse batch reads."""
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
        proxy = DropsBatchReads(server.port)
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


def test_batch_read_falls_back_when_bookies_drop_opcode_7(
    old_bookies: tuple[str, list[DropsBatchReads]],
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


def test_striped_ledgers_and_disabled_batching_use_single_reads(
    old_bookies: tuple[str, list[DropsBatchReads]],
) -> None:
    uri, proxies = old_bookies
    with BookKeeper(uri) as bk:
        striped = bk.create_ledger(3, 2, 2)
        striped.append_many([b"s%d" % e for e in range(30)])
        striped.close()
        got = bk.open_ledger(striped.ledger_id).batch_read(0, 30, 1 << 20)
        assert [e.payload for e in got] == [b"s%d" % e for e in range(30)]
        plain = bk.create_ledger(2, 2, 2)
        plain.append_many([b"p%d" % e for e in range(30)])
        plain.close()
    with BookKeeper(uri, batchReadEnabled=False) as bk:
        got = bk.open_ledger(plain.ledger_id).batch_read(0, 30, 1 << 20)
        assert [e.payload for e in got] == [b"p%d" % e for e in range(30)]
    assert sum(p.dropped for p in proxies) == 0
