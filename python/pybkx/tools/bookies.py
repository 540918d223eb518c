"""What administrators ask about bookies, shared by ``pybkx shell`` and the admin HTTP API:
registered bookies, their published endpoints, disk space (from each bookie's admin HTTP
endpoint, the way BookKeeper asks each bookie with GET_BOOKIE_INFO), and cookies. It reads the
metadata store and bookies' HTTP endpoints; it never prints and never changes a bookie.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pybkx import errors
from pybkx.meta import MetadataStore
from pybkx.tools.admin_http import open_admin

__all__ = [
    "BOOKIE_INFO_TIMEOUT_S",
    "DiskInfo",
    "admin_caller",
    "admin_url",
    "bookie_disk_info",
    "call_json",
    "disk_info",
    "format_bytes",
    "list_bookies",
]

BOOKIE_INFO_TIMEOUT_S = 5.0
"""How long one bookie's admin endpoint may take to answer."""

_KINDS = ("rw", "ro", "all")


@dataclass(frozen=True)
class DiskInfo:
    """Free and total bytes of a bookie's ledger directories (each file system once)."""

    free: int
    total: int


def list_bookies(store: MetadataStore, kind: str = "rw") -> list[str]:
    """Registered bookie ids, sorted: writable ("rw"), read-only ("ro") or both ("all").
    Raises ValueError for another kind, MetaStoreException."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {', '.join(_KINDS)}, got {kind!r}")
    found: set[str] = set()
    if kind in ("rw", "all"):
        found |= store.writable_bookies()
    if kind in ("ro", "all"):
        found |= store.readonly_bookies()
    return sorted(found)


def bookie_host(store: MetadataStore, bookie_id: str) -> str:
    """The host a bookie published for its RPC endpoint (its id's host part if none)."""
    try:
        info = store.bookie_service_info(bookie_id)
    except errors.BKException:
        info = None
    for endpoint in info.endpoints if info else ():
        if endpoint.protocol == "bookie-rpc":
            return endpoint.host
    return bookie_id.rsplit(":", 1)[0]


def admin_url(store: MetadataStore, bookie_id: str) -> str | None:
    """``scheme://host:port`` of the admin HTTP server a bookie published (``httpserver``;
    ``https`` when it serves TLS), if any."""
    try:
        info = store.bookie_service_info(bookie_id)
    except errors.BKException:
        return None
    for endpoint in info.endpoints:
        if endpoint.id == "httpserver" and endpoint.protocol in ("http", "https"):
            return f"{endpoint.protocol}://{endpoint.host}:{endpoint.port}"
    return None


def fetch_json(base_url: str, path: str, timeout_s: float = BOOKIE_INFO_TIMEOUT_S) -> object:
    """GET ``{base_url}{path}`` as JSON (https as ``pybkx.tools.admin_http`` sets it up).
    Raises OSError (unreachable, TLS refused, HTTP error, not JSON)."""
    return call_json(base_url, path, timeout_s=timeout_s)


def call_json(
    base_url: str,
    path: str,
    *,
    method: str = "GET",
    token: str | None = None,
    timeout_s: float = BOOKIE_INFO_TIMEOUT_S,
) -> object:
    """``method`` ``{base_url}{path}``, the answer as JSON; ``token``: sent as a bearer token
    (the admin API's write endpoints may require one). Raises OSError (unreachable, TLS
    refused, HTTP error, not JSON)."""
    url = f"{base_url}{path}"
    request = urllib.request.Request(url, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with open_admin(request, timeout_s) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ValueError) as exc:
        raise OSError(f"{url}: {exc}") from None


def admin_caller(
    store: MetadataStore, token: str | None = None, timeout_s: float = BOOKIE_INFO_TIMEOUT_S
) -> Callable[[str, str, str], object]:
    """``ask(bookie_id, method, path)``: the JSON a bookie's published admin endpoint answers,
    with ``token`` as its bearer token. ``ask`` raises OSError when the bookie publishes no
    endpoint, cannot be reached, refuses or answers no JSON."""

    def ask(bookie_id: str, method: str, path: str) -> object:
        base_url = admin_url(store, bookie_id)
        if base_url is None:
            raise OSError(f"{bookie_id} publishes no admin HTTP endpoint")
        return call_json(base_url, path, method=method, token=token, timeout_s=timeout_s)

    return ask


def bookie_disk_info(
    store: MetadataStore, bookie_id: str, timeout_s: float = BOOKIE_INFO_TIMEOUT_S
) -> DiskInfo | None:
    """A bookie's free and total space, asked from its admin HTTP endpoint; None when it
    publishes none or does not answer."""
    url = admin_url(store, bookie_id)
    if url is None:
        return None
    try:
        info = fetch_json(url, "/api/v1/bookie/info", timeout_s)
    except OSError:
        return None
    if not isinstance(info, dict):
        return None
    try:
        return DiskInfo(free=int(info["freeSpace"]), total=int(info["totalSpace"]))
    except (KeyError, TypeError, ValueError):
        return None


def disk_info(dirs: Iterable[str]) -> DiskInfo:
    """Free and total bytes of the file systems holding ``dirs`` (each counted once)."""
    seen: set[int] = set()
    free = total = 0
    for d in dirs:
        try:
            st = os.statvfs(d)
            device = os.stat(d).st_dev
        except OSError:
            continue
        if device in seen:
            continue
        seen.add(device)
        free += st.f_bavail * st.f_frsize
        total += st.f_blocks * st.f_frsize
    return DiskInfo(free=free, total=total)


def format_bytes(n: int) -> str:
    """As BookKeeper prints space: ``74711134208(74.711GB)``."""
    return f"{n}({n / 1e9:.3f}GB)"
