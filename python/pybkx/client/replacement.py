"""Choosing bookies to replace failed ones: the placement policy's choice for each failed index
of a ledger's last ensemble (quarantined bookies only when no other will do), or, when the
policy has none, the failed bookie itself once it is registered again (it restarted with its
data). Used by writers and by ledger recovery alike. It decides; it never writes metadata."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from pybkx import errors
from pybkx.client.context import ClientContext
from pybkx.meta import LedgerMetadata

__all__ = ["replacement_ensemble"]

logger = logging.getLogger(__name__)

#: How often the choice is tried again while waiting for a candidate bookie.
_RETRY_S = 0.2


def replacement_ensemble(
    bk: ClientContext,
    ledger_id: int,
    metadata: LedgerMetadata,
    failed: Sequence[int],
    reasons: Sequence[str],
    no_return: frozenset[int] = frozenset(),
    *,
    wait: bool = True,
) -> list[str]:
    """The last ensemble of ``metadata`` with a new bookie at each index of ``failed``.

    Asks the placement policy; a failed bookie may take its own slot back once it is registered
    again (BookKeeper would fail the writes instead when no spare exists), except at the indexes
    in ``no_return`` (a bookie that took its slot back and failed again at once must not loop).
    Waits up to ``bookieReplacementTimeoutMs`` for candidates (``wait=False``: looks once).
    Raises NotEnoughBookiesException.
    """
    deadline = time.monotonic() + bk.config.bookie_replacement_timeout_ms / 1000
    while True:
        ensemble = list(metadata.last_ensemble)
        chosen: list[str] = []
        try:
            for index in failed:
                bookie = _replacement(bk, metadata, ensemble, index, chosen)
                chosen.append(bookie)
                ensemble[index] = bookie
            break
        except errors.NotEnoughBookiesException as exc:
            writable = bk.store.writable_bookies()
            # The policy never picks the bookie being replaced; a restarted one may return.
            back = [metadata.last_ensemble[i] for i in failed[len(chosen) :]]
            returnable = not (set(failed[len(chosen) :]) & no_return)
            if returnable and all(b in writable for b in back):
                for index, bookie in zip(failed[len(chosen) :], back, strict=True):
                    ensemble[index] = bookie
                break
            if not wait or time.monotonic() >= deadline:
                raise errors.NotEnoughBookiesException(
                    f"no writable bookie to replace {_describe(bk, metadata, failed, reasons)}: "
                    f"{exc}"
                ) from exc
        time.sleep(_RETRY_S)
    for index, reason in zip(failed, reasons, strict=True):
        logger.warning(
            "ledger %d: replacing bookie %s (%s) with %s",
            ledger_id,
            metadata.last_ensemble[index],
            reason,
            ensemble[index],
        )
    return ensemble


def _replacement(
    bk: ClientContext,
    metadata: LedgerMetadata,
    ensemble: Sequence[str],
    index: int,
    chosen: Sequence[str],
) -> str:
    """The policy's bookie for ``ensemble[index]``, not one of ``chosen``: a quarantined one
    only when no other will do (as BookKeeper's ``BookieWatcherImpl.replaceBookie``). Raises
    NotEnoughBookiesException."""

    def replace(exclude: Sequence[str]) -> str:
        return bk.placement.replace_bookie(
            metadata.ensemble_size,
            metadata.write_quorum_size,
            metadata.ack_quorum_size,
            metadata.custom_metadata,
            ensemble,
            ensemble[index],
            exclude,
        ).result

    quarantined = bk.health.quarantined()
    if quarantined:
        try:
            return replace([*chosen, *quarantined])
        except errors.NotEnoughBookiesException:
            logger.debug("not enough healthy bookies; quarantined %s may be used", quarantined)
    return replace(chosen)


def _describe(
    bk: ClientContext, metadata: LedgerMetadata, failed: Sequence[int], reasons: Sequence[str]
) -> str:
    """Each failed bookie with why it failed and whether it is now registered read-only (a
    full disk, say), for the error an append raises."""
    try:
        read_only = bk.store.readonly_bookies()
    except errors.BKException:
        read_only = frozenset()
    parts = []
    for index, reason in zip(failed, reasons, strict=True):
        bookie = metadata.last_ensemble[index]
        note = "; now registered read-only" if bookie in read_only else ""
        parts.append(f"{bookie} ({reason}{note})")
    return ", ".join(parts)
