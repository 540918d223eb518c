"""What only the embedded metadata store promises: one directory shared safely by processes.

Owns the multi-process tests (children run ``embedded_child.py``); it must never leave a child
running or a store open after a test.
"""

from __future__ import annotations

import fcntl
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.wait import wait_until

from pybkx import errors
from pybkx.meta import BookieServiceInfo, LedgerMetadata, Versioned, open_metadata_store, serde
from pybkx.meta.embedded import FIRST_LEDGER_ID, EmbeddedMetadataStore

CHILD = Path(__file__).with_name("embedded_child.py")
WAIT_S = 20.0


def metadata() -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, {0: ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")})


class Child:
    """A child process running one ``embedded_child.py`` mode; its stdout lines in a queue."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put("<EOF>")

    def expect(self, prefix: str) -> str:
        """The next stdout line, which must start with ``prefix``."""
        try:
            line = self.lines.get(timeout=WAIT_S)
        except queue.Empty:
            raise AssertionError(
                f"child {self.proc.args} printed nothing, wanted {prefix}"
            ) from None
        assert line.startswith(prefix), f"child printed {line!r}, wanted {prefix}"
        return line

    def send(self, line: str = "go") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL without reaping: the child stays a zombie until ``reap``."""
        os.kill(self.proc.pid, signal.SIGKILL)

    def reap(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return f"embedded://{tmp_path / 'metadata'}"


@pytest.fixture
def store(uri: str) -> Iterator[EmbeddedMetadataStore]:
    opened = EmbeddedMetadataStore(uri, embeddedPollIntervalMs=20)
    yield opened
    opened.close()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Child]]:
    children: list[Child] = []

    def _spawn(*args: str) -> Child:
        child = Child(*args)
        children.append(child)
        return child

    yield _spawn
    for child in children:
        child.reap()


# --- opening ----------------------------------------------------------------------------------


def test_default_store_is_embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYBKX_METADATA_DIR", str(tmp_path / "default"))
    with open_metadata_store() as opened:
        assert isinstance(opened, EmbeddedMetadataStore)
        assert (tmp_path / "default" / "metadata.db").exists()


def test_uri_must_name_an_absolute_directory() -> None:
    with pytest.raises(ValueError, match="absolute"):
        EmbeddedMetadataStore("embedded://relative/dir")


def test_unwritable_directory_is_a_metastore_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(errors.MetaStoreException, match="cannot create"):
        EmbeddedMetadataStore(f"embedded://{blocker}/meta")


def test_use_after_close_is_refused(store: EmbeddedMetadataStore) -> None:
    store.close()
    store.close()  # idempotent
    with pytest.raises(errors.ClientClosedException):
        store.generate_ledger_id()
    with pytest.raises(errors.ClientClosedException), store.lock("l", "me"):
        pass


# --- ledgers ----------------------------------------------------------------------------------


def test_ledger_metadata_is_stored_as_the_zookeeper_bytes(
    store: EmbeddedMetadataStore, tmp_path: Path
) -> None:
    created = store.create_ledger_metadata(5, metadata())
    with sqlite3.connect(tmp_path / "metadata" / "metadata.db") as db:
        (stored,) = db.execute("SELECT data FROM ledgers WHERE ledger_id = 5").fetchone()
    assert bytes(stored) == serde.serialize_ledger_metadata(created.value)
    assert bytes(stored).startswith(b"BookieMetadataFormatVersion\t3\n")


def test_ledger_ids_start_at_zero_and_are_never_reused(store: EmbeddedMetadataStore) -> None:
    first = store.generate_ledger_id()
    assert first == FIRST_LEDGER_ID == 0
    store.create_ledger_metadata(first, metadata())
    store.remove_ledger_metadata(first)
    store.init_new_cluster()
    store.format()
    assert store.generate_ledger_id() == first + 1


def test_ledger_ids_are_unique_across_processes_under_concurrency(
    uri: str, spawn: Callable[..., Child]
) -> None:
    # The children open a directory nobody created yet, all at once.
    children = [spawn("ids", uri, "200") for _ in range(3)]
    for child in children:
        child.expect("READY")
    for child in children:
        child.send()
    with EmbeddedMetadataStore(uri) as parent:
        mine = [parent.generate_ledger_id() for _ in range(200)]
    theirs = [int(x) for child in children for x in child.expect("IDS").split()[1:]]
    every = mine + theirs
    assert len(every) == 800
    assert sorted(every) == list(range(800))


def test_cas_race_between_processes_has_exactly_one_winner(
    store: EmbeddedMetadataStore, uri: str, spawn: Callable[..., Child]
) -> None:
    store.create_ledger_metadata(9, metadata())
    children = [spawn("cas", uri, "9", "0") for _ in range(2)]
    for child in children:
        child.expect("READY")
    for child in children:
        child.send()
    outcomes = sorted(child.expect("") for child in children)
    assert outcomes == ["LOST", "WON"]
    after = store.read_ledger_metadata(9)
    assert after.version == 1
    assert after.value.is_closed


def test_ledger_watcher_sees_another_process_write_and_a_delete(
    store: EmbeddedMetadataStore, uri: str, spawn: Callable[..., Child]
) -> None:
    store.create_ledger_metadata(3, metadata())
    seen: list[Versioned[LedgerMetadata] | None] = []
    unsubscribe = store.watch_ledger(3, lambda _id, value: seen.append(value))
    child = spawn("cas", uri, "3", "0")
    child.expect("READY")
    child.send()
    child.expect("WON")
    wait_until(lambda: len(seen) == 1, "the child's write", timeout_s=WAIT_S)
    assert seen[0] is not None and seen[0].version == 1 and seen[0].value.is_closed
    store.remove_ledger_metadata(3)
    wait_until(lambda: len(seen) == 2, "the delete", timeout_s=WAIT_S)
    assert seen[1] is None
    unsubscribe()
    store.create_ledger_metadata(3, metadata())
    time.sleep(0.2)  # not a wait: time for a notification that must not come
    assert len(seen) == 2


def test_an_unreadable_ledger_does_not_stop_other_watches(
    store: EmbeddedMetadataStore, tmp_path: Path
) -> None:
    store.create_ledger_metadata(1, metadata())
    store.create_ledger_metadata(2, metadata())
    seen: list[int] = []
    store.watch_ledger(1, lambda i, _v: seen.append(i))
    store.watch_ledger(2, lambda i, _v: seen.append(i))
    with sqlite3.connect(tmp_path / "metadata" / "metadata.db") as db:
        db.execute("UPDATE ledgers SET data = x'00', version = 1, mzxid = 1000 WHERE ledger_id = 1")
        db.execute("UPDATE counters SET value = 1000 WHERE name = 'zxid'")
    with pytest.raises(errors.MetadataSerializationException):
        store.read_ledger_metadata(1)
    current = store.read_ledger_metadata(2)
    store.write_ledger_metadata(2, current.value.closed(0, 1), current.version)
    wait_until(lambda: seen == [2], "the readable ledger's change", timeout_s=WAIT_S)
    time.sleep(0.1)  # not a wait: time for a notification of ledger 1 that must not come
    assert seen == [2]


# --- registrations ----------------------------------------------------------------------------


def test_registration_of_a_sigkilled_process_vanishes(
    store: EmbeddedMetadataStore, uri: str, spawn: Callable[..., Child]
) -> None:
    child = spawn("register", uri, "10.0.0.1:3181", "0")
    child.expect("READY")
    assert store.writable_bookies() == {"10.0.0.1:3181"}
    assert store.bookie_service_info("10.0.0.1:3181").endpoints[0].port == 3181
    child.kill()
    # Still a zombie (not reaped): dead all the same.
    wait_until(
        lambda: not store.writable_bookies(),
        "the killed child's registration to vanish",
        timeout_s=WAIT_S,
    )
    with pytest.raises(errors.BookieHandleNotAvailableException):
        store.bookie_service_info("10.0.0.1:3181")
    child.reap()
    # The dead row was deleted, not just hidden: the id is free for a new owner.
    store.register_bookie("10.0.0.1:3181", True, BookieServiceInfo.for_address("10.0.0.1", 3181))
    assert store.readonly_bookies() == {"10.0.0.1:3181"}


def test_bookies_watcher_sees_a_child_register_and_die(
    store: EmbeddedMetadataStore, uri: str, spawn: Callable[..., Child]
) -> None:
    events: list[tuple[frozenset[str], frozenset[str]]] = []
    store.watch_bookies(lambda writable, readonly: events.append((writable, readonly)))
    assert events == [(frozenset(), frozenset())]  # called at once
    child = spawn("register", uri, "10.0.0.2:3181", "1")
    child.expect("READY")
    wait_until(
        lambda: events[-1] == (frozenset(), {"10.0.0.2:3181"}),
        "the child's registration",
        timeout_s=WAIT_S,
    )
    child.kill()
    wait_until(
        lambda: events[-1] == (frozenset(), frozenset()), "the child's death", timeout_s=WAIT_S
    )
    assert len(events) == 3


def test_a_live_registration_of_another_session_is_refused(uri: str) -> None:
    info = BookieServiceInfo.for_address("10.0.0.3", 3181)
    with EmbeddedMetadataStore(uri) as first, EmbeddedMetadataStore(uri) as second:
        first.register_bookie("10.0.0.3:3181", False, info)
        with pytest.raises(errors.MetaStoreException, match="already registered"):
            second.register_bookie("10.0.0.3:3181", False, info)
        first.close()
        second.register_bookie("10.0.0.3:3181", False, info)
        assert second.writable_bookies() == {"10.0.0.3:3181"}


def test_read_only_move_is_never_seen_half_done(store: EmbeddedMetadataStore, uri: str) -> None:
    info = BookieServiceInfo.for_address("10.0.0.4", 3181)
    store.register_bookie("10.0.0.4:3181", False, info)
    stop = threading.Event()

    def flip() -> None:
        read_only = False
        while not stop.is_set():
            read_only = not read_only
            store.register_bookie("10.0.0.4:3181", read_only, info)

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        with EmbeddedMetadataStore(uri) as reader:
            for _ in range(200):
                writable, readonly = reader._bookie_sets()  # one read of both sets
                assert len(writable | readonly) == 1 and not writable & readonly
            # A busy writer thread must not starve another thread's write (its close).
            started = time.monotonic()
        assert time.monotonic() - started < 2.0
    finally:
        stop.set()
        flipper.join()


def test_registrations_die_with_their_session_even_if_close_cannot_delete_them(
    uri: str, store: EmbeddedMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = EmbeddedMetadataStore(uri)
    other.register_bookie("10.0.0.6:3181", False, BookieServiceInfo.for_address("10.0.0.6", 3181))
    assert store.writable_bookies() == {"10.0.0.6:3181"}

    def refuse(*args: object, **kwargs: object) -> None:
        raise errors.MetaStoreException("db busy")

    monkeypatch.setattr(other, "_txn", refuse)
    other.close()  # logs, does not raise
    assert store.writable_bookies() == frozenset()


# --- locks and elections ----------------------------------------------------------------------


def test_lock_excludes_a_child_and_is_freed_when_it_is_killed(
    store: EmbeddedMetadataStore, uri: str, spawn: Callable[..., Child]
) -> None:
    child = spawn("lock", uri, "auditor", "child")
    child.expect("LOCKED")
    with (
        pytest.raises(errors.TimeoutException, match="child"),
        store.lock("auditor", "parent", timeout=0.2),
    ):
        pass
    child.kill()
    with store.lock("auditor", "parent", timeout=WAIT_S):
        pass


def test_lock_excludes_threads_of_one_process(store: EmbeddedMetadataStore) -> None:
    inside = 0
    most = 0
    guard = threading.Lock()

    def worker() -> None:
        nonlocal inside, most
        for _ in range(20):
            with store.lock("shared", threading.current_thread().name, timeout=WAIT_S):
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.001)  # not a wait: the lock is held a moment, for others to contend
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1


def test_election_leader_is_the_holder_and_goes_with_its_process(
    store: EmbeddedMetadataStore, uri: str, spawn: Callable[..., Child]
) -> None:
    election = store.election("auditor", "parent")
    assert election.leader() is None
    child = spawn("elect", uri, "auditor", "child-bookie:3181")
    child.expect("LEADER")
    assert election.leader() == "child-bookie:3181"
    elected = threading.Event()
    runner = threading.Thread(target=election.run, args=(elected.set,))
    runner.start()
    time.sleep(0.2)  # not a wait: time for an election that must not be won while the child leads
    assert not elected.is_set()
    child.kill()
    runner.join(timeout=WAIT_S)
    assert elected.is_set()
    assert election.leader() is None  # run() returned: leadership given up


def test_cancel_stops_a_waiting_contender(store: EmbeddedMetadataStore) -> None:
    leader = store.election("e", "a")
    contender = store.election("e", "b")
    release = threading.Event()
    leading = threading.Event()

    def lead() -> None:
        leading.set()
        release.wait(WAIT_S)

    t1 = threading.Thread(target=leader.run, args=(lead,))
    t1.start()
    assert leading.wait(WAIT_S)
    assert contender.leader() == "a"
    called = threading.Event()
    t2 = threading.Thread(target=contender.run, args=(called.set,))
    t2.start()
    contender.cancel()
    t2.join(timeout=WAIT_S)
    assert not t2.is_alive() and not called.is_set()
    release.set()
    t1.join(timeout=WAIT_S)


def test_close_releases_locks_and_registrations(uri: str, store: EmbeddedMetadataStore) -> None:
    other = EmbeddedMetadataStore(uri)
    other.register_bookie("10.0.0.5:3181", False, BookieServiceInfo.for_address("10.0.0.5", 3181))
    held = other.lock("l", "other")
    held.__enter__()
    other.close()
    assert store.writable_bookies() == frozenset()
    with store.lock("l", "mine", timeout=1):
        pass
    held.__exit__(None, None, None)  # after close: a no-op


def test_an_old_looking_temporary_session_file_is_removed_only_when_no_creator_holds_it(
    tmp_path: Path,
) -> None:
    """A wall-clock jump forward makes a creator's temporary file look hours old: the sweep at
    the next open keeps it while its creator holds its lock, and removes one nobody holds."""
    directory = tmp_path / "metadata"
    EmbeddedMetadataStore(f"embedded://{directory}").close()
    sessions = directory / "sessions"
    held, orphan = sessions / ".held-by-a-creator.tmp", sessions / ".left-by-a-dead-one.tmp"
    hours_ago = time.time() - 5 * 3600
    fd = os.open(held, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        orphan.write_bytes(b"")
        for path in (held, orphan):
            os.utime(path, (hours_ago, hours_ago))
        EmbeddedMetadataStore(f"embedded://{directory}").close()
        assert held.exists(), "a temporary file its creator holds was removed"
        assert not orphan.exists(), "a temporary file nobody holds was kept"
    finally:
        os.close(fd)
