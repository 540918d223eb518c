"""The V3 (protobuf) protocol byte for byte: the same V3 requests sent to a real Apache
BookKeeper 4.17 bookie and to a pybkx bookie get responses that are equal, byte for byte (the
disk figures of GET_BOOKIE_INFO apart): adds (plain and recovery), reads (an entry, the last
entry, a missing entry and ledger, fencing), READ_LAC and WRITE_LAC, FORCE_LEDGER, adds with
WriteFlag.DEFERRED_SYNC or unknown write-flag bits and the FORCE_LEDGER after them,
GET_LIST_OF_ENTRIES_OF_LEDGER, START_TLS without TLS, long-poll reads that time out and that
are answered by an add, and an operation the protocol does not serve."""

from __future__ import annotations

import struct
import threading

import pytest
from support.v3_wire import (
    ADD_ENTRY,
    FORCE_LEDGER,
    GET_BOOKIE_INFO,
    GET_LIST_OF_ENTRIES,
    READ_ENTRY,
    READ_LAC,
    START_TLS,
    WRITE_LAC,
    Connection,
    field_bytes,
    field_varint,
    parse,
    request,
)

from pybkx import errors
from pybkx._core import BookieClient, DigestManager, Future, master_key
from pybkx.config import ClientConfig

pytestmark = pytest.mark.interop

PASSWORD = b"v3-bytes"
KEY = master_key(PASSWORD)


def crc32c(data: bytes) -> bytes:
    """CRC32C as BookKeeper's digest writes it: 4 bytes, big-endian."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return struct.pack(">I", crc ^ 0xFFFFFFFF)


def add(
    ledger: int,
    entry: int,
    lac: int,
    payload: bytes,
    recovery: bool = False,
    write_flags: int | None = None,
) -> bytes:
    body = DigestManager(ledger, PASSWORD, "CRC32C").package(entry, lac, 0, payload)
    msg = field_varint(1, ledger) + field_varint(2, entry) + field_bytes(3, KEY)
    msg += field_bytes(4, body)
    if write_flags is not None:
        msg += field_varint(5, write_flags)
    if recovery:
        msg += field_varint(100, 1)
    return msg


def read(
    ledger: int,
    entry: int,
    fence: bool = False,
    previous_lac: int | None = None,
    timeout_ms: int | None = None,
    piggyback: bool = False,
) -> bytes:
    msg = field_varint(1, ledger) + field_varint(2, entry)
    if fence:
        msg += field_bytes(3, KEY)
    if previous_lac is not None:
        msg += field_varint(4, previous_lac)
    if timeout_ms is not None:
        msg += field_varint(5, timeout_ms)
    if fence:
        msg += field_varint(100, 1)
    elif piggyback:
        msg += field_varint(100, 2)
    return msg


def script(ledger: int) -> list[tuple[str, bytes]]:
    """(name, request frame): the same requests for either bookie (ledger ids differ by base)."""
    steps: list[tuple[str, bytes]] = []
    txn = iter(range(1, 1000))

    def step(name: str, operation: int, field: int | None, body: bytes = b"") -> None:
        steps.append((name, request(operation, next(txn), field, body)))

    for e in range(5):
        step(f"add {e}", ADD_ENTRY, 101, add(ledger, e, e - 1, f"entry {e}".encode() * (e + 1)))
    step("recovery add 5", ADD_ENTRY, 101, add(ledger, 5, 4, b"recovered", recovery=True))
    step("read 2", READ_ENTRY, 100, read(ledger, 2))
    step("read last", READ_ENTRY, 100, read(ledger, -1))
    step("read missing entry", READ_ENTRY, 100, read(ledger, 99))
    step("read missing ledger", READ_ENTRY, 100, read(ledger + 1, 0))
    step("read lac", READ_LAC, 104, field_varint(1, ledger))
    step("read lac, missing ledger", READ_LAC, 104, field_varint(1, ledger + 1))
    # An explicit LAC as a writer packages it: ledger id, LAC, then the digest of those.
    lac_body = struct.pack(">qq", ledger, 4) + crc32c(struct.pack(">qq", ledger, 4))
    step(
        "write lac, not a packaged LAC",
        WRITE_LAC,
        103,
        field_varint(1, ledger)
        + field_varint(2, 4)
        + field_bytes(3, KEY)
        + field_bytes(4, b"short"),
    )
    wl = (
        field_varint(1, ledger)
        + field_varint(2, 4)
        + field_bytes(3, KEY)
        + field_bytes(4, lac_body)
    )
    step("write lac", WRITE_LAC, 103, wl)
    step("read lac after write lac", READ_LAC, 104, field_varint(1, ledger))
    step("force ledger", FORCE_LEDGER, 107, field_varint(1, ledger))
    # WriteFlag.DEFERRED_SYNC (writeFlags bit 0): answered once journalled; other bits ignored.
    for e, flags in ((6, 1), (7, 1), (8, 6)):
        step(f"add {e}, writeFlags {flags}", ADD_ENTRY, 101, add(ledger, e, 5, b"ds", False, flags))
    step("force ledger after deferred adds", FORCE_LEDGER, 107, field_varint(1, ledger))
    step("read 7 after force", READ_ENTRY, 100, read(ledger, 7))
    step("force ledger, missing ledger", FORCE_LEDGER, 107, field_varint(1, ledger + 1))
    step("list entries", GET_LIST_OF_ENTRIES, 108, field_varint(1, ledger))
    step("list entries, missing ledger", GET_LIST_OF_ENTRIES, 108, field_varint(1, ledger + 1))
    step(
        "long poll, lac already past",
        READ_ENTRY,
        100,
        read(ledger, -1, previous_lac=1, timeout_ms=1000, piggyback=True),
    )
    step(
        "long poll timing out",
        READ_ENTRY,
        100,
        read(ledger, -1, previous_lac=50, timeout_ms=300, piggyback=True),
    )
    step("start tls", START_TLS, 106)
    step("read without its message", READ_ENTRY, None)
    step("fence", READ_ENTRY, 100, read(ledger, -1, fence=True))
    step("add after fence", ADD_ENTRY, 101, add(ledger, 6, 5, b"late"))
    return steps


def run(address: str, ledger: int) -> list[tuple[str, bytes]]:
    conn = Connection(address)
    try:
        return [(name, conn.exchange(frame)) for name, frame in script(ledger)]
    finally:
        conn.close()


def test_v3_responses_equal_the_java_bookies(java_bookie: str, pybkx_bookie: str) -> None:
    # The same ledger id on both bookies, so that the bytes are comparable.
    ledger = 77_000 + threading.get_ident() % 1000
    java, pybkx = run(java_bookie, ledger), run(pybkx_bookie, ledger)
    problems = []
    for (name, want), (_, got) in zip(java, pybkx, strict=True):
        if want != got:
            problems.append(f"{name}:\n  java  {parse(want)}\n  pybkx {parse(got)}")
    assert not problems, "\n".join(problems)


def test_bookie_info_has_the_java_bookies_shape(java_bookie: str, pybkx_bookie: str) -> None:
    shapes = []
    for address in (java_bookie, pybkx_bookie):
        conn = Connection(address)
        try:
            body = conn.exchange(request(GET_BOOKIE_INFO, 7, 105, field_varint(1, 3)))
        finally:
            conn.close()
        top = parse(body)
        info = parse(top[105][0])  # type: ignore[arg-type]
        shapes.append((top[1], top[2], sorted(info)))
        assert info[2][0] >= info[3][0] > 0  # total >= free > 0
    assert shapes[0] == shapes[1]


def test_a_long_poll_is_answered_by_an_add(pybkx_bookie: str) -> None:
    ledger = 78_000 + threading.get_ident() % 1000
    writer, poller = Connection(pybkx_bookie), Connection(pybkx_bookie)
    try:
        writer.exchange(request(ADD_ENTRY, 1, 101, add(ledger, 0, -1, b"zero")))
        answer: list[bytes] = []
        waiting = threading.Thread(
            target=lambda: answer.append(
                poller.exchange(
                    request(
                        READ_ENTRY,
                        2,
                        100,
                        read(ledger, -1, previous_lac=-1, timeout_ms=20_000, piggyback=True),
                    )
                )
            )
        )
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()  # LAC -1 has not passed -1 yet: the read waits
        writer.exchange(request(ADD_ENTRY, 3, 101, add(ledger, 1, 0, b"one")))
        waiting.join(10)
        assert not waiting.is_alive()
        read_response = parse(parse(answer[0])[100][0])  # type: ignore[arg-type]
        assert read_response[1] == [0] and read_response[3] == [0]  # EOK, entry 0 piggy-backed
        assert read_response[5] == [0]  # maxLAC
        piggy_backed = read_response[4][0]
        digest = DigestManager(ledger, PASSWORD, "CRC32C")
        assert digest.verify(piggy_backed).payload == b"zero"  # type: ignore[arg-type]
    finally:
        writer.close()
        poller.close()


def bookie_client_script(bookie: str, ledger: int) -> list[object]:
    """pybkx's BookieClient V3-only operations against ``bookie``: what each answered."""

    def outcome(fut: Future) -> object:
        try:
            return fut.result(10)
        except errors.BKException as e:
            return type(e).__name__

    client = BookieClient(ClientConfig.of(useV2WireProtocol=False))
    digest = DigestManager(ledger, PASSWORD, "CRC32C")
    try:
        seen: list[object] = [outcome(client.read_lac(bookie, ledger))]
        for entry in (0, 1, 2, 5):
            stored = digest.package(entry, entry - 1, 1, b"x")
            client.add(bookie, ledger, entry, KEY, stored).result(10)
        seen.append(outcome(client.get_list_of_entries(bookie, ledger)))
        seen.append(outcome(client.force_ledger(bookie, ledger)))
        lac_body = struct.pack(">qq", ledger, 2) + b"\0\0\0\0"
        seen.append(outcome(client.write_lac(bookie, ledger, 2, KEY, lac_body)))
        lac = client.read_lac(bookie, ledger).result(10)
        seen.append(lac.lac_body)
        last = digest.verify(lac.last_entry) if lac.last_entry is not None else None
        seen.append((last.entry_id, last.last_add_confirmed) if last is not None else None)
        seen.append(outcome(client.get_list_of_entries(bookie, ledger + 1)))
        info = client.get_bookie_info(bookie).result(10)
        assert info.total_disk_capacity >= info.free_disk_space > 0
        return seen
    finally:
        client.close()


def test_bookie_client_v3_operations_agree_with_the_java_bookie(
    java_bookie: str, pybkx_bookie: str
) -> None:
    ledger = 79_000 + threading.get_ident() % 1000
    java = bookie_client_script(java_bookie, ledger)
    assert java[0] == "NoSuchEntryException"  # the Java bookie's answer to a missing ledger
    assert java[1] == [(0, 2), (5, 5)] and java[2] is None and java[3] is None
    assert java[4] == struct.pack(">qq", ledger, 2) + b"\0\0\0\0"
    assert java[5] == (5, 4)
    assert bookie_client_script(pybkx_bookie, ledger) == java


def test_bookie_client_refuses_v3_operations_on_a_v2_client(pybkx_bookie: str) -> None:

    client = BookieClient(ClientConfig())
    try:
        with pytest.raises(errors.IncorrectParameterException, match="V3 request"):
            client.get_bookie_info(pybkx_bookie)
        with pytest.raises(errors.IncorrectParameterException, match="V3 request"):
            client.read_lac(pybkx_bookie, 1)
    finally:
        client.close()
