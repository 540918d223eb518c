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
from pybkx.admin.api_bookie import require
from pybkx.admin.context import AdminContext
from pybkx.admin.http import HttpError, Request, Response
from pybkx.meta import serde
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
    def ledger_list(request: Request) -> Response:
        require(request, "GET")
        store = ctx.store()
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
            if decode:
                out[str(ledger_id)] = ledger_metadata_json(ledger_id, md)
            else:
                raw = serde.serialize_ledger_metadata(md)
                out[str(ledger_id)] = raw.decode("latin-1")
        return Response(200, out)

    def ledger_metadata(request: Request) -> Response:
        require(request, "GET")
        ledger_id = _ledger_id(request)
        md = ctx.store().read_ledger_metadata(ledger_id).value
        return Response(200, {str(ledger_id): ledger_metadata_json(ledger_id, md)})

    def ledger_read(request: Request) -> Response:
        require(request, "GET")
        ledger_id = _ledger_id(request)
        first = request.int_param("start_entry_id", 0) or 0
        last = request.int_param("end_entry_id", -1)
        assert last is not None
        page = request.int_param("page", -1)
        out: dict[str, str] = {}
        if page is not None and page > 0:
            page_first = (page - 1) * ENTRIES_PER_PAGE
            page_last = page_first + ENTRIES_PER_PAGE - 1
            first = max(first, page_first)
            last = page_last if last == -1 else min(last, page_last)
            out["Entries for page: "] = str(page)
        elif last == -1 or last - first >= MAX_ENTRIES_PER_READ:
            last = first + MAX_ENTRIES_PER_READ - 1
        if first < 0 or last < first:
            raise HttpError(400, f"start_entry_id {first} and end_entry_id {last} conflict")
        for entry_id, payload in read_ledger(ctx.client(), ledger_id, first, last):
            out[str(entry_id)] = payload.decode("ascii", errors="replace")
        return Response(200, out)

    def ledger_delete(request: Request) -> Response:
        require(request, "DELETE")
        ledger_id = _ledger_id(request)
        # As BookKeeper: deleting a ledger that does not exist succeeds.
        with contextlib.suppress(errors.NoSuchLedgerExistsOnMetadataServerException):
            ctx.client().delete_ledger(ledger_id)
        return Response(200, f"Deleted ledger: {ledger_id}")

    def bookies(request: Request) -> Response:
        require(request, "GET")
        store = ctx.store()
        kind = "ro" if request.param("type") == "ro" else "rw"
        hostnames = request.param("print_hostnames") == "true"
        return Response(
            200,
            {b: (bookie_host(store, b) if hostnames else None) for b in list_bookies(store, kind)},
        )

    def bookie_info(request: Request) -> Response:
        require(request, "GET")
        store = ctx.store()
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

    return {
        "/api/v1/ledger/list": ledger_list,
        "/api/v1/ledger/metadata": ledger_metadata,
        "/api/v1/ledger/read": ledger_read,
        "/api/v1/ledger/delete": ledger_delete,
        "/api/v1/bookie/list_bookies": bookies,
        "/api/v1/bookie/list_bookie_info": bookie_info,
    }
