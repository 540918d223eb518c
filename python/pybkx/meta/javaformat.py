"""How BookKeeper's Java writes bytes, reproduced: its ``DataFormats.proto`` messages (same
names, numbers and types), protobuf text printed and parsed as protobuf-java does, varints, and
Java's parsing of integers, lines and tab-separated fields. Encoding only: it never knows what a
record means (``serde.py`` does) and never does I/O."""

from __future__ import annotations

import re
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.message import Message

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "BookieServiceInfoFormat",
    "CookieFormat",
    "LedgerMetadataFormat",
    "java_lines",
    "java_long",
    "java_split_tabs",
    "parse_text",
    "print_text",
    "read_varint",
    "varint",
]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_JAVA_INT = re.compile(r"[+-]?[0-9]+")  # what Integer/Long.parseLong accept


# --- the protobuf messages (DataFormats.proto of BookKeeper: same names, numbers, types) ------

_F = descriptor_pb2.FieldDescriptorProto


def _field(
    name: str,
    number: int,
    kind: int,
    label: int = _F.LABEL_OPTIONAL,
    type_name: str = "",
    default: str = "",
) -> descriptor_pb2.FieldDescriptorProto:
    field = descriptor_pb2.FieldDescriptorProto(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name
    if default:
        field.default_value = default
    return field


def _enum(name: str, values: dict[str, int]) -> descriptor_pb2.EnumDescriptorProto:
    enum = descriptor_pb2.EnumDescriptorProto(name=name)
    for value_name, number in values.items():
        enum.value.add(name=value_name, number=number)
    return enum


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    """Our own declaration of the messages of BookKeeper's ``DataFormats.proto`` that the
    metadata store holds. Wire compatibility needs the same field numbers and types; the text
    formats (ledger metadata V2, cookies) also need the same field and enum value names."""
    req, opt, rep = _F.LABEL_REQUIRED, _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    i32, i64, s, b = _F.TYPE_INT32, _F.TYPE_INT64, _F.TYPE_STRING, _F.TYPE_BYTES
    msg, enum = _F.TYPE_MESSAGE, _F.TYPE_ENUM
    proto = descriptor_pb2.FileDescriptorProto(
        name="pybkx/meta/data_formats.proto", syntax="proto2"
    )

    ledger = proto.message_type.add(name="LedgerMetadataFormat")
    ledger.enum_type.append(_enum("State", {"OPEN": 1, "IN_RECOVERY": 2, "CLOSED": 3}))
    ledger.enum_type.append(_enum("DigestType", {"CRC32": 1, "HMAC": 2, "CRC32C": 3, "DUMMY": 4}))
    segment = ledger.nested_type.add(name="Segment")
    segment.field.extend([_field("ensembleMember", 1, s, rep), _field("firstEntryId", 2, i64, req)])
    entry = ledger.nested_type.add(name="cMetadataMapEntry")
    entry.field.extend([_field("key", 1, s, opt), _field("value", 2, b, opt)])
    ledger.field.extend(
        [
            _field("quorumSize", 1, i32, req),
            _field("ensembleSize", 2, i32, req),
            _field("length", 3, i64, req),
            _field("lastEntryId", 4, i64, opt),
            _field("state", 5, enum, req, ".LedgerMetadataFormat.State", "OPEN"),
            _field("segment", 6, msg, rep, ".LedgerMetadataFormat.Segment"),
            _field("digestType", 7, enum, opt, ".LedgerMetadataFormat.DigestType"),
            _field("password", 8, b, opt),
            _field("ackQuorumSize", 9, i32, opt),
            _field("ctime", 10, i64, opt),
            _field("customMetadata", 11, msg, rep, ".LedgerMetadataFormat.cMetadataMapEntry"),
            _field("cToken", 12, i64, opt),
        ]
    )

    cookie = proto.message_type.add(name="CookieFormat")
    cookie.field.extend(
        [
            _field("bookieHost", 1, s, req),
            _field("journalDir", 2, s, req),
            _field("ledgerDirs", 3, s, req),
            _field("instanceId", 4, s, opt),
            _field("indexDirs", 5, s, opt),
        ]
    )

    info = proto.message_type.add(name="BookieServiceInfoFormat")
    endpoint = info.nested_type.add(name="Endpoint")
    endpoint.field.extend(
        [
            _field("id", 1, s, req),
            _field("port", 2, i32, req),
            _field("host", 3, s, req),
            _field("protocol", 4, s, req),
            _field("auth", 5, s, rep),
            _field("extensions", 6, s, rep),
        ]
    )
    properties = info.nested_type.add(name="PropertiesEntry")  # map<string, string>
    properties.options.map_entry = True
    properties.field.extend([_field("key", 1, s, opt), _field("value", 2, s, opt)])
    info.field.extend(
        [
            _field("endpoints", 6, msg, rep, ".BookieServiceInfoFormat.Endpoint"),
            _field("properties", 7, msg, rep, ".BookieServiceInfoFormat.PropertiesEntry"),
        ]
    )
    return proto


_POOL = descriptor_pool.DescriptorPool()  # private: never clashes with other .proto files
_POOL.Add(_build_file())
LedgerMetadataFormat: Any = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("LedgerMetadataFormat")
)
CookieFormat: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("CookieFormat"))
BookieServiceInfoFormat: Any = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("BookieServiceInfoFormat")
)


# --- protobuf text format, printed exactly as protobuf-java's TextFormat printer does ---------

_JAVA_ESCAPES: Final = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
    0x27: "\\'",
    0x22: '\\"',
}


def _escape(raw: bytes) -> str:
    """Java TextFormat's byte escaping: C escapes, printable ASCII as is, else 3-digit octal
    (so non-ASCII UTF-8 text comes out as octal bytes, as Java prints it)."""
    out = []
    for byte in raw:
        escaped = _JAVA_ESCAPES.get(byte)
        if escaped is not None:
            out.append(escaped)
        elif 0x20 <= byte <= 0x7E:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return "".join(out)


def _is_repeated(field: Any) -> bool:
    # ``is_repeated`` replaced ``label`` (gone in protobuf 7); older runtimes only have ``label``.
    repeated = getattr(field, "is_repeated", None)
    if repeated is None:
        return bool(field.label == _F.LABEL_REPEATED)
    return bool(repeated)


def print_text(message: Message, indent: str = "") -> str:
    """Set fields in field-number order, ``name: value`` lines, nested ``name {`` blocks."""
    lines: list[str] = []
    for field, value in message.ListFields():
        values = list(value) if _is_repeated(field) else [value]
        for item in values:
            if field.type == _F.TYPE_MESSAGE:
                lines.append(f"{indent}{field.name} {{\n")
                lines.append(print_text(item, indent + "  "))
                lines.append(f"{indent}}}\n")
            elif field.type == _F.TYPE_ENUM:
                name = field.enum_type.values_by_number[item].name
                lines.append(f"{indent}{field.name}: {name}\n")
            elif field.type == _F.TYPE_STRING:
                lines.append(f'{indent}{field.name}: "{_escape(item.encode("utf-8"))}"\n')
            elif field.type == _F.TYPE_BYTES:
                lines.append(f'{indent}{field.name}: "{_escape(item)}"\n')
            else:
                lines.append(f"{indent}{field.name}: {item}\n")
    return "".join(lines)


def parse_text(text: str, message: Message, what: str) -> None:
    """Merge protobuf text into ``message`` (later singular values win, as in Java's
    ``TextFormat.merge``); raises ValueError unless every required field is set."""
    try:
        text_format.Merge(text, message)
    except text_format.ParseError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if not message.IsInitialized():
        missing = ", ".join(message.FindInitializationErrors())
        raise ValueError(f"{what}: missing required fields {missing}")


# --- varints (writeDelimitedTo / mergeDelimitedFrom) -----------------------------------------


def varint(value: int) -> bytes:
    """A non-negative integer as a protobuf base-128 varint."""
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def read_varint(data: bytes, pos: int, bits: int = 32) -> tuple[int, int]:
    """(value, position after it) of the protobuf varint at ``pos``; raises ValueError if
    truncated or longer than ``bits`` bits allow (32: a length prefix; 64: an int64 field)."""
    value, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= bits + 3:
            raise ValueError("malformed varint")


# --- Java's text parsing ----------------------------------------------------------------------


def java_long(text: str, what: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """Parse like Java's ``Long.parseLong`` / ``Integer.parseInt`` (no spaces, no ``_``)."""
    if not _JAVA_INT.fullmatch(text):
        raise ValueError(f"{what}: not a number: {text!r}")
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"{what}: out of range: {text}")
    return value


def java_lines(text: str) -> list[str]:
    """Lines as Java's ``BufferedReader.readLine`` returns them (\\n, \\r or \\r\\n)."""
    lines = re.split(r"\r\n|\r|\n", text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def java_split_tabs(line: str) -> list[str]:
    """``line.split("\\t")`` in Java: trailing empty strings are dropped."""
    parts = line.split("\t")
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts
