"""``pybkx shell localconsistencycheck``: BookKeeper's check of a bookie's own storage, run
offline on the directories of ``--conf`` (the bookie stopped: the storage locks them). Every
entry the index points at is read back and checked (an unpaced scrub); the output follows
BookKeeper's shell, one line per damaged entry, exit status 1 when any is found. It parses and
prints; the storage's scrubber does the work."""

from __future__ import annotations

from pathlib import Path

import click

from pybkx import errors
from pybkx.cli.output import emit_json
from pybkx.cli.shell_options import failed, json_option

__all__ = ["SCRUB_COMMANDS"]


@click.command()
@click.option(
    "-c",
    "--conf",
    "conf_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The bookie's configuration file (its journal, ledger and index directories).",
)
@json_option
def localconsistencycheck(conf_path: Path, as_json: bool) -> None:
    """Validate Ledger Storage internal metadata: read every stored entry back and check its
    record CRC, ids and client digest (the bookie must be stopped)."""
    from pybkx.bookie.exceptions import BookieError
    from pybkx.bookie.scrub import report_dict
    from pybkx.bookie.serving import open_storage
    from pybkx.config import ConfigError, ServerConfig

    try:
        config = ServerConfig.from_file(conf_path, lenient=True)
    except ConfigError as exc:
        raise failed(exc) from None
    if not as_json:
        click.echo("=== Performing local consistency check ===")
    try:
        storage = open_storage(config)
    except BookieError as exc:
        raise failed(f"{exc} (is the bookie still running?)") from None
    try:
        report = storage.scrub(0)
    except errors.BKException as exc:
        raise failed(f"local consistency check failed: {type(exc).__name__}: {exc}") from None
    finally:
        storage.close()
    if as_json:
        emit_json(report_dict(report))
    elif report.corrupt_entries:
        click.echo("=== Check returned errors: ===")
        for f in report.findings:
            click.echo(
                f"Ledger {f.ledger_id}, entry {f.entry_id}: {f.check} at {f.entry_log}:{f.offset}"
            )
    else:
        click.echo(
            f"=== Check passed === ({report.entries_verified} entries in "
            f"{report.logs_scrubbed} entry logs, {report.bytes_scrubbed} bytes)"
        )
    if report.corrupt_entries:
        raise SystemExit(1)


SCRUB_COMMANDS = (localconsistencycheck,)
