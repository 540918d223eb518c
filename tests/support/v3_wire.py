"""Just enough protobuf to speak BookKeeper's V3 protocol from a test: requests built field by
field (varints, length-delimited fields) and responses parsed into {field number: [values]}.
Owns no behaviour of pybkx; it exists so tests can send the same bytes to two bookies."""

from __future__ import annotations

import socket
import struct

READ_ENTRY, ADD_ENTRY, AUTH, WRITE_LAC, READ_LAC, GET_BOOKIE_INFO = 1, 2, 5, 6, 7, 8
START_TLS, FORCE_LEDGER, GET_LIST_OF_ENTRIES = 9, 10, 11


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64s go as ten-byte two's complement, as protobuf does
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def field_bytes(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(value)) + value


def request(operation: int, txn: int, body_field: int | None = None, body: bytes = b"") -> bytes:
    """A V3 Request frame: header (version 3, operation, txnId), then the operation's message."""
    header = field_varint(1, 3) + field_varint(2, operation) + field_varint(3, txn)
    message = field_bytes(1, header)
    if body_field is not None:
        message += field_bytes(body_field, body)
    return struct.pack(">i", len(message)) + message


def parse(data: bytes) -> dict[int, list[int | bytes]]:
    """Fields of one message: varints as ints, length-delimited fields as bytes."""
    fields: dict[int, list[int | bytes]] = {}
    i = 0

    def read_varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(data):
        key = read_varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields.setdefault(number, []).append(read_varint())
        elif wire == 2:
            n = read_varint()
            fields.setdefault(number, []).append(data[i : i + n])
            i += n
        else:
            raise ValueError(f"wire type {wire} not expected")
    return fields


class Connection:
    """One connection to a bookie: send frames, read whole response frames."""

    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)

    def exchange(self, frame: bytes) -> bytes:
        """Send one request frame; the body of the response frame."""
        self.sock.sendall(frame)
        (length,) = struct.unpack(">i", self._read(4))
        return self._read(length)

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("bookie closed the connection")
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()
