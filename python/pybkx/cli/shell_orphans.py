"""``pybkx shell orphans``: what the cluster holds that its metadata does not account for, or
that its metadata promises and a bookie lacks (pybkx's own command: BookKeeper's shell has
none). It parses and prints; the checks and fixes are ``pybkx.recovery.orphans``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from pybkx.cli.output import emit, emit_json
from pybkx.cli.shell_options import client_conf, cluster, failed, json_option, resolve_uri

if TYPE_CHECKING:
    from pybkx.recovery.orphans import OrphanReport

__all__ = ["ORPHAN_COMMANDS"]


@click.command()
@cluster
@json_option
@click.option(
    "--fix",
    is_flag=True,
    help="Fix what is found: remove markers of deleted ledgers, mark ledgers lacking copies "
    "under-replicated (AutoRecovery copies them), have bookies remove what no metadata names.",
)
@click.option(
    "--admin-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file holding the bearer token of the bookies' admin API (default: the "
    "httpServerAuthTokenPath of --conf).",
)
def orphans(
    uri: str | None,
    conf_path: Path | None,
    as_json: bool,
    fix: bool,
    admin_token_file: Path | None,
) -> None:
    """Find orphans: under-replication markers of deleted ledgers, ledgers whose metadata
    names a live bookie lacking entries, and ledgers bookies store that no metadata accounts
    for (gone or over-replicated). Exits 1 when any is found and --fix was not given."""
    from pybkx.recovery.orphans import find_orphans, fix_orphans
    from pybkx.tools.bookies import admin_caller
    from pybkx.tools.shell import ShellError, open_client

    uri = resolve_uri(uri, conf_path)
    token = _admin_token(conf_path, admin_token_file)
    try:
        with open_client(uri, **client_conf(conf_path)) as bk:
            ask = admin_caller(bk.store, token)
            report = find_orphans(bk, ask)
            done = fix_orphans(bk, ask, report) if fix else None
    except ShellError as exc:
        raise failed(exc) from None
    rows = _rows(report)
    if as_json:
        emit_json({"found": rows, "fixed": _rows(done) if done is not None else None})
    else:
        emit(rows, ["kind", "ledger", "bookie", "detail"], as_json=False, title="orphans")
        if done is not None:
            emit(_rows(done), ["kind", "ledger", "bookie", "detail"], as_json=False, title="fixed")
    if not report.clean and done is None:
        raise SystemExit(1)


def _admin_token(conf_path: Path | None, token_file: Path | None) -> str | None:
    from pybkx.config import ConfigError, ServerConfig
    from pybkx.config.keystores import read_password

    try:
        if token_file is not None:
            token = read_password("--admin-token-file", str(token_file))
        elif conf_path is not None:
            config = ServerConfig.from_file(conf_path, lenient=True)
            token = read_password("httpServerAuthTokenPath", config.http_server_auth_token_path)
        else:
            token = ""
    except ConfigError as exc:
        raise failed(exc) from None
    return token or None


def _rows(report: OrphanReport) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for ledger in report.markers_without_ledger:
        rows.append(_row("marker-without-ledger", ledger))
    for ledger, missing in sorted(report.missing_copies.items()):
        for bookie, entries in sorted(missing.items()):
            rows.append(_row("missing-copy", ledger, bookie, f"{len(entries)} entries"))
    for bookie, stored in sorted(report.stored.items()):
        for ledger in stored.without_metadata:
            rows.append(_row("stored-without-metadata", ledger, bookie))
        for ledger in stored.over_replicated:
            rows.append(_row("over-replicated", ledger, bookie))
    for bookie, why in sorted(report.not_asked.items()):
        rows.append(_row("not-asked", "", bookie, why))
    return rows


def _row(kind: str, ledger: int | str, bookie: str = "", detail: str = "") -> dict[str, object]:
    return {"kind": kind, "ledger": ledger, "bookie": bookie, "detail": detail}


ORPHAN_COMMANDS = (orphans,)
