"""``pybkx autorecovery``: AutoRecovery on its own (BookKeeper's ``bin/bookkeeper
autorecovery``), for clusters whose bookies do not run it (``autoRecoveryDaemonEnabled``).
It parses, starts and waits for a signal; it never audits or copies itself (``pybkx.recovery``
does)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

import click

from pybkx.cli import logs
from pybkx.config import ConfigError, ServerConfig


@click.command("autorecovery")
@click.option(
    "--conf",
    "conf_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A bookie's configuration: its metadataServiceUri and AutoRecovery keys are used.",
)
def autorecovery_command(conf_path: Path) -> None:
    """Run an auditor elector and a replication worker until SIGTERM or SIGINT."""
    from pybkx import errors
    from pybkx.recovery.service import open_autorecovery, stop_autorecovery

    logs.configure(logging.INFO, sys.stderr)
    try:
        config = ServerConfig.from_file(conf_path, lenient=True)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    node_id = config.bookie_id or f"{socket.gethostname()}-autorecovery-{os.getpid()}"
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            auto = open_autorecovery(config, node_id)
        except (ValueError, errors.BKException) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"AutoRecovery running as {node_id}", err=True)
        try:
            while not stop.wait(1.0):
                pass
        finally:
            stop_autorecovery(auto)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
