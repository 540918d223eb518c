"""``pybkx shell``: cluster administration and file inspection, as BookKeeper's shell: the
cluster (initnewcluster, metaformat, cookie, updateledgers), bookies (listbookies, bookieinfo,
bookiesanity, lastmark), ledgers (listledgers, ledgermetadata, readledger, deleteledger,
simpletest), files (readjournal), the local consistency check (``shell_scrub``), manual
recovery (``shell_recover``), AutoRecovery (``shell_autorecovery``), orphans
(``shell_orphans``) and offload to object storage (``shell_offload``). It parses and prints
(tables, or JSON with ``--json``); it never does the work itself (``pybkx.tools``,
``pybkx.recovery``, ``pybkx.offload`` do)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import click

from pybkx import errors
from pybkx._core import scan_journal
from pybkx.cli.shell_autorecovery import AUTORECOVERY_COMMANDS
from pybkx.cli.shell_bookies import BOOKIE_COMMANDS
from pybkx.cli.shell_ledgers import LEDGER_COMMANDS
from pybkx.cli.shell_offload import OFFLOAD_COMMANDS
from pybkx.cli.shell_options import client_conf, cluster, confirmed, resolve_uri
from pybkx.cli.shell_orphans import ORPHAN_COMMANDS
from pybkx.cli.shell_recover import RECOVERY_COMMANDS
from pybkx.cli.shell_replicas import REPLICA_COMMANDS
from pybkx.cli.shell_scrub import SCRUB_COMMANDS


@click.group()
def shell() -> None:
    """Administer a cluster and inspect bookie files (like BookKeeper's shell)."""


@shell.command()
@cluster
def initnewcluster(uri: str | None, conf_path: Path | None) -> None:
    """Initialise a new cluster's metadata (fails if one exists). Bookies refuse to start on a
    metadata root that is not initialised."""
    from pybkx.tools.shell import ShellError, init_new_cluster

    uri = resolve_uri(uri, conf_path)
    try:
        instance_id = init_new_cluster(uri, **client_conf(conf_path))
    except ShellError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"initialised a new cluster at {uri} (instance id {instance_id})")


@shell.command()
@cluster
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
def metaformat(uri: str | None, conf_path: Path | None, force: bool) -> None:
    """Delete all ledgers, registrations and cookies, then initialise afresh.

    Asks for confirmation unless --force. Bookies that had joined refuse to start until their
    directories are formatted (their cookies name the old cluster instance).
    """
    from pybkx.tools.shell import ShellError, meta_format

    uri = resolve_uri(uri, conf_path)
    if not force and not confirmed(
        f"Format the metadata at {uri}? Every ledger and cookie is deleted"
    ):
        raise click.ClickException("metaformat not confirmed: nothing changed (use --force)")
    try:
        instance_id = meta_format(uri, **client_conf(conf_path))
    except ShellError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"formatted the metadata at {uri} (new instance id {instance_id})")


def _format_record(record: dict[str, Any]) -> str:
    kind = record.get("kind", "?")
    head = f"{record.get('offset', '?'):>12} {record.get('size', ''):>8} {kind:<6}"
    if kind == "end":
        return f"{head} {record.get('reason', '')}".rstrip()
    fields = [f"ledger={record.get('ledger_id')}"]
    if record.get("entry_id") is not None:
        fields.append(f"entry={record['entry_id']}")
    return f"{head} {' '.join(fields)}"


@shell.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def readjournal(path: Path) -> None:
    """Print the records of a journal file (.txn).

    One line per valid record: offset, size on disk, kind, ledger and entry id; then where and
    why the valid data ends.
    """
    try:
        records = scan_journal(str(path))
    except (OSError, errors.BKException) as exc:
        raise click.ClickException(f"cannot read {path}: {type(exc).__name__}: {exc}") from exc
    click.echo(f"Journal {path}")
    click.echo(f"{'offset':>12} {'size':>8} {'kind':<6} details")
    for record in records:
        click.echo(_format_record(record))
    kinds = Counter(str(record.get("kind")) for record in records if record.get("kind") != "end")
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "none"
    click.echo(f"{kinds.total()} records: {summary}")


for _command in (
    *BOOKIE_COMMANDS,
    *LEDGER_COMMANDS,
    *RECOVERY_COMMANDS,
    *AUTORECOVERY_COMMANDS,
    *ORPHAN_COMMANDS,
    *SCRUB_COMMANDS,
    *REPLICA_COMMANDS,
    *OFFLOAD_COMMANDS,
):
    shell.add_command(_command)
