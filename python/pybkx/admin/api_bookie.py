"""The admin endpoints about this bookie: ``/heartbeat``, ``/metrics``,
``/api/v1/config/server_config`` and ``/api/v1/bookie/*`` (info, state, read-only, readiness,
last log mark, disk files, garbage collection) with BookKeeper's paths, JSON shapes and status
codes, and pybkx's own ``/api/v1/bookie/orphans``, ``/api/v1/bookie/space``,
``/api/v1/bookie/scrub``, ``/api/v1/bookie/ledger_digest`` and
``/api/v1/bookie/cross_replica_check``. It answers requests; it never changes the bookie except
through the bookie's own methods.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from pybkx import errors
from pybkx.admin.bookie_metrics import is_entry_log, is_journal
from pybkx.admin.context import AdminContext
from pybkx.admin.http import HttpError, Request, Response, require
from pybkx.admin.prometheus import CONTENT_TYPE
from pybkx.bookie import BookieError
from pybkx.bookie.replica_access import local_digest
from pybkx.bookie.replica_check import MAX_LISTED_ENTRIES
from pybkx.bookie.space import account_space, compaction_progress
from pybkx.tools.bookies import disk_info

__all__ = ["bookie_routes"]

Handler = Callable[[Request], Response]


def bookie_routes(ctx: AdminContext) -> dict[str, Handler]:
    """The table of this bookie's endpoints: path to handler."""
    api = _BookieEndpoints(ctx)
    return {
        "/heartbeat": api.heartbeat,
        "/metrics": api.metrics,
        "/api/v1/config/server_config": api.server_config,
        "/api/v1/bookie/info": api.info,
        "/api/v1/bookie/state": api.state,
        "/api/v1/bookie/state/readonly": api.read_only,
        "/api/v1/bookie/is_ready": api.is_ready,
        "/api/v1/bookie/last_log_mark": api.last_log_mark,
        "/api/v1/bookie/list_disk_file": api.list_disk_file,
        "/api/v1/bookie/gc": api.gc,
        "/api/v1/bookie/gc_details": api.gc_details,
        "/api/v1/bookie/orphans": api.orphans,
        "/api/v1/bookie/space": api.space,
        "/api/v1/bookie/scrub": api.scrub,
        "/api/v1/bookie/ledger_digest": api.ledger_digest,
        "/api/v1/bookie/cross_replica_check": api.cross_replica_check,
    }


class _BookieEndpoints:
    """One handler per endpoint, each over the admin context's bookie."""

    def __init__(self, ctx: AdminContext) -> None:
        self._ctx = ctx
        self._bookie = ctx.bookie

    def heartbeat(self, request: Request) -> Response:
        return Response.text("OK\n")

    def metrics(self, request: Request) -> Response:
        if request.method != "GET":
            raise HttpError(403, f"{request.method} is forbidden. Should be GET method")
        return Response.text(self._ctx.metrics_text(), content_type=CONTENT_TYPE)

    def server_config(self, request: Request) -> Response:
        if request.method == "PUT":
            raise HttpError(
                403,
                "pybkx does not change its configuration while running: edit the "
                "configuration file and restart the bookie",
            )
        require(request, "GET")
        config = self._bookie.config
        shown = {key: _text(value) for key, value in config.settings().items()}
        shown.update({key: _text(value) for key, value in config.extra.items()})
        return Response(200, shown)

    def info(self, request: Request) -> Response:
        require(request, "GET")
        space = disk_info(self._bookie.config.ledger_directories)
        return Response(200, {"freeSpace": space.free, "totalSpace": space.total})

    def state(self, request: Request) -> Response:
        require(request, "GET")
        bookie = self._bookie
        running = bookie.running
        read_only = self._read_only_or(True)
        return Response(
            200,
            {
                "running": running,
                "readOnly": read_only,
                "shuttingDown": bookie.shutting_down,
                "availableForHighPriorityWrites": bookie.available_for_high_priority_writes,
            },
        )

    def read_only(self, request: Request) -> Response:
        require(request, "GET", "PUT")
        if request.method == "PUT":
            body = request.json_body()
            if not isinstance(body, dict) or not isinstance(body.get("readOnly"), bool):
                raise HttpError(400, 'expected a JSON body {"readOnly": true|false}')
            try:
                self._bookie.set_read_only(body["readOnly"])
            except BookieError as exc:
                raise HttpError(400, str(exc)) from None
        return Response(200, {"readOnly": self._read_only_or(True)})

    def is_ready(self, request: Request) -> Response:
        require(request, "GET")
        if self._bookie.running and not self._bookie.shutting_down:
            return Response.text("OK")
        return Response.text("Bookie is not fully started yet", status=503)

    def last_log_mark(self, request: Request) -> Response:
        require(request, "GET")
        marks = self._bookie.storage.journal_marks()
        return Response(
            200,
            {
                f"LastLogMark: Journal Id - {m.file_id}({m.file_id:x}.txn)": f"Pos - {m.offset}"
                for m in marks
            },
        )

    def list_disk_file(self, request: Request) -> Response:
        require(request, "GET")
        config = self._bookie.config
        listings = {
            "journal": ("journal files", _files(config.journal_directories, is_journal)),
            "entrylog": ("entrylog files", _files(config.ledger_directories, is_entry_log)),
            "index": (
                "index files",
                _files(
                    config.index_directories or config.ledger_directories[:1],
                    lambda name: name == "index.log" or name.endswith(".idx"),
                ),
            ),
        }
        wanted = request.param("file_type")
        chosen = [wanted] if wanted in listings else list(listings)
        return Response(200, {listings[k][0]: listings[k][1] for k in chosen})

    def gc(self, request: Request) -> Response:
        require(request, "GET", "PUT")
        collector = self._bookie.garbage_collector
        if request.method == "GET":
            running = collector is not None and collector.running
            return Response(200, {"is_in_force_gc": str(running).lower()})
        body = request.json_body()
        if body is not None and not isinstance(body, dict):
            raise HttpError(400, 'expected a JSON body {"forceMajor": .., "forceMinor": ..}')
        if collector is None:
            raise HttpError(404, "this bookie runs standalone: there is no metadata to compare")
        options = body or {}
        collector.run(
            force_major=bool(options.get("forceMajor", False)),
            force_minor=bool(options.get("forceMinor", False)),
        )
        return Response(200, f"Triggered GC on BookieServer: {self._bookie.bookie_id}")

    def gc_details(self, request: Request) -> Response:
        require(request, "GET")
        collector = self._bookie.garbage_collector
        if collector is None:
            raise HttpError(404, "this bookie runs standalone: it collects no garbage")
        return Response(200, [collector.details()])

    def orphans(self, request: Request) -> Response:
        """GET: what this bookie stores that no metadata accounts for (pybkx's own endpoint;
        BookKeeper has none). PUT: remove it now — a garbage collection pass that also looks
        for over-replicated ledgers whatever its interval — and say what went."""
        require(request, "GET", "PUT")
        collector = self._bookie.garbage_collector
        if collector is None:
            raise HttpError(404, "this bookie runs standalone: there is no metadata to compare")
        if request.method == "GET":
            found = collector.orphans()
            return Response(
                200,
                {
                    "ledgersWithoutMetadata": list(found.without_metadata),
                    "overReplicatedLedgers": list(found.over_replicated),
                },
            )
        done = collector.run(over_replicated_now=True)
        return Response(
            200,
            {
                "deletedLedgers": list(done.deleted),
                "overReplicatedLedgersRemoved": list(done.over_replicated),
            },
        )

    def space(self, request: Request) -> Response:
        """GET: this bookie's entry-log bytes per tier by what they hold (pybkx's own endpoint).
        Orphaned and over-replicated bytes are looked up in the metadata now (one read per
        stored ledger; ``orphans=false`` skips it and counts them as live)."""
        require(request, "GET")
        collector = self._bookie.garbage_collector
        found = None
        if collector is not None and request.param("orphans") != "false":
            found = collector.orphans()
        try:
            storage = self._bookie.storage
            tiers = account_space(storage, self._bookie.config, found)
            compaction = compaction_progress(storage.stats())
        except BookieError as exc:
            raise HttpError(503, str(exc)) from None
        return Response(
            200,
            {
                "orphansChecked": found is not None,
                "tiers": [t.as_json() for t in tiers],
                "compaction": compaction,
            },
        )

    def scrub(self, request: Request) -> Response:
        """pybkx's own endpoint: POST starts a scrub run now (at ``scrubRateBytesPerSecond``),
        GET answers the last run's figures, the current run's progress and the repairs."""
        require(request, "GET", "POST")
        scrubber = self._bookie.scrubber
        if scrubber is None:
            raise HttpError(503, "the bookie is not running")
        if request.method == "POST":
            started = scrubber.start_run()
            return Response(
                200 if started else 409,
                "Triggered a scrub run" if started else "A scrub run is already running",
            )
        return Response(200, scrubber.status())

    def ledger_digest(self, request: Request) -> Response:
        """pybkx's own endpoint: GET this bookie's digest of what it stores of ``ledger_id`` in
        entries ``first, first + stride, ..`` up to ``last`` (the cross-replica check asks it);
        ``entries=true`` adds each entry's digest (at most ``MAX_LISTED_ENTRIES`` entries)."""
        require(request, "GET")
        ledger_id, first, last = (_required_int(request, k) for k in ("ledger_id", "first", "last"))
        asked_stride = request.int_param("stride")
        stride = 1 if asked_stride is None else asked_stride
        listed = request.param("entries") == "true"
        if min(ledger_id, first, last) < 0 or stride < 1 or last < first:
            raise HttpError(400, "need ledger_id >= 0, 0 <= first <= last and stride >= 1")
        if listed and (last - first) // stride + 1 > MAX_LISTED_ENTRIES:
            raise HttpError(400, f"a listing covers at most {MAX_LISTED_ENTRIES} entries")
        try:
            found = local_digest(self._bookie.storage, ledger_id, first, last, stride, listed)
        except (BookieError, errors.BKException) as exc:
            raise HttpError(503, str(exc)) from None
        body: dict[str, object] = {
            "ledgerId": ledger_id,
            "first": first,
            "last": last,
            "stride": stride,
            "entries": found.entries,
            "bytes": found.bytes,
            "unreadable": found.unreadable,
            "digest": found.digest,
        }
        if found.listed is not None:
            body["listed"] = [[e, d] for e, d in sorted(found.listed.items())]
        return Response(200, body)

    def cross_replica_check(self, request: Request) -> Response:
        """pybkx's own endpoint. GET: the cross-replica checker's counts and last run. POST
        with ``ledger_id``: check that closed ledger's replicas now (every fragment; repaired
        unless ``repair=false``) and answer what was found. POST without: start a run over the
        fragments this bookie heads in the background (409 while one runs)."""
        require(request, "GET", "POST")
        scrubber = self._bookie.scrubber
        checker = None if scrubber is None else scrubber.replicas
        if checker is None:
            raise HttpError(404, "this bookie runs standalone or is not running: no replicas")
        if request.method == "GET":
            return Response(200, checker.status())
        repair = request.param("repair") != "false"
        ledger_id = request.int_param("ledger_id")
        try:
            if ledger_id is not None:
                return Response(200, checker.check(ledger_id, repair=repair).as_json())
            if checker.running:
                return Response(409, "A cross-replica check is already running")
            checker.run_in_background(repair=repair)
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            raise HttpError(404, f"ledger {ledger_id} has no metadata") from None
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        except (BookieError, errors.BKException) as exc:
            raise HttpError(503, str(exc)) from None
        return Response(200, "Triggered a cross-replica check")

    def _read_only_or(self, default: bool) -> bool:
        try:
            return self._bookie.read_only
        except BookieError:
            return default


def _files(dirs: tuple[str, ...] | None, wanted: Callable[[str], bool]) -> str:
    """BookKeeper's listing: the names of the wanted files, each followed by a tab."""
    names: list[str] = []
    for d in dirs or ():
        try:
            names += sorted(e.name for e in os.scandir(Path(d) / "current") if wanted(e.name))
        except OSError:
            continue
    return "".join(f"{name}\t" for name in names)


def _required_int(request: Request, name: str) -> int:
    value = request.int_param(name)
    if value is None:
        raise HttpError(400, f"missing parameter {name}")
    return value


def _text(value: object) -> str:
    """A setting as BookKeeper shows it: a string, lists comma-separated."""
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)
