"""``pybkx sandbox``: a local cluster of bookie processes until Ctrl-C.
It parses and reports; it never starts a process itself (the sandbox is
``pybkx.tools.sandbox``)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from pybkx import errors
from pybkx.cli import logs


@click.command("sandbox")
@click.option(
    "--bookies",
    default=3,
    show_default=True,
    type=click.IntRange(1, 100),
    help="How many bookie processes.",
)
@click.option(
    "--zk",
    "zk_uri",
    metavar="URI",
    help="ZooKeeper: zk+hierarchical://host:port/ledgers or host:port "
    "(default: an embedded store in the sandbox directory).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep everything here (reusable) instead of a temporary directory removed on exit.",
)
@click.option(
    "--base-port",
    type=click.IntRange(1, 65535),
    help="Bookie i listens on BASE_PORT + i (default: free ports).",
)
def sandbox_command(
    bookies: int, zk_uri: str | None, directory: Path | None, base_port: int | None
) -> None:
    """Run a local cluster until SIGTERM or SIGINT (like BookKeeper's localbookie).

    Starts BOOKIES `pybkx bookie` processes on 127.0.0.1 sharing one metadata store, waits until
    all are registered, prints the metadata URI and the bookie addresses, reports a bookie that
    dies, and on Ctrl-C stops them all and exits 0.
    """
    logs.configure(logging.WARNING, sys.stderr)
    from pybkx.tools.sandbox import Sandbox, SandboxError

    try:
        sandbox = Sandbox(bookies, zk_uri=zk_uri, directory=directory, base_port=base_port)
        code = sandbox.run(report=lambda line: click.echo(line))
    except (SandboxError, ValueError) as exc:
        raise click.ClickException(f"sandbox failed: {exc}") from None
    except errors.BKException as exc:
        raise click.ClickException(f"sandbox failed: {type(exc).__name__}: {exc}") from None
    sys.exit(code)
