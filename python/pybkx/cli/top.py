"""``pybkx top``: the live view of a cluster in the terminal. It parses options, finds the
bookies and redraws; it never scrapes or computes the view itself (``pybkx.admin.top``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import click

from pybkx.cli.shell_options import client_conf, resolve_uri


@click.command("top")
@click.option("--uri", help="metadataServiceUri of the cluster (its bookies' admin endpoints).")
@click.option(
    "--conf",
    "conf_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A bookie's configuration file; its metadataServiceUri is used.",
)
@click.option(
    "--url",
    "urls",
    multiple=True,
    metavar="http://HOST:PORT",
    help="Watch this metrics endpoint (repeatable) instead of the registered bookies.",
)
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(0.1, 3600))
@click.option(
    "--iterations", default=0, type=click.IntRange(0), help="Stop after N refreshes (0: never)."
)
def top_command(
    uri: str | None,
    conf_path: Path | None,
    urls: tuple[str, ...],
    interval: float,
    iterations: int,
) -> None:
    """Watch a cluster live: per bookie adds/s, reads/s, latency, connections, journal queue
    and disk use per directory tier, and the cluster's totals, every second. Bookies are found
    through their registrations (those running with httpServerEnabled publish their admin
    endpoint), or given with --url. Ctrl-C quits."""
    from rich.live import Live

    from pybkx.admin.top import ClusterTargets, Target, View, render
    from pybkx.tools.shell import ShellError, open_store

    closing = contextlib.ExitStack()
    header: dict[str, str] = {}
    targets: Callable[[], list[Target]]
    if urls:
        given = [Target(u.rstrip("/"), u.rstrip("/")) for u in urls]

        def targets() -> list[Target]:
            return given

    else:
        try:
            found = resolve_uri(uri, conf_path)
            store = closing.enter_context(open_store(found, **client_conf(conf_path)))
        except ShellError as exc:
            raise click.ClickException(str(exc)) from None
        cluster = ClusterTargets(store)
        targets, header = cluster, cluster.header
    view = View(targets)
    closing.callback(view.close)
    try:
        rows = view.refresh()
        with Live(render(rows, header), auto_refresh=False, transient=False) as live:
            done = 1
            while iterations == 0 or done < iterations:
                time.sleep(interval)
                live.update(render(view.refresh(), header), refresh=True)
                done += 1
    except KeyboardInterrupt:
        pass
    finally:
        closing.close()
