"""``pybkx shell recover``: BookKeeper's manual recovery of lost bookies, with its options.
Parses, confirms, shows progress and prints the report; the work is in ``pybkx.recovery``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from pybkx.cli.output import emit, emit_json
from pybkx.cli.shell_options import cluster, confirmed, failed, json_option, resolve_uri

if TYPE_CHECKING:
    from pybkx.recovery import RecoveryReport

__all__ = ["RECOVERY_COMMANDS"]


@click.command()
@cluster
@click.argument("bookies", nargs=-1, required=True)
@click.option("-q", "--query", is_flag=True, help="Only list the ledgers on these bookies.")
@click.option("-dr", "--dry-run", "dry_run", is_flag=True, help="Plan the copies; change nothing.")
@click.option(
    "-sk", "--skip-open-ledgers", "skip_open", is_flag=True, help="Leave open ledgers alone."
)
@click.option("-l", "--ledger", type=click.IntRange(0), help="Recover only this ledger.")
@click.option("-f", "--force", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "-sku",
    "--skip-unrecoverable-ledgers",
    "skip_unrecoverable",
    is_flag=True,
    help="Go on past a ledger whose data survives nowhere (else stop there).",
)
@click.option(
    "-p",
    "--parallel",
    default=6,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Ledgers copied at once.",
)
@click.option(
    "--rate",
    "rate_mb",
    type=click.FloatRange(min=0, min_open=True),
    help="The most MB/s the copies write (BookKeeper's replicationRateByBytes); no limit "
    "by default.",
)
@click.option(
    "-d",
    "--deletecookie",
    "delete_cookie",
    is_flag=True,
    help="Once every ledger healed, delete the recovered bookies' cookies.",
)
@click.option("-t", "--target", help="The bookie id that takes every copy (default: placement).")
@json_option
def recover(
    uri: str | None,
    conf_path: Path | None,
    bookies: tuple[str, ...],
    query: bool,
    dry_run: bool,
    skip_open: bool,
    ledger: int | None,
    force: bool,
    skip_unrecoverable: bool,
    parallel: int,
    rate_mb: float | None,
    delete_cookie: bool,
    target: str | None,
    as_json: bool,
) -> None:
    """Re-replicate every ledger that has data on the (lost) BOOKIES. Open ledgers are fenced
    and closed first. Exits 0 only when every ledger was healed."""
    from pybkx.cli.output import progress
    from pybkx.recovery import RecoveryOptions, affected_ledgers, recover_bookies
    from pybkx.tools.shell import ShellError, cookie_delete, open_client

    uri = resolve_uri(uri, conf_path)
    if target is not None and target in bookies:
        raise click.UsageError(f"the target {target} is one of the bookies being recovered")
    options = RecoveryOptions(
        ledger=ledger,
        skip_open_ledgers=skip_open,
        skip_unrecoverable_ledgers=skip_unrecoverable,
        dry_run=dry_run,
        target=target,
        parallel_ledgers=parallel,
        rate_bytes_per_s=int(rate_mb * 1e6) if rate_mb else None,
    )
    try:
        with open_client(uri) as bk:
            ids = affected_ledgers(bk.store, bookies, ledger)
            if query:
                if as_json:
                    emit_json({"bookies": list(bookies), "ledgers": ids})
                else:
                    click.echo(f"{len(ids)} ledgers on {', '.join(bookies)}: {ids}")
                return
            question = f"Recover {len(ids)} ledgers of {', '.join(bookies)} onto other bookies?"
            if ids and not (force or dry_run) and not confirmed(question):
                raise failed("not confirmed (give -f to recover without asking)")
            with progress(len(ids), "ledgers recovered") as update:
                report = recover_bookies(
                    bk, bookies, options, lambda done, _, __: update(done), ledgers=ids
                )
            if delete_cookie and report.ok and not dry_run:
                for bookie in bookies:
                    try:
                        cookie_delete(bk.store, bookie)
                    except ShellError as exc:
                        click.echo(f"cookie of {bookie}: {exc}", err=True)
    except ShellError as exc:
        raise failed(exc) from None
    summary = {
        "bookies": list(report.lost),
        "ledgersAffected": report.affected,
        "healed": report.healed,
        "skippedOpen": report.skipped_open,
        "unrecoverable": {str(k): v for k, v in report.unrecoverable.items()},
        "failed": {str(k): v for k, v in report.failed.items()},
        "notReached": report.not_reached,
        "entriesCopied": report.entries_copied,
        "bytesCopied": report.bytes_copied,
        "seconds": round(report.seconds, 3),
    }
    if dry_run:
        summary["plan"] = [
            {
                "ledger": f.ledger_id,
                "firstEntry": f.first,
                "lastEntry": f.last,
                "from": [f.ensemble[i] for i in f.lost],
                "to": [r[i] for i in f.lost] if r else "decided after fencing (open ledger)",
            }
            for f, r in report.planned
        ]
    if as_json:
        emit_json(summary)
    else:
        _print(report, summary, dry_run)
    if not report.ok:
        raise SystemExit(1)


def _print(report: RecoveryReport, summary: dict[str, object], dry_run: bool) -> None:
    """The report for people: what was healed, at what rate, and what was not, and why."""
    if dry_run:
        for step in summary["plan"]:  # type: ignore[attr-defined]
            click.echo(
                f"ledger {step['ledger']}: entries {step['firstEntry']}..{step['lastEntry']} "
                f"from {', '.join(step['from'])} to {step['to']}"
            )
        click.echo(f"dry run: {len(report.affected)} ledgers would be recovered")
        return
    rate = report.bytes_copied / report.seconds / 1e6 if report.seconds > 0 else 0.0
    click.echo(
        f"{len(report.healed)} of {len(report.affected)} ledgers healed: "
        f"{report.entries_copied} entry copies, {report.bytes_copied / 1e6:.1f} MB in "
        f"{report.seconds:.1f}s ({rate:.1f} MB/s)"
    )
    for ledger_id in report.skipped_open:
        click.echo(f"ledger {ledger_id}: skipped (open)", err=True)
    for ledger_id, why in report.unrecoverable.items():
        click.echo(f"ledger {ledger_id}: UNRECOVERABLE: {why}", err=True)
    for ledger_id, why in report.failed.items():
        click.echo(f"ledger {ledger_id}: not recovered: {why}", err=True)
    if report.not_reached:
        click.echo(
            f"stopped at an unrecoverable ledger; not tried: {report.not_reached} "
            "(give -sku to go on past unrecoverable ledgers)",
            err=True,
        )


# --- AutoRecovery ------------------------------------------------------------------------------


@click.command()
@cluster
@json_option
def listunderreplicated(uri: str | None, conf_path: Path | None, as_json: bool) -> None:
    """List the ledgers AutoRecovery marked under-replicated, with the bookies they miss."""
    from pybkx.tools.shell import ShellError, open_store

    uri = resolve_uri(uri, conf_path)
    try:
        with open_store(uri) as store:
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
        with open_store(uri) as store:
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
        with open_store(uri) as store:
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
        with open_store(uri) as store:
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
        with open_store(uri) as store:
            if enable or disable:
                store.set_replication_enabled(enable)
            enabled = store.replication_enabled()
    except ShellError as exc:
        raise failed(exc) from None
    click.echo(f"AutoRecovery is {'enabled' if enabled else 'disabled'}")


@click.command()
@cluster
@click.option("-bookieid", "--bookieid", "bookie", required=True, help="The bookie to retire.")
@click.option("-f", "--force", is_flag=True, help="Do not ask for confirmation.")
def decommissionbookie(uri: str | None, conf_path: Path | None, bookie: str, force: bool) -> None:
    """Retire a stopped bookie: re-replicate every ledger it held, then delete its cookie.
    Refused while the bookie is registered (stop it first)."""
    from pybkx.recovery import recover_bookies
    from pybkx.tools.shell import ShellError, cookie_delete, open_client

    uri = resolve_uri(uri, conf_path)
    try:
        with open_client(uri) as bk:
            if bookie in bk.store.writable_bookies() | bk.store.readonly_bookies():
                raise failed(f"{bookie} is still registered: stop it before decommissioning it")
            if not force and not confirmed(
                f"Re-replicate {bookie}'s ledgers and delete its cookie?"
            ):
                raise failed("not confirmed (give -f to decommission without asking)")
            report = recover_bookies(bk, [bookie])
            if not report.ok:
                problems = {**report.unrecoverable, **report.failed}
                raise failed(
                    f"{len(report.healed)} of {len(report.affected)} ledgers healed; the cookie is "
                    f"kept. Not healed: {problems}"
                )
            cookie_delete(bk.store, bookie)
    except ShellError as exc:
        raise failed(exc) from None
    click.echo(
        f"{bookie} decommissioned: {len(report.healed)} ledgers re-replicated, cookie deleted"
    )


RECOVERY_COMMANDS = (
    recover,
    decommissionbookie,
    listunderreplicated,
    whoisauditor,
    triggeraudit,
    lostbookierecoverydelay,
    autorecovery,
)
