"""The ``pybkx`` command line: one module per command group, each parsing arguments and handing
the work to the module that owns it. It must never hold storage, protocol or demo logic."""

from __future__ import annotations

import click

from pybkx.cli.autorecovery import autorecovery_command
from pybkx.cli.bookie import bookie_command
from pybkx.cli.demo import demo, storage_demo
from pybkx.cli.sandbox import sandbox_command
from pybkx.cli.shell import shell
from pybkx.cli.top import top_command

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pybkx")
def main() -> None:
    """pybkx: a replicated log store that speaks Apache BookKeeper's protocol."""


for command in (
    demo,
    storage_demo,
    bookie_command,
    autorecovery_command,
    sandbox_command,
    shell,
    top_command,
):
    main.add_command(command)
