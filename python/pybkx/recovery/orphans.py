"""The cluster's orphans, found and (when asked) fixed: under-replication markers of ledgers
whose metadata is gone, ledgers whose metadata names a live bookie that lacks entries it
should hold (the auditor's replicas check, run on demand), and, from each bookie's admin
endpoint, ledgers it stores that no metadata accounts for (gone, or over-replicated).

It decides nothing a bookie or the auditor would not: the fixes are theirs — a marker is
removed under its lock as a replication worker removes it, a ledger lacking copies is marked
under-replicated as the auditor marks it (AutoRecovery then copies it), and a bookie's own
orphans are removed by that bookie's garbage collector (``PUT /api/v1/bookie/orphans``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pybkx import errors
from pybkx._core import BookieClient
from pybkx.client import BookKeeper
from pybkx.recovery.checks import check_replicas

__all__ = ["AskBookie", "BookieOrphans", "OrphanReport", "find_orphans", "fix_orphans"]

logger = logging.getLogger(__name__)

ORPHANS_PATH = "/api/v1/bookie/orphans"
"""The bookie admin endpoint that lists (GET) and removes (PUT) what a bookie stores that no
metadata accounts for."""

AskBookie = Callable[[str, str, str], object]
"""``ask(bookie_id, method, path)``: the JSON a bookie's admin endpoint answers. Raises OSError
when the bookie publishes no endpoint, cannot be reached or refuses."""

#: The holder name of marker locks taken by this checker.
HOLDER = "pybkx-orphans-check"


@dataclass(frozen=True)
class BookieOrphans:
    """What one bookie stores that no metadata accounts for, as its admin endpoint says."""

    without_metadata: tuple[int, ...] = ()
    over_replicated: tuple[int, ...] = ()


@dataclass
class OrphanReport:
    """Every orphan found, by kind."""

    markers_without_ledger: list[int] = field(default_factory=list)
    """Under-replication markers whose ledger's metadata is gone."""
    missing_copies: dict[int, dict[str, list[int]]] = field(default_factory=dict)
    """Ledger -> live bookie its metadata names -> entries that bookie should hold but lacks."""
    stored: dict[str, BookieOrphans] = field(default_factory=dict)
    """Bookie -> what it stores that no metadata accounts for."""
    not_asked: dict[str, str] = field(default_factory=dict)
    """Bookie -> why it could not be asked (no admin endpoint, unreachable, refused)."""

    @property
    def clean(self) -> bool:
        """No orphan of any kind (bookies that could not be asked are not orphans)."""
        return not (
            self.markers_without_ledger
            or self.missing_copies
            or any(o.without_metadata or o.over_replicated for o in self.stored.values())
        )


def find_orphans(bk: BookKeeper, ask: AskBookie) -> OrphanReport:
    """Look for every kind of orphan in ``bk``'s cluster; changes nothing. ``ask`` reaches a
    bookie's admin endpoint. Raises MetaStoreException."""
    report = OrphanReport()
    store = bk.store
    for ledger_id in sorted(store.underreplicated_ledgers()):
        if _metadata_gone(bk, ledger_id):
            report.markers_without_ledger.append(ledger_id)
    _find_missing_copies(bk, report)
    for bookie in sorted(store.writable_bookies() | store.readonly_bookies()):
        _ask_bookie(ask, bookie, "GET", report)
    return report


def fix_orphans(bk: BookKeeper, ask: AskBookie, report: OrphanReport) -> OrphanReport:
    """Fix what ``report`` found: remove markers of gone ledgers (under the marker's lock: one
    a worker holds is left), mark ledgers lacking copies under-replicated (AutoRecovery copies
    them), and have each bookie with orphans remove them. Returns what was done, in the same
    shape. Raises MetaStoreException."""
    done = OrphanReport()
    store = bk.store
    for ledger_id in report.markers_without_ledger:
        version = store.lock_underreplicated_ledger(ledger_id, HOLDER)
        if version is None:
            continue  # gone meanwhile, or a worker holds it (and will find the ledger gone)
        if store.mark_ledger_replicated(ledger_id, version):
            done.markers_without_ledger.append(ledger_id)
            logger.info("orphans: removed the marker of deleted ledger %d", ledger_id)
    for ledger_id, missing in report.missing_copies.items():
        store.mark_ledger_underreplicated(ledger_id, sorted(missing))
        done.missing_copies[ledger_id] = missing
        logger.info("orphans: marked ledger %d under-replicated (%s)", ledger_id, sorted(missing))
    for bookie, orphans in report.stored.items():
        if orphans.without_metadata or orphans.over_replicated:
            _ask_bookie(ask, bookie, "PUT", done)
    # The fix's own reasons (later, more precise) win over the report's.
    done.not_asked = {**report.not_asked, **done.not_asked}
    return done


def _metadata_gone(bk: BookKeeper, ledger_id: int) -> bool:
    try:
        bk.store.read_ledger_metadata(ledger_id)
    except errors.NoSuchLedgerExistsOnMetadataServerException:
        return True
    return False


def _find_missing_copies(bk: BookKeeper, report: OrphanReport) -> None:
    """The replicas check over every closed ledger (V3: GET_LIST_OF_ENTRIES_OF_LEDGER)."""
    store = bk.store
    alive = store.writable_bookies() | store.readonly_bookies()
    config = bk.config.with_overrides({"useV2WireProtocol": False}, source="the orphans check")
    client = BookieClient(config, bk.tls_material, bk.sasl_credentials)
    try:
        for ledger_id in store.list_ledgers():
            try:
                md = store.read_ledger_metadata(ledger_id).value
            except errors.NoSuchLedgerExistsOnMetadataServerException:
                continue  # deleted meanwhile
            if not md.is_closed:
                continue  # its last segment may still grow: recovery's business
            finding = check_replicas(client, bk.address_of, alive, ledger_id, md)
            for bookie in finding.unavailable:
                report.not_asked.setdefault(bookie, "it did not answer the replicas check")
            if finding.missing:
                report.missing_copies[ledger_id] = dict(finding.missing)
    finally:
        client.close()


def _ask_bookie(ask: AskBookie, bookie: str, method: str, report: OrphanReport) -> None:
    try:
        answer = ask(bookie, method, ORPHANS_PATH)
    except OSError as exc:
        report.not_asked[bookie] = str(exc)
        return
    if not isinstance(answer, dict):
        report.not_asked[bookie] = f"unexpected answer {answer!r}"
        return
    keys = (
        ("ledgersWithoutMetadata", "overReplicatedLedgers")
        if method == "GET"
        else ("deletedLedgers", "overReplicatedLedgersRemoved")
    )
    try:
        without, over = (tuple(int(i) for i in answer.get(key, ())) for key in keys)
    except (TypeError, ValueError):
        report.not_asked[bookie] = f"unexpected answer {answer!r}"
        return
    report.stored[bookie] = BookieOrphans(without, over)
