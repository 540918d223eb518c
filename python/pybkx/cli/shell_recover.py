"""``pybkx shell`` commands of manual recovery, as BookKeeper's: ``recover`` (lost bookies
re-replicated, with its options) and ``decommissionbookie`` (a stopped bookie re-replicated and
its cookie deleted). They parse, confirm, show progress and print the report; they never copy
data themselves (``pybkx.recovery`` does)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from pybkx.cli.output import emit_json
from pybkx.cli.shell_options import (
    client_conf,
    cluster,
    confirmed,
    failed,
    json_option,
    resolve_uri,
)

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
        with open_client(uri, **client_conf(conf_path)) as bk:
            ids = affected_ledgers(bk.store, bookies, ledger)
            if query:
                _print_affected(bookies, ids, as_json)
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
    summary = _summary(report, dry_run)
    if as_json:
        emit_json(summary)
    else:
        _print(report, summary, dry_run)
    if not report.ok:
        raise SystemExit(1)


def _print_affected(bookies: tuple[str, ...], ids: list[int], as_json: bool) -> None:
    """``recover -q``: the ledgers with data on the bookies."""
    if as_json:
        emit_json({"bookies": list(bookies), "ledgers": ids})
    else:
        click.echo(f"{len(ids)} ledgers on {', '.join(bookies)}: {ids}")


def _summary(report: RecoveryReport, dry_run: bool) -> dict[str, object]:
    """The report under BookKeeper-style keys (``--json``), with the plan of a dry run."""
    summary: dict[str, object] = {
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
    return summary


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
        with open_client(uri, **client_conf(conf_path)) as bk:
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


RECOVERY_COMMANDS = (recover, decommissionbookie)
