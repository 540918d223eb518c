"""The AutoRecovery admin endpoints, with BookKeeper's paths and shapes:
``/api/v1/autorecovery/list_under_replicated_ledger``, ``who_is_auditor`` and
``lost_bookie_recovery_delay`` (GET, PUT). It reads and sets the under-replication state in the
metadata store; it never copies data itself."""

from __future__ import annotations

from collections.abc import Callable

from pybkx.admin.api_bookie import require
from pybkx.admin.context import AdminContext
from pybkx.admin.http import HttpError, Request, Response

__all__ = ["autorecovery_routes"]

Handler = Callable[[Request], Response]


def autorecovery_routes(ctx: AdminContext) -> dict[str, Handler]:
    def list_under_replicated(request: Request) -> Response:
        require(request, "GET")
        markers = ctx.store().underreplicated_ledgers()
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

    def who_is_auditor(request: Request) -> Response:
        require(request, "GET")
        auditor = ctx.store().auditor_election("admin-api").leader()
        if auditor is None:
            return Response(404, "No auditor elected")
        return Response(200, {"Auditor": auditor})

    def lost_bookie_recovery_delay(request: Request) -> Response:
        require(request, "GET", "PUT")
        store = ctx.store()
        if request.method == "PUT":
            body = request.json_body()
            seconds = body.get("delay_seconds") if isinstance(body, dict) else None
            if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0:
                raise HttpError(400, 'expected {"delay_seconds": <seconds, an integer >= 0>}')
            store.set_lost_bookie_recovery_delay(seconds)
            return Response(200, f"Successfully set lostBookieRecoveryDelay to {seconds}")
        delay = store.lost_bookie_recovery_delay()
        return Response(200, f"lostBookieRecoveryDelay value: {delay or 0}")

    return {
        "/api/v1/autorecovery/list_under_replicated_ledger": list_under_replicated,
        "/api/v1/autorecovery/who_is_auditor": who_is_auditor,
        "/api/v1/autorecovery/lost_bookie_recovery_delay": lost_bookie_recovery_delay,
    }
