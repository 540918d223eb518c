"""Cluster administration behind ``pybkx shell``: initnewcluster and metaformat, as BookKeeper's.
It acts on the metadata store a URI names; it must never touch bookie files or prompt."""

from __future__ import annotations

from typing import Any

from pybkx import errors
from pybkx.meta import MetadataStore, open_metadata_store

__all__ = ["ShellError", "init_new_cluster", "meta_format"]


class ShellError(Exception):
    """An admin command failed; the message is one line for the operator."""


def _open(uri: str, conf: dict[str, Any]) -> MetadataStore:
    try:
        return open_metadata_store(uri, **conf)
    except ValueError as exc:
        raise ShellError(str(exc)) from None
    except errors.BKException as exc:
        raise ShellError(
            f"cannot open the metadata store {uri}: {type(exc).__name__}: {exc}"
        ) from None


def init_new_cluster(uri: str, **conf: Any) -> str:
    """Initialise a new cluster at ``uri`` (layout, instance id, registration paths).

    Returns the new instance id. Raises ShellError if the cluster is already initialised (as
    BookKeeper's ``initnewcluster`` fails then) or the store cannot be reached. ``conf`` goes
    to :func:`pybkx.meta.open_metadata_store` (e.g. ``zkTimeout``).
    """
    store = _open(uri, conf)
    try:
        if not store.init_new_cluster():
            raise ShellError(
                f"a cluster is already initialised at {uri} (instance id {store.instance_id()}); "
                "use metaformat to wipe it"
            )
        return store.instance_id()
    except errors.BKException as exc:
        raise ShellError(f"initnewcluster failed on {uri}: {type(exc).__name__}: {exc}") from None
    finally:
        store.close()


def meta_format(uri: str, **conf: Any) -> str:
    """Delete every ledger, registration and cookie at ``uri`` and initialise it afresh.

    Returns the new instance id. Bookies that had joined must be formatted (their directory
    cookies name the old instance) before they can join again. Raises ShellError if the store
    cannot be reached or fails.
    """
    store = _open(uri, conf)
    try:
        store.format()
        return store.instance_id()
    except errors.BKException as exc:
        raise ShellError(f"metaformat failed on {uri}: {type(exc).__name__}: {exc}") from None
    finally:
        store.close()
