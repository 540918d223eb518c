"""The fault suite: every test here reproduces a fault found by a fault probe (real bookie
processes, real ZooKeeper, loopback) and is marked ``faults``."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/faults/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.integration)
