"""The nemesis's workload and its history: writers, tailing readers, a fencer and a deleter
working through the client while faults go on, every operation recorded by a ``Recorder`` (the
JSON-lines history ``checker.check`` judges), and the verification after the run that recovers
every ledger and reads it whole (the final reads). For the ``disk_full`` fault it also writes a
ballast ledger on every bookie and deletes ledgers to free space, recorded the same way.

Owns what clients do and see: it never starts, signals or faults a process (it knows the
cluster only by its metadata URI) and never judges the history (the checker does).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from plan import RunConfig
from support.wait import WaitTimeout, wait_until

from pybkx import errors
from pybkx.client import BookKeeper

logger = logging.getLogger("nemesis")

PASSWORD = b"nemesis"
#: Ensemble, write and ack quorums the writers pick from.
QUORUMS = [(3, 3, 2), (3, 2, 2), (2, 2, 2), (3, 3, 3)]
APPEND_WAIT_S = 30.0
"""How long a writer waits for one append's outcome before recording it unknown."""
BALLAST_ENTRY = 64 << 10
"""The size of a ballast ledger's entries."""
TAILED = 20
"""The newest ledgers, which readers tail: never deleted while the run goes on."""


class Recorder:
    """The history: events appended under a lock, each also written to a JSON-lines file."""

    def __init__(self, path: Path) -> None:
        self.t0 = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        """Held while an event is appended: take it to read ``events`` from another thread."""
        self._file = path.open("w")

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def record(self, **event: Any) -> None:
        event.setdefault("t", self.now())
        with self.lock:
            self.events.append(event)
            self._file.write(json.dumps(event) + "\n")

    def close(self) -> None:
        with self.lock:
            self._file.close()


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class Workload:
    """Writers (new ledgers with mixed quorums, pipelined appends), tailing readers, a
    recovery opener that fences ledgers still being written and (with ``lifecycle``) a deleter
    that reads closed ledgers whole, then deletes them."""

    def __init__(self, uri: str, config: RunConfig, rng: random.Random, rec: Recorder) -> None:
        self.uri, self.config, self.rec = uri, config, rec
        self.seed = rng.randrange(2**32)
        self.stop = threading.Event()
        self.deletes_held = threading.Event()
        """Set by a ``disk_full`` round: the deleter deletes nothing meanwhile, so that only the
        round's own deletes can give the bookies their space back."""
        self.ledgers: set[int] = set()
        self.writing: set[int] = set()
        self.closed: set[int] = set()
        self.deleted: set[int] = set()
        self.lock = threading.Lock()
        self.errors: Counter[str] = Counter()

    def client(self) -> BookKeeper:
        return BookKeeper(
            self.uri,
            zkTimeout=4000,
            addEntryTimeoutSec=2,
            readEntryTimeoutSec=2,
            bookieReplacementTimeoutMs=4000,
        )

    def threads(self) -> list[threading.Thread]:
        out = [
            threading.Thread(target=self._guard, args=(self._writer, f"w{i}"), daemon=True)
            for i in range(self.config.writers)
        ]
        out += [
            threading.Thread(target=self._guard, args=(self._reader, f"r{i}"), daemon=True)
            for i in range(self.config.readers)
        ]
        out.append(threading.Thread(target=self._guard, args=(self._fencer, "f"), daemon=True))
        if self.config.lifecycle:
            out.append(threading.Thread(target=self._guard, args=(self._deleter, "d"), daemon=True))
        return out

    def _guard(self, body: Callable[[str, random.Random], None], name: str) -> None:
        rng = random.Random(f"{self.seed}-{name}")
        while not self.stop.is_set():
            try:
                body(name, rng)
            except Exception as exc:  # recorded as outcomes where they matter; go on
                self.errors[type(exc).__name__] += 1
                logger.debug("%s: %s", name, exc)
                self.stop.wait(0.2)

    def _writer(self, name: str, rng: random.Random) -> None:
        with self.client() as bk:
            while not self.stop.is_set():
                e, qw, qa = rng.choice(QUORUMS)
                try:
                    lh = bk.create_ledger(e, qw, qa, password=PASSWORD)
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                    self.stop.wait(0.3)
                    continue
                lid = lh.ledger_id
                with self.lock:
                    self.ledgers.add(lid)
                    self.writing.add(lid)
                self.rec.record(type="create", ledger=lid, writer=name, quorums=[e, qw, qa])
                try:
                    # Some ledgers are written slowly, so that recovery openers fence them
                    # while their writer still appends.
                    pace = rng.choice([0.0, 0.0, 0.002, 0.01])
                    healthy = self._append_many(lh, name, rng.randrange(20, 600), rng, pace)
                    if healthy:
                        lh.close()
                        md = lh.metadata
                        self.rec.record(
                            type="close", ledger=lid, last_entry=md.last_entry_id, length=md.length
                        )
                        with self.lock:
                            self.closed.add(lid)
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                finally:
                    with self.lock:
                        self.writing.discard(lid)

    def _append_many(self, lh: Any, name: str, count: int, rng: random.Random, pace: float) -> bool:
        """Up to 16 appends in flight; False once one failed or got no answer (the ledger is
        then left for recovery)."""
        lid = lh.ledger_id
        window: list[tuple[Any, float, bytes]] = []
        healthy = True

        def settle(block: bool) -> None:
            nonlocal healthy
            while window and (block or window[0][0].done()):
                future, sent, data = window.pop(0)
                event: dict[str, Any] = dict(
                    type="append", ledger=lid, sent=sent, hash=digest(data), size=len(data)
                )
                try:
                    entry = future.result(APPEND_WAIT_S)
                    event.update(status="ok", entry=entry)
                except FutureTimeout:
                    event.update(status="unknown")
                    healthy = False
                except errors.BKException as exc:
                    event.update(status="fail", error=type(exc).__name__)
                    healthy = False
                self.rec.record(**event)

        for i in range(count):
            if self.stop.is_set() or not healthy:
                break
            data = f"{name}/{lid}/{i}/{rng.getrandbits(64):x}".encode() * rng.randrange(1, 20)
            sent = self.rec.now()
            try:
                future = lh.append_async(data)
            except errors.BKException as exc:
                self.rec.record(
                    type="append", ledger=lid, sent=sent, status="fail", hash=digest(data),
                    size=len(data), error=type(exc).__name__,
                )  # fmt: skip
                healthy = False
                break
            window.append((future, sent, data))
            settle(block=len(window) >= 16)
            if pace:
                self.stop.wait(pace)
        settle(block=True)
        return healthy and not self.stop.is_set()

    def _reader(self, name: str, rng: random.Random) -> None:
        handles: dict[int, Any] = {}
        with self.client() as bk:
            while not self.stop.is_set():
                self.stop.wait(rng.uniform(0.1, 0.5))
                with self.lock:
                    choices = sorted(self.ledgers)
                if not choices:
                    continue
                lid = rng.choice(choices[-10:])
                rh = handles.get(lid)
                if rh is None:
                    try:
                        rh = bk.open_ledger(lid, PASSWORD, recovery=False)
                    except errors.BKException as exc:
                        self.errors[type(exc).__name__] += 1
                        continue
                    handles[lid] = rh
                try:
                    lac = rh.last_add_confirmed if rh.is_closed else rh.read_last_add_confirmed()
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                    continue
                self.rec.record(type="lac", ledger=lid, observer=f"{name}:{id(rh)}", lac=lac)
                if lac < 0:
                    continue
                first = max(0, lac - rng.randrange(1, 50))
                try:
                    entries = rh.read(first, lac)
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                    continue
                self.rec.record(
                    type="read",
                    ledger=lid,
                    reader=name,
                    entries=[[x.entry_id, digest(x.payload), len(x.payload)] for x in entries],
                )

    def _fencer(self, name: str, rng: random.Random) -> None:
        with self.client() as bk:
            while not self.stop.is_set():
                self.stop.wait(rng.uniform(0.5, 2.0))
                with self.lock:
                    writing = sorted(self.writing)
                if not writing:
                    continue
                lid = rng.choice(writing)
                try:
                    rh = bk.open_ledger(lid, PASSWORD, recovery=True)
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                    continue
                self.rec.record(type="fence", ledger=lid, by=name)
                md = rh.metadata
                self.rec.record(
                    type="close", ledger=lid, last_entry=md.last_entry_id, length=md.length
                )
                with self.lock:
                    self.closed.add(lid)

    def _deleter(self, name: str, rng: random.Random) -> None:
        """Every second or two: a closed ledger older than the ones readers tail is read whole
        (a final read: it must hold every acknowledged entry) and then deleted, so the bookies'
        garbage collection and compaction have work while faults go on."""
        with self.client() as bk:
            while not self.stop.is_set():
                self.stop.wait(rng.uniform(0.5, 2.0))
                if self.deletes_held.is_set():
                    continue
                with self.lock:
                    choices = self._deletable()
                if not choices:
                    continue
                lid = rng.choice(choices)
                self._read_final(bk, lid, name)
                if not self.deletes_held.is_set():  # again: the read may have taken a while
                    self._delete(bk, lid, name)

    def _deletable(self) -> list[int]:
        """Closed ledgers no writer holds and older than the ones readers tail (under the
        lock)."""
        newest = set(sorted(self.ledgers)[-TAILED:])
        return sorted(self.closed - self.writing - newest)

    def _read_final(self, bk: BookKeeper, lid: int, name: str) -> None:
        """Reads closed ledger ``lid`` whole and records it as a final read (it must hold
        every acknowledged entry). Raises BKException."""
        rh = bk.open_ledger(lid, PASSWORD, recovery=False)
        entries = read_whole(rh, rh.metadata.last_entry_id)
        self.rec.record(type="read", ledger=lid, reader=name, final=True, entries=entries)

    def _delete(self, bk: BookKeeper, lid: int, name: str) -> None:
        """Deletes ledger ``lid``, read whole before. Raises BKException."""
        with self.lock:
            # Whatever the delete's outcome, the ledger is no longer verified at the end: its
            # final read came before.
            self.closed.discard(lid)
            self.ledgers.discard(lid)
            self.deleted.add(lid)
        bk.delete_ledger(lid)
        self.rec.record(type="delete", ledger=lid, by=name)

    def write_ballast(self, size: int) -> int:
        """A closed ledger of about ``size`` bytes on every bookie (ensemble and both quorums
        all of them), recorded like a writer's and read whole (a final read), for the
        ``disk_full`` fault to delete; its id. The fencer and the deleter leave it alone; not
        deleted, it is verified at the end like any other. Raises BKException when it cannot be
        written (each append waited for at most ``APPEND_WAIT_S``)."""
        n = self.config.bookies
        with self.client() as bk:
            lh = bk.create_ledger(n, n, n, password=PASSWORD)
            lid = lh.ledger_id
            with self.lock:
                self.ledgers.add(lid)
            self.rec.record(type="create", ledger=lid, writer="ballast", quorums=[n, n, n])
            window: list[tuple[Any, float, bytes]] = []
            count = max(1, size // BALLAST_ENTRY)
            for i in range(count):
                data = os.urandom(BALLAST_ENTRY)
                sent = self.rec.now()  # before the send: the fence rule compares it
                window.append((lh.append_async(data), sent, data))
                if len(window) >= 16 or i == count - 1:
                    self._settle_ballast(lid, window)
                    window.clear()
            lh.close()
            md = lh.metadata
            self.rec.record(type="close", ledger=lid, last_entry=md.last_entry_id, length=md.length)
            self._read_final(bk, lid, "ballast")
        return lid

    def _settle_ballast(self, lid: int, window: list[tuple[Any, float, bytes]]) -> None:
        """Records the outcome of each append in ``window``; raises the first failure
        (BKException, or TimeoutError after ``APPEND_WAIT_S``)."""
        failure: Exception | None = None
        for future, sent, data in window:
            event: dict[str, Any] = dict(
                type="append", ledger=lid, sent=sent, hash=digest(data), size=len(data)
            )
            try:
                event.update(status="ok", entry=future.result(APPEND_WAIT_S))
            except FutureTimeout as exc:
                event.update(status="unknown")
                failure = failure or TimeoutError(f"ballast append unanswered: {exc}")
            except errors.BKException as exc:
                event.update(status="fail", error=type(exc).__name__)
                failure = failure or exc
            self.rec.record(**event)
        if failure is not None:
            raise failure

    def delete_for_space(self, ledger_ids: list[int], more: int, name: str) -> list[int]:
        """Deletes up to ``more`` of the oldest closed ledgers the deleter could pick, each read
        whole first (a final read), and then ``ledger_ids`` (read whole already); the ids
        deleted.
        One that cannot be read stays to be verified at the end; a failed delete is counted
        in ``errors`` and left (its final read stands)."""
        with self.lock:
            older = self._deletable()[:more]
            self.closed.difference_update(older)  # claimed: the deleter leaves them alone
        deleted = []
        with self.client() as bk:
            for lid in older + ledger_ids:
                try:
                    if lid in older:
                        self._read_final(bk, lid, name)
                    self._delete(bk, lid, name)
                except errors.BKException as exc:
                    self.errors[type(exc).__name__] += 1
                    continue
                deleted.append(lid)
        return deleted


def read_whole(rh: Any, last_entry_id: int) -> list[list[Any]]:
    """Entries 0..``last_entry_id`` as a read event lists them: [id, hash, size]."""
    entries: list[list[Any]] = []
    for start in range(0, last_entry_id + 1, 500):
        stop = min(last_entry_id, start + 499)
        entries += [[x.entry_id, digest(x.payload), len(x.payload)] for x in rh.read(start, stop)]
    return entries


def verify(uri: str, ledgers: list[int], rec: Recorder, timeout_s: float = 300.0) -> list[str]:
    """Recover every ledger (closing the open ones) and read it whole: the final reads. All of
    them within ``timeout_s``; returns what could not be verified."""
    problems: list[str] = []
    deadline = time.monotonic() + timeout_s
    with BookKeeper(uri, zkTimeout=10000, readEntryTimeoutSec=5) as bk:
        for lid in ledgers:
            problem = verify_ledger(bk, lid, rec, max(0.0, deadline - time.monotonic()))
            if problem is not None:
                problems.append(problem)
    return problems


def verify_ledger(bk: BookKeeper, lid: int, rec: Recorder, timeout_s: float) -> str | None:
    """Recover ledger ``lid`` and record its close and final read, retried while the cluster
    heals (once a second, for ``timeout_s``); returns why it could not be verified, if so."""

    verified = "verified"

    def recovered_and_read() -> str:
        """``verified``, or why the ledger never will be; other BKExceptions are retried."""
        try:
            rh = bk.open_ledger(lid, PASSWORD, recovery=True)
            md = rh.metadata
            rec.record(type="close", ledger=lid, last_entry=md.last_entry_id, length=md.length)
            entries = read_whole(rh, md.last_entry_id)
            rec.record(type="read", ledger=lid, reader="verify", final=True, entries=entries)
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            # Recorded once its creation returned and never deleted: it must be there.
            return "its metadata is gone"
        return verified

    try:
        outcome = wait_until(
            recovered_and_read,
            f"ledger {lid} recovered and read",
            timeout_s=timeout_s,
            interval_s=1.0,
            ignoring=(errors.BKException,),
        )
    except WaitTimeout as timeout:
        return f"ledger {lid} not verified: {type(timeout.last).__name__}: {timeout.last}"
    return None if outcome == verified else f"ledger {lid} not verified: {outcome}"
