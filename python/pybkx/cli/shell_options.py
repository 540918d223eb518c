"""The options ``pybkx shell`` commands share: which cluster (``--uri``, a bookie's ``--conf``,
or the one a client finds), ``--json``, asking for confirmation and turning failures into
one-line errors. Parsing only: it never reaches a cluster."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = ["cluster", "confirmed", "failed", "json_option", "resolve_uri"]

_URI_HELP = (
    "metadataServiceUri: zk+hierarchical://host:port/ledgers or embedded:///abs/dir (default: "
    "$PYBKX_METADATA_URI, else a running `pybkx sandbox`, else ~/.pybkx/metadata if it exists)"
)
_F = TypeVar("_F", bound=Callable[..., Any])


def cluster(command: _F) -> _F:
    """``--uri`` or ``--conf`` (a bookie's configuration naming its metadataServiceUri); with
    neither, the cluster a client would find (``$PYBKX_METADATA_URI``, a running sandbox)."""
    command = click.option(
        "--conf",
        "conf_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="A bookie's configuration file: its metadataServiceUri, and for commands that "
        "read or write ledgers its client settings (zkTimeout, TLS keys).",
    )(command)
    return click.option("--uri", help=_URI_HELP)(command)


def json_option(command: _F) -> _F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        command
    )


def resolve_uri(uri: str | None, conf_path: Path | None) -> str:
    """The metadata URI from --uri, else from --conf, else found as a client finds it:
    ``$PYBKX_METADATA_URI``, a running ``pybkx sandbox``, the embedded default store if it
    exists (a shell command never creates one). Raises ClickException."""
    if uri:
        return uri
    if conf_path is None:
        return _found_as_a_client_finds_it()
    from pybkx.config import ConfigError, ServerConfig

    try:
        found = ServerConfig.from_file(conf_path, lenient=True).metadata_uri()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if found is None:
        raise click.ClickException(f"{conf_path} names no metadataServiceUri or zkServers")
    return found


def client_conf(conf_path: Path | None) -> dict[str, object]:
    """The client keys of a shell command's client: with ``--conf``, those the bookie's
    configuration gives a client (``zkTimeout``, TLS: so the shell works on a cluster that
    requires TLS), else none. Raises ClickException for a file that cannot be read."""
    if conf_path is None:
        return {}
    from pybkx.config import ConfigError, ServerConfig

    try:
        return ServerConfig.from_file(conf_path, lenient=True).client_settings()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _found_as_a_client_finds_it() -> str:
    from pybkx.meta.discovery import describe_default, existing_metadata_uri

    found = existing_metadata_uri()
    if found is not None:
        return found
    raise click.UsageError(f"give --uri or --conf: no cluster found at {describe_default()}")


def failed(exc: Exception | str) -> click.ClickException:
    return click.ClickException(str(exc))


def confirmed(question: str) -> bool:
    """Ask on stderr; no answer (stdin closed) is no. The prompt's line always ends, so that
    an error after it stands on a line of its own."""
    try:
        answer = click.confirm(question, err=True)
    except click.Abort:
        answer = False
    if not sys.stdin.isatty():
        click.echo(err=True)
    return answer
