"""Cluster administration behind ``pybkx shell``, as BookKeeper's shell commands do it:
initnewcluster, metaformat, cookies, updateledgers (a bookie's id replaced in every ledger),
deleteledger, simpletest and bookiesanity. It acts on the metadata store and through the client;
it must never touch bookie files, print or prompt (progress goes to a callback).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.meta import (
    Cookie,
    LedgerMetadata,
    MetadataStore,
    Versioned,
    open_metadata_store,
    serde,
)
from pybkx.tools.ledgers import CheckResult, write_and_read

__all__ = [
    "LOCAL_POLICY",
    "ShellError",
    "UpdateResult",
    "bookie_sanity",
    "cookie_delete",
    "cookie_get",
    "cookie_text",
    "cookie_update",
    "delete_ledger",
    "init_new_cluster",
    "meta_format",
    "open_store",
    "simple_test",
    "update_ledgers",
]

LOCAL_POLICY = "org.apache.bookkeeper.bookie.LocalBookieEnsemblePlacementPolicy"
"""The placement policy that puts every ledger on one given bookie (``bookiesanity``)."""


class ShellError(Exception):
    """An admin command failed; the message is one line for the operator."""


def _open(uri: str, conf: dict[str, Any]) -> MetadataStore:
    try:
        return open_metadata_store(uri, **conf)
    except ValueError as exc:
        raise ShellError(str(exc)) from None
    except errors.BKException as exc:
        raise ShellError(
            f"cannot open the metadata store {uri}: {type(exc).__name__}: {exc}"
        ) from None


@contextlib.contextmanager
def open_store(uri: str, **conf: Any) -> Iterator[MetadataStore]:
    """The metadata store at ``uri``, closed afterwards; its errors become ShellError."""
    store = _open(uri, conf)
    try:
        yield store
    except errors.BKException as exc:
        raise ShellError(f"{type(exc).__name__}: {exc}") from None
    finally:
        store.close()


@contextlib.contextmanager
def open_client(uri: str, **conf: Any) -> Iterator[BookKeeper]:
    """A client of the cluster at ``uri``, closed afterwards; errors become ShellError."""
    try:
        bk = BookKeeper(uri, **conf)
    except ValueError as exc:
        raise ShellError(str(exc)) from None
    except errors.BKException as exc:
        raise ShellError(f"cannot open the cluster {uri}: {type(exc).__name__}: {exc}") from None
    try:
        yield bk
    except errors.BKException as exc:
        raise ShellError(f"{type(exc).__name__}: {exc}") from None
    finally:
        bk.close()


def init_new_cluster(uri: str, **conf: Any) -> str:
    """Initialise a new cluster at ``uri`` (layout, instance id, registration paths).

    Returns the new instance id. Raises ShellError if the cluster is already initialised (as
    BookKeeper's ``initnewcluster`` fails then) or the store cannot be reached. ``conf`` goes
    to :func:`pybkx.meta.open_metadata_store` (e.g. ``zkTimeout``).
    """
    with open_store(uri, **conf) as store:
        if not store.init_new_cluster():
            raise ShellError(
                f"a cluster is already initialised at {uri} (instance id {store.instance_id()}); "
                "use metaformat to wipe it"
            )
        return store.instance_id()


def meta_format(uri: str, **conf: Any) -> str:
    """Delete every ledger, registration and cookie at ``uri`` and initialise it afresh.

    Returns the new instance id. Bookies that had joined must be formatted (their directory
    cookies name the old instance) before they can join again. Raises ShellError if the store
    cannot be reached or fails.
    """
    with open_store(uri, **conf) as store:
        store.format()
        return store.instance_id()


# --- cookies ----------------------------------------------------------------------------------


def cookie_get(store: MetadataStore, bookie_id: str) -> Versioned[Cookie]:
    """A bookie's cookie in the store. Raises ShellError if it has none."""
    try:
        return store.read_cookie(bookie_id)
    except errors.CookieNotFoundException:
        raise ShellError(f"no cookie for bookie {bookie_id} in {store.uri}") from None


def cookie_text(cookie: Cookie) -> str:
    """A cookie as BookKeeper writes it (the text ``cookie update`` takes back)."""
    return serde.serialize_cookie(cookie).decode()


def cookie_update(store: MetadataStore, bookie_id: str, text: bytes) -> Versioned[Cookie]:
    """Replace a bookie's cookie in the store with ``text`` (BookKeeper's cookie file format),
    by compare-and-set. Raises ShellError if the text is not a cookie of that bookie or the
    bookie has no cookie yet."""
    try:
        cookie = serde.parse_cookie(text)
    except errors.InvalidCookieException as exc:
        raise ShellError(f"not a cookie: {exc}") from None
    if cookie.bookie_id != bookie_id:
        raise ShellError(f"the cookie names bookie {cookie.bookie_id}, not {bookie_id}")
    current = cookie_get(store, bookie_id)
    try:
        return store.write_cookie(bookie_id, cookie, current.version)
    except errors.MetadataVersionException:
        raise ShellError(f"the cookie of {bookie_id} changed meanwhile; try again") from None


def cookie_delete(store: MetadataStore, bookie_id: str) -> None:
    """Remove a bookie's cookie from the store (the bookie can then join again with formatted
    directories). Raises ShellError if it has none."""
    current = cookie_get(store, bookie_id)
    try:
        store.remove_cookie(bookie_id, current.version)
    except errors.MetadataVersionException:
        raise ShellError(f"the cookie of {bookie_id} changed meanwhile; try again") from None


# --- ledgers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpdateResult:
    examined: int
    updated: list[int]
    """Ledgers whose ensembles named the source bookie (updated unless a dry run)."""


def update_ledgers(
    store: MetadataStore,
    src: str,
    dest: str,
    *,
    updates_per_s: float = 5.0,
    limit: int | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> UpdateResult:
    """Replace bookie ``src`` by ``dest`` in the ensembles of every ledger (BookKeeper's
    ``updateledgers`` / ``updateBookieInLedger``), each by compare-and-set, at most
    ``updates_per_s`` metadata writes a second and ``limit`` ledgers. ``progress(done, total)``
    after each ledger examined. Ledgers deleted meanwhile are skipped.

    Raises ShellError when ``src`` equals ``dest``, ``dest`` already serves in a segment with
    ``src`` (the ensemble would name it twice), or the store fails.
    """
    if src == dest:
        raise ShellError("the source and destination bookies are the same")
    if updates_per_s <= 0:
        raise ShellError("updates per second must be > 0")
    ids = list(store.list_ledgers())
    updated: list[int] = []
    gap = 1.0 / updates_per_s
    next_at = time.monotonic()
    for n, ledger_id in enumerate(ids, 1):
        if limit is not None and len(updated) >= limit:
            break
        try:
            current = store.read_ledger_metadata(ledger_id)
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            continue
        if any(src in bookies for bookies in current.value.ensembles.values()):
            if not dry_run:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at = time.monotonic() + gap
                _replace_bookie(store, ledger_id, current, src, dest)
            updated.append(ledger_id)
        if progress is not None:
            progress(n, len(ids))
    return UpdateResult(len(ids), updated)


def _replace_bookie(
    store: MetadataStore,
    ledger_id: int,
    current: Versioned[LedgerMetadata],
    src: str,
    dest: str,
) -> None:
    def change(md: LedgerMetadata) -> LedgerMetadata | None:
        ensembles = {}
        for first, bookies in md.ensembles.items():
            if src in bookies and dest in bookies:
                raise ShellError(
                    f"ledger {ledger_id}: {dest} is already in the ensemble at entry {first}"
                )
            ensembles[first] = tuple(dest if b == src else b for b in bookies)
        return None if ensembles == dict(md.ensembles) else md.replace(ensembles=ensembles)

    # A ledger deleted meanwhile has nothing left to update.
    with contextlib.suppress(errors.NoSuchLedgerExistsOnMetadataServerException):
        store.update_ledger_metadata(ledger_id, current, change)


def delete_ledger(store: MetadataStore, ledger_id: int) -> None:
    """Delete a ledger's metadata (its bookies drop the data at their next garbage
    collection). Raises ShellError if it does not exist."""
    try:
        store.remove_ledger_metadata(ledger_id)
    except errors.NoSuchLedgerExistsOnMetadataServerException:
        raise ShellError(f"ledger {ledger_id} does not exist") from None


# --- checks -----------------------------------------------------------------------------------


def simple_test(
    uri: str,
    entries: int,
    ensemble_size: int,
    write_quorum_size: int,
    ack_quorum_size: int,
    progress: Callable[[int], None] | None = None,
    **conf: Any,
) -> CheckResult:
    """Write ``entries`` entries to a new ledger across the cluster, read them back, delete it
    (BookKeeper's ``simpletest``). Raises ShellError."""
    with open_client(uri, **conf) as bk:
        return write_and_read(
            bk,
            entries,
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
            progress=progress,
        )


def bookie_sanity(uri: str, bookie_id: str, entries: int = 10, **conf: Any) -> CheckResult:
    """Write and read ``entries`` entries on one bookie alone (BookKeeper's ``bookiesanity``).
    Raises ShellError (the bookie is not registered as writable, or the check fails)."""
    with open_store(uri, **conf) as store:
        if bookie_id not in store.writable_bookies():
            raise ShellError(f"bookie {bookie_id} is not registered as writable in {uri}")
    with open_client(uri, ensemblePlacementPolicy=LOCAL_POLICY, bookieId=bookie_id, **conf) as bk:
        return write_and_read(bk, entries, ensemble_size=1, write_quorum_size=1, ack_quorum_size=1)
