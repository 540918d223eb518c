"""Bookie server configuration under Apache BookKeeper's key names: properties/TOML files, flags.
It only reads files and validates values; it must never open storage, listen or start threads."""

# Key names and defaults are those of BookKeeper 4.17's ``ServerConfiguration`` (and
# ``AbstractConfiguration`` for ``nettyMaxFrameSizeBytes``, ``metadataServiceUri``, ``zkServers``).
# Attributes are snake_case with units; each field's metadata carries its BookKeeper key. Keys
# pybkx does not use yet are kept in ``extra`` (real bk_server.conf files carry hundreds).

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import re
import socket
import struct
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TypedDict, TypeVar

__all__ = ["ConfigError", "ServerConfig", "ServerKwargs", "parse_properties"]

logger = logging.getLogger(__name__)

MIB: Final = 1 << 20
JAVA_INT_MAX: Final = (1 << 31) - 1
JAVA_LONG_MAX: Final = (1 << 63) - 1
MAX_LOG_SIZE_LIMIT: Final = (1 << 32) - 1 - 64 * MIB
"""Largest ``logSizeLimit`` the Rust entry log accepts (its offsets are 32-bit)."""

_T = TypeVar("_T")


class ConfigError(ValueError):
    """An invalid configuration file, value or combination of values.

    The message is one line that names the key and where its value came from.
    """


class _Invalid(ValueError):
    """A value failed its parser; the caller adds the key and the source."""


# --- value parsers: raw value (str from a properties file, or a TOML/Python value) -> typed ----

_INT_RE: Final = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+)")
_TRUE: Final = frozenset({"true", "yes", "on", "y", "t", "1"})
_FALSE: Final = frozenset({"false", "no", "off", "n", "f", "0"})


def _int(minimum: int, maximum: int = JAVA_INT_MAX) -> Callable[[object], int]:
    def parse(value: object) -> int:
        if isinstance(value, bool):
            raise _Invalid(f"expected an integer, got {value!r}")
        if isinstance(value, int):
            n = value
        elif isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
            text = value.strip()
            sign, digits = (-1, text[1:]) if text[0] == "-" else (1, text.lstrip("+"))
            n = sign * (int(digits, 16) if digits[:2].lower() == "0x" else int(digits, 10))
        else:
            raise _Invalid(f"expected an integer, got {value!r}")
        if not minimum <= n <= maximum:
            raise _Invalid(f"must be between {minimum} and {maximum}, got {n}")
        return n

    return parse


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise _Invalid(f"expected true or false, got {value!r}")


def _opt_str(value: object) -> str | None:
    """A string; blank means unset (None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, got {value!r}")
    return value.strip() or None


def _servers(value: object) -> str | None:
    """ZooKeeper servers: a comma-separated string or a list of ``host:port``."""
    if isinstance(value, list | tuple):
        value = ",".join(str(item).strip() for item in value)
    return _opt_str(value)


def _dirs(value: object) -> tuple[str, ...]:
    """Directories: a comma-separated string or a list of paths; at least one."""
    items: Sequence[object]
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise _Invalid(f"expected a comma-separated list of paths, got {value!r}")
    paths: list[str] = []
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise _Invalid(f"expected paths, got {item!r}")
        path = os.fspath(item).strip()
        if path:
            paths.append(path)
    if not paths:
        raise _Invalid("no directory given")
    return tuple(paths)


def _opt_dirs(value: object) -> tuple[str, ...] | None:
    return None if value is None else _dirs(value)


def _setting(key: str, default: _T, parse: Callable[[object], _T], *, storage: bool = False) -> _T:
    """A field holding the BookKeeper key ``key``; ``storage`` keys go to ``LedgerStorage``."""
    return field(default=default, metadata={"key": key, "parse": parse, "storage": storage})


class ServerKwargs(TypedDict):
    """Keyword arguments of ``pybkx._core.BookieServer`` after the storage."""

    host: str
    port: int
    max_frame_size: int
    max_pending_adds: int
    max_pending_reads: int
    max_batch_read_size: int
    read_only: bool


@dataclass(frozen=True)
class ServerConfig:
    """A bookie's configuration; construct it with ``from_file``/``load`` or keyword arguments.

    Every value is checked on construction (``ConfigError``). Directory lists are tuples.
    """

    # --- network and identity
    bookie_port: int = _setting("bookiePort", 3181, _int(0, 65535))
    listening_interface: str | None = _setting("listeningInterface", None, _opt_str)
    """A network interface name (as in BookKeeper) or, a pybkx extension, an address to bind."""
    advertised_address: str | None = _setting("advertisedAddress", None, _opt_str)
    bookie_id: str | None = _setting("bookieId", None, _opt_str)
    allow_loopback: bool = _setting("allowLoopback", False, _bool)
    allow_ephemeral_ports: bool = _setting("allowEphemeralPorts", False, _bool)

    # --- directories (``journalDirectory`` is the legacy single-directory key)
    journal_directories: tuple[str, ...] = _setting(
        "journalDirectories", ("/tmp/bk-txn",), _dirs, storage=True
    )
    ledger_directories: tuple[str, ...] = _setting(
        "ledgerDirectories", ("/tmp/bk-data",), _dirs, storage=True
    )
    index_directories: tuple[str, ...] | None = _setting(
        "indexDirectories", None, _opt_dirs, storage=True
    )

    # --- metadata (None: a standalone bookie)
    metadata_service_uri: str | None = _setting("metadataServiceUri", None, _opt_str)
    zk_servers: str | None = _setting("zkServers", None, _servers)
    zk_timeout_ms: int = _setting("zkTimeout", 10_000, _int(1))
    """ZooKeeper session timeout; a killed bookie's registration outlives it by at most this."""

    # --- journal (group commit and files)
    journal_max_group_wait_ms: int = _setting("journalMaxGroupWaitMSec", 2, _int(0), storage=True)
    journal_buffered_writes_threshold_bytes: int = _setting(
        "journalBufferedWritesThreshold", 512 * 1024, _int(0), storage=True
    )
    journal_buffered_entries_threshold: int = _setting(
        "journalBufferedEntriesThreshold", 0, _int(0), storage=True
    )
    journal_flush_when_queue_empty: bool = _setting(
        "journalFlushWhenQueueEmpty", False, _bool, storage=True
    )
    journal_sync_data: bool = _setting("journalSyncData", True, _bool, storage=True)
    journal_write_buffer_size_kb: int = _setting(
        "journalWriteBufferSizeKB", 64, _int(1), storage=True
    )
    journal_pre_alloc_size_mb: int = _setting("journalPreAllocSizeMB", 16, _int(0), storage=True)
    journal_max_size_mb: int = _setting("journalMaxSizeMB", 2048, _int(1), storage=True)
    journal_max_backups: int = _setting("journalMaxBackups", 5, _int(0), storage=True)
    journal_queue_size: int = _setting("journalQueueSize", 10_000, _int(1), storage=True)
    journal_page_cache_flush_interval_ms: int = _setting(
        "journalPageCacheFlushIntervalMSec", 1000, _int(1), storage=True
    )
    skip_replay_journal_invalid_record: bool = _setting(
        "skipReplayJournalInvalidRecord", False, _bool, storage=True
    )

    # --- entry logs and checkpoints
    log_size_limit_bytes: int = _setting(
        "logSizeLimit", 1 << 30, _int(4096, MAX_LOG_SIZE_LIMIT), storage=True
    )
    write_buffer_size_bytes: int = _setting("writeBufferSizeBytes", 65536, _int(1), storage=True)
    flush_interval_ms: int = _setting("flushInterval", 10_000, _int(0), storage=True)

    # --- server limits
    netty_max_frame_size_bytes: int = _setting("nettyMaxFrameSizeBytes", 5 * MIB, _int(1))
    max_pending_add_requests_per_thread: int = _setting(
        "maxPendingAddRequestsPerThread", 10_000, _int(1)
    )
    max_pending_read_requests_per_thread: int = _setting(
        "maxPendingReadRequestsPerThread", 10_000, _int(1)
    )
    max_batch_read_size_bytes: int = _setting("maxBatchReadSize", 5 * MIB, _int(1, JAVA_LONG_MAX))

    # --- state
    read_only_mode_enabled: bool = _setting("readOnlyModeEnabled", True, _bool)
    force_read_only_bookie: bool = _setting("forceReadOnlyBookie", False, _bool)
    http_server_enabled: bool = _setting("httpServerEnabled", False, _bool)
    """Accepted for bk_server.conf compatibility; the HTTP admin server is not implemented yet."""

    # --- not settings
    extra: Mapping[str, object] = field(
        default_factory=lambda: MappingProxyType({}), hash=False, repr=False
    )
    """Keys pybkx does not use (yet), as given."""
    source: str = field(default="ServerConfig()", compare=False)
    """Where the values came from, for messages: a file path, ``command line``, or both."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if "key" not in f.metadata:
                continue
            try:
                value = f.metadata["parse"](getattr(self, f.name))
            except _Invalid as exc:
                raise ConfigError(f"invalid {f.metadata['key']} in {self.source}: {exc}") from None
            object.__setattr__(self, f.name, value)  # normalised, e.g. a list becomes a tuple
        if not isinstance(self.extra, MappingProxyType):
            object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))
        if self.bookie_port == 0 and not self.allow_ephemeral_ports:
            raise ConfigError(
                f"invalid bookiePort in {self.source}: 0 (an ephemeral port) needs "
                "allowEphemeralPorts=true"
            )
        if self.force_read_only_bookie and not self.read_only_mode_enabled:
            raise ConfigError(
                f"invalid forceReadOnlyBookie in {self.source}: a forced read-only bookie "
                "needs readOnlyModeEnabled=true"
            )

    # --- construction

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ServerConfig:
        """Read a BookKeeper properties file (``bk_server.conf`` syntax) or, for ``*.toml``, a
        TOML file with the same flat key names. Unknown keys are kept in ``extra``."""
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"cannot read configuration file {p}: {exc.strerror or exc}"
            ) from None
        if p.suffix.lower() == ".toml":
            return cls()._apply(_read_toml(data, p), source=str(p), lines={})
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"cannot read configuration file {p}: not UTF-8 ({exc})") from None
        values, lines = _merge_properties(parse_properties(text), p)
        return cls()._apply(values, source=str(p), lines=lines)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, object] | None = None,
        *,
        overrides_source: str = "command line",
    ) -> ServerConfig:
        """The file's configuration (BookKeeper's defaults without one), then ``overrides``."""
        config = cls() if path is None else cls.from_file(path)
        if overrides:
            config = config.with_overrides(overrides, source=overrides_source)
        return config

    def with_overrides(
        self, overrides: Mapping[str, object], *, source: str = "overrides"
    ) -> ServerConfig:
        """A copy with ``overrides`` (BookKeeper key names -> values) applied over this one."""
        return self._apply(overrides, source=source, lines={})

    def _apply(
        self, values: Mapping[str, object], *, source: str, lines: Mapping[str, int]
    ) -> ServerConfig:
        values = dict(values)
        legacy = values.pop("journalDirectory", None)
        if legacy is not None and _blank(values.get("journalDirectories")):
            values["journalDirectories"] = legacy  # BookKeeper's fallback for the old key
            if "journalDirectory" in lines:
                lines = {**lines, "journalDirectories": lines["journalDirectory"]}
        changes: dict[str, Any] = {}
        extra = dict(self.extra)
        unknown: list[str] = []
        for key, raw in values.items():
            f = _FIELDS.get(key)
            if f is None:
                extra[key] = raw
                unknown.append(key)
                continue
            try:
                changes[f.name] = f.metadata["parse"](raw)
            except _Invalid as exc:
                where = f"{source}:{lines[key]}" if key in lines else source
                raise ConfigError(f"invalid {key} in {where}: {exc}") from None
        if unknown:
            logger.warning(
                "%s: keeping %d key(s) pybkx does not use yet: %s",
                source,
                len(unknown),
                ", ".join(sorted(unknown)),
            )
        combined = source if self.source == "ServerConfig()" else f"{self.source} + {source}"
        return dataclasses.replace(self, **changes, extra=MappingProxyType(extra), source=combined)

    # --- views

    def settings(self) -> dict[str, object]:
        """Every known setting by its BookKeeper key (directory lists as lists)."""
        out: dict[str, object] = {}
        for key, f in _FIELDS.items():
            value = getattr(self, f.name)
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def storage_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``pybkx._core.LedgerStorage``: BookKeeper key names."""
        kwargs: dict[str, Any] = {}
        for key, f in _FIELDS.items():
            if not f.metadata["storage"]:
                continue
            value = getattr(self, f.name)
            if value is None:  # indexDirectories unset: the index lives in the ledger directory
                continue
            kwargs[key] = list(value) if isinstance(value, tuple) else value
        return kwargs

    def server_kwargs(self) -> ServerKwargs:
        """Keyword arguments for ``pybkx._core.BookieServer(storage, **kwargs)``."""
        return ServerKwargs(
            host=self.listening_address(),
            port=self.bookie_port,
            max_frame_size=self.netty_max_frame_size_bytes,
            max_pending_adds=self.max_pending_add_requests_per_thread,
            max_pending_reads=self.max_pending_read_requests_per_thread,
            max_batch_read_size=self.max_batch_read_size_bytes,
            read_only=self.force_read_only_bookie,
        )

    def listening_address(self) -> str:
        """The address to bind: all IPv4 interfaces unless ``listeningInterface`` is set.

        ``listeningInterface`` names a network interface (its IPv4 address is used, as in
        BookKeeper); pybkx also accepts an IP address or a host name there.
        """
        iface = self.listening_interface
        if iface is None:
            return "0.0.0.0"
        if _is_ip(iface) or iface not in _interface_names():
            return iface
        address = _interface_ipv4(iface)
        if address is None:
            raise ConfigError(
                f"invalid listeningInterface in {self.source}: interface {iface} has no IPv4 "
                "address"
            )
        return address

    def metadata_uri(self) -> str | None:
        """``metadataServiceUri``, else the URI BookKeeper derives from the legacy ``zkServers``
        (and ``zkLedgersRootPath``); None for a standalone bookie."""
        if self.metadata_service_uri is not None:
            return self.metadata_service_uri
        if self.zk_servers is None:
            return None
        root = str(self.extra.get("zkLedgersRootPath", "/ledgers")).strip() or "/ledgers"
        return f"zk+hierarchical://{self.zk_servers.replace(',', ';')}{root}"


_FIELDS: Final[Mapping[str, dataclasses.Field[Any]]] = MappingProxyType(
    {f.metadata["key"]: f for f in dataclasses.fields(ServerConfig) if "key" in f.metadata}
)
"""BookKeeper key -> field of ``ServerConfig``."""

_LIST_KEYS: Final = frozenset(
    {"journalDirectories", "journalDirectory", "ledgerDirectories", "indexDirectories", "zkServers"}
)
"""Keys whose repeated lines add to one list, as BookKeeper's (commons-configuration) lists do."""


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


# --- files ------------------------------------------------------------------------------------

_WS: Final = " \t\f"
_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _continues(line: str) -> bool:
    """A line ending in an odd number of backslashes continues on the next one."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, logical line) with comments and blank lines dropped and
    continuations joined (the next line's leading whitespace removed)."""
    physical = text.splitlines()
    i = 0
    while i < len(physical):
        number = i + 1
        line = physical[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i == len(physical):
                break
            line += physical[i].lstrip(_WS)
            i += 1
        yield number, line


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            hex4 = text[i + 2 : i + 6]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", hex4):
                out.append(chr(int(hex4, 16)))
                i += 6
            else:
                out.append(_ESCAPES.get(nxt, nxt))
                i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> list[tuple[str, str, int]]:
    """Parse Java properties text: ``(key, value, line number)`` in file order.

    ``key=value``, ``key: value`` or ``key value``; ``#`` and ``!`` start comment lines; a
    trailing backslash continues a line; ``\\t``, ``\\uXXXX`` and ``\\<char>`` escapes; keys and
    values trimmed.
    """
    entries: list[tuple[str, str, int]] = []
    for number, line in _logical_lines(text):
        end = 0
        while end < len(line):
            c = line[end]
            if c == "\\":
                end += 2
                continue
            if c in "=:" or c in _WS:
                break
            end += 1
        rest = line[end:].lstrip(_WS)
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        entries.append((_unescape(line[:end]).strip(), _unescape(rest).strip(), number))
    return entries


def _merge_properties(
    entries: list[tuple[str, str, int]], path: Path
) -> tuple[dict[str, object], dict[str, int]]:
    """Key -> value and key -> line. Repeated list keys add up; a repeated scalar key must
    repeat the same value."""
    values: dict[str, object] = {}
    lines: dict[str, int] = {}
    for key, value, number in entries:
        if key not in values:
            values[key], lines[key] = value, number
        elif key in _LIST_KEYS:
            values[key] = f"{values[key]},{value}"
        elif values[key] != value:
            raise ConfigError(
                f"invalid {key} in {path}:{number}: set again with a different value "
                f"(first at line {lines[key]})"
            )
    return values, lines


def _read_toml(data: bytes, path: Path) -> dict[str, object]:
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot parse configuration file {path}: {exc}") from None
    return _flatten(document)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, object]:
    """Tables become dotted keys, so ``a.b = 1`` reads back as key ``a.b`` (as in properties)."""
    flat: dict[str, object] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# --- network interfaces -------------------------------------------------------------------------

_SIOCGIFADDR: Final = 0x8915  # Linux ioctl: an interface's IPv4 address


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _interface_names() -> set[str]:
    try:
        return {name for _, name in socket.if_nameindex()}
    except OSError:
        return set()


def _interface_ipv4(name: str) -> str | None:
    """The IPv4 address of a network interface, or None (none assigned, or not Linux)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    request = struct.pack("256s", name.encode()[:15])
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            reply = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
    except OSError:
        return None
    return socket.inet_ntoa(reply[20:24])
