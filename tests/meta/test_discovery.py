"""Which cluster a client or the shell uses with no URI given (``pybkx.meta.discovery``): the
order $PYBKX_METADATA_URI, a running sandbox, the embedded default; the shell's variant never
names a store that does not exist."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pybkx.meta import discovery


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYBKX_HOME", str(tmp_path))
    monkeypatch.delenv("PYBKX_METADATA_URI", raising=False)
    monkeypatch.delenv("PYBKX_METADATA_DIR", raising=False)
    return tmp_path


def test_nothing_exists_yet_so_only_the_client_has_a_uri(home: Path) -> None:
    assert discovery.existing_metadata_uri() is None
    assert discovery.default_metadata_uri() == f"embedded://{(home / 'metadata').resolve()}"


def test_the_embedded_default_counts_once_its_store_exists(home: Path) -> None:
    (home / "metadata").mkdir()
    assert discovery.existing_metadata_uri() == discovery.default_embedded_uri()


def test_a_running_sandbox_comes_before_the_embedded_default(home: Path) -> None:
    (home / "metadata").mkdir()
    discovery.record_sandbox("zk+hierarchical://127.0.0.1:1/ledgers")
    assert discovery.existing_metadata_uri() == "zk+hierarchical://127.0.0.1:1/ledgers"
    discovery.clear_sandbox_record()
    assert not discovery.sandbox_record_path().exists()


def test_a_dead_sandbox_record_is_ignored(home: Path) -> None:
    dead = max(int(p) for p in os.listdir("/proc") if p.isdigit()) + 10_000
    discovery.sandbox_record_path().write_text(f'{{"uri": "embedded:///x", "pid": {dead}}}')
    assert discovery.existing_metadata_uri() is None


def test_the_environment_comes_first(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    discovery.record_sandbox("embedded:///sandbox")
    monkeypatch.setenv("PYBKX_METADATA_URI", "embedded:///from-env")
    assert discovery.existing_metadata_uri() == "embedded:///from-env"
    assert discovery.default_metadata_uri() == "embedded:///from-env"
