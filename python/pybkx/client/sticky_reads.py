"""Sticky reads (BookKeeper's ``stickyReadSEnabled``): which bookie of a ledger's ensemble one
read handle sends all its reads to first, and when it moves to another. It chooses a bookie
index; it never sends a read (the handle's read plan does, in that order).

As in BookKeeper's ``LedgerHandle``, only ledgers with E == Qw are read this way (every bookie
holds every entry), the first index comes from the placement policy's
``get_sticky_read_bookie_index`` (random) and, after a failure, the next one it gives. pybkx
also passes over bookies that are quarantined or not registered when it chooses, and moves
when the sticky bookie is quarantined. A failure is any failed request to the bookie the
client's connections counted since the index was chosen (BookKeeper counts the handle's own
read errors; pybkx's count is the client's, so an add or another handle's read that failed on
that bookie moves it too).
"""

from __future__ import annotations

import logging

from pybkx.client.context import ClientContext
from pybkx.meta import LedgerMetadata

__all__ = ["StickyBookie"]

logger = logging.getLogger(__name__)


class StickyBookie:
    """The sticky bookie index of one read handle (None when sticky reads do not apply)."""

    def __init__(self, bk: ClientContext, ledger_id: int) -> None:
        self._bk = bk
        self._ledger_id = ledger_id
        self._index: int | None = None
        # The failure count of the bookies at the index when it was chosen, and for which
        # metadata (an ensemble change puts other bookies at the index).
        self._seen = 0
        self._seen_for: LedgerMetadata | None = None

    def index(self, md: LedgerMetadata) -> int | None:
        """The ensemble index reads go to first now, moved on when its bookie failed since
        it was chosen or is quarantined; None when sticky reads are off or E > Qw."""
        if not (self._bk.config.sticky_reads_enabled and md.ensemble_size == md.write_quorum_size):
            return None
        current = self._index
        if current is None:
            self._choose(md, None, "first read")
        elif md is not self._seen_for:
            self._seen, self._seen_for = self._failures(md, current), md
        elif self._failures(md, current) > self._seen:
            self._choose(md, current, "it failed")
        elif self._bk.health.is_quarantined(md.last_ensemble[current]):
            self._choose(md, current, "it is quarantined")
        return self._index

    @staticmethod
    def orders(md: LedgerMetadata, index: int) -> list[list[list[int]]]:
        """Read orders (``ReadPlan``'s ``orders``) that try ``index`` first for every entry,
        then the next indexes: every bookie holds every entry, since E == Qw."""
        size = md.ensemble_size
        order = [(index + k) % size for k in range(size)]
        return [[order] * size for _ in md.ensembles]

    def _failures(self, md: LedgerMetadata, index: int) -> int:
        """Failed requests so far to the bookies at ``index`` in any segment."""
        addresses = {self._bk.address_of(bookies[index]) for bookies in md.ensembles.values()}
        return sum(self._bk.bookies.failure_count(a) for a in addresses)

    def _usable(self, md: LedgerMetadata, index: int) -> bool:
        bookie = md.last_ensemble[index]
        return bookie in self._bk.registered_bookies and not self._bk.health.is_quarantined(bookie)

    def _choose(self, md: LedgerMetadata, current: int | None, why: str) -> None:
        """The policy's next index after ``current``, passing over unusable bookies (at most
        once round the ensemble; all unusable: the policy's first choice)."""
        placement = self._bk.placement
        first = placement.get_sticky_read_bookie_index(md, current)
        index = first
        for _ in range(md.ensemble_size):
            if index != current and self._usable(md, index):
                break
            index = placement.get_sticky_read_bookie_index(md, index)
        else:
            index = first
        self._index = index
        self._seen, self._seen_for = self._failures(md, index), md
        if current is not None:
            logger.info(
                "ledger %d: sticky reads move from bookie %s to %s (%s)",
                self._ledger_id,
                md.last_ensemble[current],
                md.last_ensemble[index],
                why,
            )
