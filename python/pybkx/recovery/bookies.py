"""Manual recovery of lost bookies (BookKeeper's ``recover`` shell command and its admin doc):
every ledger with a segment on one of them is re-replicated. An open ledger is fenced and
closed first (opened with recovery), unless asked to skip it, so that no writer can still add
to the fragment being copied; then each fragment that named a lost bookie is copied onto a
bookie the ledger's placement policy chooses (or a given target) and its ensemble rewritten by
compare-and-set. A ledger whose entries survive nowhere is reported unrecoverable, never
silently skipped. It heals what it is asked to; it never marks ledgers under-replicated
(AutoRecovery's auditor does)."""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from pybkx import errors
from pybkx.client import BookKeeper, ReadHandle
from pybkx.meta import LedgerMetadata, MetadataStore
from pybkx.recovery.copy import FragmentUnreadable, copy_fragment
from pybkx.recovery.fragments import Fragment, fragments_on
from pybkx.recovery.rate import ByteRate

__all__ = [
    "RecoveryOptions",
    "RecoveryReport",
    "affected_ledgers",
    "heal_fragments",
    "heal_ledger",
    "recover_bookies",
]

logger = logging.getLogger(__name__)

#: Tries per ledger when a copy fails for a reason other than lost data (a target bookie
#: failing, a metadata race); each try chooses the replacements again.
ATTEMPTS = 3
LOCK_WAIT_S = 60.0
"""How long recovery waits for a ledger's replication lock (a bookie's garbage collector holds
it for a moment; a replication worker for as long as its copy takes)."""


@dataclass(frozen=True)
class RecoveryOptions:
    """BookKeeper's ``recover`` options. ``ledger``: only that ledger. ``target``: the bookie
    that takes every lost copy (else the placement policy chooses per fragment).
    ``skip_unrecoverable_ledgers``: go on past a ledger whose data is lost (else stop there).
    ``dry_run``: plan, change nothing. ``parallel_ledgers``: ledgers copied at once (each holds
    at most two chunks of ``copy.CHUNK_BYTES`` in memory). ``rate_bytes_per_s``: BookKeeper's
    ``replicationRateByBytes``, the most bytes a second all copies write (None: no limit)."""

    ledger: int | None = None
    skip_open_ledgers: bool = False
    skip_unrecoverable_ledgers: bool = False
    dry_run: bool = False
    target: str | None = None
    #: Ledgers copied at once. Six: measured on one disk, six healed faster than four and still
    #: kept clients' add p99 within the recovery goal of twice its quiet value; eight did not
    #: (docs/performance.md, "Healing a lost bookie", "How many ledgers at once, now").
    parallel_ledgers: int = 6
    rate_bytes_per_s: int | None = None


@dataclass
class RecoveryReport:
    """What a recovery did. ``ok`` only when every affected ledger was healed (or, in a dry
    run, could be planned)."""

    lost: tuple[str, ...]
    affected: list[int] = field(default_factory=list)
    healed: list[int] = field(default_factory=list)
    planned: list[tuple[Fragment, tuple[str, ...]]] = field(default_factory=list)
    skipped_open: list[int] = field(default_factory=list)
    unrecoverable: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    not_reached: list[int] = field(default_factory=list)
    entries_copied: int = 0
    bytes_copied: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.unrecoverable or self.failed or self.not_reached or self.skipped_open)


Progress = Callable[[int, int, int], None]
"""``progress(ledgers done, ledgers affected, bytes copied)``."""


def affected_ledgers(
    store: MetadataStore, lost: Collection[str], ledger: int | None = None
) -> list[int]:
    """Ids of the ledgers with a segment on a bookie of ``lost`` (only ``ledger`` if given),
    ascending. Ledgers deleted while listing are left out. Raises MetaStoreException."""
    ids = [ledger] if ledger is not None else list(store.list_ledgers())
    found = []
    for ledger_id in ids:
        try:
            md = store.read_ledger_metadata(ledger_id).value
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            continue
        if _names_any(md, lost):
            found.append(ledger_id)
    return found


def recover_bookies(
    bk: BookKeeper,
    lost: Sequence[str],
    options: RecoveryOptions = RecoveryOptions(),
    progress: Progress | None = None,
    *,
    ledgers: Sequence[int] | None = None,
) -> RecoveryReport:
    """Re-replicate every ledger that has a segment on a bookie of ``lost`` (bookie ids).

    Per ledger: open (an OPEN one is fenced, recovered and closed, unless
    ``skip_open_ledgers``), then each fragment naming a lost bookie is copied and its ensemble
    rewritten. ``ledgers``: the affected ledger ids when already listed (by
    ``affected_ledgers``), else they are listed here. Returns a report; per-ledger failures
    are in it, not raised. Raises
    IncorrectParameterException (no bookie given, or the target is among the lost),
    MetaStoreException (the metadata store fails while listing), KeyboardInterrupt.
    """
    if not lost:
        raise errors.IncorrectParameterException("no bookie to recover was given")
    if options.target is not None and options.target in lost:
        raise errors.IncorrectParameterException(
            f"the target {options.target} is one of the bookies being recovered"
        )
    started = time.monotonic()
    lost_set = frozenset(lost)
    report = RecoveryReport(lost=tuple(lost))
    if ledgers is None:
        ledgers = affected_ledgers(bk.store, lost_set, options.ledger)
    report.affected = list(ledgers)
    _recover_ledgers(bk, lost_set, options, report, progress)
    report.healed.sort()
    report.not_reached.sort()
    report.seconds = time.monotonic() - started
    return report


def _recover_ledgers(
    bk: BookKeeper,
    lost: frozenset[str],
    options: RecoveryOptions,
    report: RecoveryReport,
    progress: Progress | None,
) -> None:
    """Recover ``report.affected`` in order, ``options.parallel_ledgers`` at once, folding
    each outcome into ``report``; stop starting ledgers at an unrecoverable one (unless told
    to skip those) or on an interrupt, whose running copies end by their timeouts."""
    lock = threading.Lock()
    rate = ByteRate(options.rate_bytes_per_s)
    done = 0

    def copied(nbytes: int) -> None:
        with lock:
            report.bytes_copied += nbytes
            if progress is not None:
                progress(done, len(report.affected), report.bytes_copied)

    def one(ledger_id: int) -> RecoveryReport:
        mine = RecoveryReport(lost=report.lost)
        _recover_ledger(bk, ledger_id, lost, options, mine, copied, rate)
        return mine

    waiting = collections.deque(report.affected)
    running: dict[concurrent.futures.Future[RecoveryReport], int] = {}
    workers = max(1, options.parallel_ledgers)
    with concurrent.futures.ThreadPoolExecutor(workers, "pybkx-recover") as pool:
        try:
            while waiting or running:
                while waiting and len(running) < workers:
                    ledger_id = waiting.popleft()
                    running[pool.submit(one, ledger_id)] = ledger_id
                finished, _ = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in finished:
                    ledger_id = running.pop(future)
                    if not _settle(future, ledger_id, report, options):
                        report.not_reached = list(waiting)  # stop at an unrecoverable ledger
                        waiting.clear()
                    with lock:
                        done += 1
                        if progress is not None:
                            progress(done, len(report.affected), report.bytes_copied)
        except BaseException:
            waiting.clear()  # Ctrl-C: start nothing more; the running copies end by timeout
            raise


def _settle(
    future: concurrent.futures.Future[RecoveryReport],
    ledger_id: int,
    report: RecoveryReport,
    options: RecoveryOptions,
) -> bool:
    """Fold one ledger's outcome into ``report``; False when recovery must stop here."""
    try:
        mine = future.result()
    except FragmentUnreadable as exc:
        logger.error("ledger %d is unrecoverable: %s", ledger_id, exc)
        report.unrecoverable[ledger_id] = str(exc)
        return options.skip_unrecoverable_ledgers
    except errors.BKException as exc:
        logger.warning("ledger %d not recovered: %s: %s", ledger_id, type(exc).__name__, exc)
        report.failed[ledger_id] = f"{type(exc).__name__}: {exc}"
        return True
    report.healed += mine.healed
    report.skipped_open += mine.skipped_open
    report.planned += mine.planned
    report.entries_copied += mine.entries_copied
    return True


def _recover_ledger(
    bk: BookKeeper,
    ledger_id: int,
    lost: frozenset[str],
    options: RecoveryOptions,
    report: RecoveryReport,
    copied: Callable[[int], None],
    rate: ByteRate,
) -> None:
    try:
        md = bk.store.read_ledger_metadata(ledger_id).value
    except errors.NoSuchLedgerExistsOnMetadataServerException:
        return  # deleted meanwhile: nothing to heal
    if not md.is_closed:
        if options.skip_open_ledgers:
            report.skipped_open.append(ledger_id)
            return
        if options.dry_run:
            # Planning the last fragment needs its end: only fencing the ledger gives it.
            report.planned.extend((f, ()) for f in fragments_on(ledger_id, md, lost, open_end=True))
            return
    # Opening with recovery fences and closes an OPEN ledger: its writer can add no more.
    handle = bk.open_ledger(ledger_id, md.password, recovery=not md.is_closed)
    holder = f"recover-{os.getpid()}-{threading.get_ident()}"
    locked = options.dry_run or _lock_against_gc(bk.store, ledger_id, holder)
    try:
        _heal_with_retries(bk, handle, lost, options, report, copied, rate)
    finally:
        if locked and not options.dry_run:
            bk.store.release_underreplicated_ledger(ledger_id)


def _lock_against_gc(store: MetadataStore, ledger_id: int, holder: str) -> bool:
    """Take the ledger's replication lock, waiting up to ``LOCK_WAIT_S``: while recovery holds
    it, the target bookie's garbage collector does not take the entries just copied onto it
    for over-replicated ones (the metadata names the target only once the copy is done).
    False, with a warning, if it stays held: recovery goes on without it."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while not store.lock_ledger_against_replication(ledger_id, holder):
        if time.monotonic() >= deadline:
            logger.warning(
                "ledger %d: its replication lock stayed held for %.0f s; copying without it",
                ledger_id,
                LOCK_WAIT_S,
            )
            return False
        time.sleep(0.2)  # a bounded poll: the lock has no wake-up
    return True


def _heal_with_retries(
    bk: BookKeeper,
    handle: ReadHandle,
    lost: frozenset[str],
    options: RecoveryOptions,
    report: RecoveryReport,
    copied: Callable[[int], None],
    rate: ByteRate,
) -> None:
    ledger_id = handle.ledger_id
    for attempt in range(1, ATTEMPTS + 1):
        try:
            heal_ledger(bk, handle, lost, options, report, copied, rate)
            if not options.dry_run:
                report.healed.append(ledger_id)
            return
        except (FragmentUnreadable, errors.NotEnoughBookiesException):
            raise
        except errors.BKException as exc:
            if attempt == ATTEMPTS:
                raise
            logger.info("ledger %d: copy failed (%s); trying again", ledger_id, exc)


def heal_ledger(
    bk: BookKeeper,
    handle: ReadHandle,
    lost: frozenset[str],
    options: RecoveryOptions,
    report: RecoveryReport,
    copied: Callable[[int], None],
    rate: ByteRate,
) -> None:
    """Copy and re-point every fragment of the ledger that names a bookie of ``lost``, except
    an open ledger's last segment (still being written: fence the ledger first to heal it).
    Adds to ``report``'s planned copies (dry run) or copied entries. Raises
    FragmentUnreadable, NotEnoughBookiesException, IncorrectParameterException, and the
    add and metadata errors of a failed copy."""
    md = handle.refresh_metadata()
    fragments = fragments_on(handle.ledger_id, md, lost, open_end=True)
    for fragment in fragments:
        if not md.is_closed and fragment.first == md.last_segment_start:
            continue
        replacement = _replacement(bk, md, fragment, lost, options.target)
        if options.dry_run:
            report.planned.append((fragment, replacement))
            continue
        _copy_and_repoint(bk, handle, fragment, replacement, report, copied, rate)
        logger.info(
            "ledger %d: entries %d..%d copied from %s to %s",
            fragment.ledger_id,
            fragment.first,
            fragment.last,
            [fragment.ensemble[i] for i in fragment.lost],
            [replacement[i] for i in fragment.lost],
        )


def heal_fragments(
    bk: BookKeeper,
    handle: ReadHandle,
    fragments: Sequence[Fragment],
    options: RecoveryOptions,
    report: RecoveryReport,
    copied: Callable[[int], None],
    rate: ByteRate,
) -> None:
    """Copy each fragment onto bookies that replace its ``lost`` indexes (whose bookies may
    be registered but miss the entries: the auditor's ledger and replicas checks) and re-point
    its segment. A segment whose ensemble changed since the fragment was found is left for the
    next check. Raises what ``heal_ledger`` raises."""
    md = handle.refresh_metadata()
    for fragment in fragments:
        if md.ensembles.get(fragment.first) != fragment.ensemble:
            continue
        bad = frozenset(fragment.ensemble[i] for i in fragment.lost)
        replacement = _replacement(bk, md, fragment, bad, options.target)
        _copy_and_repoint(bk, handle, fragment, replacement, report, copied, rate)
        md = handle.metadata
        logger.info(
            "ledger %d: entries %d..%d missing on %s copied to %s",
            fragment.ledger_id,
            fragment.first,
            fragment.last,
            sorted(bad),
            [replacement[i] for i in fragment.lost],
        )


def _copy_and_repoint(
    bk: BookKeeper,
    handle: ReadHandle,
    fragment: Fragment,
    replacement: tuple[str, ...],
    report: RecoveryReport,
    copied: Callable[[int], None],
    rate: ByteRate,
) -> None:
    """Copy the fragment's lost entries onto ``replacement`` and re-point its segment there,
    counting the entries in ``report``. Raises what ``copy_fragment`` and
    ``_rewrite_ensemble`` raise."""
    entries, _ = copy_fragment(bk, handle, fragment, replacement, copied, rate)
    report.entries_copied += entries
    _rewrite_ensemble(handle, fragment, replacement)


def _replacement(
    bk: BookKeeper,
    md: LedgerMetadata,
    fragment: Fragment,
    lost: frozenset[str],
    target: str | None,
) -> tuple[str, ...]:
    """The fragment's ensemble with a new bookie at each lost index. Raises
    NotEnoughBookiesException, IncorrectParameterException (the target already serves it)."""
    ensemble = list(fragment.ensemble)
    chosen: list[str] = []
    for index in fragment.lost:
        if target is not None:
            if target in ensemble:
                raise errors.IncorrectParameterException(
                    f"ledger {fragment.ledger_id}: the target {target} already holds the "
                    f"fragment from entry {fragment.first}"
                )
            bookie = target
        else:
            bookie = bk.placement.replace_bookie(
                md.ensemble_size,
                md.write_quorum_size,
                md.ack_quorum_size,
                md.custom_metadata,
                ensemble,
                ensemble[index],
                [*lost, *chosen],
            ).result
        chosen.append(bookie)
        ensemble[index] = bookie
    return tuple(ensemble)


def _rewrite_ensemble(handle: ReadHandle, fragment: Fragment, replacement: tuple[str, ...]) -> None:
    """Compare-and-set the fragment's segment to ``replacement``. A segment someone else
    already healed is left alone; one changed otherwise is a race (MetadataVersionException:
    the ledger is tried again)."""

    def change(md: LedgerMetadata) -> LedgerMetadata | None:
        current = md.ensembles.get(fragment.first)
        if current == fragment.ensemble:
            ensembles = dict(md.ensembles)
            ensembles[fragment.first] = replacement
            return md.replace(ensembles=ensembles)
        gone = {fragment.ensemble[i] for i in fragment.lost}
        if current is not None and not gone.intersection(current):
            return None
        raise errors.MetadataVersionException(
            f"ledger {fragment.ledger_id}: the segment from entry {fragment.first} changed "
            "while it was being copied"
        )

    handle.update_metadata(change)


def _names_any(md: LedgerMetadata, lost: Collection[str]) -> bool:
    return any(b in lost for bookies in md.ensembles.values() for b in bookies)
