"""``pybkx shell`` commands about AutoRecovery, as BookKeeper's: listunderreplicated,
whoisauditor, triggeraudit, lostbookierecoverydelay and autorecovery (enable, disable, show).
They read and set AutoRecovery's state in the metadata store; they never copy data (the
replication workers do) and never run an auditor.
"""

from __future__ import annotations

from pathlib import Path

import click

from pybkx.cli.output import emit, emit_json
from pybkx.cli.shell_options import client_conf, cluster, failed, json_option, resolve_uri

__all__ = ["AUTORECOVERY_COMMANDS"]


@click.command()
@cluster
@json_option
def listunderreplicated(uri: str | None, conf_path: Path | None, as_json: bool) -> None:
    """List the ledgers AutoRecovery marked under-replicated, with the bookies they miss."""
    from pybkx.tools.shell import ShellError, open_store

    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            markers = store.underreplicated_ledgers()
    except ShellError as exc:
        raise failed(exc) from None
    rows = [{"ledger": k, "missingReplicas": v} for k, v in sorted(markers.items())]
    if as_json:
        emit_json(rows)
    else:
        emit(rows, ["ledger", "missingReplicas"], as_json=False, title="under-replicated")


@click.command()
@cluster
def whoisauditor(uri: str | None, conf_path: Path | None) -> None:
    """Print the bookie id of the cluster's auditor."""
    from pybkx.tools.shell import ShellError, open_store

    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            election = store.auditor_election("pybkx-shell")
            auditor = election.leader()
    except ShellError as exc:
        raise failed(exc) from None
    if auditor is None:
        raise failed("no auditor is running")
    click.echo(f"Auditor: {auditor}")


@click.command()
@cluster
def triggeraudit(uri: str | None, conf_path: Path | None) -> None:
    """Make the auditor audit lost bookies now, by storing lostBookieRecoveryDelay again with
    the value it has (as BookKeeper's triggeraudit). Fails when AutoRecovery is disabled or no
    auditor is elected."""
    from pybkx.recovery.auditor import AuditUnavailable, trigger_audit
    from pybkx.tools.shell import ShellError, open_store

    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            try:
                delay = trigger_audit(store)
            except AuditUnavailable as exc:
                raise failed(exc) from None
    except ShellError as exc:
        raise failed(exc) from None
    click.echo(f"Audit triggered (lostBookieRecoveryDelay {delay} s stored again)")


@click.command()
@cluster
@click.option("-g", "--get", "get", is_flag=True, help="Print the delay.")
@click.option("-s", "--set", "seconds", type=click.IntRange(0), help="Set the delay (seconds).")
def lostbookierecoverydelay(
    uri: str | None, conf_path: Path | None, get: bool, seconds: int | None
) -> None:
    """Get or set how long the auditor waits before marking one lost bookie's ledgers."""
    from pybkx.tools.shell import ShellError, open_store

    if get == (seconds is not None):
        raise click.UsageError("give exactly one of -g and -s N")
    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            if seconds is not None:
                store.set_lost_bookie_recovery_delay(seconds)
            delay = store.lost_bookie_recovery_delay()
    except ShellError as exc:
        raise failed(exc) from None
    click.echo(f"lostBookieRecoveryDelay value: {delay if delay is not None else 0}")


@click.command()
@cluster
@click.option("-e", "--enable", is_flag=True, help="Let AutoRecovery replicate.")
@click.option("-d", "--disable", is_flag=True, help="Stop AutoRecovery replicating.")
def autorecovery(uri: str | None, conf_path: Path | None, enable: bool, disable: bool) -> None:
    """Enable, disable, or (with neither flag) show whether AutoRecovery replicates."""
    from pybkx.tools.shell import ShellError, open_store

    if enable and disable:
        raise click.UsageError("give -e or -d, not both")
    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri, **client_conf(conf_path)) as store:
            if enable or disable:
                store.set_replication_enabled(enable)
            enabled = store.replication_enabled()
    except ShellError as exc:
        raise failed(exc) from None
    click.echo(f"AutoRecovery is {'enabled' if enabled else 'disabled'}")


AUTORECOVERY_COMMANDS = (
    listunderreplicated,
    whoisauditor,
    triggeraudit,
    lostbookierecoverydelay,
    autorecovery,
)
