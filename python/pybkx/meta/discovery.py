"""Which cluster a client with no metadata URI talks to: ``$PYBKX_METADATA_URI``, else a running
``pybkx sandbox`` (which records its URI under ``~/.pybkx``), else the embedded store in
``~/.pybkx/metadata``. It reads and writes that one small record; it never opens a store."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

__all__ = [
    "clear_sandbox_record",
    "default_embedded_uri",
    "default_metadata_uri",
    "describe_default",
    "existing_metadata_uri",
    "record_sandbox",
    "sandbox_record_path",
]


def _home() -> Path:
    return Path(os.environ.get("PYBKX_HOME") or Path.home() / ".pybkx")


def sandbox_record_path() -> Path:
    """Where a running ``pybkx sandbox`` records its metadata URI."""
    return _home() / "sandbox.json"


def default_embedded_uri() -> str:
    """The embedded store of last resort: ``$PYBKX_METADATA_DIR``, else ``~/.pybkx/metadata``."""
    root = os.environ.get("PYBKX_METADATA_DIR") or str(_home() / "metadata")
    return "embedded://" + str(Path(root).resolve())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _running_sandbox_uri() -> str | None:
    try:
        record = json.loads(sandbox_record_path().read_text())
        uri, pid = str(record["uri"]), int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return uri if _alive(pid) else None


def existing_metadata_uri() -> str | None:
    """The URI of a cluster that exists already, in the client's order: ``$PYBKX_METADATA_URI``,
    else the running sandbox's, else :func:`default_embedded_uri` if that store's directory
    exists; None when there is none (what a tool that must not create a store asks)."""
    found = os.environ.get("PYBKX_METADATA_URI") or _running_sandbox_uri()
    if found:
        return found
    embedded = default_embedded_uri()
    return embedded if Path(embedded.removeprefix("embedded://")).is_dir() else None


def default_metadata_uri() -> str:
    """The URI a client with none given uses: :func:`existing_metadata_uri`, else
    :func:`default_embedded_uri` (a store the client then creates)."""
    return existing_metadata_uri() or default_embedded_uri()


def describe_default() -> str:
    """Where a client with no URI looked, for error messages."""
    return (
        f"$PYBKX_METADATA_URI ({os.environ.get('PYBKX_METADATA_URI') or 'unset'}), then a "
        f"running `pybkx sandbox` recorded in {sandbox_record_path()}, then "
        f"{default_embedded_uri()}"
    )


def record_sandbox(uri: str) -> None:
    """Record this process's sandbox as the default cluster (best effort: a read-only home
    only loses the convenience)."""
    path = sandbox_record_path()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"uri": uri, "pid": os.getpid()}))
        tmp.replace(path)


def clear_sandbox_record() -> None:
    """Remove the record if it is this process's."""
    path = sandbox_record_path()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        if int(json.loads(path.read_text())["pid"]) == os.getpid():
            path.unlink()
