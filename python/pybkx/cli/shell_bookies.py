"""``pybkx shell`` commands about bookies: listbookies, bookieinfo, bookiesanity, lastmark and
cookie, as BookKeeper's. They parse and print; they never do the work themselves
(``pybkx.tools`` does)."""

from __future__ import annotations

from pathlib import Path

import click

from pybkx.cli.output import emit, emit_json
from pybkx.cli.shell_options import (
    client_conf,
    cluster,
    confirmed,
    failed,
    json_option,
    resolve_uri,
)

__all__ = ["BOOKIE_COMMANDS"]

# --- bookies ----------------------------------------------------------------------------------


@click.command()
@cluster
@click.option("-rw", "--readwrite", is_flag=True, help="Writable bookies (the default).")
@click.option("-ro", "--readonly", is_flag=True, help="Read-only bookies.")
@click.option("-a", "--all", "all_", is_flag=True, help="Writable and read-only bookies.")
@click.option("-h", "--hostnames", is_flag=True, help="Also the host each bookie published.")
@json_option
def listbookies(
    uri: str | None,
    conf_path: Path | None,
    readwrite: bool,
    readonly: bool,
    all_: bool,
    hostnames: bool,
    as_json: bool,
) -> None:
    """List the registered bookies (BookKeeper's listbookies -rw/-ro/-a)."""
    from pybkx.tools.bookies import admin_url, bookie_host
    from pybkx.tools.shell import ShellError, open_store

    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            writable, ro = store.writable_bookies(), store.readonly_bookies()
            wanted = (
                (writable | ro)
                if all_ or (readwrite and readonly)
                else (ro if readonly else writable)
            )
            rows = []
            for bookie_id in sorted(wanted):
                rows.append(
                    {
                        "bookie": bookie_id,
                        "state": "read-only" if bookie_id in ro else "writable",
                        "host": bookie_host(store, bookie_id) if hostnames else None,
                        "admin": admin_url(store, bookie_id),
                    }
                )
    except ShellError as exc:
        raise failed(exc) from None
    columns = ["bookie", "state", *(["host"] if hostnames else []), "admin"]
    emit(rows, columns, as_json=as_json, title=f"{len(rows)} bookies in {uri}")


@click.command()
@cluster
@json_option
def bookieinfo(uri: str | None, conf_path: Path | None, as_json: bool) -> None:
    """Free and total disk space of every bookie (asked from its admin HTTP endpoint), and of
    the cluster."""
    from pybkx.tools.bookies import bookie_disk_info, list_bookies
    from pybkx.tools.shell import ShellError, open_store

    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            infos = {b: bookie_disk_info(store, b) for b in list_bookies(store, "all")}
    except ShellError as exc:
        raise failed(exc) from None
    rows: list[dict[str, object]] = [
        {
            "bookie": b,
            "free": info.free if info else None,
            "total": info.total if info else None,
            "used %": round(100 * (1 - info.free / info.total), 1) if info and info.total else None,
        }
        for b, info in infos.items()
    ]
    known = [info for info in infos.values() if info is not None]
    free, total = sum(i.free for i in known), sum(i.total for i in known)
    rows.append(
        {
            "bookie": "cluster",
            "free": free,
            "total": total,
            "used %": round(100 * (1 - free / total), 1) if total else None,
        }
    )
    emit(rows, ["bookie", "free", "total", "used %"], as_json=as_json, title="Bookie disk space")


@click.command()
@cluster
@click.option("-b", "--bookie", "bookie_id", help="The bookie id (default: the one --conf runs).")
@click.option("-e", "--entries", default=10, show_default=True, type=click.IntRange(1, 100_000))
@json_option
def bookiesanity(
    uri: str | None, conf_path: Path | None, bookie_id: str | None, entries: int, as_json: bool
) -> None:
    """Write entries to a ledger on one bookie alone, read them back, delete the ledger."""
    from pybkx.tools.shell import ShellError, bookie_sanity

    uri = resolve_uri(uri, conf_path)
    bookie_id = bookie_id or _conf_bookie_id(conf_path)
    try:
        result = bookie_sanity(uri, bookie_id, entries, **client_conf(conf_path))
    except ShellError as exc:
        raise failed(f"bookie sanity test failed for {bookie_id}: {exc}") from None
    if as_json:
        emit_json({"bookie": bookie_id, "passed": True, "entries": result.entries})
    else:
        click.echo(f"Bookie sanity test succeeded: {bookie_id} ({result.entries} entries)")


def _conf_bookie_id(conf_path: Path | None) -> str:
    if conf_path is None:
        raise click.UsageError("give --bookie, or --conf of the bookie to check")
    from pybkx.config import ConfigError, ServerConfig

    try:
        config = ServerConfig.from_file(conf_path, lenient=True)
        return config.bookie_identity(config.bookie_port)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@click.command()
@cluster
@click.option("-b", "--bookie", "bookie_id", help="One bookie (default: every registered one).")
@json_option
def lastmark(uri: str | None, conf_path: Path | None, bookie_id: str | None, as_json: bool) -> None:
    """The last log mark of each bookie's journals: how far its journal is durable and applied
    (asked from the bookie's admin HTTP endpoint)."""
    from pybkx.tools.bookies import admin_url, fetch_json, list_bookies
    from pybkx.tools.shell import ShellError, open_store

    uri = resolve_uri(uri, conf_path)
    rows: list[dict[str, object]] = []
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            for b in [bookie_id] if bookie_id else list_bookies(store, "all"):
                url = admin_url(store, b)
                if url is None:
                    rows.append({"bookie": b, "journal": None, "position": "no admin endpoint"})
                    continue
                try:
                    marks = fetch_json(url, "/api/v1/bookie/last_log_mark")
                except OSError as exc:
                    rows.append({"bookie": b, "journal": None, "position": str(exc)})
                    continue
                assert isinstance(marks, dict)
                for journal, position in marks.items():
                    rows.append({"bookie": b, "journal": journal, "position": position})
    except ShellError as exc:
        raise failed(exc) from None
    emit(rows, ["bookie", "journal", "position"], as_json=as_json, title="Last log marks")


@click.command()
@click.argument("action", type=click.Choice(["get", "update", "delete"]))
@click.argument("bookie_id")
@cluster
@click.option(
    "-cf",
    "--cookie-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="update: the new cookie (BookKeeper's cookie text).",
)
@click.option("-f", "--force", is_flag=True, help="delete: do not ask for confirmation.")
@json_option
def cookie(
    action: str,
    bookie_id: str,
    uri: str | None,
    conf_path: Path | None,
    cookie_file: Path | None,
    force: bool,
    as_json: bool,
) -> None:
    """Show, replace or remove a bookie's cookie in the metadata store (BookKeeper's
    cookie_get, cookie_update, cookie_delete)."""
    from pybkx.tools.shell import (
        ShellError,
        cookie_delete,
        cookie_get,
        cookie_text,
        cookie_update,
        open_store,
    )

    uri = resolve_uri(uri, conf_path)
    if action == "update" and cookie_file is None:
        raise click.UsageError("cookie update needs --cookie-file")
    if action == "delete" and not force and not confirmed(f"Delete the cookie of {bookie_id}?"):
        raise click.ClickException("not confirmed: nothing changed (use --force)")
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            if action == "get":
                found = cookie_get(store, bookie_id)
            elif action == "update":
                assert cookie_file is not None
                found = cookie_update(store, bookie_id, cookie_file.read_bytes())
            else:
                cookie_delete(store, bookie_id)
                click.echo(f"deleted the cookie of {bookie_id}")
                return
    except (ShellError, OSError) as exc:
        raise failed(exc) from None
    c = found.value
    if as_json:
        emit_json(
            {
                "bookieId": c.bookie_id,
                "journalDirs": list(c.journal_dirs),
                "ledgerDirs": list(c.ledger_dirs),
                "indexDirs": list(c.index_dirs) if c.index_dirs is not None else None,
                "instanceId": c.instance_id,
                "version": found.version,
            }
        )
    else:
        click.echo(cookie_text(c), nl=False)


BOOKIE_COMMANDS = (listbookies, bookieinfo, bookiesanity, lastmark, cookie)
