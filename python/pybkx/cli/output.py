"""How commands print: tables for people (rich), JSON for machines (``--json``), and progress
bars on stderr for long commands (quiet when stderr is not a terminal). It formats; it never
decides what a command does."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence

import click

__all__ = ["emit", "emit_json", "progress"]


def emit_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def emit(
    rows: Sequence[Mapping[str, object]],
    columns: Sequence[str],
    *,
    as_json: bool,
    title: str | None = None,
) -> None:
    """``rows`` as a table of ``columns`` or, with ``as_json``, as a JSON list of objects."""
    if as_json:
        emit_json([dict(row) for row in rows])
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    console = Console(soft_wrap=False, width=max(100, Console().width))
    console.print(table)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


@contextlib.contextmanager
def progress(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """A progress bar of ``total`` steps on stderr; yields ``update(done)``. Nothing is drawn
    when stderr is not a terminal."""
    if not sys.stderr.isatty() or total <= 0:
        yield lambda done: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)
