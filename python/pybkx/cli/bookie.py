"""``pybkx bookie``: run one bookie from a BookKeeper configuration file and flags.
It parses and reports; the bookie itself is ``pybkx.bookie``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from pybkx.cli import logs
from pybkx.config import ConfigError, ServerConfig


@click.command("bookie")
@click.option(
    "--conf",
    "conf_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="BookKeeper server configuration: bk_server.conf (properties) syntax, or *.toml.",
)
@click.option("--port", type=click.IntRange(0, 65535), help="bookiePort")
@click.option("--journal-dirs", metavar="A,B", help="journalDirectories (comma-separated)")
@click.option("--ledger-dirs", metavar="A,B", help="ledgerDirectories (comma-separated)")
@click.option(
    "--host",
    help="listeningInterface: a network interface name, or an address to listen on.",
)
@click.option("--readonly", is_flag=True, help="Start read-only (forceReadOnlyBookie=true).")
def bookie_command(
    conf_path: Path | None,
    port: int | None,
    journal_dirs: str | None,
    ledger_dirs: str | None,
    host: str | None,
    readonly: bool,
) -> None:
    """Run a bookie until SIGTERM or SIGINT.

    Reads Apache BookKeeper's key names from --conf (BookKeeper's defaults without it); the
    flags override the file. With metadataServiceUri the bookie checks (or stamps) its cookie
    and registers; without, it serves standalone. Logs go to stdout; a failure to start (an
    InvalidCookieException too) exits non-zero with one line on stderr. On a signal the bookie
    unregisters, drains in-flight requests, checkpoints and exits 0.
    """
    flags: dict[str, object] = {
        "bookiePort": port,
        "journalDirectories": journal_dirs,
        "ledgerDirectories": ledger_dirs,
        "listeningInterface": host,
        "forceReadOnlyBookie": True if readonly else None,
    }
    overrides = {key: value for key, value in flags.items() if value is not None}
    logs.configure(logging.INFO, sys.stdout)
    try:
        config = ServerConfig.load(conf_path, overrides)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    # Imported here: only this command needs the server half of the extension.
    from pybkx.bookie import Bookie, BookieError

    try:
        code = Bookie(config).run()
    except BookieError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(code)
