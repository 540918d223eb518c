"""Reading a ledger's explicit LAC: READ_LAC (V3) to every bookie of the last ensemble, each
answer giving the explicit LAC a writer flushed (WRITE_LAC) and the bookie's last entry, whose
piggy-backed LAC also counts; the highest wins once BookKeeper's coverage rule holds
(``PendingReadLacOp``). It never holds a handle's state; the handle keeps the LAC it learns.
"""

from __future__ import annotations

from collections.abc import Callable

from pybkx import errors
from pybkx._core import DigestManager, Future, VerifiedEntry
from pybkx.client.context import ClientContext
from pybkx.client.lac import _covered as covered
from pybkx.meta import LedgerMetadata

__all__ = ["explicit_lac_from_bookies"]


def _answer(
    future: Future, digest: DigestManager, verify: Callable[[bytes], VerifiedEntry]
) -> tuple[int, int | None]:
    """(highest LAC, ledger length at the bookie's last entry or None) of one READ_LAC
    answer. Raises its error (DigestMatchException for a corrupt body)."""
    result = future.result()
    lac = -1
    length: int | None = None
    if result.lac_body:
        lac = max(lac, digest.verify_lac(result.lac_body))
    if result.last_entry:
        entry = verify(result.last_entry)
        lac = max(lac, entry.last_add_confirmed)
        length = entry.ledger_length
    return lac, length


def explicit_lac_from_bookies(
    bk: ClientContext,
    ledger_id: int,
    md: LedgerMetadata,
    verify: Callable[[bytes], VerifiedEntry],
) -> tuple[int, int | None]:
    """(LAC, a ledger length the bookies reported or None) from READ_LAC to the last
    ensemble, as BookKeeper's ``readExplicitLastConfirmed``: the highest of the explicit LACs
    and of the LACs the last entries carry, once enough bookies answered by the coverage rule
    (a bookie that has no such ledger or entry counts as an answer).

    Raises IncorrectParameterException (a V2 client: READ_LAC is a V3 request), ReadException
    (too few answers), UnauthorizedAccessException."""
    if bk.config.use_v2_wire_protocol:
        raise errors.IncorrectParameterException(
            "READ_LAC is a V3 request and this client speaks V2 (useV2WireProtocol=true)"
        )
    digest = DigestManager(ledger_id, md.password, md.digest_type.name)
    futures = [bk.bookies.read_lac(bk.address_of(b), ledger_id) for b in md.last_ensemble]
    known = [False] * len(futures)
    best_lac, best_length = -1, None
    last_error: Exception | None = None
    for i, future in enumerate(futures):
        try:
            lac, length = _answer(future, digest, verify)
        except (errors.NoSuchEntryException, errors.NoSuchLedgerExistsException):
            known[i] = True
            continue
        except errors.UnauthorizedAccessException:
            raise
        except errors.BKException as exc:
            last_error = exc
            continue
        known[i] = True
        best_lac = max(best_lac, lac)
        if length is not None:
            best_length = length if best_length is None else max(best_length, length)
    if not covered(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size, known):
        raise errors.ReadException(
            f"ledger {ledger_id}: too few bookies answered READ_LAC"
            + (f" (last error: {last_error})" if last_error else "")
        )
    return best_lac, best_length
