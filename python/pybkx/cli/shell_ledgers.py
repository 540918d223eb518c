"""``pybkx shell`` commands about ledgers: listledgers, ledgermetadata, readledger (and its
alias ledger), deleteledger, simpletest and updateledgers, as BookKeeper's. They parse and print
(long ones with a progress bar); they never do the work themselves (``pybkx.tools`` does)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from pybkx import errors
from pybkx.cli.output import emit, emit_json, progress
from pybkx.cli.shell_options import (
    client_conf,
    cluster,
    confirmed,
    failed,
    json_option,
    resolve_uri,
)

__all__ = ["LEDGER_COMMANDS"]

# --- ledgers ----------------------------------------------------------------------------------


@click.command()
@cluster
@click.option("-m", "--meta", is_flag=True, help="Also each ledger's metadata.")
@json_option
def listledgers(uri: str | None, conf_path: Path | None, meta: bool, as_json: bool) -> None:
    """List every ledger of the cluster (with -m, its state, quorums, last entry, length)."""
    from pybkx.tools.ledgers import ledger_metadata_json
    from pybkx.tools.shell import ShellError, open_store

    uri = resolve_uri(uri, conf_path)
    rows: list[dict[str, object]] = []
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            ids = list(store.list_ledgers())
            with progress(len(ids) if meta else 0, "reading metadata") as update:
                for n, ledger_id in enumerate(ids, 1):
                    row: dict[str, object] = {"ledger": ledger_id}
                    if meta:
                        try:
                            md = store.read_ledger_metadata(ledger_id).value
                        except errors.NoSuchLedgerExistsOnMetadataServerException:
                            continue  # deleted while listing
                        row.update(ledger_metadata_json(ledger_id, md))
                        row["quorums"] = (
                            f"{md.ensemble_size}/{md.write_quorum_size}/{md.ack_quorum_size}"
                        )
                        row["ensemble"] = list(md.last_ensemble)
                    rows.append(row)
                    update(n)
    except ShellError as exc:
        raise failed(exc) from None
    if as_json:
        emit_json(rows)
        return
    columns = ["ledger"]
    if meta:
        columns += ["state", "quorums", "lastEntryId", "length", "ensemble"]
    emit(rows, columns, as_json=False, title=f"{len(rows)} ledgers in {uri}")


@click.command()
@cluster
@click.option("-l", "--ledgerid", "ledger_id", required=True, type=click.IntRange(0))
def ledgermetadata(uri: str | None, conf_path: Path | None, ledger_id: int) -> None:
    """Print a ledger's metadata (JSON, as BookKeeper's admin API shows it)."""
    from pybkx.tools.ledgers import ledger_metadata_json
    from pybkx.tools.shell import ShellError, open_store

    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            try:
                md = store.read_ledger_metadata(ledger_id).value
            except errors.NoSuchLedgerExistsOnMetadataServerException:
                raise click.ClickException(f"ledger {ledger_id} does not exist") from None
    except ShellError as exc:
        raise failed(exc) from None
    emit_json(ledger_metadata_json(ledger_id, md))


_READ_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option("-l", "--ledgerid", "ledger_id", required=True, type=click.IntRange(0)),
    click.option("-fe", "--firstentryid", "first", default=0, type=click.IntRange(0)),
    click.option(
        "-le", "--lastentryid", "last", default=-1, type=click.IntRange(-1), help="-1: the last."
    ),
    click.option(
        "--format",
        "fmt",
        type=click.Choice(["hex", "string"]),
        default="hex",
        show_default=True,
        help="How to print each entry's data.",
    ),
]


def _read_command(name: str, doc: str) -> click.Command:
    def command(
        uri: str | None,
        conf_path: Path | None,
        ledger_id: int,
        first: int,
        last: int,
        fmt: str,
        as_json: bool,
    ) -> None:
        from pybkx.tools.ledgers import read_ledger
        from pybkx.tools.shell import ShellError, open_client

        uri = resolve_uri(uri, conf_path)
        rows: list[dict[str, object]] = []
        try:
            with open_client(uri, **client_conf(conf_path)) as bk:
                for entry_id, payload in read_ledger(bk, ledger_id, first, last):
                    data = payload.hex() if fmt == "hex" else payload.decode("utf-8", "replace")
                    rows.append({"entry": entry_id, "size": len(payload), "data": data})
        except (ShellError, errors.BKException) as exc:
            raise failed(exc) from None
        emit(rows, ["entry", "size", "data"], as_json=as_json, title=f"Ledger {ledger_id}")

    command.__doc__ = doc
    decorated: Callable[..., Any] = json_option(cluster(command))
    for option in reversed(_READ_OPTIONS):
        decorated = option(decorated)
    return click.command(name)(decorated)


readledger = _read_command(
    "readledger",
    "Print the entries of a ledger (from -fe to -le), read through its bookies without "
    "recovering it.",
)
ledger = _read_command(
    "ledger",
    "Print the entries of a ledger, as readledger (pybkx reads them through the bookies; "
    "BookKeeper's `ledger` reads a stopped bookie's index).",
)


@click.command()
@cluster
@click.option("-l", "--ledgerid", "ledger_id", required=True, type=click.IntRange(0))
@click.option("-f", "--force", is_flag=True, help="Do not ask for confirmation.")
def deleteledger(uri: str | None, conf_path: Path | None, ledger_id: int, force: bool) -> None:
    """Delete a ledger (its metadata; bookies drop the data at their next garbage collection)."""
    from pybkx.tools.shell import ShellError, delete_ledger, open_store

    uri = resolve_uri(uri, conf_path)
    if not force and not confirmed(f"Delete ledger {ledger_id}?"):
        raise click.ClickException("not confirmed: nothing changed (use --force)")
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            delete_ledger(store, ledger_id)
    except ShellError as exc:
        raise failed(exc) from None
    click.echo(f"deleted ledger {ledger_id}")


@click.command()
@cluster
@click.option("-e", "--ensemble", default=3, show_default=True, type=click.IntRange(1))
@click.option(
    "-w", "--writeQuorum", "write_quorum", default=2, show_default=True, type=click.IntRange(1)
)
@click.option(
    "-a", "--ackQuorum", "ack_quorum", default=2, show_default=True, type=click.IntRange(1)
)
@click.option(
    "-n",
    "--numEntries",
    "entries",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10_000_000),
)
@json_option
def simpletest(
    uri: str | None,
    conf_path: Path | None,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    entries: int,
    as_json: bool,
) -> None:
    """Write N entries to a new ledger across the cluster, read them back, delete it."""
    from pybkx.tools.shell import ShellError, simple_test

    uri = resolve_uri(uri, conf_path)
    try:
        with progress(2 * entries, "writing, then reading") as update:
            result = simple_test(
                uri, entries, ensemble, write_quorum, ack_quorum, update, **client_conf(conf_path)
            )
    except ShellError as exc:
        raise failed(exc) from None
    summary = {
        "ledger": result.ledger_id,
        "entries": result.entries,
        "ensemble": list(result.ensemble),
        "write_s": round(result.write_s, 3),
        "read_s": round(result.read_s, 3),
    }
    if as_json:
        emit_json(summary)
    else:
        click.echo(
            f"{result.entries} entries written to ledger {result.ledger_id} on "
            f"{', '.join(result.ensemble)} in {result.write_s:.2f}s and read back in "
            f"{result.read_s:.2f}s"
        )


@click.command()
@cluster
@click.option("-sb", "--srcbookie", "src", required=True, help="The bookie id to replace.")
@click.option("-db", "--destbookie", "dest", required=True, help="The bookie id to put instead.")
@click.option(
    "-s",
    "--updatespersec",
    "rate",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.01),
    help="Metadata updates per second.",
)
@click.option("-l", "--limit", type=click.IntRange(1), help="Update at most this many ledgers.")
@click.option("--dry-run", is_flag=True, help="Only list the ledgers that would change.")
@json_option
def updateledgers(
    uri: str | None,
    conf_path: Path | None,
    src: str,
    dest: str,
    rate: float,
    limit: int | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Replace a bookie id by another in every ledger's ensembles (a bookie that changed its
    identity, as BookKeeper's updateledgers/updateBookieInLedger)."""
    from pybkx.tools.shell import ShellError, open_store, update_ledgers

    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            total = sum(1 for _ in store.list_ledgers())
            with progress(total, f"updating {src} -> {dest}") as update:
                result = update_ledgers(
                    store,
                    src,
                    dest,
                    updates_per_s=rate,
                    limit=limit,
                    dry_run=dry_run,
                    progress=lambda done, _total: update(done),
                )
    except ShellError as exc:
        raise failed(exc) from None
    if as_json:
        emit_json({"examined": result.examined, "updated": result.updated, "dry_run": dry_run})
    else:
        verb = "would update" if dry_run else "updated"
        click.echo(
            f"{verb} {len(result.updated)} of {result.examined} ledgers: "
            f"{', '.join(map(str, result.updated)) or 'none'}"
        )


LEDGER_COMMANDS = (
    listledgers,
    ledgermetadata,
    readledger,
    ledger,
    deleteledger,
    simpletest,
    updateledgers,
)
