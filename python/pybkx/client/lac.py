"""Asking a ledger's last ensemble for its last add confirmed (LAC): the READ of entry -1 to
every bookie with BookKeeper's coverage rule, V3's long-poll read (alone, or with the entry
after it, speculatively to the next replica: ``ReadLastConfirmedAndEntryOp``), and V2's polling
with a growing pause. It never holds a handle's state; the handle keeps the LAC it learns.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pybkx import errors
from pybkx._core import FLAG_DO_FENCING, Future, VerifiedEntry, master_key
from pybkx.client.context import ClientContext
from pybkx.meta import LedgerMetadata

__all__ = [
    "LacSpeculation",
    "lac_from_bookies",
    "long_poll_lac_and_entry",
    "long_poll_past",
    "poll_past",
]

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


@dataclass(frozen=True)
class LacSpeculation:
    """When a long-poll read of the LAC and an entry also goes to the next replica: after
    ``first_s`` without an answer, then each wait ``multiplier`` times the last, up to ``max_s``
    (``firstSpeculativeReadLACTimeout``, ``maxSpeculativeReadLACTimeout``,
    ``speculativeReadLACTimeoutBackoffMultiplier``). ``first_s == 0``: never."""

    first_s: float
    max_s: float
    multiplier: float


class _Poll:
    """The long-poll reads of one ``long_poll_lac_and_entry``: the replicas asked, one more each
    time the speculative wait passes without an answer, and their answers as they arrive."""

    def __init__(
        self,
        bk: ClientContext,
        ledger_id: int,
        replicas: list[str],
        previous: int,
        wait_s: float,
        speculation: LacSpeculation | None,
    ) -> None:
        self.bk, self.ledger_id, self.replicas = bk, ledger_id, replicas
        self.previous, self.wait_ms = previous, int(wait_s * 1000)
        # At most one answer per replica: bounded by the write quorum.
        self.answers: queue.SimpleQueue[Future] = queue.SimpleQueue()
        self.sent = 0
        self.outstanding = 0
        self.speculation = speculation
        self.speculative_wait = speculation.first_s if speculation is not None else 0.0
        self.speculate_at: float | None = None
        self.send_next()

    def send_next(self) -> bool:
        """Asks the next replica (and arms the speculative wait); False when every one was."""
        if self.sent >= len(self.replicas):
            return False
        bookie = self.replicas[self.sent]
        self.sent += 1
        self.outstanding += 1
        future = self.bk.bookies.long_poll_lac(bookie, self.ledger_id, self.previous, self.wait_ms)
        future.add_done_callback(self.answers.put)
        more = self.sent < len(self.replicas)
        self.speculate_at = time.monotonic() + self.speculative_wait if more else None
        return True

    def next_answer(self, deadline: float) -> Future | None:
        """The next answer before ``deadline`` (``time.monotonic``), or None; asks the next
        replica each time the speculative wait passes first."""
        while (now := time.monotonic()) < deadline:
            at = self.speculate_at if self.speculation is not None else None
            try:
                answer = self.answers.get(
                    timeout=(deadline if at is None else min(at, deadline)) - now
                )
            except queue.Empty:
                if self.speculation is not None and at is not None and time.monotonic() >= at:
                    spec = self.speculation
                    self.speculative_wait = min(spec.max_s, self.speculative_wait * spec.multiplier)
                    self.send_next()
                continue
            self.outstanding -= 1
            return answer
        return None


def long_poll_lac_and_entry(
    bk: ClientContext,
    ledger_id: int,
    md: LedgerMetadata,
    entry_id: int,
    timeout: float,
    *,
    known_lac: int,
    parallel: bool,
    speculation: LacSpeculation,
    verify: Callable[[bytes, int], VerifiedEntry],
) -> tuple[int, VerifiedEntry | None]:
    """BookKeeper's ``ReadLastConfirmedAndEntryOp`` over V3: long-poll reads (LAC past
    ``entry_id - 1``, entry piggy-backed) to the replicas of ``entry_id`` in the last ensemble,
    one after the other with speculative requests (``speculation``) or all at once
    (``parallel``). Returns (LAC, the entry or None) at the first answer that carries the entry
    or a LAC at or past it, once Qw - Qa + 1 replicas answered with neither, or when
    ``timeout`` plus the read timeout ran out. Raises UnauthorizedAccessException, ReadException
    (every replica failed), DigestMatchException (a corrupt copy)."""
    ensemble = md.last_ensemble
    replicas = [bk.address_of(ensemble[i]) for i in md.write_set(entry_id)]
    speculating = speculation.first_s > 0 and not parallel
    poll = _Poll(
        bk, ledger_id, replicas, entry_id - 1, timeout, speculation if speculating else None
    )
    while parallel and poll.send_next():
        continue
    read_timeout = bk.config.read_entry_timeout_sec or bk.config.read_timeout_sec
    deadline = time.monotonic() + timeout + read_timeout
    empty_allowed = md.write_quorum_size - md.ack_quorum_size + 1
    lac, empty = known_lac, 0
    last_error: Exception | None = None
    while (future := poll.next_answer(deadline)) is not None:
        try:
            answer = future.result()
        except errors.UnauthorizedAccessException:
            raise
        except errors.BKException as exc:
            last_error = exc
        else:
            lac = max(lac, answer.lac)
            if answer.next_entry is not None:
                return lac, verify(answer.next_entry, entry_id)
            empty += 1
            if lac >= entry_id or empty >= empty_allowed:
                return lac, None
        # Nothing outstanding after a failure or an empty answer: the next replica.
        if poll.outstanding == 0 and not poll.send_next():
            break
    if last_error is not None and empty == 0:
        raise errors.ReadException(
            f"ledger {ledger_id}: no replica answered the long-poll read of entry {entry_id} "
            f"(last error: {last_error})"
        )
    return lac, None
