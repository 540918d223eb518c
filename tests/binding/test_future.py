"""The one future type of the client: results, callbacks, asyncio, timeouts, Ctrl-C, and the
limits every call enforces at once (entry size, read ranges).

Owns the behaviour of ``pybkx.Future`` and the public API's bounds against real bookie
processes; it never looks inside the Rust future.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pybkx
from pybkx import _core, errors
from pybkx.config import ClientConfig
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with Sandbox(3, directory=tmp_path_factory.mktemp("future") / "sandbox") as sb:
        yield sb


@pytest.fixture
def bk(cluster: Sandbox) -> Iterator[pybkx.BookKeeper]:
    with pybkx.BookKeeper(cluster.metadata_uri) as client:
        yield client


@pytest.fixture
def silent_bookie() -> Iterator[str]:
    """An address that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def test_the_public_api_is_importable_from_the_package() -> None:
    for name in ("BookKeeper", "LedgerHandle", "ReadHandle", "LedgerEntry", "Future", "errors"):
        assert hasattr(pybkx, name), name
    assert pybkx.DigestType.parse("crc32c").name == "CRC32C"


def test_every_error_class_the_extension_raises_exists() -> None:
    classes = _core._error_classes()
    assert classes and all(issubclass(c, errors.BKException) for c in classes)
    assert issubclass(errors.TimeoutException, TimeoutError)


def test_append_futures_resolve_in_order_and_call_back(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 2, 2)
    called: list[tuple[int, str]] = []
    done = threading.Event()

    def on_done(future: pybkx.Future) -> None:
        called.append((future.result(0), threading.current_thread().name))
        if len(called) == 100:
            done.set()

    futures = [lh.append_async(b"e%d" % i) for i in range(100)]
    for f in futures:
        f.add_done_callback(on_done)
    assert [f.result(10) for f in futures] == list(range(100))
    assert done.wait(10)
    assert sorted(i for i, _ in called) == list(range(100))
    # A callback added to a done future runs at once, in the caller's thread.
    late: list[str] = []
    futures[0].add_done_callback(lambda f: late.append(threading.current_thread().name))
    assert late == [threading.current_thread().name]
    assert futures[0].done() and not futures[0].cancel() and futures[0].exception() is None
    lh.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_failing_callback_is_reported_not_raised(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 2, 2)
    after = threading.Event()
    future = lh.append_async(b"x")
    future.add_done_callback(lambda f: 1 / 0)
    future.add_done_callback(lambda f: after.set())
    assert future.result(10) == 0
    assert after.wait(10)  # the next callback still ran
    lh.close()


def test_asyncio_gathers_ten_thousand_appends_and_reads(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 3, 2)

    async def main() -> list[pybkx.LedgerEntry]:
        ids = await asyncio.gather(*(lh.append_async(b"p%d" % i) for i in range(10_000)))
        assert list(ids) == list(range(10_000))
        read = await lh.read_async(0, 9_999)
        return list(read.entries)

    entries = asyncio.run(main())
    assert [e.payload for e in entries] == [b"p%d" % i for i in range(10_000)]
    lh.close()


def test_cancelling_an_awaiting_task_leaves_the_handle_usable(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 2, 2)

    async def main() -> int:
        task = asyncio.ensure_future(lh.append_async(b"first"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await lh.append_async(b"second")

    assert asyncio.run(main()) == 1  # the first append still happened: it was sent
    assert [e.payload for e in lh.read(0, 1)] == [b"first", b"second"]
    lh.close()


def test_result_with_a_timeout_raises_a_timeout_error(silent_bookie: str) -> None:
    client = _core.BookieClient(ClientConfig.of(readEntryTimeoutSec=30))
    try:
        future = client.read(silent_bookie, 1, 0)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            future.result(timeout=0.2)
        assert time.monotonic() - started < 5
        assert not future.done() and future.running()
    finally:
        client.close()
    with pytest.raises(errors.ClientClosedException):
        future.result(10)  # closing the client completes what was pending


def test_ctrl_c_interrupts_a_blocked_result(silent_bookie: str, tmp_path: Path) -> None:
    script = tmp_path / "blocked.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            from pybkx import _core
            from pybkx.config import ClientConfig
            client = _core.BookieClient(ClientConfig.of(readEntryTimeoutSec=600))
            future = client.read({silent_bookie!r}, 1, 0)
            print("waiting", flush=True)
            try:
                future.result()
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(3)
            """
        )
    )
    child = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        # Not a wait on a condition: nothing outside shows the child blocked in result(); a
        # moment after "waiting" it is.
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert child.wait(timeout=10) == 3
        assert time.monotonic() - started < 1.5
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_bytes_like_payloads_are_accepted(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 2, 2)
    lh.append(bytearray(b"ba"))
    lh.append(memoryview(b"xmvx")[1:3])
    lh.append_many([b"b", bytearray(b"c")])
    with pytest.raises(TypeError, match="bytes-like"):
        lh.append("text")  # type: ignore[arg-type]
    assert [e.payload for e in lh.read(0, 3)] == [b"ba", b"mv", b"b", b"c"]
    lh.close()


def test_read_ranges_are_bounded_before_anything_is_allocated(bk: pybkx.BookKeeper) -> None:
    lh = bk.create_ledger(3, 2, 2)
    lh.append(b"only")
    with pytest.raises(errors.IncorrectParameterException, match="more than"):
        lh.read_unconfirmed(0, 2**40)
    with pytest.raises(errors.IncorrectParameterException):
        lh.read_unconfirmed(5, 4)
    with pytest.raises(errors.ReadException):
        lh.read(0, 5)  # beyond the LAC
    assert len(lh.batch_read(0, 2**31, 0)) == 1
    lh.close()
