"""Ledger metadata as Apache BookKeeper defines it: quorums, ensembles per segment, state.
Pure values and their rules; it never talks to a metadata store (serde.py does the bytes)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pybkx import errors


class LedgerState(enum.IntEnum):
    """``LedgerMetadataFormat.State`` values."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


class DigestType(enum.IntEnum):
    """``LedgerMetadataFormat.DigestType`` values; names as the client API spells them."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4

    @classmethod
    def parse(cls, name: str | DigestType) -> DigestType:
        """From a name ("CRC32C", "MAC" as an alias of HMAC, any case). Raises ValueError."""
        if isinstance(name, DigestType):
            return name
        key = name.strip().upper()
        if key == "MAC":
            key = "HMAC"
        try:
            return cls[key]
        except KeyError:
            raise ValueError(
                f"unknown digest type {name!r}; use CRC32, CRC32C, HMAC (MAC) or DUMMY"
            ) from None


@dataclass(frozen=True)
class LedgerMetadata:
    """What the metadata store holds for one ledger.

    ``ensembles`` maps the first entry id of each segment to its bookies (``host:port`` ids in
    ensemble index order), ascending. ``ctime`` is milliseconds since the epoch, or None when
    not stored (BookKeeper then uses the znode's creation time).
    """

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ensembles: Mapping[int, tuple[str, ...]]
    digest_type: DigestType = DigestType.CRC32C
    password: bytes = b""
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    ctime: int | None = None
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict)
    c_token: int = 0
    metadata_format_version: int = 3

    def __post_init__(self) -> None:
        ordered = dict(sorted((int(k), tuple(v)) for k, v in self.ensembles.items()))
        object.__setattr__(self, "ensembles", ordered)
        object.__setattr__(self, "custom_metadata", dict(self.custom_metadata))
        self.validate()

    def validate(self) -> None:
        """Raises IncorrectParameterException unless E >= Qw >= Qa >= 1 and every ensemble has
        E distinct bookies, the first segment starting at entry 0."""
        e, qw, qa = self.ensemble_size, self.write_quorum_size, self.ack_quorum_size
        if not (e >= qw >= qa >= 1):
            raise errors.IncorrectParameterException(
                f"need ensemble >= write quorum >= ack quorum >= 1, got {e}/{qw}/{qa}"
            )
        if not self.ensembles:
            raise errors.IncorrectParameterException("a ledger needs at least one ensemble")
        if next(iter(self.ensembles)) != 0:
            raise errors.IncorrectParameterException("the first ensemble must start at entry 0")
        for first, bookies in self.ensembles.items():
            if len(bookies) != e or len(set(bookies)) != e:
                raise errors.IncorrectParameterException(
                    f"ensemble at entry {first} must hold {e} distinct bookies: {list(bookies)}"
                )

    @property
    def is_closed(self) -> bool:
        return self.state == LedgerState.CLOSED

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble of the segment holding ``entry_id``."""
        chosen: tuple[str, ...] = ()
        for first, bookies in self.ensembles.items():
            if first > entry_id:
                break
            chosen = bookies
        return chosen

    def segment_start(self, entry_id: int) -> int:
        """First entry id of the segment holding ``entry_id``."""
        start = 0
        for first in self.ensembles:
            if first > entry_id:
                break
            start = first
        return start

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[self.last_segment_start]

    @property
    def last_segment_start(self) -> int:
        return max(self.ensembles)

    def write_set(self, entry_id: int) -> list[int]:
        """Ensemble indexes that store ``entry_id`` (round-robin striping, as BookKeeper)."""
        return [(entry_id + i) % self.ensemble_size for i in range(self.write_quorum_size)]

    def replace(self, **changes: object) -> LedgerMetadata:
        """A copy with ``changes`` applied (validated)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_ensemble(self, first_entry_id: int, bookies: Sequence[str]) -> LedgerMetadata:
        """A copy whose segment from ``first_entry_id`` is ``bookies``: replaces the last segment
        if it starts there, else appends one (BookKeeper's ensemble-change rule)."""
        if first_entry_id < self.last_segment_start:
            raise errors.IncorrectParameterException(
                f"a new ensemble cannot start at {first_entry_id}, before the last segment "
                f"({self.last_segment_start})"
            )
        ensembles = dict(self.ensembles)
        ensembles[first_entry_id] = tuple(bookies)
        return self.replace(ensembles=ensembles)

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        return self.replace(state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)
