"""Asking a ledger's last ensemble for its last add confirmed (LAC): the READ of entry -1 to
every bookie with BookKeeper's coverage rule, V3's long-poll read, and V2's polling with a
growing pause. It never holds a handle's state; the handle keeps the LAC it learns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from pybkx import errors
from pybkx._core import FLAG_DO_FENCING, Future, VerifiedEntry, master_key
from pybkx.client.context import ClientContext
from pybkx.meta import LedgerMetadata

__all__ = ["lac_from_bookies", "long_poll_past", "poll_past"]

#: How a V2 client waiting for the LAC reads it again: first after this, then twice as late
#: each time, up to the maximum (V2 has no long-poll read).
_POLL_FIRST_S = 0.01
_POLL_MAX_S = 0.2


Verify = Callable[[bytes], VerifiedEntry]
"""Checks a stored entry's digest; raises DigestMatchException."""


def _covered(ensemble_size: int, write_quorum: int, ack_quorum: int, known: Sequence[bool]) -> bool:
    """BookKeeper's coverage rule: in every write set fewer than Qa bookies are unknown."""
    for start in range(ensemble_size):
        unknown = sum(1 for i in range(write_quorum) if not known[(start + i) % ensemble_size])
        if unknown >= ack_quorum:
            return False
    return True


def lac_from_bookies(
    bk: ClientContext, ledger_id: int, md: LedgerMetadata, verify: Verify, *, fence: bool
) -> tuple[int, int]:
    """(LAC, length at the LAC) as the last ensemble's bookies report it (READ of entry -1,
    fencing if asked), once enough answered by the coverage rule. Raises ReadException (too few
    answers), UnauthorizedAccessException."""
    bookies = [bk.address_of(b) for b in md.last_ensemble]
    key = master_key(md.password)
    flags = FLAG_DO_FENCING if fence else 0
    futures = [bk.bookies.read(b, ledger_id, -1, flags, key if fence else None) for b in bookies]
    known = [False] * len(bookies)
    best = (-1, 0)
    last_error: Exception | None = None
    for i, future in enumerate(futures):
        try:
            entry = verify(future.result())
            known[i] = True
            best = max(best, (entry.last_add_confirmed, entry.ledger_length))
        except (errors.NoSuchEntryException, errors.NoSuchLedgerExistsException):
            known[i] = True
        except errors.UnauthorizedAccessException:
            raise
        except errors.BKException as exc:
            last_error = exc
    if not _covered(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size, known):
        raise errors.ReadException(
            f"ledger {ledger_id}: too few bookies answered the LAC read"
            + (f" (last error: {last_error})" if last_error else "")
        )
    return best


def long_poll_past(
    bk: ClientContext, ledger_id: int, md: LedgerMetadata, previous: int, timeout: float
) -> bool:
    """Long-poll reads (V3, BookKeeper's ``readLacLongPoll``) to every bookie of the last
    ensemble; True once one reports a LAC past ``previous`` within ``timeout`` seconds."""
    passed = threading.Event()

    def answered(future: Future) -> None:
        if future.exception() is None and future.result().lac > previous:
            passed.set()

    ms = int(timeout * 1000)
    for bookie in md.last_ensemble:
        bk.bookies.long_poll_lac(bk.address_of(bookie), ledger_id, previous, ms).add_done_callback(
            answered
        )
    return passed.wait(timeout)


def poll_past(
    read_lac: Callable[[], int], closed: Callable[[], bool], previous: int, deadline: float
) -> int:
    """Reads the LAC with ``read_lac`` (V2: no long poll) until it passes ``previous``, the
    ledger is ``closed`` or ``deadline`` (``time.monotonic``) passes, pausing 10 ms, then twice
    as long each time up to 200 ms; returns the LAC read last."""
    pause = _POLL_FIRST_S
    while True:
        lac = read_lac()
        remaining = deadline - time.monotonic()
        if lac > previous or remaining <= 0 or closed():
            return lac
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, _POLL_MAX_S)
