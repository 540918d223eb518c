"""The asyncio face of ``pybkx._core.Future``: awaiting one resolves an asyncio future of the
running loop from the Rust future's completion callback. No thread per call, no polling."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator
from concurrent.futures import Executor
from typing import Any, TypeVar

from pybkx._core import Future

_T = TypeVar("_T")

__all__ = ["await_future", "run_blocking", "wrap"]


def wrap(future: Future, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Future[Any]:
    """An asyncio future of ``loop`` (default: the running one) with ``future``'s outcome.
    Cancelling it does not cancel the operation (it was sent to bookies already)."""
    loop = loop or asyncio.get_running_loop()
    result: asyncio.Future[Any] = loop.create_future()

    def settle(done: Future) -> None:
        if result.cancelled():
            return
        try:
            result.set_result(done.result(0))
        except BaseException as exc:  # the operation's exception, delivered to the awaiter
            result.set_exception(exc)

    def on_done(done: Future) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(settle, done)

    future.add_done_callback(on_done)
    return result


def await_future(future: Future) -> Generator[Any, None, Any]:
    """What ``Future.__await__`` returns: the iterator of an asyncio future wrapping it."""
    return wrap(future).__await__()


async def run_blocking(executor: Executor, fn: Callable[..., _T], *args: Any) -> _T:
    """Run a blocking control-plane call (metadata, recovery) on the client's bounded pool and
    await it: the event loop never blocks, and no thread is made per call."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, functools.partial(fn, *args))
