"""Typed configuration values: the parsers for BookKeeper-style values and the machinery that
turns a table of keyed fields into a checked, immutable configuration. It never reads files."""

# A configuration class is a frozen dataclass whose fields are made with ``setting(key,
# default, parser)``: the field name is snake_case with units, its metadata the BookKeeper key.
# ``KeyedConfig`` gives such a class one way in (``from_values``), one way to derive a changed
# copy (``with_overrides``) and one way out (``settings``); every value is parsed exactly once.

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from types import MappingProxyType
from typing import Any, ClassVar, Final, Self, TypeVar

from pybkx.config.suggest import closest

__all__ = [
    "JAVA_INT_MAX",
    "JAVA_LONG_MAX",
    "MIB",
    "ConfigError",
    "InvalidValue",
    "KeyedConfig",
    "boolean",
    "dirs",
    "integer",
    "number",
    "optional",
    "optional_dirs",
    "optional_str",
    "servers",
    "setting",
]

MIB: Final = 1 << 20
JAVA_INT_MAX: Final = (1 << 31) - 1
JAVA_LONG_MAX: Final = (1 << 63) - 1

_T = TypeVar("_T")


class ConfigError(ValueError):
    """An invalid configuration file, value or combination of values.

    The message is one line that names the key and where its value came from.
    """


class InvalidValue(ValueError):
    """A value failed its parser; the caller adds the key and the source."""


# --- value parsers: raw value (str from a properties file, or a TOML/Python value) -> typed ----

_INT_RE: Final = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+)")
_TRUE: Final = frozenset({"true", "yes", "on", "y", "t", "1"})
_FALSE: Final = frozenset({"false", "no", "off", "n", "f", "0"})


def integer(minimum: int, maximum: int = JAVA_INT_MAX) -> Callable[[object], int]:
    """A parser of integers in ``minimum..maximum`` (decimal or 0x hex in strings)."""

    def parse(value: object) -> int:
        if isinstance(value, bool):
            raise InvalidValue(f"expected an integer, got {value!r}")
        if isinstance(value, int):
            n = value
        elif isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
            text = value.strip()
            sign, digits = (-1, text[1:]) if text[0] == "-" else (1, text.lstrip("+"))
            n = sign * (int(digits, 16) if digits[:2].lower() == "0x" else int(digits, 10))
        else:
            raise InvalidValue(f"expected an integer, got {value!r}")
        if not minimum <= n <= maximum:
            raise InvalidValue(f"must be between {minimum} and {maximum}, got {n}")
        return n

    return parse


def number(minimum: float, maximum: float = float("inf")) -> Callable[[object], float]:
    """A parser of finite numbers in ``minimum..maximum``, e.g. timeouts in seconds."""

    def parse(value: object) -> float:
        if isinstance(value, bool):
            raise InvalidValue(f"expected a number, got {value!r}")
        try:
            n = float(value) if isinstance(value, int | float | str) else float("nan")
        except ValueError:
            raise InvalidValue(f"expected a number, got {value!r}") from None
        if not minimum <= n <= maximum:  # also false for NaN
            raise InvalidValue(f"must be between {minimum:g} and {maximum:g}, got {value!r}")
        return n

    return parse


def boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise InvalidValue(f"expected true or false, got {value!r}")


def optional_str(value: object) -> str | None:
    """A string; blank means unset (None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidValue(f"expected a string, got {value!r}")
    return value.strip() or None


def servers(value: object) -> str | None:
    """ZooKeeper servers: a comma-separated string or a list of ``host:port``."""
    if isinstance(value, list | tuple):
        value = ",".join(str(item).strip() for item in value)
    return optional_str(value)


def dirs(value: object) -> tuple[str, ...]:
    """Directories: a comma-separated string or a list of paths; at least one."""
    items: Sequence[object]
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise InvalidValue(f"expected a comma-separated list of paths, got {value!r}")
    paths: list[str] = []
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise InvalidValue(f"expected paths, got {item!r}")
        path = os.fspath(item).strip()
        if path:
            paths.append(path)
    if not paths:
        raise InvalidValue("no directory given")
    return tuple(paths)


def optional_dirs(value: object) -> tuple[str, ...] | None:
    return None if value is None else dirs(value)


def optional(parse: Callable[[object], _T]) -> Callable[[object], _T | None]:
    """``parse``, with None (unset) passed through."""

    def parse_optional(value: object) -> _T | None:
        return None if value is None else parse(value)

    return parse_optional


def setting(key: str, default: _T, parse: Callable[[object], _T], **flags: bool) -> _T:
    """A field holding the BookKeeper key ``key``; ``flags`` tag it for a consumer (e.g.
    ``storage=True``)."""
    return field(default=default, metadata={"key": key, "parse": parse, **flags})


def keyed_fields(cls: type) -> Mapping[str, dataclasses.Field[Any]]:
    """BookKeeper key -> field, for a dataclass made of ``setting`` fields."""
    return MappingProxyType(
        {f.metadata["key"]: f for f in dataclasses.fields(cls) if "key" in f.metadata}
    )


DEFAULT_ORIGIN: Final = "default"


class KeyedConfig:
    """Base of the configuration dataclasses: parse once, by key, with messages naming the key
    and where the value came from. Subclasses are frozen dataclasses with ``setting`` fields, an
    ``extra`` mapping (keys they do not use, kept as given), an ``origins`` mapping (key -> where
    its value came from) and a ``source`` string."""

    #: Keys that are BookKeeper's old names for a field's key: old -> new.
    LEGACY_KEYS: ClassVar[Mapping[str, str]] = MappingProxyType({})
    #: BookKeeper keys this configuration does not implement -> what pybkx does instead. They
    #: are kept in ``extra``; any other key that is not a field's is misspelt (or foreign).
    FOREIGN_KEYS: ClassVar[Mapping[str, str]] = MappingProxyType({})

    extra: Mapping[str, object]
    origins: Mapping[str, str]
    source: str

    def _parse_fields(self) -> None:
        """Parses every field in place (``__post_init__`` of a subclass calls it)."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if "key" not in f.metadata:
                continue
            try:
                value = f.metadata["parse"](getattr(self, f.name))
            except InvalidValue as exc:
                raise ConfigError(f"invalid {f.metadata['key']} in {self.source}: {exc}") from None
            object.__setattr__(self, f.name, value)  # normalised, e.g. a list becomes a tuple
        for name in ("extra", "origins"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        return frozenset(keyed_fields(cls)) | frozenset(cls.LEGACY_KEYS)

    @classmethod
    def suggestion(cls, key: str) -> str | None:
        """The known key (implemented or not) that ``key`` most likely means."""
        return closest(key, cls.known_keys() | frozenset(cls.FOREIGN_KEYS))

    def origin(self, key: str) -> str:
        """Where ``key``'s value came from: ``file:line``, ``command line``, ... or
        ``default``."""
        return self.origins.get(key, DEFAULT_ORIGIN)

    def with_overrides(
        self,
        values: Mapping[str, object],
        *,
        source: str = "overrides",
        lines: Mapping[str, int] | None = None,
        strict: bool = False,
    ) -> Self:
        """A copy with ``values`` (BookKeeper key -> value) applied over this one.

        Keys that are not a field's are kept in ``extra``; with ``strict``, one that is not
        in ``FOREIGN_KEYS`` either is an error naming the closest known key. Raises ConfigError.
        """
        lines = dict(lines or {})
        values = dict(values)
        origins = dict(self.origins)
        fields_by_key = keyed_fields(type(self))
        for old, new in self.LEGACY_KEYS.items():
            legacy = values.pop(old, None)
            if legacy is not None and _blank(values.get(new)):
                values[new] = legacy  # BookKeeper's fallback for the old key
                if old in lines:
                    lines[new] = lines[old]
        changes: dict[str, Any] = {}
        extra = dict(self.extra)
        for key, raw in values.items():
            where = f"{source}:{lines[key]}" if key in lines else source
            f = fields_by_key.get(key)
            if f is None:
                if strict and key not in self.FOREIGN_KEYS:
                    hint = self.suggestion(key)
                    raise ConfigError(
                        f"unknown configuration key {key!r} in {source}"
                        + (f"; did you mean {hint!r}?" if hint else "")
                    )
                extra[key] = raw
                origins[key] = where
                continue
            try:
                changes[f.name] = f.metadata["parse"](raw)
            except InvalidValue as exc:
                raise ConfigError(f"invalid {key} in {where}: {exc}") from None
            origins[key] = where
        combined = (
            source if self.source == f"{type(self).__name__}()" else f"{self.source} + {source}"
        )
        return dataclasses.replace(  # type: ignore[type-var]
            self,
            **changes,
            extra=MappingProxyType(extra),
            origins=MappingProxyType(origins),
            source=combined,
        )

    def settings(self) -> dict[str, object]:
        """Every known setting by its BookKeeper key (directory lists as lists)."""
        out: dict[str, object] = {}
        for key, f in keyed_fields(type(self)).items():
            value = getattr(self, f.name)
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def unknown_keys(self) -> list[tuple[str, str | None]]:
        """Keys in ``extra`` that are neither a field's nor in ``FOREIGN_KEYS`` (misspelt, or
        of another system), each with the closest known key (None if none is close)."""
        return [
            (key, self.suggestion(key))
            for key in self.extra  # in the order given (file order)
            if key not in self.FOREIGN_KEYS
        ]

    def not_implemented(self) -> list[tuple[str, object, str]]:
        """``(key, value, what pybkx does instead)`` for every ``FOREIGN_KEYS`` key given."""
        return [
            (key, self.extra[key], self.FOREIGN_KEYS[key])
            for key in self.extra
            if key in self.FOREIGN_KEYS
        ]

    def check_keys(self, *, lenient: bool = False) -> list[str]:
        """Refuse misspelt keys: raises ConfigError naming each with the closest known key
        (and where it was set). With ``lenient``, returns those messages instead, for the
        caller to log as warnings."""
        problems = [
            f"unknown key {key} in {self.origin(key)}"
            + (f" (did you mean {hint}?)" if hint else " (not a BookKeeper or pybkx key)")
            for key, hint in self.unknown_keys()
        ]
        if problems and not lenient:
            raise ConfigError(
                "; ".join(problems) + ": fix the key, or start with --lenient to ignore it"
            )
        return problems

    def describe(self) -> list[tuple[str, object, str, str]]:
        """The effective configuration: ``(key, value, origin, note)`` for every setting, then
        for every other key given (with what pybkx does instead of a key it does not
        implement, or that it is unknown)."""
        rows: list[tuple[str, object, str, str]] = []
        for key, value in self.settings().items():
            rows.append((key, value, self.origin(key), ""))
        for key in sorted(self.extra):
            note = self.FOREIGN_KEYS.get(key)
            if note is None:
                hint = self.suggestion(key)
                note = "unknown key, ignored" + (f" (did you mean {hint}?)" if hint else "")
            else:
                note = f"not implemented: {note}"
            rows.append((key, self.extra[key], self.origin(key), note))
        return rows


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())
