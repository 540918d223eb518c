"""An append larger than the bookies' frame limit (``nettyMaxFrameSizeBytes``) fails at once with
IncorrectParameterException; it used to hang for ever while the client "replaced" bookies. The
ledger goes on, with its ensemble unchanged.

Owns that bound of the append path against real bookie processes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pybkx
from pybkx import errors
from pybkx.tools.sandbox import Sandbox


@pytest.fixture
def bk(tmp_path: Path) -> Iterator[pybkx.BookKeeper]:
    with (
        Sandbox(3, directory=tmp_path / "sandbox") as sandbox,
        pybkx.BookKeeper(sandbox.metadata_uri) as client,
    ):
        yield client


def test_an_entry_too_large_for_the_bookies_fails_at_once(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 2, 2)
    assert lh.append(b"before") == 0
    started = time.monotonic()
    with pytest.raises(errors.IncorrectParameterException, match="exceeds"):
        lh.append(b"x" * (6 << 20))
    assert time.monotonic() - started < 5
    assert lh.append(b"after") == 1  # the ledger goes on
    assert len(lh.metadata.ensembles) == 1  # no bookie was "replaced" for it
    lh.close()
