"""Which parts of a ledger a set of lost bookies held: its fragments (a segment's entries with
the ensemble indexes that were on a lost bookie). Pure values from ledger metadata; it never
asks a bookie."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from pybkx.meta import LedgerMetadata

__all__ = ["Fragment", "fragments_on"]


@dataclass(frozen=True)
class Fragment:
    """Entries ``first..last`` of a ledger's segment that starts at ``first`` (``last`` may be
    ``first - 1``: an empty segment, whose ensemble still names the lost bookies), written to
    ``ensemble``; ``lost`` are the ensemble indexes whose bookie is gone."""

    ledger_id: int
    first: int
    last: int
    ensemble: tuple[str, ...]
    lost: tuple[int, ...]

    @property
    def entries(self) -> int:
        return max(0, self.last - self.first + 1)


def fragments_on(
    ledger_id: int, metadata: LedgerMetadata, lost: Collection[str], *, open_end: bool = False
) -> list[Fragment]:
    """The fragments of a closed ledger whose ensemble names a bookie of ``lost``, in entry
    order. The end of an open ledger's last segment is not known (recover the ledger first):
    raises ValueError for one, unless ``open_end`` (planning only), which gives that fragment
    no entries."""
    if not metadata.is_closed and not open_end:
        raise ValueError(f"ledger {ledger_id} is not closed: its last fragment has no end")
    starts = list(metadata.ensembles)
    found: list[Fragment] = []
    for n, (first, ensemble) in enumerate(metadata.ensembles.items()):
        gone = tuple(i for i, bookie in enumerate(ensemble) if bookie in lost)
        if not gone:
            continue
        if n + 1 < len(starts):
            last = starts[n + 1] - 1
        else:
            last = metadata.last_entry_id if metadata.is_closed else first - 1
        found.append(Fragment(ledger_id, first, max(last, first - 1), ensemble, gone))
    return found
