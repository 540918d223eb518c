"""The ``pybkx`` command line: parses arguments and hands each command to the module that owns it.
It must never hold storage, protocol or demo logic itself; it only parses, calls and prints."""

from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click

from pybkx import errors
from pybkx._core import scan_journal
from pybkx.config import ConfigError, ServerConfig
from pybkx.demo import DemoError, run_demo

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pybkx")
def main() -> None:
    """pybkx: a replicated log store that speaks Apache BookKeeper's protocol."""


@main.command()
@click.option("--entries", default=100_000, show_default=True, type=click.IntRange(min=3))
@click.option(
    "--size",
    "size_bytes",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Payload bytes per entry.",
)
@click.option("--bookies", default=3, show_default=True, type=click.IntRange(min=3, max=16))
@click.option("--zk", "zk_uri", help="ZooKeeper metadataServiceUri instead of the embedded store.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the sandbox here instead of a temporary directory.",
)
def demo(
    entries: int, size_bytes: int, bookies: int, zk_uri: str | None, directory: Path | None
) -> None:
    """Cluster demo (the README's main job).

    Starts a sandbox of BOOKIES bookie processes, writes ENTRIES entries to an E=3/Qw=2/Qa=2
    ledger while one bookie of its ensemble is killed with SIGKILL (and restarted), lets a second
    client open the ledger with recovery, reads everything back with batch reads, verifies every
    byte and prints throughput. Exits non-zero on any mismatch.
    """
    from pybkx.workload import WorkloadError, run_workload

    try:
        run_workload(entries, size_bytes, bookies, zk_uri, directory, report=click.echo)
    except (WorkloadError, errors.BKException) as exc:
        raise click.ClickException(f"demo failed: {type(exc).__name__}: {exc}") from exc
    click.echo("demo OK")


@main.command("storage-demo")
@click.option("--entries", default=100_000, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--size",
    "size_bytes",
    default=1024,
    show_default=True,
    type=click.IntRange(min=1),
    help="Payload bytes per entry.",
)
@click.option(
    "--writers",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Writer threads; each writes its own ledger.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the storage here (empty or new) instead of a temporary directory.",
)
def storage_demo(entries: int, size_bytes: int, writers: int, directory: Path | None) -> None:
    """Storage engine demo: write entries, read them back, verify, report.

    Writes ENTRIES entries of SIZE bytes to a local ledger storage (BookKeeper defaults) from
    WRITERS threads, one ledger each, reads all back with read_range, verifies every byte and
    prints throughput and journal stats (entries per fsync). Exits non-zero on any mismatch.
    """
    try:
        run_demo(entries, size_bytes, writers, directory, report=click.echo)
    except (DemoError, errors.BKException) as exc:
        raise click.ClickException(f"storage demo failed: {type(exc).__name__}: {exc}") from exc
    click.echo("storage demo OK")


@main.command("bookie")
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
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stdout)
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


@main.command("sandbox")
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
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, stream=sys.stderr)
    from pybkx.sandbox import Sandbox, SandboxError

    try:
        sandbox = Sandbox(bookies, zk_uri=zk_uri, directory=directory, base_port=base_port)
        code = sandbox.run(report=lambda line: click.echo(line))
    except (SandboxError, ValueError) as exc:
        raise click.ClickException(f"sandbox failed: {exc}") from None
    except errors.BKException as exc:
        raise click.ClickException(f"sandbox failed: {type(exc).__name__}: {exc}") from None
    sys.exit(code)


@main.group()
def shell() -> None:
    """Administer a cluster and inspect bookie files (like BookKeeper's shell)."""


_URI_HELP = "metadataServiceUri: zk+hierarchical://host:port/ledgers or embedded:///abs/dir"


@shell.command()
@click.option("--uri", required=True, help=_URI_HELP)
def initnewcluster(uri: str) -> None:
    """Initialise a new cluster's metadata (fails if one exists)."""
    from pybkx.shell import ShellError, init_new_cluster

    try:
        instance_id = init_new_cluster(uri)
    except ShellError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"initialised a new cluster at {uri} (instance id {instance_id})")


@shell.command()
@click.option("--uri", required=True, help=_URI_HELP)
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
def metaformat(uri: str, force: bool) -> None:
    """Delete all ledgers, registrations and cookies, then initialise afresh.

    Asks for confirmation unless --force. Bookies that had joined refuse to start until their
    directories are formatted (their cookies name the old cluster instance).
    """
    from pybkx.shell import ShellError, meta_format

    if not force:
        try:
            confirmed = click.confirm(
                f"Format the metadata at {uri}? Every ledger and cookie is deleted", err=True
            )
        except click.Abort:  # no answer (stdin closed): end the prompt's line
            click.echo(err=True)
            confirmed = False
        if not confirmed:
            raise click.ClickException("metaformat not confirmed: nothing changed (use --force)")
    try:
        instance_id = meta_format(uri)
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
