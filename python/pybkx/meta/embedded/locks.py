"""Locks and elections in the embedded store: one ``flock``ed file per name, the holder's
identifier written into it; released on exit, on close or when the holder dies. It never holds
the store's lock while it waits for a lock file."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType

from pybkx import errors
from pybkx.meta.coordination import Election
from pybkx.meta.embedded.session import (
    HOLDER_READ_ATTEMPTS,
    LOCK_BACKOFF_MAX_S,
    LOCK_BACKOFF_MIN_S,
    EmbeddedSession,
)
from pybkx.meta.types import (
    check_name,
)


class EmbeddedCoordination(EmbeddedSession):
    """Locks and elections."""

    def _lock_path(self, kind: str, name: str) -> Path:
        check_name(name, kind)
        if len(name) > 200:  # stay well inside NAME_MAX
            name = hashlib.sha256(name.encode()).hexdigest()
        return self._lock_dir / f"{kind}-{name}"

    def _flock(
        self, path: Path, identifier: str, timeout: float | None, cancelled: threading.Event | None
    ) -> HeldFlock | None:
        """Hold ``path`` exclusively (a new open file description, so threads of one process
        exclude each other too) and publish ``identifier`` in it. None if ``cancelled`` is set
        first or the store closes while an election waits. Raises TimeoutException,
        ClientClosedException, MetaStoreException.

        Another process's ``flock`` tells nobody when it ends, so the wait tries again after a
        pause that doubles up to LOCK_BACKOFF_MAX_S (a cancel ends the pause at once)."""
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        backoff = LOCK_BACKOFF_MIN_S
        while True:
            if self._stops_waiting(cancelled, closing=self._closing):
                return None
            fd = self._try_flock(path)
            if fd is not None:
                return self._hold(path, fd, identifier, cancelled)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise errors.TimeoutException(
                    f"lock {path.name} in {self.uri} not acquired within {timeout} s "
                    f"(held by {self._holder(path) or 'another process'})"
                )
            pause = max(backoff if deadline is None else min(backoff, deadline - now), 0.0)
            if cancelled is not None:
                cancelled.wait(pause)
            else:
                time.sleep(pause)
            backoff = min(backoff * 2, LOCK_BACKOFF_MAX_S)

    def _stops_waiting(self, cancelled: threading.Event | None, *, closing: bool) -> bool:
        """True when an election must stop waiting (``cancelled`` set, or the store
        ``closing``); raises ClientClosedException when a lock's store is closing."""
        if cancelled is not None and cancelled.is_set():
            return True
        if closing:
            if cancelled is not None:
                return True
            raise self._closed_error()
        return False

    @staticmethod
    def _try_flock(path: Path) -> int | None:
        """One attempt: an open descriptor of ``path`` holding its ``flock``, or None while
        another holds it. Raises MetaStoreException."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise errors.MetaStoreException(
                f"cannot open lock file {path}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise errors.MetaStoreException(
                    f"cannot lock {path}: {exc.strerror or exc}"
                ) from None
            return None
        return fd

    def _hold(
        self, path: Path, fd: int, identifier: str, cancelled: threading.Event | None
    ) -> HeldFlock | None:
        """Publish ``identifier`` in the locked ``fd`` and keep it among what ``close()``
        releases; released again (None, or ClientClosedException for a lock) if the store began
        closing meanwhile. Raises MetaStoreException."""
        held = HeldFlock(self, fd)
        try:
            payload = (identifier + "\n").encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, payload, 0)
        except OSError as exc:
            held.release()
            raise errors.MetaStoreException(
                f"cannot write the holder into {path}: {exc.strerror or exc}"
            ) from None
        with self._lock:
            closing = self._closing
            if not closing:
                self._held.add(held)
        if closing:  # close() has already released what it knew of
            held.release()
            if cancelled is None:
                raise self._closed_error()
            return None
        return held

    def _holder(self, path: Path) -> str | None:
        """The identifier published by the holder of ``path``, None if nobody holds it."""
        for _ in range(HOLDER_READ_ATTEMPTS):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise errors.MetaStoreException(
                    f"cannot open lock file {path}: {exc.strerror or exc}"
                ) from None
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except OSError:
                    pass  # held by someone: read what they published
                else:
                    return None  # nobody holds it (a dead holder's text may linger)
                data = os.pread(fd, 4096, 0)
            finally:
                os.close(fd)
            if data.endswith(b"\n"):
                return data[:-1].decode(errors="replace")
            time.sleep(LOCK_BACKOFF_MIN_S)  # the holder is between acquiring and publishing
        return None

    def lock(
        self, name: str, identifier: str, timeout: float | None = None
    ) -> AbstractContextManager[None]:
        """An exclusive lock named ``name`` among every process and thread using this directory,
        taken on ``with`` entry (waiting at most ``timeout`` seconds, forever if None) and
        released on exit, on ``close()`` or when the holder dies. Not reentrant. Raises
        IncorrectParameterException for a name outside [a-zA-Z0-9._-]; on entry
        TimeoutException, ClientClosedException, MetaStoreException."""
        return _FlockLock(self, self._lock_path("lock", name), identifier, timeout)

    def election(self, name: str, identifier: str) -> Election:
        """A leader election: the leader holds the election's lock file (separate from
        ``lock(name)``); ``leader()`` reads the identifier the holder wrote into it. Raises
        IncorrectParameterException for a name outside [a-zA-Z0-9._-]."""
        election = FlockElection(self, self._lock_path("election", name), identifier)
        with self._lock:
            self._elections.add(election)
        return election


# --- locks and elections ----------------------------------------------------------------------


class HeldFlock:
    """One held lock file descriptor; ``release`` is idempotent and thread-safe."""

    def __init__(self, store: EmbeddedCoordination, fd: int) -> None:
        self._store = store
        self._fd: int | None = fd
        self._pid = os.getpid()
        self._guard = threading.Lock()

    def release(self) -> None:
        with self._guard:
            fd, self._fd = self._fd, None
        if fd is None:
            return
        with self._store._lock:
            self._store._held.discard(self)
        forked = os.getpid() != self._pid
        try:
            if not forked:  # a forked child shares the parent's lock: leave it to the parent
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)  # nobody is the holder any more
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            os.close(fd)


class _FlockLock(AbstractContextManager[None]):
    """``store.lock(...)``: acquired on ``with`` entry, released on exit."""

    def __init__(
        self, store: EmbeddedCoordination, path: Path, identifier: str, timeout: float | None
    ) -> None:
        self._store = store
        self._path = path
        self._identifier = identifier
        self._timeout = timeout
        self._held: HeldFlock | None = None

    def __enter__(self) -> None:
        if self._held is not None:
            raise errors.IllegalOpException(f"lock {self._path.name} is already held here")
        self._held = self._store._flock(self._path, self._identifier, self._timeout, None)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.release()


class FlockElection(Election):
    """An election whose leader is the holder of one lock file."""

    def __init__(self, store: EmbeddedCoordination, path: Path, identifier: str) -> None:
        self._store = store
        self._path = path
        self._identifier = identifier
        self._cancelled = threading.Event()

    def run(self, on_elected: Callable[[], None]) -> None:
        """Block until elected, call ``on_elected``, then give up leadership. Returns without
        calling it once ``cancel()`` is called or the store closes; ``cancel()`` does not
        interrupt a running ``on_elected``. Raises MetaStoreException."""
        held = self._store._flock(self._path, self._identifier, None, self._cancelled)
        if held is None:
            return
        try:
            on_elected()
        finally:
            held.release()

    def leader(self) -> str | None:
        """The leader's identifier, None if nobody leads."""
        return self._store._holder(self._path)

    def cancel(self) -> None:
        """Stop contending for good (a waiting ``run`` returns soon)."""
        self._cancelled.set()
