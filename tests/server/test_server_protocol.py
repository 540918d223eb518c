"""The V2 server over raw sockets: hand-packed frames against an in-process ``BookieServer``,
checked byte for byte where the reference gives bytes (§1.15) and otherwise against the Java
bookie's behaviour as the reference describes it (§1.1-§1.13).

Owns black-box tests of the server's wire behaviour only; frames are built by ``v2_wire`` and
never by pybkx's own client or protocol code.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.v2_wire import (
    AUTH_DISABLED_PLUGIN,
    BATCH_FIXED_LEN,
    EBADVERSION,
    EFENCED,
    ENOENTRY,
    ENOLEDGER,
    EOK,
    EREADONLY,
    ETOOMANYREQUESTS,
    EUA,
    FLAG_DO_FENCING,
    FLAG_HIGH_PRIORITY,
    FLAG_RECOVERY_ADD,
    OP_ADD,
    OP_AUTH,
    OP_BATCH_READ,
    OP_READ,
    OTHER_KEY,
    Conn,
    Response,
    add_request,
    auth_message,
    auth_request,
    batch_request,
    crc32_entry,
    decode_auth_message,
    frame,
    header,
    parse_response,
    read_request,
    unhex,
)
from support.wait import wait_until

from pybkx._core import BookieServer, DigestManager, LedgerEntry, LedgerStorage, master_key
from pybkx.config import ServerConfig

MakeServer = Callable[..., BookieServer]

# ---------------------------------------------------------------------------------------------
# Reference §1.15, transcribed by hand (ledger 1, entry 0, LAC -1, payload "hello", no password).

REF_KEY = unhex("850bf1071c5e3d8c24235676f8816ae0cbe2f14f")
REF_ENTRY = unhex(
    "0000000000000001 0000000000000000 ffffffffffffffff 0000000000000005"
    " 0000000030a56872 68656c6c6f"
)
REF_ADD_FRAME = unhex("00000045 02010000") + REF_KEY + REF_ENTRY
REF_ADD_RESPONSE = unhex("00000018 02010000 00000000 0000000000000001 0000000000000000")
REF_READ_FRAME = unhex("00000014 02020000 0000000000000001 0000000000000000")
REF_FENCING_LAC_READ = unhex("00000028 02020001 0000000000000001 ffffffffffffffff") + REF_KEY
REF_READ_RESPONSE = (
    unhex("00000045 02020000 00000000 0000000000000001 0000000000000000") + REF_ENTRY
)
REF_BATCH_FRAME = unhex(
    "00000028 02070000 0000000000000001 0000000000000000 000000000000002a 00000064 0000000000500000"
)
REF_BATCH_RESPONSE_HEAD = unhex(
    "00000082 02070000 00000000 0000000000000001 0000000000000000 000000000000002a"
)

# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture
def make_server(storage: LedgerStorage) -> Iterator[MakeServer]:
    """``make_server(**keys)``: a BookieServer on 127.0.0.1, an ephemeral port, over the test's
    storage, with BookKeeper server keys (``nettyMaxFrameSizeBytes=...``); stopped at teardown
    (before the storage is closed)."""
    servers: list[BookieServer] = []

    def _make(**keys: Any) -> BookieServer:
        server = BookieServer(storage, ServerConfig.of(**keys), "127.0.0.1", 0)
        servers.append(server)
        return server

    yield _make
    for server in servers:
        server.stop()


@pytest.fixture(params=[2, 0], ids=["read-pool", "reads-inline"])
def server(make_server: MakeServer, request: pytest.FixtureRequest) -> BookieServer:
    """A server with its defaults, its reads on two read threads or inline
    (``numReadWorkerThreads=0``): both paths answer every request the same."""
    return make_server(numReadWorkerThreads=request.param)


@pytest.fixture
def conn(server: BookieServer) -> Iterator[Conn]:
    with Conn(server.port) as c:
        yield c


def add_ok(c: Conn, ledger: int, entry: int, payload: bytes = b"hello", **kw: Any) -> bytes:
    """ADD one CRC32 entry and assert EOK; return the entry bytes as stored."""
    data = crc32_entry(ledger, entry, payload)
    resp = c.call(add_request(ledger, entry, entry_bytes=data, **kw))
    assert (resp.op, resp.rc, resp.ledger, resp.entry) == (OP_ADD, EOK, ledger, entry)
    return data


def expect_rc(resp: Response, op: int, rc: int, ledger: int, entry: int) -> None:
    assert (resp.op, resp.rc, resp.ledger, resp.entry) == (op, rc, ledger, entry), resp


def expect_closed(c: Conn) -> None:
    """The server closes the connection without answering."""
    assert c.wait_closed() == b""


def protocol_errors(server: BookieServer) -> int:
    return server.stats()["pybkx_server_protocol_errors"]


def requests_taken(server: BookieServer, op: str) -> int:
    """Requests of ``op`` ("ADD_ENTRY", "READ_ENTRY") the server decoded: those in progress
    plus those answered (the count of its ``*_REQUEST`` summary, both outcomes)."""
    taken = 0
    for metric in server.metrics():
        value = metric.value
        if metric.name == f"bookkeeper_server_{op}_IN_PROGRESS":
            assert isinstance(value, int)
            taken += value
        elif metric.name == f"bookkeeper_server_{op}_REQUEST":
            assert isinstance(value, dict)
            taken += value["true"].count + value["false"].count
    return taken


# ---------------------------------------------------------------------------------------------
# §1.15 byte examples


def test_hand_built_frames_equal_the_reference_bytes() -> None:
    assert crc32_entry(1, 0, b"hello") == REF_ENTRY
    assert len(REF_ENTRY) == 45
    assert DigestManager(1, b"", "CRC32").package(0, -1, 5, b"hello") == REF_ENTRY
    assert master_key(b"") == REF_KEY
    assert len(REF_ADD_FRAME) == 73
    assert add_request(1, 0, b"hello") == REF_ADD_FRAME
    assert read_request(1, 0) == REF_READ_FRAME
    assert read_request(1, -1, flags=FLAG_DO_FENCING, key=REF_KEY) == REF_FENCING_LAC_READ
    assert batch_request(1, 0, 42, 100, 5 << 20) == REF_BATCH_FRAME


@pytest.mark.parametrize("digest_type", ["CRC32", "CRC32C", "HMAC", "DUMMY"])
def test_an_entry_read_packages_again_into_the_bytes_its_writer_sent(digest_type: str) -> None:
    manager = DigestManager(7, b"pw", digest_type)
    sent = manager.package(3, 2, 4096 + 11, b"x" * 11)
    verified = manager.verify(sent, 3)
    read = LedgerEntry(7, 3, verified.payload, verified.last_add_confirmed, verified.ledger_length)
    assert read.packaged(manager) == sent
    with pytest.raises(ValueError, match="ledger 8"):
        read.packaged(DigestManager(8, b"pw", digest_type))


def test_reference_add_read_and_batch_bytes(conn: Conn, storage: LedgerStorage) -> None:
    conn.send(REF_ADD_FRAME)
    assert conn.recv_raw() == REF_ADD_RESPONSE
    assert storage.read_entry(1, 0) == REF_ENTRY

    conn.send(REF_READ_FRAME)
    assert conn.recv_raw() == REF_READ_RESPONSE

    entry1 = DigestManager(1, b"", "CRC32").package(1, 0, 10, b"hello")
    assert len(entry1) == 45
    conn.send(add_request(1, 1, entry_bytes=entry1))
    assert conn.recv_raw() == unhex("00000018 02010000 00000000 0000000000000001 0000000000000001")

    conn.send(REF_BATCH_FRAME)
    raw = conn.recv_raw()
    assert len(raw) == 4 + 0x82 == 134
    assert raw == (
        REF_BATCH_RESPONSE_HEAD + unhex("0000002d") + REF_ENTRY + unhex("0000002d") + entry1
    )


def test_reference_fencing_lac_read(conn: Conn, storage: LedgerStorage) -> None:
    conn.send(REF_ADD_FRAME)
    assert conn.recv_raw() == REF_ADD_RESPONSE
    conn.send(REF_FENCING_LAC_READ)
    # Entry id -1 is echoed; the body is the last entry stored.
    assert conn.recv_raw() == (
        unhex("00000045 02020000 00000000 0000000000000001 ffffffffffffffff") + REF_ENTRY
    )
    assert storage.is_fenced(1)


# ---------------------------------------------------------------------------------------------
# Version byte and flags (§1.3, quirk 6)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_responses_echo_the_request_version_with_zero_flags(
    server: BookieServer, version: int
) -> None:
    with Conn(server.port) as c:
        # Version 0 carries no flags; 1 and 2 send some that must not come back.
        add_flags = 0 if version == 0 else FLAG_RECOVERY_ADD
        read_flags = 0 if version == 0 else FLAG_HIGH_PRIORITY
        data = crc32_entry(7, 0, b"v")
        resp = c.call(add_request(7, 0, entry_bytes=data, flags=add_flags, version=version))
        assert resp.raw[4:8] == header(OP_ADD, 0, version)
        assert (resp.version, resp.flags, resp.rc) == (version, 0, EOK)

        resp = c.call(read_request(7, 0, flags=read_flags, version=version))
        assert resp.raw[4:8] == header(OP_READ, 0, version)
        assert (resp.version, resp.flags, resp.rc, resp.body) == (version, 0, EOK, data)

        resp = c.call(batch_request(7, 0, 99, 0, 1 << 20, flags=read_flags, version=version))
        assert resp.raw[4:8] == header(OP_BATCH_READ, 0, version)
        assert (resp.version, resp.flags, resp.rc) == (version, 0, EOK)
        assert (resp.request_id, resp.entries) == (99, [data])

        # An error response echoes the version too.
        resp = c.call(read_request(8, 0, version=version))
        assert resp.raw[4:8] == header(OP_READ, 0, version)
        assert resp.rc == ENOLEDGER


@pytest.mark.parametrize("op", ["add", "read", "batch"])
def test_version_3_gets_ebadversion_and_the_connection_stays_usable(
    conn: Conn, storage: LedgerStorage, op: str
) -> None:
    if op == "add":
        resp = conn.call(add_request(5, 3, version=3))
        expect_rc(resp, OP_ADD, EBADVERSION, 5, 3)
        assert resp.raw == frame(header(OP_ADD, 0, 3) + struct.pack(">iqq", EBADVERSION, 5, 3))
        assert not storage.ledger_exists(5)
    elif op == "read":
        resp = conn.call(read_request(5, 3, version=3))
        assert resp.raw == frame(header(OP_READ, 0, 3) + struct.pack(">iqq", EBADVERSION, 5, 3))
    else:
        resp = conn.call(batch_request(5, 3, 77, 10, 1 << 20, version=3))
        assert resp.raw == frame(
            header(OP_BATCH_READ, 0, 3) + struct.pack(">iqqq", EBADVERSION, 5, 3, 77)
        )
    add_ok(conn, 5, 0)
    assert conn.call(read_request(5, 0)).rc == EOK


@pytest.mark.parametrize("version", [3, 0x0A, 0x7F, 0xFF])
def test_out_of_range_versions_after_a_v2_frame_get_ebadversion(conn: Conn, version: int) -> None:
    # After the first V2 frame the connection is V2 for good: even a body starting with 0x0A is a
    # V2 header with version 10, not a protobuf request.
    assert conn.call(read_request(1, 0)).rc == ENOLEDGER
    resp = conn.call(read_request(1, 0, version=version))
    assert resp.raw == frame(header(OP_READ, 0, version) + struct.pack(">iqq", EBADVERSION, 1, 0))
    assert conn.call(read_request(1, 0)).rc == ENOLEDGER


# ---------------------------------------------------------------------------------------------
# Connections the server must close (§1.1, §1.4, §1.7, quirk 1)


@pytest.mark.parametrize("op", [4, 5, 6, 0, 8, 9, 0xFF])
def test_reserved_and_unknown_opcodes_close_only_that_connection(
    server: BookieServer, op: int
) -> None:
    with Conn(server.port) as other, Conn(server.port) as bad:
        data = add_ok(other, 3, 0)
        assert bad.call(read_request(3, 0)).rc == EOK
        errors = protocol_errors(server)
        bad.send(frame(header(op) + struct.pack(">qq", 3, 0)))
        expect_closed(bad)
        assert protocol_errors(server) == errors + 1
        # The other connection was not disturbed.
        assert other.call(read_request(3, 0)).body == data
        add_ok(other, 3, 1)


LIMIT = 64 * 1024


def test_frame_exactly_at_max_frame_size_is_accepted(make_server: MakeServer) -> None:
    server = make_server(nettyMaxFrameSizeBytes=LIMIT)
    # frameLength + 4 == limit: body = header (4) + key (20) + entry.
    payload = b"p" * (LIMIT - 4 - 4 - 20 - 40)
    data = crc32_entry(2, 0, payload)
    request = add_request(2, 0, entry_bytes=data)
    assert len(request) == LIMIT
    with Conn(server.port) as c:
        expect_rc(c.call(request), OP_ADD, EOK, 2, 0)
        assert c.call(read_request(2, 0)).body == data
    assert protocol_errors(server) == 0


@pytest.mark.parametrize(
    "prefix",
    [
        struct.pack(">i", LIMIT - 3),  # frameLength + 4 == limit + 1
        struct.pack(">i", 0x7FFFFFFF),
        struct.pack(">i", -1),
        struct.pack(">i", -(2**31)),
    ],
    ids=["limit+1", "int-max", "minus-1", "int-min"],
)
def test_oversize_or_negative_frame_length_closes_only_that_connection(
    make_server: MakeServer, prefix: bytes
) -> None:
    server = make_server(nettyMaxFrameSizeBytes=LIMIT)
    with Conn(server.port) as other, Conn(server.port) as bad:
        data = add_ok(other, 2, 0)
        assert bad.call(read_request(2, 0)).rc == EOK
        errors = protocol_errors(server)
        # The length alone is enough to refuse (Netty's fail-fast); a little body follows.
        bad.send(prefix + header(OP_READ) + b"\0" * 100)
        expect_closed(bad)
        assert protocol_errors(server) == errors + 1
        assert other.call(read_request(2, 0)).body == data
        add_ok(other, 2, 1)


def test_oversize_frame_on_first_frame_is_closed(make_server: MakeServer) -> None:
    server = make_server(nettyMaxFrameSizeBytes=LIMIT)
    with Conn(server.port) as bad:
        bad.send(add_request(2, 0, b"p" * LIMIT))
        assert bad.wait_closed() == b""
    assert protocol_errors(server) == 1


TRUNCATED = {
    "empty-body": b"",
    "half-header": header(OP_READ)[:2],
    "read-without-entry-id": header(OP_READ) + struct.pack(">q", 1),
    "read-short-by-one": header(OP_READ) + struct.pack(">q", 1) + b"\0" * 7,
    "add-without-entry-id": header(OP_ADD) + REF_KEY + struct.pack(">q", 1),
    "add-short-key": header(OP_ADD) + REF_KEY[:10],
    "batch-short-by-one": header(OP_BATCH_READ) + struct.pack(">qqqi", 1, 0, 1, 10) + b"\0" * 7,
    "fencing-read-v2-without-key": header(OP_READ, FLAG_DO_FENCING) + struct.pack(">qq", 1, 0),
    "fencing-read-v2-short-key": header(OP_READ, FLAG_DO_FENCING)
    + struct.pack(">qq", 1, 0)
    + REF_KEY[:19],
    "fencing-batch-v2-without-key": header(OP_BATCH_READ, FLAG_DO_FENCING)
    + struct.pack(">qqqiq", 1, 0, 1, 10, 1 << 20),
    "auth-without-payload-field": header(OP_AUTH) + b"\x0a\x04SASL",
    "auth-truncated-field": header(OP_AUTH) + b"\x0a\x04SA",
}


@pytest.mark.parametrize("body", list(TRUNCATED.values()), ids=list(TRUNCATED))
def test_truncated_or_malformed_bodies_close_the_connection(
    server: BookieServer, storage: LedgerStorage, body: bytes
) -> None:
    with Conn(server.port) as other, Conn(server.port) as bad:
        add_ok(other, 1, 0)
        assert bad.call(read_request(1, 0)).rc == EOK
        errors = protocol_errors(server)
        bad.send(frame(body))
        expect_closed(bad)
        assert protocol_errors(server) == errors + 1
        assert other.call(read_request(1, 0)).rc == EOK
    # A fencing request that could not be decoded fenced nothing.
    assert not storage.is_fenced(1)


def test_a_v3_first_frame_makes_a_v3_connection(server: BookieServer) -> None:
    # Request{header{version=VERSION_THREE, operation=READ_ENTRY, txnId=1}}: protobuf tag 0x0A,
    # without a readRequest: served with its defaults (ledger 0, entry 0), as the Java bookie
    # does (tests/interop/test_v3_against_java_bookie.py compares the bytes).
    v3 = frame(unhex("0a06 0803 1001 1801"))
    with Conn(server.port) as conn:
        conn.send(v3)
        (length,) = struct.unpack(">i", conn.recv_exact(4))
        body = conn.recv_exact(length)
        # Response{header{3, READ_ENTRY, 1}, status ENOLEDGER, readResponse{ENOLEDGER, 0, 0}}
        assert body == unhex("0a06 0803 1001 1801 1092 03 a206 0708 9203 1000 1800")
        assert protocol_errors(server) == 0


# ---------------------------------------------------------------------------------------------
# AUTH (§1.12)

AUTH_DISABLED_RESPONSE = frame(header(OP_AUTH) + auth_message(AUTH_DISABLED_PLUGIN, b""))


def test_auth_is_answered_by_the_auth_disabled_plugin(conn: Conn) -> None:
    raw = conn.call(auth_request("SASL", b"x")).raw
    # Decoded by hand: [len][02030000] 0x0A <len> "AuthDisabledPlugin" 0x12 0x00.
    (length,) = struct.unpack_from(">i", raw)
    assert length == len(raw) - 4
    assert raw[4:8] == unhex("02030000")
    message = raw[8:]
    assert message[0] == 0x0A
    assert message[1] == len(AUTH_DISABLED_PLUGIN) == 0x12
    assert message[2:20] == b"AuthDisabledPlugin"
    assert message[20:] == b"\x12\x00"
    assert decode_auth_message(message) == {1: b"AuthDisabledPlugin", 2: b""}
    assert raw == AUTH_DISABLED_RESPONSE
    # The connection then serves requests.
    data = add_ok(conn, 4, 0)
    assert conn.call(read_request(4, 0)).body == data


def test_auth_first_then_pipelined_requests(conn: Conn) -> None:
    conn.send(auth_request("SASL", b"x") + add_request(4, 0) + add_request(4, 1))
    assert conn.recv_raw() == AUTH_DISABLED_RESPONSE
    # Responses to ADDs may come in any order (matched by ledger and entry, §1.11).
    assert sorted((r.op, r.rc, r.ledger, r.entry) for r in collect(conn, 2)) == [
        (OP_ADD, EOK, 4, 0),
        (OP_ADD, EOK, 4, 1),
    ]
    resp = conn.call(read_request(4, 1))
    expect_rc(resp, OP_READ, EOK, 4, 1)
    assert resp.body == crc32_entry(4, 1, b"hello")


def test_auth_response_from_the_disabled_path_is_version_2(conn: Conn) -> None:
    # The Java bookie builds it with CURRENT_PROTOCOL_VERSION whatever the request's version.
    assert conn.call(auth_request("SASL", b"x", version=1)).raw == AUTH_DISABLED_RESPONSE


# ---------------------------------------------------------------------------------------------
# Fencing and master keys (§1.9, §1.10)


def test_fencing_read_then_adds(conn: Conn, storage: LedgerStorage) -> None:
    e0 = add_ok(conn, 6, 0)
    add_ok(conn, 6, 1)
    resp = conn.call(read_request(6, 0, flags=FLAG_DO_FENCING, key=REF_KEY))
    expect_rc(resp, OP_READ, EOK, 6, 0)
    assert resp.body == e0
    assert storage.is_fenced(6)

    expect_rc(conn.call(add_request(6, 2)), OP_ADD, EFENCED, 6, 2)
    expect_rc(conn.call(add_request(6, 2, flags=FLAG_HIGH_PRIORITY)), OP_ADD, EFENCED, 6, 2)
    assert conn.call(read_request(6, 2)).rc == ENOENTRY
    # Recovery adds bypass the fence (alone, and as the Java client sends them: 0x0006).
    add_ok(conn, 6, 2, flags=FLAG_RECOVERY_ADD)
    add_ok(conn, 6, 3, flags=FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY)
    assert conn.call(read_request(6, 3)).body == crc32_entry(6, 3, b"hello")
    # Fencing again is fine and still reads.
    resp = conn.call(read_request(6, -1, flags=FLAG_DO_FENCING | FLAG_HIGH_PRIORITY, key=REF_KEY))
    expect_rc(resp, OP_READ, EOK, 6, -1)
    assert resp.body == crc32_entry(6, 3, b"hello")


def test_fencing_lac_read_of_unknown_ledger_creates_it_fenced(
    conn: Conn, storage: LedgerStorage
) -> None:
    resp = conn.call(read_request(9, -1, flags=FLAG_DO_FENCING, key=REF_KEY))
    assert resp.raw == frame(header(OP_READ) + struct.pack(">iqq", ENOENTRY, 9, -1))
    assert storage.ledger_exists(9)
    assert storage.is_fenced(9)
    assert storage.read_master_key(9) == REF_KEY
    expect_rc(conn.call(add_request(9, 0)), OP_ADD, EFENCED, 9, 0)
    # The key it was created with is enforced.
    expect_rc(
        conn.call(add_request(9, 0, flags=FLAG_RECOVERY_ADD, key=OTHER_KEY)), OP_ADD, EUA, 9, 0
    )
    add_ok(conn, 9, 0, flags=FLAG_RECOVERY_ADD)


def test_fencing_batch_read(conn: Conn, storage: LedgerStorage) -> None:
    e0 = add_ok(conn, 6, 0)
    e1 = add_ok(conn, 6, 1)
    resp = conn.call(batch_request(6, 0, 5, 0, 1 << 20, flags=FLAG_DO_FENCING, key=REF_KEY))
    expect_rc(resp, OP_BATCH_READ, EOK, 6, 0)
    assert (resp.request_id, resp.entries) == (5, [e0, e1])
    assert storage.is_fenced(6)
    expect_rc(conn.call(add_request(6, 2)), OP_ADD, EFENCED, 6, 2)


def test_wrong_master_key(conn: Conn, storage: LedgerStorage) -> None:
    add_ok(conn, 11, 0)
    expect_rc(conn.call(add_request(11, 1, key=OTHER_KEY)), OP_ADD, EUA, 11, 1)
    assert conn.call(read_request(11, 1)).rc == ENOENTRY
    # Plain reads carry no key and are not checked.
    assert conn.call(read_request(11, 0)).rc == EOK
    resp = conn.call(read_request(11, 0, flags=FLAG_DO_FENCING, key=OTHER_KEY))
    expect_rc(resp, OP_READ, EUA, 11, 0)
    assert resp.body == b""
    resp = conn.call(batch_request(11, 0, 3, 0, 1 << 20, flags=FLAG_DO_FENCING, key=OTHER_KEY))
    expect_rc(resp, OP_BATCH_READ, EUA, 11, 0)
    assert (resp.request_id, resp.entries) == (3, [])
    assert not storage.is_fenced(11)
    add_ok(conn, 11, 1)


def test_fencing_read_version_1_carries_no_key_and_gets_eua(
    conn: Conn, storage: LedgerStorage
) -> None:
    add_ok(conn, 12, 0)
    # Version 1: the decoder reads no key, so the fence has none -> EUA (§1.9).
    resp = conn.call(read_request(12, 0, flags=FLAG_DO_FENCING, version=1))
    assert resp.raw == frame(header(OP_READ, 0, 1) + struct.pack(">iqq", EUA, 12, 0))
    assert not storage.is_fenced(12)
    add_ok(conn, 12, 1)


# ---------------------------------------------------------------------------------------------
# Reads (§1.8, §1.10)


def test_read_last_entry_echoes_minus_one(conn: Conn) -> None:
    entries = [add_ok(conn, 13, i, b"x" * i) for i in range(5)]
    resp = conn.call(read_request(13, -1))
    assert resp.raw[4:28] == header(OP_READ) + struct.pack(">iqq", EOK, 13, -1)
    assert resp.body == entries[4]
    assert struct.unpack_from(">q", resp.body, 8) == (4,)


def test_read_errors(conn: Conn, storage: LedgerStorage) -> None:
    def error(rc: int, ledger: int, entry: int) -> bytes:
        return frame(header(OP_READ) + struct.pack(">iqq", rc, ledger, entry))

    assert conn.call(read_request(20, 0)).raw == error(ENOLEDGER, 20, 0)
    assert conn.call(read_request(20, -1)).raw == error(ENOLEDGER, 20, -1)
    add_ok(conn, 20, 0)
    assert conn.call(read_request(20, 1)).raw == error(ENOENTRY, 20, 1)
    assert conn.call(read_request(20, 1 << 40)).raw == error(ENOENTRY, 20, 1 << 40)
    # A ledger created by a fence has no entries: the LAC read finds none.
    storage.fence(21, REF_KEY)
    assert conn.call(read_request(21, -1)).raw == error(ENOENTRY, 21, -1)
    assert conn.call(read_request(21, 0)).raw == error(ENOENTRY, 21, 0)


def test_batch_read_errors_and_gaps(conn: Conn) -> None:
    def error(rc: int, ledger: int, start: int, rid: int) -> bytes:
        return frame(header(OP_BATCH_READ) + struct.pack(">iqqq", rc, ledger, start, rid))

    assert conn.call(batch_request(30, 0, 1, 10, 1 << 20)).raw == error(ENOLEDGER, 30, 0, 1)
    stored = {i: add_ok(conn, 30, i, bytes([i]) * 10) for i in [0, 1, 2, 4, 5]}
    # First entry missing: an error with no entries but the request id echoed (frame 32).
    raw = conn.call(batch_request(30, 3, -7, 10, 1 << 20)).raw
    assert raw == error(ENOENTRY, 30, 3, -7)
    assert len(raw) == 4 + 32
    assert conn.call(batch_request(30, 6, 1 << 62, 0, 1 << 20)).raw == error(
        ENOENTRY, 30, 6, 1 << 62
    )
    # A gap later: a shorter successful result.
    resp = conn.call(batch_request(30, 0, 2, 10, 1 << 20))
    expect_rc(resp, OP_BATCH_READ, EOK, 30, 0)
    assert (resp.request_id, resp.entries) == (2, [stored[0], stored[1], stored[2]])
    resp = conn.call(batch_request(30, 4, 3, 0, 1 << 20))
    assert (resp.rc, resp.request_id, resp.entries) == (EOK, 3, [stored[4], stored[5]])


# ---------------------------------------------------------------------------------------------
# Batch accounting (§1.13)

PAYLOAD = 100
L = 32 + 8 + PAYLOAD  # stored length of a CRC32 entry with a 100-byte payload
N = 10


def fill(c: Conn, ledger: int, n: int = N) -> list[bytes]:
    entries = [crc32_entry(ledger, i, bytes([i]) * PAYLOAD) for i in range(n)]
    c.send(b"".join(add_request(ledger, i, entry_bytes=e) for i, e in enumerate(entries)))
    for _ in range(n):
        assert c.recv().rc == EOK
    assert all(len(e) == L for e in entries)
    return entries


def size_for(k: int) -> int:
    """The largest response frame (length prefix included) carrying k entries of length L."""
    return BATCH_FIXED_LEN + k * (L + 4)


def batch(c: Conn, start: int, max_count: int, max_size: int, ledger: int = 40) -> list[bytes]:
    resp = c.call(batch_request(ledger, start, 1234, max_count, max_size))
    assert (resp.rc, resp.request_id, resp.ledger, resp.entry) == (EOK, 1234, ledger, start)
    # The frame never exceeds maxSize unless it holds only the (always returned) first entry.
    assert len(resp.raw) == size_for(len(resp.entries))
    return resp.entries


@pytest.mark.parametrize("k", range(N + 1))
def test_batch_size_boundaries(conn: Conn, k: int) -> None:
    entries = fill(conn, 40)
    assert batch(conn, 0, 100, size_for(k)) == entries[: max(k, 1)]
    assert batch(conn, 0, 100, size_for(k) - 1) == entries[: max(k - 1, 1)]
    assert batch(conn, 0, 0, size_for(k)) == entries[: max(k, 1)]


def test_batch_count_limits(conn: Conn) -> None:
    entries = fill(conn, 40)
    big = 5 << 20
    for unbounded in [0, -1, -(2**31)]:
        assert batch(conn, 0, unbounded, big) == entries
        assert batch(conn, 0, unbounded, size_for(4)) == entries[:4]
        assert batch(conn, 7, unbounded, big) == entries[7:]
    assert batch(conn, 0, 3, big) == entries[:3]
    assert batch(conn, 0, 1, big) == entries[:1]
    assert batch(conn, 5, 3, big) == entries[5:8]
    assert batch(conn, 0, 3, size_for(2)) == entries[:2]
    assert batch(conn, 0, 3, size_for(3)) == entries[:3]
    assert batch(conn, 0, 2**31 - 1, big) == entries
    # The first entry comes back whatever maxSize says.
    for tiny in [0, 1, 35, 36, -1, -(2**63)]:
        assert batch(conn, 0, 100, tiny) == entries[:1]


def test_server_max_batch_read_size_caps_max_size(make_server: MakeServer) -> None:
    server = make_server(maxBatchReadSize=size_for(3))
    with Conn(server.port) as c:
        entries = fill(c, 40)
        assert batch(c, 0, 100, 5 << 20) == entries[:3]
        assert batch(c, 0, 0, 2**63 - 1) == entries[:3]
        assert batch(c, 0, 100, size_for(3) + 1) == entries[:3]
        assert batch(c, 0, 100, size_for(2)) == entries[:2]
        assert batch(c, 0, 1, 5 << 20) == entries[:1]


# ---------------------------------------------------------------------------------------------
# Read-only mode (§1.10)


def test_read_only_mode(server: BookieServer, storage: LedgerStorage) -> None:
    with Conn(server.port) as c:
        e0 = add_ok(c, 50, 0)
        assert not server.is_read_only()
        server.set_read_only(True)
        assert server.is_read_only()
        expect_rc(c.call(add_request(50, 1)), OP_ADD, EREADONLY, 50, 1)
        # Only high priority gets through, not recovery alone (as Java's WriteEntryProcessor).
        expect_rc(c.call(add_request(50, 1, flags=FLAG_RECOVERY_ADD)), OP_ADD, EREADONLY, 50, 1)
        assert c.call(read_request(50, 1)).rc == ENOENTRY
        add_ok(c, 50, 1, flags=FLAG_HIGH_PRIORITY)
        # The version check comes first.
        expect_rc(c.call(add_request(50, 2, version=3)), OP_ADD, EBADVERSION, 50, 2)
        # Reads, batch reads and fencing still work.
        assert c.call(read_request(50, 0)).body == e0
        assert c.call(batch_request(50, 0, 1, 0, 1 << 20)).entries == [
            e0,
            crc32_entry(50, 1, b"hello"),
        ]
        resp = c.call(read_request(50, -1, flags=FLAG_DO_FENCING, key=REF_KEY))
        expect_rc(resp, OP_READ, EOK, 50, -1)
        assert storage.is_fenced(50)
        add_ok(c, 50, 2, flags=FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY)

        server.set_read_only(False)
        assert not server.is_read_only()
        add_ok(c, 51, 0)


def test_server_started_read_only(make_server: MakeServer) -> None:
    server = make_server(forceReadOnlyBookie=True)
    assert server.is_read_only()
    with Conn(server.port) as c:
        expect_rc(c.call(add_request(52, 0)), OP_ADD, EREADONLY, 52, 0)
        server.set_read_only(False)
        add_ok(c, 52, 0)


# ---------------------------------------------------------------------------------------------
# Pipelining, pending limits, stop


def collect(c: Conn, n: int) -> list[Response]:
    return [c.recv() for _ in range(n)]


def test_thousand_pipelined_adds(conn: Conn, storage: LedgerStorage) -> None:
    sent = {(60 + i % 3, i // 3): crc32_entry(60 + i % 3, i // 3, b"%d" % i) for i in range(1000)}
    conn.send(b"".join(add_request(lg, e, entry_bytes=d) for (lg, e), d in sent.items()))
    responses = collect(conn, 1000)
    assert all(r.op == OP_ADD and r.rc == EOK and r.version == 2 for r in responses)
    assert Counter((r.ledger, r.entry) for r in responses) == Counter(sent.keys())
    for (ledger, entry), data in sent.items():
        assert storage.read_entry(ledger, entry) == data
    # And they come back over the wire too, pipelined.
    conn.send(b"".join(read_request(lg, e) for lg, e in sent))
    reads = collect(conn, 1000)
    assert {(r.ledger, r.entry): r.body for r in reads} == sent
    assert all(r.rc == EOK for r in reads)


def test_pending_adds_limit(make_server: MakeServer, storage: LedgerStorage) -> None:
    server = make_server(maxPendingAddRequestsPerThread=1)
    n = 200
    with Conn(server.port) as c:
        c.send(b"".join(add_request(70, i) for i in range(n)))
        responses = collect(c, n)
        assert Counter((r.ledger, r.entry) for r in responses) == Counter((70, i) for i in range(n))
        codes = Counter(r.rc for r in responses)
        assert set(codes) <= {EOK, ETOOMANYREQUESTS}, codes
        assert codes[ETOOMANYREQUESTS] >= 1, codes
        assert codes[EOK] >= 1, codes
        assert server.stats()["bookkeeper_server_ADD_ENTRY_REJECTED"] == codes[ETOOMANYREQUESTS]
        for r in responses:
            stored = c.call(read_request(70, r.entry)).rc
            assert stored == (EOK if r.rc == EOK else ENOENTRY)
        # Nothing stays counted once the responses are out.
        add_ok(c, 71, 0)


def test_pending_reads_limit(make_server: MakeServer, storage: LedgerStorage) -> None:
    server = make_server(maxPendingReadRequestsPerThread=1)
    small = [crc32_entry(80, i, bytes([i]) * 100) for i in range(4)]
    storage.add_entries(80, list(enumerate(small)), REF_KEY)
    n = 2000
    with Conn(server.port, timeout=30) as c:
        c.send(b"".join(read_request(80, i % 4) for i in range(n)))
        responses = collect(c, n)
    assert Counter(r.entry for r in responses) == Counter(i % 4 for i in range(n))
    codes = Counter(r.rc for r in responses)
    assert set(codes) <= {EOK, ETOOMANYREQUESTS}, codes
    assert codes[EOK] >= 1, codes
    for r in responses:
        assert r.body == (small[r.entry] if r.rc == EOK else b"")


@pytest.mark.parametrize("read_threads", [2, 0], ids=["read-pool", "reads-inline"])
def test_a_client_that_never_reads_costs_the_bookie_a_bounded_buffer(
    make_server: MakeServer, storage: LedgerStorage, read_threads: int
) -> None:
    high = 256 * 1024
    server = make_server(
        serverWriteBufferLowWaterMark=high // 2,
        serverWriteBufferHighWaterMark=high,
        numReadWorkerThreads=read_threads,
    )
    big = [crc32_entry(81, i, bytes([i]) * (1 << 20)) for i in range(4)]
    storage.add_entries(81, list(enumerate(big)), REF_KEY)
    n = 200  # 200 MiB of responses asked for
    with Conn(server.port, timeout=30, rcvbuf=64 * 1024) as stuck:
        stuck.send(b"".join(read_request(81, i % 4) for i in range(n)))
        wait_until(
            lambda: server.stats()["pybkx_server_connections_paused"] >= 1,
            "the stuck connection paused",
            timeout_s=20,
            interval_s=0.01,
        )
        time.sleep(0.5)  # not a wait: half a second in which the queue must stay bounded
        stats = server.stats()
        # At most the high-water mark plus the response that crossed it stay queued.
        assert stats["pybkx_server_response_bytes_queued"] <= high + (1 << 20) + 4096, stats
        assert requests_taken(server, "READ_ENTRY") < n, stats  # it stopped reading requests
        with Conn(server.port) as other:  # other clients are served meanwhile
            assert other.call(read_request(81, 0)).body == big[0]
        responses = collect(stuck, n)  # reading again lets it finish
    assert [r.rc for r in responses] == [EOK] * n
    assert server.stats()["pybkx_server_response_bytes_queued"] == 0


def stop_while_pipelining(
    server: BookieServer, storage: LedgerStorage, *, client_reads: bool
) -> tuple[int, int, list[Response], int]:
    """Pipeline adds to ledger 90 from a sender thread; once the server has taken more than 1,000,
    call ``stop()`` from another thread. ``client_reads``: read responses all along, or only
    from the moment stop() is called (with a small receive buffer, so that most responses still
    wait in the server's socket then).

    Returns (adds sent, adds taken, whole responses received before the close, bytes of a cut
    frame after them)."""
    n, chunk = 50_000, 100
    sent_upto = 0

    def sender(c: Conn) -> None:
        nonlocal sent_upto
        # The server closes the connection under our feet: stop sending at the first error.
        with contextlib.suppress(OSError):
            for first in range(0, n, chunk):
                c.send(
                    b"".join(add_request(90, i, b"s%d" % i) for i in range(first, first + chunk))
                )
                sent_upto = first + chunk

    tail = b""
    c = Conn(server.port, timeout=30, rcvbuf=None if client_reads else 4096)
    try:
        add_ok(c, 91, 0)

        def reader() -> None:
            nonlocal tail
            tail = c.wait_closed()

        threads = [threading.Thread(target=sender, args=(c,))]
        if client_reads:
            threads.append(threading.Thread(target=reader))
        for thread in threads:
            thread.start()
        # Polled often: stop() must come while the adds are still pipelining.
        wait_until(
            lambda: requests_taken(server, "ADD_ENTRY") > 1000,
            "more than 1,000 adds taken",
            timeout_s=20,
            interval_s=0.01,
        )
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        if client_reads:
            threads[1].join()
        else:
            reader()
    finally:
        c.close()  # also unblocks the sender if the server drains input after its FIN
    for thread in [stopper, *threads]:
        thread.join()
    responses, partial = whole_responses(tail)
    taken = requests_taken(server, "ADD_ENTRY") - 1
    print(
        f"stop(): {sent_upto} adds sent, {taken} taken, {len(responses)} answered before the"
        f" close (+{partial} bytes of a cut frame)"
    )
    assert all(r.op == OP_ADD and r.ledger == 90 for r in responses)
    assert {r.rc for r in responses} <= {EOK, ETOOMANYREQUESTS}
    answered = Counter(r.entry for r in responses)
    assert all(count == 1 for count in answered.values())
    stored = {i for i in range(n) if has_entry(storage, 90, i)}
    assert {r.entry for r in responses if r.rc == EOK} <= stored
    assert not {r.entry for r in responses if r.rc != EOK} & stored
    assert len(stored) <= taken
    with pytest.raises(OSError):
        Conn(server.port, timeout=5)
    return sent_upto, taken, responses, partial


def whole_responses(received: bytes) -> tuple[list[Response], int]:
    """The whole response frames at the start of ``received``, and the bytes of a cut frame
    after them."""
    responses: list[Response] = []
    at = 0
    while at + 4 <= len(received):
        (length,) = struct.unpack_from(">i", received, at)
        if at + 4 + length > len(received):
            break
        responses.append(parse_response(received[at : at + 4 + length]))
        at += 4 + length
    return responses, len(received) - at


@pytest.mark.parametrize("client_reads", [True, False], ids=["reading-client", "reading-from-stop"])
def test_stop_drains_received_requests(
    make_server: MakeServer, storage: LedgerStorage, client_reads: bool
) -> None:
    """stop() while a client is still pipelining adds: every add the server took (decoded) gets
    exactly one response, delivered before the close, and exactly those adds are stored."""
    server = make_server()
    sent, taken, responses, partial = stop_while_pipelining(
        server, storage, client_reads=client_reads
    )
    assert (len(responses), partial) == (taken, 0), f"{sent} adds sent"


def has_entry(storage: LedgerStorage, ledger: int, entry: int) -> bool:
    try:
        storage.read_entry(ledger, entry)
    except Exception:
        return False
    return True
