"""``LedgerHandleAdv``: a ledger open for writing whose appends name their entry ids
(BookKeeper's ``createLedgerAdv`` / ``LedgerHandleAdv``). The Rust writer keeps pending adds
ordered by id and completes them in id order; this class only checks calls and refuses the
plain ``append``. It never moves entries itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from pybkx import errors
from pybkx._core import Future
from pybkx.client.write_handle import LedgerHandle

__all__ = ["LedgerHandleAdv"]


class LedgerHandleAdv(LedgerHandle):
    """A ledger created by ``BookKeeper.create_ledger_adv``: ``append(entry_id, data)`` with
    ids the caller chooses. Adds may come in any order and with gaps; an add completes once
    Qa bookies hold it **and** every lower id has completed, so the LAC moves contiguously and
    an add whose lower ids never come stays pending (``close`` then waits for it, as
    BookKeeper's does). Thread-safe.
    """

    _ADV = True

    def append(  # type: ignore[override]
        self, entry_id: int, data: bytes | bytearray | memoryview | None = None
    ) -> int:
        """Append ``data`` as entry ``entry_id``; returns the id once Qa bookies hold it and
        every lower id is confirmed. Raises DuplicateEntryIdException (an id at or below the
        LAC, already added, or negative, as BookKeeper's ``LedgerHandleAdv``),
        IllegalOpException (``append(data)`` without an entry id, as BookKeeper refuses it),
        and what ``LedgerHandle.append`` raises."""
        result: int = self.append_async(entry_id, data).result()
        return result

    def append_async(  # type: ignore[override]
        self, entry_id: int, data: bytes | bytearray | memoryview | None = None
    ) -> Future:
        """Start an append of entry ``entry_id``; the future gives the id, or raises as
        ``append`` does. Waits while ``throttle`` appends are pending."""
        if data is None:
            raise errors.IllegalOpException(
                f"ledger {self.ledger_id} is an adv ledger: append(entry_id, data) names each id"
            )
        if self._closing:
            raise errors.LedgerClosedException(f"ledger {self.ledger_id} is closed")
        if not isinstance(entry_id, int) or isinstance(entry_id, bool):
            raise TypeError(f"entry_id must be an int, not {type(entry_id).__name__}")
        return self._writer.append_adv(entry_id, data)

    def append_many(self, payloads: Sequence[bytes | bytearray | memoryview]) -> int:
        """Refused, as BookKeeper's ``LedgerHandleAdv`` refuses an add without an entry id.
        Raises IllegalOpException."""
        raise errors.IllegalOpException(
            f"ledger {self.ledger_id} is an adv ledger: append(entry_id, data) names each id"
        )
