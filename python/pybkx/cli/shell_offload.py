"""``pybkx shell offload``, ``listoffloaded`` and ``offloadorphans``: a closed ledger offloaded
to the object store a bookie's ``objectStorage*`` keys name, the ledgers whose metadata records
an offload, and the objects of ledgers that no longer exist (removed with ``--delete``). It
parses and prints; ``pybkx.offload`` does the work."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from pybkx import errors
from pybkx.cli.output import emit
from pybkx.cli.shell_options import client_conf, failed, json_option, resolve_uri

if TYPE_CHECKING:
    from pybkx.config.objectstore import ObjectStorageSettings

__all__ = ["OFFLOAD_COMMANDS"]


def _object_storage(conf_path: Path) -> ObjectStorageSettings:
    """The object storage ``conf_path``'s keys name. Raises ClickException."""
    from pybkx.config import ConfigError, ServerConfig
    from pybkx.config.values import InvalidValue

    try:
        settings = ServerConfig.from_file(conf_path, lenient=True).object_storage()
    except (ConfigError, InvalidValue) as exc:
        raise failed(exc) from None
    if settings is None:
        raise failed(f"{conf_path} sets no objectStorageBucket: there is no object storage")
    return settings


_URI = click.option("--uri", help="metadataServiceUri (default: the one --conf names).")
_CONF = click.option(
    "--conf",
    "conf_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A bookie's configuration file: its objectStorage* keys, metadataServiceUri and "
    "client settings.",
)


@click.command()
@_URI
@_CONF
@click.option("-l", "--ledgerid", "ledger_id", required=True, type=click.IntRange(0))
@click.option(
    "--owner", default=None, help="Who claims the offload (default: this host and process)."
)
@json_option
def offload(
    uri: str | None, conf_path: Path, ledger_id: int, owner: str | None, as_json: bool
) -> None:
    """Offload a closed ledger to object storage as one Parquet object (the local copies
    stay); a ledger already offloaded is left as it is."""
    from pybkx.offload import ObjectStore, offload_ledger
    from pybkx.tools.shell import ShellError, open_client

    settings = _object_storage(conf_path)
    uri = resolve_uri(uri, conf_path)
    try:
        with open_client(uri, **client_conf(conf_path)) as bk:
            try:
                password = bk.store.read_ledger_metadata(ledger_id).value.password
            except errors.NoSuchLedgerExistsOnMetadataServerException:
                raise failed(f"ledger {ledger_id} does not exist") from None
            result = offload_ledger(bk, ObjectStore(settings), ledger_id, password, owner=owner)
    except (ShellError, errors.ObjectStorageException) as exc:
        raise failed(exc) from None
    row = {
        "ledger": ledger_id,
        "action": result.action,
        "object": f"s3://{result.context.bucket}/{result.context.object_key}",
        "entries": result.context.entries,
        "bytes": result.context.size_bytes,
        "rowGroups": len(result.context.row_groups),
    }
    emit([row], list(row), as_json=as_json, title=f"Ledger {ledger_id} offloaded")


@click.command()
@click.option("--uri", help="metadataServiceUri (default: --conf's, else as a client finds it).")
@click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path))
@json_option
def listoffloaded(uri: str | None, conf_path: Path | None, as_json: bool) -> None:
    """List the ledgers whose metadata records an offload (complete, or claimed in progress)."""
    from pybkx.offload import offloaded_ledgers
    from pybkx.tools.shell import ShellError, open_client

    uri = resolve_uri(uri, conf_path)
    try:
        with open_client(uri, **client_conf(conf_path)) as bk:
            found = offloaded_ledgers(bk)
    except ShellError as exc:
        raise failed(exc) from None
    rows = [
        {
            "ledger": ledger_id,
            "state": "offloaded" if context.complete else "claimed",
            "owner": context.owner,
            "object": f"s3://{context.bucket}/{context.object_key}",
            "entries": context.entries,
            "bytes": context.size_bytes,
        }
        for ledger_id, context in found
    ]
    emit(
        rows,
        ["ledger", "state", "owner", "object", "entries", "bytes"],
        as_json=as_json,
        title=f"{len(rows)} offloaded ledgers in {uri}",
    )


@click.command()
@_URI
@_CONF
@click.option("--delete", is_flag=True, help="Remove the orphans that name a ledger.")
@json_option
def offloadorphans(uri: str | None, conf_path: Path, delete: bool, as_json: bool) -> None:
    """List the objects of offloaded ledgers whose metadata is gone (deleted ledgers), and
    with --delete remove them. Keys that name no ledger are listed, never removed."""
    from pybkx.offload import ObjectStore, find_orphan_objects, remove_orphan_objects
    from pybkx.tools.shell import ShellError, open_client

    store = ObjectStore(_object_storage(conf_path))
    uri = resolve_uri(uri, conf_path)
    try:
        with open_client(uri, **client_conf(conf_path)) as bk:
            orphans = find_orphan_objects(bk, store)
            removed = (
                {o.key for o in remove_orphan_objects(bk, store, orphans)} if delete else set()
            )
    except (ShellError, errors.ObjectStorageException) as exc:
        raise failed(exc) from None
    rows = [
        {
            "object": f"s3://{store.settings.bucket}/{o.key}",
            "ledger": o.ledger_id,
            "bytes": o.size_bytes,
            "removed": o.key in removed,
        }
        for o in orphans
    ]
    emit(
        rows,
        ["object", "ledger", "bytes", "removed"],
        as_json=as_json,
        title=f"{len(rows)} orphan objects, {len(removed)} removed",
    )


OFFLOAD_COMMANDS = (offload, listoffloaded, offloadorphans)
