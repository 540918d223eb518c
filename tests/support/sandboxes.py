"""Sandboxes of pybkx bookies a test starts with the configuration it gives (the ``sandboxes``
fixture: stopped at the end of the test), and the sum of one of their Prometheus metrics."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pybkx.tools.admin_http import open_admin
from pybkx.tools.sandbox import Sandbox

__all__ = ["metric_total", "sandboxes"]

StartSandbox = Callable[..., Sandbox]


def metric_total(cluster: Sandbox, name: str) -> float:
    """The sum over every bookie of ``cluster`` of the samples of metric ``name`` (read from
    their admin endpoints' ``/metrics``)."""
    total = 0.0
    for url in cluster.admin_urls:
        with open_admin(f"{url}/metrics", timeout_s=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(name) and not line.startswith("#"):
                    total += float(line.split()[-1])
    return total


@pytest.fixture
def sandboxes(tmp_path: Path) -> Iterator[StartSandbox]:
    """``start(conf, name="sandbox", zk_uri=None, bookies=3)``: a started Sandbox in
    ``tmp_path / name``, with ``conf`` given to every bookie."""
    started: list[Sandbox] = []

    def start(
        conf: dict[str, Any], name: str = "sandbox", zk_uri: str | None = None, bookies: int = 3
    ) -> Sandbox:
        sandbox = Sandbox(bookies, zk_uri=zk_uri, directory=tmp_path / name, conf=conf)
        sandbox.start()
        started.append(sandbox)
        return sandbox

    yield start
    for sandbox in reversed(started):
        sandbox.stop()
