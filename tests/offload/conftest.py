"""Fixtures of the offload tests: the module's S3-compatible server (S3Proxy) and a sandbox
cluster of three bookies with its client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.s3server import S3Server, s3_server  # noqa: F401

from pybkx.client import BookKeeper
from pybkx.config.objectstore import ObjectStorageSettings
from pybkx.tools.sandbox import Sandbox


def settings_for(server: S3Server, bucket: str, **overrides: object) -> ObjectStorageSettings:
    """Object-storage settings pointing at ``server``'s ``bucket``."""
    values: dict[str, object] = {
        "bucket": bucket,
        "endpoint": f"http://{server.endpoint}",
        "access_key": server.access_key,
        "secret_key": server.secret_key,
        "prefix": "cold",
        "row_group_bytes": 64 * 1024,
        "request_timeout_ms": 5000,
    }
    values.update(overrides)
    return ObjectStorageSettings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, BookKeeper]]:
    """Three sandbox bookies on the embedded metadata store, and a client of them."""
    directory: Path = tmp_path_factory.mktemp("offload") / "sandbox"
    with Sandbox(3, directory=directory) as sandbox, BookKeeper(sandbox.metadata_uri) as bk:
        yield sandbox, bk
