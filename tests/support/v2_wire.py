"""Raw BookKeeper V2 wire helpers for the server protocol tests: frames packed by hand with
``struct`` (reference §1.3-§1.8) and a blocking socket that reads them back.

Owns only test utilities; deliberately independent of pybkx's own client and protocol code, so
the tests check the server against the reference rather than against itself. Never imports
pytest.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import zlib
from dataclasses import dataclass, field

# Opcodes (§1.4), flags (§1.5), result codes (§1.6).
OP_ADD = 1
OP_READ = 2
OP_AUTH = 3
OP_READ_LAC = 4
OP_WRITE_LAC = 5
OP_GET_BOOKIE_INFO = 6
OP_BATCH_READ = 7

FLAG_NONE = 0x0000
FLAG_DO_FENCING = 0x0001
FLAG_RECOVERY_ADD = 0x0002
FLAG_HIGH_PRIORITY = 0x0004

EOK = 0
ENOLEDGER = 1
ENOENTRY = 2
EBADREQ = 100
EIO = 101
EUA = 102
EBADVERSION = 103
EFENCED = 104
EREADONLY = 105
ETOOMANYREQUESTS = 106

RESPONSE_HEADER_LEN = 24
BATCH_FIXED_LEN = 4 + RESPONSE_HEADER_LEN + 8
"""Bytes of a batch response frame besides its entries, length prefix included (§1.13)."""

EMPTY_KEY = hashlib.sha1(b"ledger").digest()
"""Master key for the empty password: SHA-1("ledger") (§1.9)."""
OTHER_KEY = hashlib.sha1(b"ledgerpw").digest()
AUTH_DISABLED_PLUGIN = "AuthDisabledPlugin"


def unhex(text: str) -> bytes:
    """Bytes from a hex dump with arbitrary whitespace, as the reference prints them."""
    return bytes.fromhex("".join(text.split()))


def header(op: int, flags: int = 0, version: int = 2) -> bytes:
    """The packet header int (§1.3); version 0 carries only the opcode."""
    if version == 0:
        return struct.pack(">I", op)
    return struct.pack(">I", (version & 0xFF) << 24 | (op & 0xFF) << 16 | (flags & 0xFFFF))


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def crc32_entry(ledger: int, entry: int, payload: bytes, lac: int = -1, length: int = -1) -> bytes:
    """An entry as a CRC32 DigestManager packages it (§2.1/§2.2): 32-byte header, the CRC-32
    of header + payload zero-extended to 8 bytes, payload. ``length`` defaults to the payload's
    length."""
    if length < 0:
        length = len(payload)
    head = struct.pack(">qqqq", ledger, entry, lac, length)
    return head + struct.pack(">Q", zlib.crc32(head + payload)) + payload


def add_request(
    ledger: int,
    entry: int,
    payload: bytes = b"hello",
    *,
    flags: int = 0,
    version: int = 2,
    key: bytes = EMPTY_KEY,
    entry_bytes: bytes | None = None,
) -> bytes:
    """A whole ADD frame (§1.7): header, 20-byte key, the entry as stored."""
    if entry_bytes is None:
        entry_bytes = crc32_entry(ledger, entry, payload)
    assert len(key) == 20
    return frame(header(OP_ADD, flags, version) + key + entry_bytes)


def read_request(
    ledger: int, entry: int, *, flags: int = 0, version: int = 2, key: bytes | None = None
) -> bytes:
    """A whole READ frame (§1.7); ``key`` is appended only when given."""
    body = header(OP_READ, flags, version) + struct.pack(">qq", ledger, entry)
    return frame(body + (key or b""))


def batch_request(
    ledger: int,
    start: int,
    request_id: int,
    max_count: int,
    max_size: int,
    *,
    flags: int = 0,
    version: int = 2,
    key: bytes | None = None,
) -> bytes:
    """A whole BATCH_READ_ENTRY frame (§1.7/§1.13)."""
    body = header(OP_BATCH_READ, flags, version) + struct.pack(
        ">qqqiq", ledger, start, request_id, max_count, max_size
    )
    return frame(body + (key or b""))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def auth_message(plugin: str, payload: bytes) -> bytes:
    """Protobuf ``AuthMessage{authPluginName = 1; payload = 2}``."""
    name = plugin.encode()
    return b"\x0a" + _varint(len(name)) + name + b"\x12" + _varint(len(payload)) + payload


def auth_request(plugin: str, payload: bytes, *, version: int = 2) -> bytes:
    return frame(header(OP_AUTH, 0, version) + auth_message(plugin, payload))


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def decode_auth_message(data: bytes) -> dict[int, bytes]:
    """Length-delimited fields of a protobuf message by field number (only wire type 2)."""
    fields: dict[int, bytes] = {}
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        assert key & 7 == 2, f"unexpected wire type in {data.hex()}"
        n, at = _read_varint(data, at)
        fields[key >> 3] = data[at : at + n]
        at += n
    return fields


@dataclass
class Response:
    """One decoded V2 response frame."""

    raw: bytes
    """The whole frame, length prefix included."""
    version: int
    op: int
    flags: int
    rc: int = 0
    ledger: int = 0
    entry: int = 0
    body: bytes = b""
    """READ: the entry bytes. AUTH: the protobuf message."""
    request_id: int | None = None
    entries: list[bytes] = field(default_factory=list)


def parse_response(raw: bytes) -> Response:
    (length,) = struct.unpack_from(">i", raw)
    assert length == len(raw) - 4, f"frame length {length} but {len(raw) - 4} bytes"
    (hdr,) = struct.unpack_from(">I", raw, 4)
    version = hdr >> 24
    op = hdr & 0xFF if version == 0 else (hdr >> 16) & 0xFF
    flags = 0 if version == 0 else hdr & 0xFFFF
    if op == OP_AUTH:
        return Response(raw, version, op, flags, body=raw[8:])
    rc, ledger, entry = struct.unpack_from(">iqq", raw, 8)
    resp = Response(raw, version, op, flags, rc, ledger, entry)
    rest = raw[4 + RESPONSE_HEADER_LEN :]
    if op == OP_BATCH_READ:
        (resp.request_id,) = struct.unpack_from(">q", rest)
        at = 8
        while at < len(rest):
            (n,) = struct.unpack_from(">i", rest, at)
            resp.entries.append(rest[at + 4 : at + 4 + n])
            at += 4 + n
        assert at == len(rest), "batch entries overrun the frame"
    else:
        resp.body = rest
    return resp


class Conn:
    """A blocking TCP connection to a bookie speaking raw V2 frames."""

    def __init__(self, port: int, timeout: float = 15.0, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            # Before connecting, so that the window scale and advertised window follow it.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(("127.0.0.1", port))
        except BaseException:
            self.sock.close()
            raise
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_raw(self) -> bytes:
        """One whole response frame, length prefix included."""
        prefix = self.recv_exact(4)
        (length,) = struct.unpack(">i", prefix)
        assert length >= 0
        return prefix + self.recv_exact(length)

    def recv(self) -> Response:
        return parse_response(self.recv_raw())

    def call(self, request: bytes) -> Response:
        self.send(request)
        return self.recv()

    def wait_closed(self) -> bytes:
        """Read until the server closes; return whatever arrived first. A reset counts as a
        close; a timeout does not (it raises)."""
        got = bytearray()
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return bytes(got)
            if not chunk:
                return bytes(got)
            got += chunk
