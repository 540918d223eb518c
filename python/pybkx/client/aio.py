"""The asyncio face of ``pybkx._core.Future``: awaiting one resolves an asyncio future of the
running loop from the Rust future's completion callback. No thread per call, no polling."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import weakref
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Executor
from typing import Any, TypeVar

from pybkx._core import Future

_T = TypeVar("_T")

__all__ = ["await_future", "run_blocking", "wrap"]


class _LoopInbox:
    """Completed pybkx futures waiting to be settled in one event loop's thread. The callback
    thread appends; the first append after a drain schedules one drain, so a burst of
    completions wakes the loop once (one self-pipe write), not once per future."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weak: the inboxes map is keyed weakly by loop, and a strong value would keep the key.
        self.loop = weakref.ref(loop)
        # Bounded by the futures awaited in this loop: each completed one is put here once and
        # drained on the loop's next turn.
        self._done: deque[tuple[asyncio.Future[Any], Future]] = deque()
        self._scheduled = False

    def put(self, result: asyncio.Future[Any], done: Future) -> None:
        """From any thread: settle ``result`` with ``done``'s outcome in the loop's thread."""
        self._done.append((result, done))
        if not self._scheduled:
            self._scheduled = True
            loop = self.loop()
            if loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits
                    loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        # Reset before draining: a future appended from now on is drained here or schedules
        # the next drain; none is left behind.
        self._scheduled = False
        while True:
            try:
                result, done = self._done.popleft()
            except IndexError:
                return
            if result.cancelled():
                continue
            try:
                result.set_result(done.result(0))
            except BaseException as exc:  # the operation's exception, delivered to the awaiter
                result.set_exception(exc)


_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopInbox] = (
    weakref.WeakKeyDictionary()
)


#: The inbox used last: a program almost always has one loop, found without a weak lookup
#: (it refers to its loop weakly, so keeping it keeps no loop alive).
_last: _LoopInbox | None = None


def _inbox(loop: asyncio.AbstractEventLoop) -> _LoopInbox:
    global _last
    last = _last
    if last is not None and last.loop() is loop:
        return last
    inbox = _inboxes.get(loop)
    if inbox is None:
        inbox = _inboxes[loop] = _LoopInbox(loop)
    _last = inbox
    return inbox


def wrap(future: Future, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Future[Any]:
    """An asyncio future of ``loop`` (default: the running one) with ``future``'s outcome.
    Cancelling it does not cancel the operation (it was sent to bookies already)."""
    loop = loop or asyncio.get_running_loop()
    result: asyncio.Future[Any] = loop.create_future()
    inbox = _inbox(loop)
    future.add_done_callback(functools.partial(inbox.put, result))
    return result


def await_future(future: Future) -> Generator[Any, None, Any]:
    """What ``Future.__await__`` returns: the iterator of an asyncio future wrapping it."""
    return wrap(future).__await__()


async def run_blocking(executor: Executor, fn: Callable[..., _T], *args: Any) -> _T:
    """Run a blocking control-plane call (metadata, recovery) on the client's bounded pool and
    await it: the event loop never blocks, and no thread is made per call."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, functools.partial(fn, *args))
