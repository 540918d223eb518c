"""The client as a Python user meets it: iteration, asyncio, zero-copy entries, Arrow batches,
the default cluster, logging, and Ctrl-C on every blocking call, with real bookie processes.

Owns the public API's behaviour; it never looks inside the Rust core.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from support.wait import wait_until

import pybkx
from pybkx import errors
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

COUNT = 2_500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with Sandbox(3, directory=tmp_path_factory.mktemp("api") / "sandbox") as sb:
        yield sb


@pytest.fixture
def bk(cluster: Sandbox) -> Iterator[pybkx.BookKeeper]:
    with pybkx.BookKeeper(cluster.metadata_uri) as client:
        yield client


def payload(i: int) -> bytes:
    return b"entry-%06d" % i


@pytest.fixture(scope="module", params=[(3, 3, 2), (3, 2, 2)], ids=["E=Qw", "striped"])
def written(cluster: Sandbox, request: pytest.FixtureRequest) -> int:
    """A closed ledger of COUNT entries; its id."""
    e, qw, qa = request.param
    with pybkx.BookKeeper(cluster.metadata_uri) as bk:
        lh = bk.create_ledger(e, qw, qa)
        lh.append_many([payload(i) for i in range(COUNT)])
        lh.close()
        return lh.ledger_id


def test_iteration_streams_every_entry_in_order(bk: pybkx.BookKeeper, written: int) -> None:
    rh = bk.open_ledger(written)
    assert len(rh) == COUNT
    assert [e.entry_id for e in rh] == list(range(COUNT))
    some = list(rh.entries(7, 1_234, batch_entries=100, read_ahead=3))
    assert [e.payload for e in some] == [payload(i) for i in range(7, 1_235)]
    assert [e.payload for e in rh.entries(5, 5, batch_entries=1, read_ahead=0)] == [payload(5)]
    with pytest.raises(errors.ReadException):
        list(rh.entries(0, COUNT))  # beyond the LAC
    with pytest.raises(errors.IncorrectParameterException):
        list(rh.entries(0, 10, batch_entries=0))


def test_a_writer_iterates_what_it_confirmed(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 2, 2)
    lh.append_many([payload(i) for i in range(10)])
    assert len(lh) == 10
    assert [e.payload for e in lh] == [payload(i) for i in range(10)]
    lh.append(payload(10))
    assert [e.entry_id for e in lh.entries(9)] == [9, 10]
    lh.close()


def test_asyncio_covers_the_ledger_life(bk: pybkx.BookKeeper) -> None:
    async def main() -> None:
        lh = await bk.create_ledger_async(3, 2, 2)
        ids = await asyncio.gather(*(lh.append_async(payload(i)) for i in range(400)))
        assert list(ids) == list(range(400))
        assert await lh.append_many_async([payload(i) for i in range(400, 500)]) == 499
        await lh.close_async()
        rh = await bk.open_ledger_async(lh.ledger_id)
        assert await rh.read_last_add_confirmed_async() == 499
        seen = [e.payload async for e in rh.aentries(100, 499, batch_entries=64)]
        assert seen == [payload(i) for i in range(100, 500)]
        assert [e.entry_id async for e in rh][:3] == [0, 1, 2]
        batch = await rh.batch_read_async(0, 50, 0)
        assert [e.entry_id for e in batch] == list(range(50))
        arrow = await rh.read_arrow_async(10, 19)
        assert arrow.column("entry_id").to_pylist() == list(range(10, 20))
        await rh.close_async()
        await bk.delete_ledger_async(lh.ledger_id)
        with pytest.raises(errors.NoSuchLedgerExistsOnMetadataServerException):
            await bk.open_ledger_async(lh.ledger_id)

    asyncio.run(main())


def test_each_event_loop_gets_its_own_completions(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 2, 2)

    async def burst(first: int) -> list[int]:
        return list(await asyncio.gather(*(lh.append_async(payload(i)) for i in range(100))))

    assert asyncio.run(burst(0)) == list(range(100))
    assert asyncio.run(burst(100)) == list(range(100, 200))  # a new loop, after the first closed

    def in_thread(out: list[list[int]]) -> None:
        out.append(asyncio.run(burst(200)))

    out: list[list[int]] = []
    worker = threading.Thread(target=in_thread, args=(out,))
    worker.start()
    worker.join(60)
    assert out == [list(range(200, 300))]
    lh.close()


def test_entries_lend_their_payload_without_a_copy(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 3, 2)
    lh.append(b"zero-copy payload")
    entry = lh.read(0, 0)[0]
    view = memoryview(entry)
    assert view.readonly and view.nbytes == len(entry) == 17
    assert view.tobytes() == b"zero-copy payload" == bytes(entry) == entry.payload
    assert entry.payload is entry.payload  # made once, then kept
    # Every view is of the same memory (no copy per view), and nobody may write into it.
    assert pa.py_buffer(entry).address == pa.py_buffer(view).address
    with pytest.raises(TypeError, match="read-only"):
        view[0:1] = b"x"
    made = pybkx.LedgerEntry(1, 2, bytearray(b"abc"))
    assert bytes(made) == b"abc" and made == pybkx.LedgerEntry(1, 2, b"abc")
    assert made != pybkx.LedgerEntry(1, 2, b"abd")
    lh.close()


def test_read_arrow_returns_one_record_batch(bk: pybkx.BookKeeper, written: int) -> None:
    rh = bk.open_ledger(written)
    batch = rh.read_arrow(0, COUNT - 1)
    assert batch.schema == pa.schema(
        [
            pa.field("ledger_id", pa.int64(), nullable=False),
            pa.field("entry_id", pa.int64(), nullable=False),
            pa.field("payload", pa.binary(), nullable=False),
        ]
    )
    assert batch.num_rows == COUNT
    assert batch.column("ledger_id").to_pylist() == [written] * COUNT
    assert batch.column("entry_id").to_pylist() == list(range(COUNT))
    assert batch.column("payload").to_pylist() == [payload(i) for i in range(COUNT)]
    assert rh.read_arrow(42, 42).to_pydict()["payload"] == [payload(42)]
    with pytest.raises(errors.ReadException):
        rh.read_arrow(0, COUNT)
    with pytest.raises(errors.IncorrectParameterException):
        rh.read_arrow(10, 9)


def test_arrow_batches_read_ahead_in_order(bk: pybkx.BookKeeper, written: int) -> None:
    rh = bk.open_ledger(written)
    for read_ahead in (0, 1, 5):
        batches = list(rh.arrow_batches(3, COUNT - 1, 7, read_ahead))
        assert [b.num_rows for b in batches[:-1]] == [7] * (len(batches) - 1)
        assert 1 <= batches[-1].num_rows <= 7
        whole = pa.Table.from_batches(batches)
        assert whole.column("entry_id").to_pylist() == list(range(3, COUNT))
        assert whole.column("payload").to_pylist() == [payload(i) for i in range(3, COUNT)]
    assert [b.num_rows for b in rh.arrow_batches(5, 5, 100)] == [1]
    # Bad arguments fail at the call, not at the first batch.
    for bad in ((0, COUNT, 10, 2), (0, 9, 0, 2), (0, 9, 10, -1), (0, 9, (1 << 20) + 1, 0)):
        with pytest.raises((errors.ReadException, errors.IncorrectParameterException)):
            rh.arrow_batches(*bad)


def test_every_read_face_refuses_a_bad_range_with_the_same_error(
    bk: pybkx.BookKeeper, written: int
) -> None:
    """BookKeeper's rule (LedgerHandle.asyncReadEntries, readAsync): a negative first entry or
    one past the last is IncorrectParameterException, a last entry past the LAC ReadException;
    raised at the call by every face, iteration included."""
    rh = bk.open_ledger(written)
    lac = rh.last_add_confirmed

    async def first_of_aentries(first: int, last: int) -> None:
        async for _ in rh.aentries(first, last):
            return

    faces = {
        "read": rh.read,
        "read_arrow": rh.read_arrow,
        "entries": lambda first, last: rh.entries(first, last),
        "aentries": lambda first, last: asyncio.run(first_of_aentries(first, last)),
        "arrow_batches": lambda first, last: rh.arrow_batches(first, last, 100),
    }
    bad = {
        (-1, 5): errors.IncorrectParameterException,  # first negative
        (-3, -1): errors.IncorrectParameterException,  # both negative
        (0, -1): errors.IncorrectParameterException,  # last negative
        (10, 9): errors.IncorrectParameterException,  # first past last
        (0, lac + 1): errors.ReadException,  # last past the LAC
        (lac + 1, lac + 5): errors.ReadException,  # first past the LAC
    }
    for (first, last), expected in bad.items():
        for name, face in faces.items():
            with pytest.raises(errors.BKException) as raised:
                face(first, last)
            assert type(raised.value) is expected, (name, first, last, raised.value)
    # Iterating up to the LAC from past it reads nothing (a tailing reader's "nothing new").
    assert list(rh.entries(lac + 1)) == []


def test_a_client_with_no_uri_finds_the_running_sandbox(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "PYBKX_HOME": str(home)}
    env.pop("PYBKX_METADATA_URI", None)
    sandbox = subprocess.Popen(
        [sys.executable, "-m", "pybkx", "sandbox", "--bookies", "3", "--dir", str(tmp_path / "sb")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    client_script = textwrap.dedent(
        """
        import pybkx
        with pybkx.BookKeeper() as bk:
            lh = bk.create_ledger()
            lh.append(b"found it")
            lh.close()
            print(bk.store.uri, [e.payload for e in bk.open_ledger(lh.ledger_id)])
        """
    )
    try:
        assert sandbox.stdout is not None
        deadline = time.monotonic() + 60
        while not (line := sandbox.stdout.readline()).startswith("sandbox ready"):
            assert line and time.monotonic() < deadline, "the sandbox did not start"
        found = subprocess.run(
            [sys.executable, "-c", client_script],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert found.returncode == 0, found.stderr
        assert found.stdout.strip() == f"embedded://{tmp_path / 'sb' / 'metadata'} [b'found it']"
        assert found.stderr == ""  # nothing alarming on a plain create
        sandbox.send_signal(signal.SIGINT)
        assert sandbox.wait(timeout=30) == 0
        assert not (home / "sandbox.json").exists()  # a stopped sandbox is not the default
    finally:
        if sandbox.poll() is None:
            sandbox.kill()
            sandbox.wait()


def test_no_bookies_says_where_the_client_looked_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYBKX_HOME", str(tmp_path))
    with pybkx.BookKeeper() as bk, pytest.raises(errors.NotEnoughBookiesException) as caught:
        bk.create_ledger()
    message = str(caught.value)
    assert f"embedded://{tmp_path / 'metadata'}" in message
    assert "0 writable" in message and "pybkx sandbox" in message
    assert str(tmp_path / "sandbox.json") in message


def test_rust_log_records_reach_python_logging(
    bk: pybkx.BookKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    # Qa = Qw: when the append returns, every bookie holds the entry (with Qa < Qw the third
    # may answer ENOENTRY to the read below, which is then not a digest error).
    lh = bk.create_ledger(3, 3, 3, digest_type="MAC", password=b"right")
    lh.append(b"secret")
    wrong = pybkx._core.ReadPlan(
        bk.bookies,
        lh.ledger_id,
        3,
        b"wrong",
        "MAC",
        [(0, [bk.address_of(b) for b in lh.metadata.last_ensemble])],
    )
    with caplog.at_level(logging.WARNING, logger="pybkx.core"):
        with pytest.raises(errors.DigestMatchException):
            wrong.read(0, 0, batch=False).result(30)
        # The core's records reach Python logging through a queue drained a moment later.
        record = wait_until(
            lambda: next((r for r in caplog.records if r.name == "pybkx.core.ledger.reader"), None),
            "the reader's warning logged",
            timeout_s=10,
        )
    assert record.levelno == logging.WARNING
    assert f"ledger {lh.ledger_id}: entry 0 from" in record.getMessage()
    lh.close()


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T in /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


BLOCKED_CALL = """
import sys, pybkx
uri, op = sys.argv[1], sys.argv[2]
bk = pybkx.BookKeeper(uri, addEntryTimeoutSec=600, readEntryTimeoutSec=600)
lh = bk.create_ledger(3, 3, 2)
lh.append(b"before")
ledger_id = lh.ledger_id
print("ready", flush=True)
sys.stdin.readline()  # the bookies stop answering now
print("waiting", flush=True)
try:
    if op == "append":
        lh.append(b"blocked")
    elif op == "read":
        lh.read_unconfirmed(0, 0)
    else:
        bk.open_ledger(ledger_id)  # recovery: fencing reads of the LAC
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
print("returned", flush=True)
"""


@pytest.mark.parametrize("op", ["append", "read", "open"])
def test_ctrl_c_interrupts_a_blocked_call(cluster: Sandbox, tmp_path: Path, op: str) -> None:
    script = tmp_path / "blocked.py"
    script.write_text(BLOCKED_CALL)
    child = subprocess.Popen(
        [sys.executable, str(script), cluster.metadata_uri, op],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids = [pid for i in range(3) if (pid := cluster.pid(i)) is not None]
    assert len(pids) == 3, "every bookie of the sandbox must be running"
    stopped = False
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        stopped = True
        # A signal is delivered when its process next runs: on a loaded machine, wait until
        # every bookie is really stopped before the call starts.
        wait_until(lambda: all(_stopped(pid) for pid in pids), "the bookies to stop")
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "waiting"
        # Not a wait on a condition: half a second for a call that must not return (and that
        # nothing outside shows blocked).
        time.sleep(0.5)
        if child.poll() is not None:
            states = {pid: _stopped(pid) for pid in pids}
            pytest.fail(
                f"the call returned (exit {child.returncode}) with every bookie stopped "
                f"({states}); stdout: {child.stdout.read()!r}; stderr: "
                f"{child.stderr.read() if child.stderr else ''}"
            )
        child.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert child.wait(timeout=10) == 3
        # The call would block for its 600 s timeout; a few seconds leaves room for a loaded
        # machine while still proving the interrupt ended it.
        assert time.monotonic() - started < 5.0
    finally:
        if stopped:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        if child.poll() is None:
            child.kill()
        child.wait()
