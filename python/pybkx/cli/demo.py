"""``pybkx demo`` and ``pybkx storage-demo``: the README's main job and the storage engine's demo.
It parses and reports; it never holds demo logic (the demos live in ``pybkx.tools``)."""

from __future__ import annotations

from pathlib import Path

import click

from pybkx import errors


@click.command()
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
    from pybkx.tools.demo import DemoError, run_demo

    try:
        run_demo(entries, size_bytes, bookies, zk_uri, directory, report=click.echo)
    except (DemoError, errors.BKException) as exc:
        raise click.ClickException(f"demo failed: {type(exc).__name__}: {exc}") from exc
    click.echo("demo OK")


@click.command("storage-demo")
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
    from pybkx.tools.storage_demo import StorageDemoError, run_storage_demo

    try:
        run_storage_demo(entries, size_bytes, writers, directory, report=click.echo)
    except (StorageDemoError, errors.BKException) as exc:
        raise click.ClickException(f"storage demo failed: {type(exc).__name__}: {exc}") from exc
    click.echo("storage demo OK")
