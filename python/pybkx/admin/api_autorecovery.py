"""The AutoRecovery admin endpoints, with BookKeeper's paths, methods and shapes under
``/api/v1/autorecovery/``: ``list_under_replicated_ledger`` and ``who_is_auditor`` (GET),
``lost_bookie_recovery_delay`` and ``status`` (GET, PUT), ``trigger_audit`` and ``decommission``
(PUT). It reads and sets the under-replication state in the metadata store; it never copies
data itself (a decommission waits for AutoRecovery to)."""

from __future__ import annotations

from collections.abc import Callable

from pybkx.admin.context import AdminContext
from pybkx.admin.decommission import Decommissions
from pybkx.admin.http import HttpError, Request, Response, require
from pybkx.meta.audit import AuditUnavailable, trigger_audit

__all__ = ["autorecovery_routes"]

Handler = Callable[[Request], Response]


def autorecovery_routes(ctx: AdminContext) -> dict[str, Handler]:
    """The table of AutoRecovery's endpoints: path to handler."""
    api = _AutoRecoveryEndpoints(ctx)
    return {
        "/api/v1/autorecovery/status": api.status,
        "/api/v1/autorecovery/trigger_audit": api.trigger,
        "/api/v1/autorecovery/decommission": api.decommission,
        "/api/v1/autorecovery/list_under_replicated_ledger": api.list_under_replicated,
        "/api/v1/autorecovery/who_is_auditor": api.who_is_auditor,
        "/api/v1/autorecovery/lost_bookie_recovery_delay": api.lost_bookie_recovery_delay,
    }


class _AutoRecoveryEndpoints:
    """One handler per endpoint, each over the context's metadata store; the decommissions
    started here run until done or until the admin server stops."""

    def __init__(self, ctx: AdminContext) -> None:
        self._ctx = ctx
        self._decommissions = Decommissions(ctx.closed)

    def list_under_replicated(self, request: Request) -> Response:
        require(request, "GET")
        markers = self._ctx.store().underreplicated_ledgers()
        missing = request.param("missingreplica")
        excluding = request.param("excludingmissingreplica")
        chosen = {
            ledger_id: replicas
            for ledger_id, replicas in sorted(markers.items())
            if (missing is None or missing in replicas)
            and (excluding is None or excluding not in replicas)
        }
        if not chosen:
            return Response(404, "No under replicated ledgers found")
        if request.param("printmissingreplica") == "true":
            return Response(200, {str(k): v for k, v in chosen.items()})
        return Response(200, list(chosen))

    def who_is_auditor(self, request: Request) -> Response:
        require(request, "GET")
        auditor = self._ctx.store().auditor_election("admin-api").leader()
        if auditor is None:
            return Response(404, "No auditor elected")
        return Response(200, {"Auditor": auditor})

    def lost_bookie_recovery_delay(self, request: Request) -> Response:
        require(request, "GET", "PUT")
        store = self._ctx.store()
        if request.method == "PUT":
            body = request.json_body()
            seconds = body.get("delay_seconds") if isinstance(body, dict) else None
            if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0:
                raise HttpError(400, 'expected {"delay_seconds": <seconds, an integer >= 0>}')
            store.set_lost_bookie_recovery_delay(seconds)
            return Response(200, f"Successfully set lostBookieRecoveryDelay to {seconds}")
        delay = store.lost_bookie_recovery_delay()
        return Response(200, f"lostBookieRecoveryDelay value: {delay or 0}")

    def status(self, request: Request) -> Response:
        require(request, "GET", "PUT")
        store = self._ctx.store()
        if request.method == "PUT":
            enabled = request.param("enabled")
            if enabled is None:
                raise HttpError(400, f"Param 'enabled' not found in {dict(request.params)}")
            wanted = enabled.lower() == "true"  # Java's Boolean.parseBoolean
            if store.replication_enabled() != wanted:
                store.set_replication_enabled(wanted)
        return Response(200, {"enabled": store.replication_enabled()})

    def trigger(self, request: Request) -> Response:
        require(request, "PUT")
        try:
            trigger_audit(self._ctx.store())
        except AuditUnavailable as exc:  # BookKeeper answers 404 when triggerAudit throws
            raise HttpError(404, f"Exception when do operation. {exc}") from None
        return Response(200, "Success trigger audit.")

    def decommission(self, request: Request) -> Response:
        require(request, "PUT")
        body = request.json_body()
        if body is None:
            raise HttpError(404, "Null request body for DecommissionService.")
        bookie = body.get("bookie_src") if isinstance(body, dict) else None
        if not isinstance(bookie, str) or not bookie:
            raise HttpError(404, "Request body not contains bookie_src.")
        flag = body.get("delete_cookie", False)
        delete_cookie = flag is True or (isinstance(flag, str) and flag.lower() == "true")
        try:
            started = self._decommissions.start(self._ctx.store(), bookie, delete_cookie)
        except (ValueError, AuditUnavailable) as exc:
            raise HttpError(404, f"Exception when send decommission command. {exc}") from None
        if not started:
            return Response(200, f"Decommission of {bookie} is already under way")
        return Response(200, f"Success send decommission Bookie command {bookie}")
