"""``pybkx bookie``: run one bookie (with its HTTP services) from a BookKeeper configuration
file and flags, or print the configuration it would run with. It parses and reports; it never
serves anything itself (the bookie is ``pybkx.bookie``, its HTTP services ``pybkx.admin``)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

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
@click.option(
    "--lenient",
    is_flag=True,
    help="Start despite unknown (misspelt) keys in --conf: warn and ignore them.",
)
@click.option(
    "--print-config",
    is_flag=True,
    help="Print the effective configuration with where each value came from, and exit.",
)
@click.option("--json", "as_json", is_flag=True, help="With --print-config: print JSON.")
def bookie_command(
    conf_path: Path | None,
    port: int | None,
    journal_dirs: str | None,
    ledger_dirs: str | None,
    host: str | None,
    readonly: bool,
    lenient: bool,
    print_config: bool,
    as_json: bool,
) -> None:
    """Run a bookie until SIGTERM or SIGINT.

    Reads Apache BookKeeper's key names from --conf (BookKeeper's defaults without it); the
    flags override the file. A key that is neither BookKeeper's nor pybkx's is refused, naming
    the closest known key (--lenient: warned and ignored); BookKeeper keys pybkx does not
    implement are logged at start, one line each, with what pybkx does instead. With
    metadataServiceUri the bookie checks (or stamps) its cookie and registers in an initialised
    cluster (see `pybkx shell initnewcluster`); without, it serves standalone. With
    httpServerEnabled it serves BookKeeper's admin HTTP API (and /metrics) on httpServerPort;
    otherwise, with a Prometheus statsProviderClass, /metrics on prometheusStatsHttpPort. Logs go
    to stdout; a failure to start exits non-zero with one line on stderr. On a signal the bookie
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
    # --print-config keeps stdout for the configuration itself.
    logs.configure(logging.INFO, sys.stderr if print_config else sys.stdout)
    try:
        config = ServerConfig.load(conf_path, overrides, lenient=lenient or print_config)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if print_config:
        _print_config(config, as_json)
        return
    # Imported here: only running needs the server half of the extension and the HTTP stack.
    from pybkx._core import set_metrics_enabled
    from pybkx.admin import services_for
    from pybkx.bookie import Bookie, BookieError, BookieService
    from pybkx.bookie.faultcontrol import start_from_environment
    from pybkx.recovery.service import AutoRecoveryService

    # The process runs this one bookie: its configuration decides whether the process's core
    # records latencies at all (BookKeeper's enableStatistics / NullStatsProvider).
    set_metrics_enabled(config.collects_metrics)
    start_from_environment()  # test-only disk faults; off unless PYBKX_TEST_DISK_FAULTS is set
    try:
        services: list[BookieService] = list(services_for(config))
        if config.auto_recovery_daemon_enabled:
            services.append(AutoRecoveryService())
        code = Bookie(config, services=services).run()
    except BookieError as exc:
        raise click.ClickException(str(exc)) from None
    _exit_now(code)


def _exit_now(code: int) -> NoReturn:
    """End the process once the bookie has stopped (its storage checkpointed and closed), as
    BookKeeper's bookie ends with ``System.exit``: threads a bounded stop left behind (a
    metadata step or AutoRecovery stuck in a retry against an unreachable ZooKeeper) are not
    waited for, which the interpreter's exit would do for the pools among them."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _print_config(config: ServerConfig, as_json: bool) -> None:
    rows = config.describe()
    if as_json:
        click.echo(
            json.dumps(
                [
                    {"key": key, "value": value, "source": origin, "note": note or None}
                    for key, value, origin, note in rows
                ],
                indent=2,
                default=str,
            )
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Effective configuration ({config.source})", title_justify="left")
    for column in ("key", "value", "source", "note"):
        table.add_column(column, overflow="fold")
    for key, value, origin, note in rows:
        shown = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        table.add_row(key, shown, origin, note)
    Console(width=max(120, Console().width)).print(table)
