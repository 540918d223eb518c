"""DNS-to-switch mappings: names to locations (table, file, script), cached, default location.
They must never place bookies or touch a topology; they only answer and notify."""

# BookKeeper resolves a bookie's host name through ``reppDnsResolverClass`` (ScriptBasedMapping by
# default, cached) and a decorator that turns failures into the default rack. Two user reports
# shape the choices here: rack tables keyed by ``host:port`` that the resolver never looked up
# (pulsar#20918), and mappings whose changes only applied after a restart (BK#2490). So a
# static table matches the full bookie id first and then its host, and mappings tell listeners
# (the policies) which names changed. Policies pass bookie ids (``host:port``) to ``resolve``.

from __future__ import annotations

import abc
import importlib
import logging
import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from pybkx.config import ConfigError
from pybkx.placement.conf import conf_int, conf_str
from pybkx.placement.stats import PlacementStats
from pybkx.placement.topology import InvalidTopologyError, normalize_location

__all__ = [
    "SCRIPT_MAPPING_NAMES",
    "STATIC_MAPPING_NAMES",
    "CachedDNSToSwitchMapping",
    "DNSToSwitchMapping",
    "DefaultingResolver",
    "RackChangeListener",
    "ScriptBasedMapping",
    "StaticDNSToSwitchMapping",
    "host_of",
    "resolver_from_conf",
]

logger = logging.getLogger(__name__)

RackChangeListener = Callable[[list[str]], None]
"""Called with the names whose location may have changed."""

DEFAULT_SCRIPT_NUMBER_ARGS: Final = 100
DEFAULT_SCRIPT_TIMEOUT_S: Final = 10.0
MAX_WARNED_NAMES: Final = 10_000
"""Bound on the names a DefaultingResolver remembers having warned about."""


def host_of(name: str) -> str:
    """The host part of a bookie id: ``"10.0.0.1:3181"`` -> ``"10.0.0.1"``,
    ``"[::1]:3181"`` -> ``"::1"``; a name without a port is returned as is."""
    if name.startswith("["):
        end = name.find("]")
        if end > 0:
            return name[1:end]
    head, sep, tail = name.rpartition(":")
    if sep and tail.isdigit() and head and ":" not in head:
        return head
    return name


class DNSToSwitchMapping(abc.ABC):
    """Resolves names (bookie ids or host names) to network locations such as ``/r1/rack3``."""

    def __init__(self) -> None:
        self._listeners: list[RackChangeListener] = []
        self._listeners_lock = threading.Lock()

    @abc.abstractmethod
    def resolve(self, names: Sequence[str]) -> list[str | None]:
        """One location per name, in order; None where a name cannot be resolved."""

    @abc.abstractmethod
    def reload_cached_mappings(self) -> None:
        """Forget cached answers (and re-read backing files); listeners hear of changes."""

    def use_host_name(self) -> bool:
        """Whether names are host names rather than IP addresses (BookKeeper's flag)."""
        return True

    def register_rack_change_listener(self, listener: RackChangeListener) -> None:
        with self._listeners_lock:
            self._listeners.append(listener)

    def unregister_rack_change_listener(self, listener: RackChangeListener) -> None:
        with self._listeners_lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _notify(self, names: list[str]) -> None:
        if not names:
            return
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(names)


class StaticDNSToSwitchMapping(DNSToSwitchMapping):
    """A table of name -> location. A bookie id ``host:port`` matches its own entry first, then
    the entry of its host. Changes (``set``, ``remove``, ``update``, ``reload_cached_mappings``
    of a file-backed table) are pushed to rack-change listeners at once.

    Raises InvalidTopologyError for a location that is not ``/a[/b...]``.
    """

    def __init__(self, mapping: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._table: dict[str, str] = {}
        self._path: Path | None = None
        for name, location in (mapping or {}).items():
            self._table[name.strip()] = normalize_location(location)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> StaticDNSToSwitchMapping:
        """A table read from ``path``: one ``name location`` pair per line (the format of
        Hadoop's TableMapping), ``#`` starts a comment. Raises ConfigError."""
        mapping = cls(_read_table(Path(path)))
        mapping._path = Path(path)
        return mapping

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        with self._lock:
            return [self._table.get(name, self._table.get(host_of(name))) for name in names]

    def set(self, name: str, location: str) -> None:
        """Map ``name`` to ``location``. Raises InvalidTopologyError."""
        normalized = normalize_location(location)
        with self._lock:
            changed = self._table.get(name) != normalized
            self._table[name] = normalized
        if changed:
            self._notify([name])

    def remove(self, name: str) -> None:
        """Forget ``name`` (it then resolves to the default location)."""
        with self._lock:
            changed = self._table.pop(name, None) is not None
        if changed:
            self._notify([name])

    def update(self, mapping: Mapping[str, str]) -> None:
        """Set many entries at once (one notification). Raises InvalidTopologyError."""
        normalized = {name: normalize_location(loc) for name, loc in mapping.items()}
        with self._lock:
            changed = [n for n, loc in normalized.items() if self._table.get(n) != loc]
            self._table.update(normalized)
        self._notify(changed)

    def reload_cached_mappings(self) -> None:
        """Re-read the backing file, if any. Raises ConfigError when it became unreadable."""
        if self._path is None:
            return
        fresh = _read_table(self._path)
        with self._lock:
            names = set(self._table) | set(fresh)
            changed = [n for n in names if self._table.get(n) != fresh.get(n)]
            self._table = fresh
        self._notify(changed)

    def __repr__(self) -> str:
        source = f" from {self._path}" if self._path else ""
        return f"StaticDNSToSwitchMapping({len(self._table)} entries{source})"


def _read_table(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read network topology table {path}: {exc}") from None
    table: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ConfigError(f"{path}:{number}: expected 'name location', got {raw.strip()!r}")
        try:
            table[parts[0]] = normalize_location(parts[1])
        except InvalidTopologyError as exc:
            raise ConfigError(f"{path}:{number}: {exc}") from None
    return table


class CachedDNSToSwitchMapping(DNSToSwitchMapping):
    """Remembers the answers of another mapping; names it could not resolve are asked again
    next time. Unresolved names of one call go to the wrapped mapping in a single call."""

    def __init__(self, raw: DNSToSwitchMapping) -> None:
        super().__init__()
        self.raw = raw
        self._lock = threading.Lock()
        self._cache: dict[str, str] = {}

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        with self._lock:
            missing = [n for n in dict.fromkeys(names) if n not in self._cache]
        if missing:
            answers = self.raw.resolve(missing)
            if len(answers) == len(missing):
                with self._lock:
                    for name, location in zip(missing, answers, strict=True):
                        if location is not None:
                            self._cache[name] = location
        with self._lock:
            return [self._cache.get(name) for name in names]

    def reload_cached_mappings(self) -> None:
        with self._lock:
            names = list(self._cache)
            self._cache.clear()
        self.raw.reload_cached_mappings()
        self._notify(names)

    def use_host_name(self) -> bool:
        return self.raw.use_host_name()


class _RawScriptMapping(DNSToSwitchMapping):
    def __init__(self, script: str, max_args: int, timeout_s: float) -> None:
        super().__init__()
        self.script = script
        self.max_args = max_args
        self.timeout_s = timeout_s

    def reload_cached_mappings(self) -> None:
        """Nothing to forget: every call runs the script (the cache sits in front of it)."""
        return None

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        out: list[str | None] = []
        for start in range(0, len(names), self.max_args):
            batch = list(names[start : start + self.max_args])
            out.extend(self._run(batch))
        return out

    def _run(self, batch: list[str]) -> list[str | None]:
        argv = [self.script, *(host_of(name) for name in batch)]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            logger.warning("network topology script %s failed: %s", self.script, exc)
            return [None] * len(batch)
        if done.returncode != 0:
            logger.warning(
                "network topology script %s exited %d: %s",
                self.script,
                done.returncode,
                done.stderr.strip()[-500:],
            )
            return [None] * len(batch)
        tokens = done.stdout.split()
        if len(tokens) != len(batch):
            logger.warning(
                "network topology script %s returned %d locations for %d names",
                self.script,
                len(tokens),
                len(batch),
            )
            return [None] * len(batch)
        answers: list[str | None] = []
        for name, token in zip(batch, tokens, strict=True):
            try:
                answers.append(normalize_location(token))
            except InvalidTopologyError as exc:
                logger.warning("network topology script %s, %s: %s", self.script, name, exc)
                answers.append(None)
        return answers


class ScriptBasedMapping(CachedDNSToSwitchMapping):
    """Runs ``script`` with up to ``max_args`` host names as arguments; its standard output is
    one whitespace-separated location per argument (BookKeeper's ScriptBasedMapping). Answers
    are cached; a failing run (non-zero exit, timeout after ``timeout_s``, wrong count) leaves
    those names unresolved until the next call.

    Raises ConfigError when ``script`` is not an executable file or ``max_args`` < 1.
    """

    def __init__(
        self,
        script: str | os.PathLike[str],
        max_args: int = DEFAULT_SCRIPT_NUMBER_ARGS,
        timeout_s: float = DEFAULT_SCRIPT_TIMEOUT_S,
    ) -> None:
        path = os.fspath(script)
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise ConfigError(f"network topology script {path} is not an executable file")
        if max_args < 1:
            raise ConfigError(f"invalid networkTopologyScriptNumberArgs: {max_args} < 1")
        super().__init__(_RawScriptMapping(path, max_args, timeout_s))

    def __repr__(self) -> str:
        raw = self.raw
        assert isinstance(raw, _RawScriptMapping)
        return f"ScriptBasedMapping({raw.script}, max_args={raw.max_args})"


class DefaultingResolver:
    """Wraps a mapping so every name gets a location: unresolved names, a failing mapping or a
    wrong-length answer give ``default_location``. Each such name is counted in
    ``failed_to_resolve_network_location_count`` and logged once."""

    def __init__(
        self,
        mapping: DNSToSwitchMapping | None,
        default_location: str,
        stats: PlacementStats | None = None,
    ) -> None:
        self.mapping = mapping
        self.default_location = default_location
        self.stats = stats if stats is not None else PlacementStats()
        self._warned: set[str] = set()

    def resolve(self, names: Sequence[str]) -> list[str]:
        if not names:
            return []
        answers: list[str | None]
        if self.mapping is None:
            answers = [None] * len(names)
        else:
            try:
                answers = self.mapping.resolve(names)
            except Exception as exc:  # a custom mapping must not take placement down
                logger.warning("network location resolver %r failed: %s", self.mapping, exc)
                answers = [None] * len(names)
            if len(answers) != len(names):
                logger.warning(
                    "network location resolver %r answered %d names of %d",
                    self.mapping,
                    len(answers),
                    len(names),
                )
                answers = [None] * len(names)
        out: list[str] = []
        for name, answer in zip(names, answers, strict=True):
            if answer is None:
                if self.mapping is not None:
                    self.stats.inc("failed_to_resolve_network_location_count")
                    self._warn(name)
                out.append(self.default_location)
            else:
                out.append(answer)
        return out

    def resolve_one(self, name: str) -> str:
        return self.resolve([name])[0]

    def _warn(self, name: str) -> None:
        if name in self._warned:
            return
        if len(self._warned) >= MAX_WARNED_NAMES:
            self._warned.clear()
        self._warned.add(name)
        logger.warning(
            "cannot resolve the network location of %s; using %s", name, self.default_location
        )


SCRIPT_MAPPING_NAMES: Final = frozenset(
    {"org.apache.bookkeeper.net.ScriptBasedMapping", "ScriptBasedMapping", "script"}
)
STATIC_MAPPING_NAMES: Final = frozenset(
    {
        "pybkx.placement.dns.StaticDNSToSwitchMapping",
        "StaticDNSToSwitchMapping",
        "org.apache.hadoop.net.TableMapping",
        "TableMapping",
        "static",
        "table",
    }
)


def resolver_from_conf(conf: Mapping[str, object]) -> DNSToSwitchMapping | None:
    """The mapping ``reppDnsResolverClass`` names (default: the script mapping).

    * script: ``networkTopologyScriptFileName`` (None is returned when it is unset, as
      BookKeeper then has no usable resolver), ``networkTopologyScriptNumberArgs`` (100);
    * static table: ``networkTopologyTableFileName`` (pybkx's key; Hadoop's file format);
    * a Python class by dotted name, subclassing DNSToSwitchMapping; constructed without
      arguments, then given ``conf`` through its ``set_conf`` method if it has one.

    Raises ConfigError for unknown names or bad settings.
    """
    name = conf_str(conf, "reppDnsResolverClass", "org.apache.bookkeeper.net.ScriptBasedMapping")
    assert name is not None
    if name in SCRIPT_MAPPING_NAMES:
        script = conf_str(conf, "networkTopologyScriptFileName")
        if script is None:
            return None
        max_args = conf_int(conf, "networkTopologyScriptNumberArgs", DEFAULT_SCRIPT_NUMBER_ARGS)
        return ScriptBasedMapping(script, max_args=max_args)
    if name in STATIC_MAPPING_NAMES:
        table = conf_str(conf, "networkTopologyTableFileName")
        if table is None:
            raise ConfigError(f"reppDnsResolverClass={name} needs networkTopologyTableFileName")
        return StaticDNSToSwitchMapping.from_file(table)
    return _import_mapping(name, conf)


def _import_mapping(name: str, conf: Mapping[str, object]) -> DNSToSwitchMapping:
    module_name, _, class_name = name.replace(":", ".").rpartition(".")
    if not module_name:
        raise ConfigError(f"unknown reppDnsResolverClass {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise ConfigError(
            f"reppDnsResolverClass {name!r} is not available in pybkx (not a Python class)"
        ) from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, DNSToSwitchMapping)):
        raise ConfigError(f"reppDnsResolverClass {name!r} is not a DNSToSwitchMapping")
    mapping = cls()
    set_conf = getattr(mapping, "set_conf", None)
    if callable(set_conf):
        set_conf(conf)
    return mapping
