"""The network topology: a tree of /region/rack or /zone/upgradedomain, bookies as leaves.
It must never resolve names or choose bookies."""

# BookKeeper's NetworkTopologyImpl insists that all leaves sit at one depth and drops a bookie
# whose location breaks that rule (BK#2490: a bookie without rack information next to bookies
# with /region/rack locations silently disappears). Here the depth rule is the caller's choice:
# ``levels`` fixes the number of location components, ``min_levels`` only bounds it, and a bad
# location raises InvalidTopologyError instead of being dropped. Not thread-safe: policies hold
# their lock around it.

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEFAULT_RACK",
    "DEFAULT_REGION",
    "DEFAULT_REGION_AND_RACK",
    "DEFAULT_UPGRADE_DOMAIN",
    "DEFAULT_ZONE",
    "DEFAULT_ZONE_AND_UPGRADE_DOMAIN",
    "InvalidTopologyError",
    "NetworkTopology",
    "normalize_location",
    "split_location",
]

DEFAULT_REGION: Final = "/default-region"
DEFAULT_RACK: Final = "/default-rack"
DEFAULT_ZONE: Final = "/default-zone"
DEFAULT_UPGRADE_DOMAIN: Final = "/default-upgradedomain"
DEFAULT_REGION_AND_RACK: Final = DEFAULT_REGION + DEFAULT_RACK
DEFAULT_ZONE_AND_UPGRADE_DOMAIN: Final = DEFAULT_ZONE + DEFAULT_UPGRADE_DOMAIN

SEPARATOR: Final = "/"
INVERSE: Final = "~"
"""A scope starting with ``~`` means every leaf *not* under the comma-separated paths after it."""


class InvalidTopologyError(ValueError):
    """A location that is malformed or has the wrong number of levels for this topology."""


def split_location(location: str) -> tuple[str, ...]:
    """The components of a normalized location: ``"/r1/rack2"`` -> ``("r1", "rack2")``."""
    return tuple(location.split(SEPARATOR)[1:]) if location else ()


def normalize_location(location: str) -> str:
    """``location`` in canonical form: starts with ``/``, no trailing ``/``, no empty or
    whitespace-padded components. Raises InvalidTopologyError for anything else
    (``"rack1"``, ``"/a//b"``, ``"/"``)."""
    text = location.strip()
    if len(text) > 1 and text.endswith(SEPARATOR):
        text = text[:-1]
    if not text.startswith(SEPARATOR) or text == SEPARATOR:
        raise InvalidTopologyError(f"network location {location!r} must look like /a or /a/b")
    parts = text.split(SEPARATOR)[1:]
    for part in parts:
        if not part or part != part.strip() or INVERSE in part or "," in part:
            raise InvalidTopologyError(f"network location {location!r} has an invalid component")
    return text


@dataclass
class _Inner:
    """A location in the tree; ``bookies`` are the leaves directly at this location."""

    children: dict[str, _Inner] = field(default_factory=dict)
    bookies: set[str] = field(default_factory=set)
    count: int = 0  # leaves in this subtree


class NetworkTopology:
    """Bookies placed at locations (``/a/b``), indexed by exact location and by subtree.

    ``levels`` (exact number of location components) or ``min_levels`` (at least) restricts
    which locations are valid. A bookie is at one location at a time: ``add`` of a known bookie
    at another location moves it.
    """

    def __init__(self, levels: int | None = None, min_levels: int = 1) -> None:
        if levels is not None and levels < 1:
            raise ValueError(f"levels must be at least 1, got {levels}")
        if min_levels < 1:
            raise ValueError(f"min_levels must be at least 1, got {min_levels}")
        self.levels = levels
        self.min_levels = levels if levels is not None else min_levels
        self._root = _Inner()
        self._where: dict[str, str] = {}
        self._at: dict[str, set[str]] = {}

    # --- validation

    def validate(self, location: str) -> str:
        """The normalized ``location`` if this topology accepts it, else InvalidTopologyError."""
        normalized = normalize_location(location)
        depth = len(split_location(normalized))
        if self.levels is not None and depth != self.levels:
            raise InvalidTopologyError(
                f"network location {location!r} has {depth} level(s); this topology needs "
                f"exactly {self.levels}"
            )
        if depth < self.min_levels:
            raise InvalidTopologyError(
                f"network location {location!r} has {depth} level(s); this topology needs at "
                f"least {self.min_levels}"
            )
        return normalized

    # --- changes

    def add(self, bookie: str, location: str) -> bool:
        """Place ``bookie`` at ``location`` (moving it if it was elsewhere). Returns True when
        something changed. Raises InvalidTopologyError (the topology is then unchanged)."""
        normalized = self.validate(location)
        old = self._where.get(bookie)
        if old == normalized:
            return False
        if old is not None:
            self._detach(bookie, old)
        node = self._root
        node.count += 1
        for part in split_location(normalized):
            node = node.children.setdefault(part, _Inner())
            node.count += 1
        node.bookies.add(bookie)
        self._where[bookie] = normalized
        self._at.setdefault(normalized, set()).add(bookie)
        return True

    def remove(self, bookie: str) -> bool:
        """Take ``bookie`` out; returns False if it was not in the topology."""
        old = self._where.get(bookie)
        if old is None:
            return False
        self._detach(bookie, old)
        return True

    def move(self, bookie: str, location: str) -> bool:
        """``add`` for a bookie that must already be present. Raises KeyError otherwise."""
        if bookie not in self._where:
            raise KeyError(bookie)
        return self.add(bookie, location)

    def _detach(self, bookie: str, location: str) -> None:
        path = [self._root]
        node = self._root
        for part in split_location(location):
            node = node.children[part]
            path.append(node)
        node.bookies.discard(bookie)
        for inner in path:
            inner.count -= 1
        parts = split_location(location)
        for depth in range(len(parts), 0, -1):  # prune empty subtrees bottom-up
            parent = path[depth - 1]
            if path[depth].count == 0:
                del parent.children[parts[depth - 1]]
        del self._where[bookie]
        at = self._at[location]
        at.discard(bookie)
        if not at:
            del self._at[location]

    # --- queries

    def __contains__(self, bookie: object) -> bool:
        return bookie in self._where

    def __len__(self) -> int:
        return len(self._where)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def location_of(self, bookie: str) -> str | None:
        return self._where.get(bookie)

    def locations(self) -> list[str]:
        """Every location holding at least one bookie (BookKeeper's "racks")."""
        return list(self._at)

    @property
    def num_racks(self) -> int:
        return len(self._at)

    def bookies_at(self, location: str) -> frozenset[str]:
        """The bookies exactly at ``location``."""
        return frozenset(self._at.get(location, ()))

    def domains(self, level: int = 1) -> set[str]:
        """The distinct first ``level`` components of every location, as paths
        (``level=1`` gives the regions or zones: ``{"/r1", "/r2"}``)."""
        out: set[str] = set()
        for location in self._at:
            parts = split_location(location)
            if len(parts) >= level:
                out.add(SEPARATOR + SEPARATOR.join(parts[:level]))
        return out

    def leaves(self, scope: str = "") -> set[str]:
        """The bookies under ``scope``: ``""`` or ``"/"`` for all, ``"/r1"`` for a subtree, or
        ``"~/r1,/r2/a"`` for every bookie outside those subtrees."""
        if scope.startswith(INVERSE):
            excluded: set[str] = set()
            for path in scope[1:].split(","):
                if path.strip():
                    excluded |= self._subtree(path)
            return set(self._where) - excluded
        return self._subtree(scope)

    def count_leaves(self, scope: str = "", exclude: Iterable[str] = ()) -> int:
        """How many bookies ``leaves(scope)`` holds, not counting ``exclude``."""
        return len(self.leaves(scope) - set(exclude))

    def _subtree(self, scope: str) -> set[str]:
        if scope.strip() in ("", SEPARATOR):
            return set(self._where)
        try:
            path = normalize_location(scope)
        except InvalidTopologyError:
            return set()
        node = self._root
        for part in split_location(path):
            child = node.children.get(part)
            if child is None:
                return set()
            node = child
        out: set[str] = set()
        stack = [node]
        while stack:
            inner = stack.pop()
            out |= inner.bookies
            stack.extend(inner.children.values())
        return out

    def __repr__(self) -> str:
        return f"NetworkTopology({len(self._where)} bookies in {len(self._at)} locations)"
