"""Byte formats of BookKeeper's metadata (ledger metadata V1-V3, cookies, service info, LAYOUT).
Pure value <-> bytes conversions shared by every backend, built on ``javaformat.py``'s
encodings; it must never do I/O or hold state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pybkx import errors
from pybkx.meta.javaformat import (
    INT32_MAX,
    INT32_MIN,
    BookieServiceInfoFormat,
    CookieFormat,
    LedgerMetadataFormat,
    java_lines,
    java_long,
    java_split_tabs,
    parse_text,
    print_text,
    read_varint,
    varint,
)
from pybkx.meta.ledger_metadata import DigestType, LedgerMetadata, LedgerState
from pybkx.meta.types import BookieServiceInfo, Cookie, Endpoint

__all__ = [
    "CURRENT_COOKIE_VERSION",
    "CURRENT_LEDGER_METADATA_FORMAT",
    "HIERARCHICAL_FACTORY",
    "LONG_HIERARCHICAL_FACTORY",
    "LedgerLayout",
    "decode_dir_paths",
    "encode_dir_paths",
    "parse_bookie_service_info",
    "parse_cookie",
    "parse_layout",
    "parse_ledger_metadata",
    "serialize_bookie_service_info",
    "serialize_cookie",
    "serialize_layout",
    "serialize_ledger_metadata",
]

CURRENT_LEDGER_METADATA_FORMAT: Final = 3
"""The ledger metadata format new ledgers are written in (binary protobuf, since 4.9)."""

CURRENT_COOKIE_VERSION: Final = 5
"""Cookie layout version written: first line ``5``, then protobuf text of ``CookieFormat``."""

HIERARCHICAL_FACTORY: Final = "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"
LONG_HIERARCHICAL_FACTORY: Final = "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory"

_HEADER: Final = b"BookieMetadataFormatVersion\t"
_MAX_VERSION_DIGITS: Final = 10
_V1_CLOSED_TAG: Final = "CLOSED"
_V1_IN_RECOVERY_ENTRY_ID: Final = -102
_LAYOUT_FORMAT_VERSION: Final = 2
_LAYOUT_MIN_COMPAT_VERSION: Final = 1


# --- ledger metadata ------------------------------------------------------------------------


def serialize_ledger_metadata(metadata: LedgerMetadata) -> bytes:
    """The bytes BookKeeper's ``LedgerMetadataSerDe`` writes for ``metadata``, in its
    ``metadata_format_version`` (3 for new ledgers; an update keeps a ledger's format).

    Raises MetadataSerializationException for an unknown format version, or a state that
    format 1 cannot express.
    """
    version = metadata.metadata_format_version
    header = _HEADER + str(version).encode() + b"\n"
    if version == 3:
        body: bytes = _to_format(metadata, with_c_token=True).SerializeToString()
        return header + varint(len(body)) + body
    if version == 2:
        # Format 2 never carries the cToken (BookKeeper froze its fields).
        text = print_text(_to_format(metadata, with_c_token=False))
        return header + text.encode("utf-8")
    if version == 1:
        return header + _serialize_v1(metadata)
    raise errors.MetadataSerializationException(f"invalid metadata format version {version}")


def _to_format(metadata: LedgerMetadata, *, with_c_token: bool) -> Any:
    fmt = LedgerMetadataFormat()
    fmt.quorumSize = metadata.write_quorum_size
    fmt.ackQuorumSize = metadata.ack_quorum_size
    fmt.ensembleSize = metadata.ensemble_size
    closed = metadata.state == LedgerState.CLOSED
    # A ledger that is not closed has no length and no last entry (-1), whatever it holds.
    fmt.length = metadata.length if closed else 0
    fmt.lastEntryId = metadata.last_entry_id if closed else -1
    fmt.state = int(metadata.state)
    if metadata.ctime is not None:
        fmt.ctime = metadata.ctime
    fmt.digestType = int(metadata.digest_type)
    fmt.password = bytes(metadata.password)
    for key, value in metadata.custom_metadata.items():
        fmt.customMetadata.add(key=key, value=bytes(value))
    for first_entry_id, bookies in metadata.ensembles.items():
        fmt.segment.add(firstEntryId=first_entry_id, ensembleMember=list(bookies))
    if with_c_token:
        fmt.cToken = metadata.c_token
    return fmt


def _serialize_v1(metadata: LedgerMetadata) -> bytes:
    lines = [
        str(metadata.write_quorum_size),
        str(metadata.ensemble_size),
        str(metadata.length if metadata.state == LedgerState.CLOSED else 0),
    ]
    lines += ["\t".join([str(first), *bookies]) for first, bookies in metadata.ensembles.items()]
    text = "".join(line + "\n" for line in lines)
    if metadata.state == LedgerState.IN_RECOVERY:
        text += f"{_V1_IN_RECOVERY_ENTRY_ID}\t{_V1_CLOSED_TAG}"
    elif metadata.state == LedgerState.CLOSED:
        text += f"{metadata.last_entry_id}\t{_V1_CLOSED_TAG}"
    return text.encode("utf-8")


def parse_ledger_metadata(data: bytes) -> LedgerMetadata:
    """Ledger metadata from the bytes of any format BookKeeper ever wrote (1, 2 or 3).

    ``ctime`` is None unless stored in the bytes (BookKeeper then shows the znode's creation
    time). Raises MetadataSerializationException for a missing or corrupt header, an unknown
    format version, unparsable bodies and values BookKeeper would reject (missing required
    fields, quorums that do not fit, segments out of order or of the wrong size).
    """
    try:
        version, pos = _read_header(bytes(data))
        if version == 3:
            return _parse_v3(data, pos)
        if version == 2:
            return _parse_v2(data[pos:])
        if version == 1:
            return _parse_v1(data[pos:])
        raise ValueError(f"metadata format version {version} not supported (1 to 3)")
    except errors.IncorrectParameterException as exc:
        raise errors.MetadataSerializationException(f"invalid ledger metadata: {exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.MetadataSerializationException(f"corrupt ledger metadata: {exc}") from None


def _read_header(data: bytes) -> tuple[int, int]:
    if not data.startswith(_HEADER):
        raise ValueError("no BookieMetadataFormatVersion header")
    start = len(_HEADER)
    end = data.find(b"\n", start, start + _MAX_VERSION_DIGITS + 1)
    if end < 0:
        raise ValueError("no end of the format version line")
    text = data[start:end].decode("ascii")
    return java_long(text, "format version", INT32_MIN, INT32_MAX), end + 1


def _parse_v3(data: bytes, pos: int) -> LedgerMetadata:
    size, pos = read_varint(data, pos)
    if pos + size > len(data):
        raise ValueError(f"message of {size} bytes truncated to {len(data) - pos}")
    fmt = LedgerMetadataFormat()
    try:
        fmt.MergeFromString(data[pos : pos + size])  # trailing bytes are ignored, as in Java
    except Exception as exc:  # DecodeError, or a RuntimeWarning-turned error of upb
        raise ValueError(f"undecodable protobuf: {exc}") from None
    if not fmt.IsInitialized():
        raise ValueError("missing required fields " + ", ".join(fmt.FindInitializationErrors()))
    return _from_format(fmt, 3)


def _parse_v2(body: bytes) -> LedgerMetadata:
    fmt = LedgerMetadataFormat()
    parse_text(body.decode("utf-8"), fmt, "format 2 text")
    return _from_format(fmt, 2)


def _from_format(fmt: Any, version: int) -> LedgerMetadata:
    ensembles: dict[int, tuple[str, ...]] = {}
    for segment in fmt.segment:
        first = int(segment.firstEntryId)
        if ensembles and first <= next(reversed(ensembles)):
            raise ValueError(f"segment at entry {first} out of order")
        ensembles[first] = tuple(segment.ensembleMember)
    state = LedgerState(fmt.state)
    closed = state == LedgerState.CLOSED
    has_password = fmt.HasField("password")
    if has_password:
        # The digest type counts only with a password; its getter defaults to CRC32 (first).
        digest = DigestType(fmt.digestType) if fmt.HasField("digestType") else DigestType.CRC32
    elif fmt.HasField("digestType"):
        digest = DigestType(fmt.digestType)
    else:
        digest = DigestType.CRC32C
    return LedgerMetadata(
        ensemble_size=int(fmt.ensembleSize),
        write_quorum_size=int(fmt.quorumSize),
        ack_quorum_size=int(fmt.ackQuorumSize if fmt.HasField("ackQuorumSize") else fmt.quorumSize),
        ensembles=ensembles,
        digest_type=digest,
        password=bytes(fmt.password) if has_password else b"",
        state=state,
        last_entry_id=int(fmt.lastEntryId) if closed else -1,
        length=int(fmt.length) if closed else 0,
        ctime=int(fmt.ctime) if fmt.HasField("ctime") else None,
        custom_metadata={entry.key: bytes(entry.value) for entry in fmt.customMetadata},
        c_token=int(fmt.cToken) if fmt.HasField("cToken") else 0,
        metadata_format_version=version,
    )


def _parse_v1(body: bytes) -> LedgerMetadata:
    lines = java_lines(body.decode("utf-8"))
    if len(lines) < 3:
        raise ValueError("format 1 needs quorum, ensemble and length lines")
    quorum = java_long(lines[0], "quorum size", INT32_MIN, INT32_MAX)
    ensemble_size = java_long(lines[1], "ensemble size", INT32_MIN, INT32_MAX)
    length = java_long(lines[2], "length")
    ensembles: dict[int, tuple[str, ...]] = {}
    state, last_entry_id = LedgerState.OPEN, -1
    for line in lines[3:]:
        parts = java_split_tabs(line)
        if len(parts) < 2:
            raise ValueError(f"format 1 line without bookies: {line!r}")
        if parts[1] == _V1_CLOSED_TAG:
            tagged = java_long(parts[0], "last entry id")
            if tagged == _V1_IN_RECOVERY_ENTRY_ID:
                state = LedgerState.IN_RECOVERY
            else:
                state, last_entry_id = LedgerState.CLOSED, tagged
            break
        first = java_long(parts[0], "first entry id")
        if ensembles and first <= next(reversed(ensembles)):
            raise ValueError(f"segment at entry {first} out of order")
        ensembles[first] = tuple(parts[1:])
    closed = state == LedgerState.CLOSED
    return LedgerMetadata(
        ensemble_size=ensemble_size,
        write_quorum_size=quorum,
        ack_quorum_size=quorum,
        ensembles=ensembles,
        state=state,
        last_entry_id=last_entry_id,
        length=length if closed else 0,
        metadata_format_version=1,
    )


# --- cookies --------------------------------------------------------------------------------


def encode_dir_paths(dirs: tuple[str, ...] | list[str]) -> str:
    """A cookie's ledgerDirs/indexDirs value: the count, then a TAB before each directory."""
    return "".join([str(len(dirs)), *("\t" + d for d in dirs)])


def decode_dir_paths(value: str) -> tuple[str, ...]:
    """The directories of an :func:`encode_dir_paths` value (the leading count is skipped)."""
    if "\t" not in value:
        return () if value.strip() in ("", "0") else (value,)
    return tuple(java_split_tabs(value.split("\t", 1)[1]))


def serialize_cookie(cookie: Cookie) -> bytes:
    """The cookie text BookKeeper writes (layout version 5): ``5``, a newline, then protobuf
    text of ``CookieFormat``; journal dirs joined by ``,``, ledger/index dirs as
    :func:`encode_dir_paths`. The same bytes go to the store and to ``current/VERSION``."""
    fmt = CookieFormat()
    fmt.bookieHost = cookie.bookie_id
    fmt.journalDir = ",".join(cookie.journal_dirs)
    fmt.ledgerDirs = encode_dir_paths(cookie.ledger_dirs)
    if cookie.instance_id is not None:
        fmt.instanceId = cookie.instance_id
    if cookie.index_dirs is not None:
        fmt.indexDirs = encode_dir_paths(cookie.index_dirs)
    return (f"{CURRENT_COOKIE_VERSION}\n" + print_text(fmt)).encode("utf-8")


def parse_cookie(data: bytes) -> Cookie:
    """A cookie from its text (layout 3: four plain lines; layouts 4 and 5: protobuf text).
    An empty instance id or index dirs value reads as absent.

    Raises InvalidCookieException for anything else (older layouts included), as BookKeeper
    refuses such a cookie.
    """
    try:
        text = bytes(data).decode("utf-8")
        lines = java_lines(text)
        if not lines:
            raise ValueError("empty cookie")
        layout = java_long(lines[0].strip(), "cookie layout version", INT32_MIN, INT32_MAX)
        if layout == 3:
            if len(lines) < 4:
                raise ValueError("layout 3 cookie needs four lines")
            bookie_id, journal, ledgers, instance, index = lines[1], lines[2], lines[3], "", ""
        elif layout >= 4:
            fmt = CookieFormat()
            rest = text.split("\n", 1)[1] if "\n" in text else ""
            parse_text(rest, fmt, "cookie")
            bookie_id, journal, ledgers = fmt.bookieHost, fmt.journalDir, fmt.ledgerDirs
            instance, index = fmt.instanceId, fmt.indexDirs
        else:
            raise ValueError(f"cookie layout version {layout} is too old")
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.InvalidCookieException(f"unparsable cookie: {exc}") from None
    return Cookie(
        bookie_id=bookie_id,
        journal_dirs=tuple(journal.split(",")) if journal else (),
        ledger_dirs=decode_dir_paths(ledgers),
        instance_id=instance or None,
        index_dirs=decode_dir_paths(index) if index else None,
    )


# --- bookie service info --------------------------------------------------------------------


def serialize_bookie_service_info(info: BookieServiceInfo) -> bytes:
    """Binary protobuf ``BookieServiceInfoFormat`` (a bookie's registration data). Properties
    are written sorted by key (Java writes its map's order; readers do not care)."""
    fmt = BookieServiceInfoFormat()
    for endpoint in info.endpoints:
        fmt.endpoints.add(
            id=endpoint.id,
            port=endpoint.port,
            host=endpoint.host,
            protocol=endpoint.protocol,
            auth=list(endpoint.auth),
            extensions=list(endpoint.extensions),
        )
    for key, value in info.properties.items():
        fmt.properties[key] = value
    serialized: bytes = fmt.SerializeToString(deterministic=True)
    return serialized


def parse_bookie_service_info(data: bytes, bookie_id: str) -> BookieServiceInfo:
    """A registration's service info. Empty data is a legacy bookie's registration: one
    ``bookie-rpc`` endpoint (id = the bookie id) at the ``host:port`` of ``bookie_id``.

    Raises MetadataSerializationException for bytes that are not a BookieServiceInfoFormat, or
    a legacy bookie id that is not ``host:port``.
    """
    if not data:
        host, sep, port = bookie_id.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise errors.MetadataSerializationException(
                f"legacy registration of {bookie_id!r}: the bookie id is not host:port"
            )
        endpoint = Endpoint(bookie_id, int(port), host, "bookie-rpc")
        return BookieServiceInfo(endpoints=(endpoint,))
    fmt = BookieServiceInfoFormat()
    try:
        fmt.MergeFromString(bytes(data))
    except Exception as exc:
        raise errors.MetadataSerializationException(
            f"corrupt registration of {bookie_id}: {exc}"
        ) from None
    if not fmt.IsInitialized():
        raise errors.MetadataSerializationException(
            f"registration of {bookie_id} misses " + ", ".join(fmt.FindInitializationErrors())
        )
    endpoints = tuple(
        Endpoint(e.id, int(e.port), e.host, e.protocol, tuple(e.auth), tuple(e.extensions))
        for e in fmt.endpoints
    )
    return BookieServiceInfo(endpoints=endpoints, properties=dict(fmt.properties))


# --- LAYOUT ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerLayout:
    """The ``<root>/LAYOUT`` record: which ledger manager factory (and version) a cluster uses."""

    manager_factory_class: str = HIERARCHICAL_FACTORY
    manager_version: int = 1
    layout_format_version: int = _LAYOUT_FORMAT_VERSION


def serialize_layout(layout: LedgerLayout | None = None) -> bytes:
    """``<format version>\\n<factory class>:<manager version>`` (no trailing newline)."""
    layout = layout or LedgerLayout()
    return (
        f"{layout.layout_format_version}\n{layout.manager_factory_class}:{layout.manager_version}"
    ).encode()


def parse_layout(data: bytes) -> LedgerLayout:
    """Raises MetadataSerializationException for an unparsable or incompatible layout (format
    version outside 1..2)."""
    try:
        text = bytes(data).decode("utf-8")
        lines = text.split("\n")
        version = java_long(lines[0], "layout format version", INT32_MIN, INT32_MAX)
        if not _LAYOUT_MIN_COMPAT_VERSION <= version <= _LAYOUT_FORMAT_VERSION:
            raise ValueError(f"layout format version {version} not supported (1 to 2)")
        if len(lines) < 2:
            raise ValueError("no ledger manager line")
        parts = lines[1].split(":")
        if len(parts) != 2:
            raise ValueError(f"invalid ledger manager {lines[1]!r}")
        manager_version = java_long(parts[1], "manager version", INT32_MIN, INT32_MAX)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.MetadataSerializationException(f"corrupt LAYOUT: {exc}") from None
    return LedgerLayout(parts[0], manager_version, version)
