"""The stream reader's latest offset with real bookie processes (no Spark job needed: Spark
calls ``latestOffset`` with the previous offset): when nothing new has come it waits for an
entry (``longPollTimeoutMs``) and returns with it, instead of answering "nothing new" and being
asked again; with the wait turned off, or only closed ledgers, it answers at once."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pybkx.client import BookKeeper, LedgerHandle
from pybkx.spark.options import SourceOptions
from pybkx.spark.stream import LedgerStreamReader
from pybkx.tools.sandbox import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def payload(entry_id: int) -> bytes:
    return hashlib.sha256(str(entry_id).encode()).digest()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, BookKeeper]]:
    directory: Path = tmp_path_factory.mktemp("stream-offsets") / "sandbox"
    with (
        Sandbox(3, directory=directory, conf={"zkTimeout": 4000}) as sandbox,
        BookKeeper(sandbox.metadata_uri, zkTimeout=4000) as bk,
    ):
        yield sandbox, bk


def reader(sandbox: Sandbox, ledger_id: int, wait_ms: int) -> LedgerStreamReader:
    return LedgerStreamReader(
        SourceOptions.parse(
            {
                "metadataServiceUri": sandbox.metadata_uri,
                "ledgers": str(ledger_id),
                "password": "pw",
                "longPollTimeoutMs": str(wait_ms),
            }
        )
    )


def open_ledger(bk: BookKeeper, entries: int) -> LedgerHandle:
    lh = bk.create_ledger(3, 2, 2, password=b"pw")
    lh.append_many([payload(e) for e in range(entries)])
    lh.append(payload(entries))  # sent after the others were acknowledged: carries their LAC
    return lh


def test_latest_offset_waits_for_the_next_entry(cluster: tuple[Sandbox, BookKeeper]) -> None:
    sandbox, bk = cluster
    lh = open_ledger(bk, 10)
    stream = reader(sandbox, lh.ledger_id, 60_000)
    start = stream.latestOffset(None)
    assert start == {"ledgers": {str(lh.ledger_id): 10}}

    def write_later() -> None:
        # Not a wait on a condition: the appends come half a second after latestOffset began
        # waiting for them (nothing outside shows it waiting).
        time.sleep(0.5)
        lh.append(payload(11))
        lh.append(payload(12))  # carries LAC 11 to the bookies

    writer = threading.Thread(target=write_later)
    writer.start()
    try:
        latest = stream.latestOffset(start)
    finally:
        writer.join()
    # Asked before the appends, answered with them: the wait saw entry 10 and 11 confirmed.
    assert latest["ledgers"][str(lh.ledger_id)] >= 11
    lh.close()


def test_latest_offset_answers_at_once_when_asked_not_to_wait_or_when_closed(
    cluster: tuple[Sandbox, BookKeeper],
) -> None:
    sandbox, bk = cluster
    lh = open_ledger(bk, 5)
    no_wait = reader(sandbox, lh.ledger_id, 0)
    start = no_wait.latestOffset(None)
    assert no_wait.latestOffset(start) == start
    lh.close()
    closed = reader(sandbox, lh.ledger_id, 60_000)
    start = closed.latestOffset(None)
    assert start == {"ledgers": {str(lh.ledger_id): 6}}  # closed: through its last entry
    assert closed.latestOffset(start) == start


def test_a_bad_wait_option_is_refused() -> None:
    with pytest.raises(ValueError, match="longPollTimeoutMs"):
        SourceOptions.parse({"longPollTimeoutMs": "-1"})
    with pytest.raises(ValueError, match="longPollTimeoutMs"):
        SourceOptions.parse({"longPollTimeoutMs": "soon"})
