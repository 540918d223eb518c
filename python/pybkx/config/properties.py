"""Reading configuration files: Java properties (``bk_server.conf`` syntax) and TOML with the
same flat key names. It returns raw key -> value mappings; it never interprets a value."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from pybkx.config.values import ConfigError

__all__ = ["LIST_KEYS", "parse_properties", "read_file"]

LIST_KEYS: Final = frozenset(
    {"journalDirectories", "journalDirectory", "ledgerDirectories", "indexDirectories", "zkServers"}
)
"""Keys whose repeated lines add to one list, as BookKeeper's (commons-configuration) lists do."""


def read_file(path: Path) -> tuple[dict[str, object], dict[str, int]]:
    """Key -> raw value and key -> line number (properties only) of a configuration file:
    ``*.toml`` as TOML, anything else as Java properties. Raises ConfigError."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror or exc}") from None
    if path.suffix.lower() == ".toml":
        return _read_toml(data, path), {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read configuration file {path}: not UTF-8 ({exc})") from None
    return _merge_properties(parse_properties(text), path)


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
        elif key in LIST_KEYS:
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
