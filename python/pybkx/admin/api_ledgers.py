"""The admin endpoints about the cluster: ``/api/v1/ledger/{list,metadata,read,delete}`` and
``/api/v1/bookie/{list_bookies,list_bookie_info}``, with BookKeeper's paths, parameters, JSON
shapes and status codes. It answers requests through the metadata store and the client; it
never keeps state of its own.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable

from pybkx import errors
from pybkx.admin.context import AdminContext
from pybkx.admin.http import HttpError, Request, Response, require
from pybkx.meta import LedgerMetadata, serde
from pybkx.tools.bookies import bookie_disk_info, bookie_host, format_bytes, list_bookies
from pybkx.tools.ledgers import ledger_metadata_json, read_ledger

__all__ = ["ledger_routes"]

Handler = Callable[[Request], Response]

LEDGERS_PER_PAGE = 100
"""``/api/v1/ledger/list?print_metadata=true&page=N`` pages, as BookKeeper's."""
ENTRIES_PER_PAGE = 1000
"""``/api/v1/ledger/read?page=N`` pages, as BookKeeper's."""
MAX_ENTRIES_PER_READ = 10_000
"""A read without a page stops here: the response holds the entries, so it is bounded."""


def _ledger_id(request: Request) -> int:
    ledger_id = request.int_param("ledger_id")
    if ledger_id is None:
        raise HttpError(404, "no ledger_id: should provide ledger_id=<id>")
    if ledger_id < 0:
        raise HttpError(400, f"ledger_id must be >= 0, got {ledger_id}")
    return ledger_id


def ledger_routes(ctx: AdminContext) -> dict[str, Handler]:
    """The table of the cluster's endpoints: path to handler."""
    api = _LedgerEndpoints(ctx)
    return {
        "/api/v1/ledger/list": api.ledger_list,
        "/api/v1/ledger/metadata": api.ledger_metadata,
        "/api/v1/ledger/read": api.ledger_read,
        "/api/v1/ledger/delete": api.ledger_delete,
        "/api/v1/bookie/list_bookies": api.bookies,
        "/api/v1/bookie/list_bookie_info": api.bookie_info,
    }


class _LedgerEndpoints:
    """One handler per endpoint, each through the context's metadata store or client."""

    def __init__(self, ctx: AdminContext) -> None:
        self._ctx = ctx

    def ledger_list(self, request: Request) -> Response:
        require(request, "GET")
        store = self._ctx.store()
        print_metadata = request.param("print_metadata") == "true"
        decode = request.param("decode_meta") == "true"
        page = request.int_param("page", -1) if print_metadata else -1
        ids = store.list_ledgers()
        if page is not None and page > 0:
            start = (page - 1) * LEDGERS_PER_PAGE
            ids = itertools.islice(ids, start, start + LEDGERS_PER_PAGE)
        out: dict[str, object] = {}
        for ledger_id in ids:
            if not print_metadata:
                out[str(ledger_id)] = None
                continue
            try:
                md = store.read_ledger_metadata(ledger_id).value
            except errors.NoSuchLedgerExistsOnMetadataServerException:
                continue  # deleted while listing
            out[str(ledger_id)] = _shown_metadata(ledger_id, md, decode)
        return Response(200, out)

    def ledger_metadata(self, request: Request) -> Response:
        require(request, "GET")
        ledger_id = _ledger_id(request)
        md = self._ctx.store().read_ledger_metadata(ledger_id).value
        return Response(200, {str(ledger_id): ledger_metadata_json(ledger_id, md)})

    def ledger_read(self, request: Request) -> Response:
        require(request, "GET")
        ledger_id = _ledger_id(request)
        first, last, page = _read_range(request)
        out: dict[str, str] = {}
        if page is not None:
            out["Entries for page: "] = str(page)
        for entry_id, payload in read_ledger(self._ctx.client(), ledger_id, first, last):
            out[str(entry_id)] = payload.decode("ascii", errors="replace")
        return Response(200, out)

    def ledger_delete(self, request: Request) -> Response:
        require(request, "DELETE")
        ledger_id = _ledger_id(request)
        # As BookKeeper: deleting a ledger that does not exist succeeds.
        with contextlib.suppress(errors.NoSuchLedgerExistsOnMetadataServerException):
            self._ctx.client().delete_ledger(ledger_id)
        return Response(200, f"Deleted ledger: {ledger_id}")

    def bookies(self, request: Request) -> Response:
        require(request, "GET")
        store = self._ctx.store()
        kind = "ro" if request.param("type") == "ro" else "rw"
        hostnames = request.param("print_hostnames") == "true"
        return Response(
            200,
            {b: (bookie_host(store, b) if hostnames else None) for b in list_bookies(store, kind)},
        )

    def bookie_info(self, request: Request) -> Response:
        require(request, "GET")
        store = self._ctx.store()
        out: dict[str, str] = {}
        free = total = 0
        for bookie_id in list_bookies(store, "all"):
            info = bookie_disk_info(store, bookie_id)
            if info is None:
                out[bookie_id] = ": {unknown: no admin HTTP endpoint answered},"
                continue
            free, total = free + info.free, total + info.total
            out[bookie_id] = (
                f": {{Free: {format_bytes(info.free)}, Total: {format_bytes(info.total)}}},"
            )
        out["ClusterInfo: "] = f"{{Free: {format_bytes(free)}, Total: {format_bytes(total)}}}"
        return Response(200, out)


def _shown_metadata(ledger_id: int, md: LedgerMetadata, decode: bool) -> object:
    """A ledger's metadata in a listing: decoded as JSON, else its stored bytes as text."""
    if decode:
        return ledger_metadata_json(ledger_id, md)
    return serde.serialize_ledger_metadata(md).decode("latin-1")


def _read_range(request: Request) -> tuple[int, int, int | None]:
    """The entries a read asks for, ``(first, last, page)``: a page of ENTRIES_PER_PAGE within
    ``start_entry_id..end_entry_id`` when ``page`` is given (``page`` None otherwise), else at
    most MAX_ENTRIES_PER_READ from ``start_entry_id``. Raises HttpError 400 when they conflict."""
    first = request.int_param("start_entry_id", 0) or 0
    last = request.int_param("end_entry_id", -1)
    assert last is not None
    page = request.int_param("page", -1)
    if page is not None and page > 0:
        page_first = (page - 1) * ENTRIES_PER_PAGE
        page_last = page_first + ENTRIES_PER_PAGE - 1
        first = max(first, page_first)
        last = page_last if last == -1 else min(last, page_last)
    else:
        page = None
        if last == -1 or last - first >= MAX_ENTRIES_PER_READ:
            last = first + MAX_ENTRIES_PER_READ - 1
    if first < 0 or last < first:
        raise HttpError(400, f"start_entry_id {first} and end_entry_id {last} conflict")
    return first, last, page
