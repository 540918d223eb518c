"""The command line every stand-alone bench script shares: ``--set KEY=VALUE`` bookie settings,
the working directory (``--dir``, or a temporary one removed at the end), and the figures,
printed as JSON and written to ``--json`` when given. It never measures anything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def work_dir(given: str | Path | None, prefix: str) -> Iterator[Path]:
    """``given`` (kept), or a new temporary directory named ``prefix``... removed on exit."""
    if given:
        yield Path(given)
        return
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def report_figures(figures: dict[str, object], json_path: str | None) -> int:
    """Prints a bench's figures as JSON and, when asked, writes them to ``json_path`` too;
    returns the exit status (0)."""
    text = json.dumps(figures, indent=2)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")
    return 0


def add_settings_option(parser: argparse.ArgumentParser, help: str) -> None:
    """Adds ``--set KEY=VALUE`` (repeatable) for bookie settings to ``parser``."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def settings_of(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, str]:
    """The ``--set`` pairs as a mapping; a malformed one ends the program with a usage error."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"--set wants KEY=VALUE, got {pair!r}")
        settings[key] = value
    return settings
