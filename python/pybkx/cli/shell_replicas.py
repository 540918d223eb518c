"""``pybkx shell crossreplicacheck``: compares the replicas of closed ledgers, fragment by
fragment, and repairs the odd one out (pybkx's own command: BookKeeper's shell has none). It
parses and prints; the check is ``pybkx.bookie.replica_check``'s, through each bookie's
``/api/v1/bookie/ledger_digest``.
"""

from __future__ import annotations

from pathlib import Path

import click

from pybkx.cli.output import emit, emit_json
from pybkx.cli.shell_options import client_conf, cluster, failed, json_option, resolve_uri

__all__ = ["REPLICA_COMMANDS"]


@click.command("crossreplicacheck")
@cluster
@json_option
@click.option(
    "--ledger",
    "ledgers",
    type=click.IntRange(min=0),
    multiple=True,
    help="Check this ledger (repeatable; default: every closed ledger).",
)
@click.option(
    "--no-repair",
    is_flag=True,
    help="Only report: rewrite no copy, even of an odd one out.",
)
def crossreplicacheck(
    uri: str | None,
    conf_path: Path | None,
    as_json: bool,
    ledgers: tuple[int, ...],
    no_repair: bool,
) -> None:
    """Compare the replicas of closed ledgers (each bookie's digest of the entries it should
    hold, asked through its admin HTTP API) and rewrite the copies of an odd one out from the
    majority, as recovery adds. Exits 1 when a difference is left unrepaired (two replicas that
    disagree have no majority) or a bookie could not be asked."""
    from pybkx import errors
    from pybkx.bookie.replica_access import AdminReplicas
    from pybkx.bookie.replica_check import LedgerCheck, check_ledger
    from pybkx.tools.bookies import admin_caller
    from pybkx.tools.shell import ShellError, open_client

    uri = resolve_uri(uri, conf_path)
    done = LedgerCheck()
    skipped: list[dict[str, object]] = []
    try:
        with open_client(uri, **client_conf(conf_path)) as bk:
            replicas = AdminReplicas(admin_caller(bk.store), bk.bookies, bk.address_of)
            for ledger_id in ledgers or sorted(bk.store.list_ledgers()):
                try:
                    md = bk.store.read_ledger_metadata(ledger_id).value
                except errors.NoSuchLedgerExistsOnMetadataServerException:
                    skipped.append({"ledgerId": ledger_id, "why": "no metadata"})
                    continue
                if not md.is_closed:
                    skipped.append({"ledgerId": ledger_id, "why": "not closed"})
                    continue
                done.add(check_ledger(replicas, ledger_id, md, repair=not no_repair))
    except ShellError as exc:
        raise failed(exc) from None
    report = {**done.as_json(), "skipped": skipped}
    if as_json:
        emit_json(report)
    else:
        rows = [
            {
                "ledger": f.ledger_id,
                "bookie": f.bookie,
                "kind": f.kind,
                "entries": len(f.entries),
                "repaired": len(f.repaired),
                "detail": f.detail or (f"rewritten from {f.source}" if f.repaired else ""),
            }
            for f in done.findings
        ]
        columns = ["ledger", "bookie", "kind", "entries", "repaired", "detail"]
        emit(rows, columns, as_json=False, title="cross-replica findings")
        for bookie, why in sorted(done.not_asked.items()):
            click.echo(f"not asked: {bookie}: {why}")
        click.echo(
            f"{done.ranges} ranges compared, {done.entries} entry copies, "
            f"{done.differing} differing, {done.repaired} repaired"
        )
    if done.unrepaired or done.not_asked:
        raise SystemExit(1)


REPLICA_COMMANDS = (crossreplicacheck,)
